"""placement.yaml and its shards, put together from per-component sections, load back to
exactly the plan (as does a placement.yaml written before the shards); a decision that
keeps a component's plan object does not dump that component again, and one that changes
a component changes its shard alone."""

from __future__ import annotations

import gc
import weakref
from datetime import UTC, datetime

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from qonnect_gitops.model import load_goals
from qonnect_gitops.model.observed import empty_observation
from qonnect_gitops.model.plan import CurrentPlacement, Plan
from qonnect_gitops.placement import plan as make_plan
from qonnect_gitops.render import placement_file
from qonnect_gitops.render.placement_file import (
    PLACEMENT_FILE,
    PlacementFileError,
    load_placement,
    placement_files,
    placement_of,
    placement_yaml,
    plain_yaml,
    shard_of,
)

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _as_dumped(plan: Plan) -> object:
    return plan.model_dump(mode="json", by_alias=True,
                           exclude={"provisioning"} if plan.provisioning is None else None)


@pytest.fixture
def planned(template_files) -> Plan:  # type: ignore[no-untyped-def]
    goals = load_goals(template_files)
    return make_plan(goals, empty_observation(NOW), CurrentPlacement())


def test_the_file_loads_back_to_the_plan(planned: Plan) -> None:
    text = placement_yaml(planned)
    assert yaml.safe_load(text) == _as_dumped(planned)
    assert Plan.model_validate(yaml.load(text, Loader=yaml.CSafeLoader)) == planned
    # Awkward strings survive the indentation: quotes, colons, newlines, long lines, unicode.
    key = next(k for k, c in planned.components.items() if c.assignments)
    awkward = planned.model_copy(update={"components": {**planned.components, key: _reworded(
        planned, key, "a: b\n  'c' \"d\" #e\n" + "é " * 5000)}})
    assert yaml.safe_load(placement_yaml(awkward)) == _as_dumped(awkward)
    assert "é é" in yaml.safe_load(placement_yaml(awkward))["components"][key]["assignments"][0]["reason"]


def test_the_shards_load_back_to_the_plan_as_the_single_file_does(planned: Plan) -> None:
    files = placement_files(planned)
    assert placement_of(files) == _as_dumped(planned)
    assert Plan.model_validate(placement_of(files)) == planned
    # A plan branch written before the shards: one placement.yaml, read the same way.
    assert placement_of({PLACEMENT_FILE: placement_yaml(planned)}) == _as_dumped(planned)
    header = yaml.safe_load(files[PLACEMENT_FILE])
    assert "components" not in header and header["shards"] == "placement"
    for path, data in files.items():
        if path != PLACEMENT_FILE:
            assert all(shard_of(key) == path for key in yaml.safe_load(data)["components"])


def test_identical_plans_give_identical_files_and_a_change_touches_its_shard(planned: Plan) -> None:
    files = placement_files(planned)
    again = planned.model_copy(update={"components": {k: c.model_copy(deep=True)
                                                      for k, c in planned.components.items()}})
    assert placement_files(again) == files
    key = next(k for k, c in sorted(planned.components.items()) if c.assignments)
    later = planned.model_copy(update={
        "components": {**planned.components, key: _reworded(planned, key, "moved for the test")},
        "last_moved": {**planned.last_moved, key: NOW}})
    changed = placement_files(later)
    assert {p for p in files.keys() | changed.keys() if files.get(p) != changed.get(p)} == {shard_of(key)}
    assert Plan.model_validate(placement_of(changed)) == later


@pytest.mark.parametrize(("files", "message"), [
    ({"placement/zz.yaml": b"components: {}\n"}, "placement/zz.yaml: not a shard"),
    ({"placement/00.yaml": b"components: [\n"}, "placement/00.yaml: not YAML"),
    ({"placement/00.yaml": b"- a\n"}, "placement/00.yaml: expected a mapping"),
    ({"placement/00.yaml": b"reason: failover\n"}, "placement/00.yaml: field 'reason': not expected"),
    ({"placement/00.yaml": b"components: [a]\n"}, "placement/00.yaml: field 'components': expected a mapping"),
    ({"placement/00.yaml": b"lastMoved:\n  shop/web: x\n"},
     f"placement/00.yaml: field 'lastMoved': component 'shop/web' belongs in {shard_of('shop/web')}"),
    ({"placement/00.yaml": b"components:\n  7: {}\n"}, "placement/00.yaml: field 'components': component 7"),
])
def test_a_malformed_shard_is_refused_naming_file_and_field(files: dict[str, bytes], message: str) -> None:
    header = b"reason: goals-changed\nshards: placement\n"
    with pytest.raises(PlacementFileError, match=f"^{message}".replace("[", "\\[")):
        load_placement(header, lambda: files)


