"""The quick paths of a cold load answer exactly as the slow ones would, or not at all:
libyaml's own composing builds what the event scan builds, and the compiled schema
checks never pass an object jsonschema finds an error in."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qonnect_gitops.model import kubeschema
from qonnect_gitops.model.parsing import _SCANNERS_DIFFER, _Building, _quick_documents, _scan, load_documents
from tests.conftest import TEMPLATE
from tests.fuzz import VALUES, k8s_objects
from tests.model.test_scan_agrees import FRAGMENTS, TRICKY, _same


def _scanned(text: str) -> list[tuple[Any, int]] | None:
    building = _Building()
    return building.docs if _scan("x.yaml", text, building) else None


def _quick_agrees(text: str) -> bool:
    """Whether the quick path built ``text`` (it must then match the scan)."""
    if _SCANNERS_DIFFER.search(text, 1 if text.startswith("\ufeff") else 0):
        return False  # scan_documents leaves these to ruamel before either path runs
    quick = _quick_documents(text)
    if quick is None:
        return False
    scanned = _scanned(text)
    assert scanned is not None, text
    assert _same(quick, scanned), (text, quick, scanned)
    return True


def test_the_quick_path_builds_the_usual_tricky_files_as_the_scan_does() -> None:
    built = [raw for raw in TRICKY if _quick_agrees(raw.decode("utf-8"))]
    assert len(built) >= 10  # the quick path is taken, not only skipped


def test_the_template_goals_take_the_quick_path() -> None:
    files = [p for p in TEMPLATE.rglob("*.yaml") if p.is_file()]
    assert files and all(_quick_agrees(p.read_text()) for p in files)


def test_nesting_past_the_limit_is_left_to_the_scan() -> None:
    deep = "a: " + "[" * 101 + "]" * 101 + "\n"
    assert _quick_documents(deep) is None
    assert _quick_documents("a: " + "[" * 99 + "]" * 99 + "\n") is not None


@settings(max_examples=400, deadline=None, derandomize=True)
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=40).map("".join))
def test_random_yaml_the_quick_path_builds_is_what_the_scan_builds(text: str) -> None:
    _quick_agrees(text)


def _template_objects() -> list[dict[str, Any]]:
    out = []
    for path in TEMPLATE.rglob("manifests/*.yaml"):
        out += [d for d in load_documents(str(path), path.read_bytes()) if isinstance(d, dict)]
    return out


def _quick_and_full(obj: dict[str, Any]) -> tuple[bool, list[Any]] | None:
    group, version = kubeschema.split_api_version(str(obj.get("apiVersion", "")))
    definition = kubeschema._index().get((group, version, str(obj.get("kind", ""))))
    if definition is None:
        return None
    quick = kubeschema._builtin_quick(definition)
    assert quick is not None  # every 1.37 definition compiles
    errors = list(kubeschema._builtin_validator(definition).iter_errors(obj))
    return kubeschema._valid(quick, obj), errors


def test_valid_template_objects_pass_the_quick_check() -> None:
    objects = _template_objects()
    assert len(objects) > 10
    for obj in objects:
        answer = _quick_and_full(obj)
        assert answer is not None
        assert answer == (True, []), obj


def _mutations(obj: dict[str, Any]) -> list[tuple[tuple[Any, ...], Any]]:
    """(path, node) of every mapping and list in ``obj``."""
    out: list[tuple[tuple[Any, ...], Any]] = []
    todo: list[tuple[tuple[Any, ...], Any]] = [((), obj)]
    while todo:
        where, node = todo.pop()
        out.append((where, node))
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        todo += [(where + (k,), v) for k, v in items if isinstance(v, (dict, list))]
    return out


@settings(max_examples=300, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_the_quick_check_never_passes_what_jsonschema_refuses(data: st.DataObject) -> None:
    """Template objects with one node changed (a value replaced, a field added or dropped)."""
    objects = _template_objects()
    obj = copy.deepcopy(data.draw(st.sampled_from(objects)))
    nodes = _mutations(obj)
    _, node = data.draw(st.sampled_from(nodes))
    change = data.draw(st.sampled_from(["replace", "add", "drop"]))
    if isinstance(node, dict) and node:
        key = data.draw(st.sampled_from(sorted(node, key=str)))
        if change == "replace":
            node[key] = data.draw(VALUES)
        elif change == "drop":
            del node[key]
        else:
            node[data.draw(st.sampled_from(["extra", "name", "port", "replicas", "type", "protocol"]))] = \
                data.draw(VALUES)
    elif isinstance(node, list) and node:
        index = data.draw(st.integers(0, len(node) - 1))
        node[index] = data.draw(VALUES)
    answer = _quick_and_full(obj)
    if answer is not None and answer[0]:
        assert answer[1] == [], obj


@settings(max_examples=200, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(k8s_objects())
def test_random_objects_pass_the_quick_check_only_when_jsonschema_does(obj: dict[str, Any]) -> None:
    answer = _quick_and_full(obj)
    if answer is not None and answer[0]:
        assert answer[1] == [], obj