@pytest.mark.parametrize(("header", "message"), [
    (b"reason: x\nshards: ../etc\n", "placement.yaml: field 'shards': expected 'placement'"),
    (b"reason: x\nshards: placement\ncomponents: {}\n", "placement.yaml: field 'components': belongs in"),
    (b"reason: x\nshards: placement\nlastMoved: {}\n", "placement.yaml: field 'lastMoved': belongs in"),
    (b"just text\n", "placement.yaml: expected a mapping"),
])
def test_a_malformed_header_is_refused_naming_its_field(header: bytes, message: str) -> None:
    with pytest.raises(PlacementFileError, match=f"^{message}"):
        load_placement(header, dict)


def _reworded(plan: Plan, key: str, reason: str):  # type: ignore[no-untyped-def]
    component = plan.components[key]
    first = component.assignments[0].model_copy(update={"reason": reason})
    return component.model_copy(update={"assignments": (first, *component.assignments[1:])})


def test_an_empty_decision_is_a_valid_file() -> None:
    empty = Plan(reason="initial", components={})
    assert yaml.safe_load(placement_yaml(empty)) == _as_dumped(empty)
    assert list(placement_files(empty)) == [PLACEMENT_FILE]
    assert placement_of(placement_files(empty)) == _as_dumped(empty)


def test_a_kept_component_plan_is_not_dumped_again(planned: Plan, monkeypatch: pytest.MonkeyPatch) -> None:
    placement_yaml(planned)
    dumped: list[object] = []
    real = placement_file._dump

    def counting(data: object) -> bytes:
        dumped.append(data)
        return real(data)

    monkeypatch.setattr(placement_file, "_dump", counting)
    key = next(k for k, c in sorted(planned.components.items()) if c.assignments)
    changed = _reworded(planned, key, "moved for the test")
    later = planned.model_copy(update={"components": {**planned.components, key: changed}})
    text = placement_yaml(later)
    sections = [d for d in dumped if isinstance(d, dict) and set(d) <= set(planned.components)]
    assert [list(d) for d in sections] == [[key]]  # only the component whose plan is new
    assert yaml.safe_load(text) == _as_dumped(later)


def test_old_plans_are_not_kept_alive_by_the_section_cache(planned: Plan) -> None:
    # A leader renders a plan every cycle, usually with new but equal component objects:
    # the cache must let the old ones go, or every cycle's plan stays in memory.
    def copy_of(plan: Plan) -> Plan:
        return plan.model_copy(update={"components": {
            k: c.model_copy(deep=True) for k, c in plan.components.items()}})

    first = copy_of(planned)
    gone = [weakref.ref(c) for c in first.components.values()]
    text = placement_yaml(first)
    del first
    for _ in range(3):
        assert placement_yaml(copy_of(planned)) == text  # equal content: sections reused
    gc.collect()
    assert all(ref() is None for ref in gone)


_scalars = (st.none() | st.booleans() | st.integers(-(2**70), 2**70)
            | st.floats(allow_nan=False) | st.text(max_size=30))
_keys = st.text(max_size=12) | st.sampled_from(["y", "No", "null", "on", "a b", "k:", "- x", "#c", "1", "1.5", "~"])
_data = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_keys, inner, max_size=4),
                     max_leaves=25)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(_keys, _data, max_size=5))
def test_the_fast_writer_writes_what_yaml_reads_back(data: dict[str, object]) -> None:
    """Whatever the fast writer takes (else it declines and PyYAML dumps), libyaml and the
    pure loader read back exactly."""
    text = plain_yaml(data)
    if text is None:
        return
    assert yaml.safe_load(text) == data
    assert yaml.load(text, Loader=yaml.CSafeLoader) == data


def test_a_plan_takes_the_fast_writer(planned: Plan) -> None:
    for component in planned.components.values():
        assert plain_yaml({component.component: component.model_dump(mode="json", by_alias=True)}) is not None
