"""The libyaml scan builds goals documents as ruamel reads them (YAML 1.2): the same data,
the same start lines, and ruamel still decides every document the scan leaves to it."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError

from qonnect_gitops.model import GoalsError
from qonnect_gitops.model.parsing import load_documents, scan_documents
from qonnect_gitops.model.yamlpos import YamlDocument, parse_yaml, to_plain
from tests.conftest import TEMPLATE
from tests.fuzz import yaml_files

TRICKY = [
    # YAML 1.1 words that YAML 1.2 (ruamel) reads as strings
    b"a: yes\nb: no\nc: on\nd: off\ne: Y\nf: n\ng: NO\nh: On\n",
    b"t: [true, True, TRUE, false, False, FALSE, tRUE]\n",
    # octals, hex, binary, underscores, leading zeros, sexagesimal (1.1 only)
    b"a: 0o17\nb: 017\nc: 0x1F\nd: 0xff\ne: 0b101\nf: 1_000\ng: -0o7\nh: +12\ni: 0\nj: 00\n",
    b"a: 1:20\nb: 190:20:30\nc: 1:20.5\nd: 0x_1\ne: 08\nf: 09.5\n",
    # floats 1.2 accepts and 1.1 does not, and specials
    b"a: 1e3\nb: 1.5\nc: -.5\nd: .inf\ne: -.Inf\nf: +.INF\ng: 1.\nh: 6.02e+23\ni: 1_0.5\nj: 1E3\n",
    # nulls, empties, quoted look-alikes
    b"a: ~\nb: null\nc: Null\nd: NULL\ne:\nf: ''\ng: 'null'\nh: \"true\"\ni: '12'\nj: nULL\n",
    # block scalars, folding, chomping
    b"a: |\n  one\n  two\n\nb: >\n  folded\n  text\n\n  para\nc: |-\n  strip\nd: |+\n  keep\n\ne: >-\n  x\n",
    b"a: \"esc \\t \\u00e9 \\n end\"\nb: 'it''s'\nc: plain # comment\nd: \"multi\n  line\"\n",
    # flow collections, nesting, keys that are numbers or booleans
    b"a: {b: [1, 2, {c: d}], e: []}\nf: {}\n1: one\nfalse: f\n~: nothing\n2.5: f\n",
    b"- a\n- - b\n  - c\n- {k: v}\n- ? plain\n",
    # several documents, empty ones, explicit ends, leading comments
    b"# c\n---\na: 1\n---\n---\n- x\n--- scalar\n---\n# only a comment\n",
    b"\n\n# lead\n\n  a: 1\n",
    b"[1, 2]\n",
    b"just a string\n",
    b"",
    # what the scan leaves to ruamel: it must come out the same anyway
    b"a: &x {b: 1}\nc: *x\n",
    b"a: !!str 12\nb: !!int '7'\nc: !custom x\n",
    b"base: &b {x: 1}\nd:\n  <<: *b\n  y: 2\n",
    b"when: 2024-01-02\nat: 2024-01-02T03:04:05Z\n",
    b"%YAML 1.1\n---\na: yes\nb: 017\n",
    b"? [a, b]\n: c\n",
    b"a: =\n",
    b"a: _\nb: 0b\nc: +_\n",
    b"k: 1\nk: 2\n",
    b"1: a\n1.0: b\n",
    b"true: a\n1: b\n",
    b"a\n...\n---\nb\n...\n",
    b"a: 1\t\nb: \"x\ty\"\n",
    b"a: |#\n  x\n",
    b"--- |\n---\n",
    b"\xe2\x80\xa8a: 1\n",
]


def _yaml() -> YAML:
    """ruamel as it reads goals, without qonnect's limits: what the scan must agree with."""
    reader = YAML(typ="rt")
    reader.allow_duplicate_keys = False
    return reader


def _ruamel(raw: bytes) -> list[tuple[Any, int]]:
    out = []
    for node in _yaml().load_all(raw.decode()):
        line = node.lc.line + 1 if isinstance(node, (CommentedMap, CommentedSeq)) else 1
        out.append((to_plain(node), line))
    return out


def _same(a: Any, b: Any) -> bool:
    """Equal, with types (1 is not True, 1.0 is not 1) and NaN equal to itself."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return len(a) == len(b) and all(_same(k, k2) and _same(v, v2)
                                        for (k, v), (k2, v2) in zip(a.items(), b.items(), strict=True))
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)


@pytest.mark.parametrize("raw", TRICKY, ids=range(len(TRICKY)))
def test_the_scan_builds_what_ruamel_reads(raw: bytes) -> None:
    try:
        expected: list[tuple[Any, int]] | Exception = _ruamel(raw)
    except Exception as exc:  # ruamel refuses it: the scan must not have built it
        expected = exc
    _, built = scan_documents("x.yaml", raw)
    if isinstance(expected, Exception):
        assert built is None
        return
    if built is not None:
        assert _same(built, expected), (built, expected)
    # parse_yaml (scan or ruamel) agrees with ruamel alone, for data and start lines
    docs = parse_yaml("x.yaml", raw, multi=True)
    assert _same([(d.data, d.start_line) for d in docs], expected)


def test_usual_documents_are_built_by_the_scan() -> None:
    built = [raw for raw in TRICKY[:15] if scan_documents("x.yaml", raw)[1] is not None]
    assert built == TRICKY[:15]
    for raw in TRICKY[15:]:
        assert scan_documents("x.yaml", raw)[1] is None, raw


def test_the_template_goals_are_built_by_the_scan_as_ruamel_reads_them() -> None:
    files = [p for p in TEMPLATE.rglob("*.yaml") if p.is_file()]
    assert len(files) > 10
    for path in files:
        raw = path.read_bytes()
        _, built = scan_documents(str(path), raw)
        assert built is not None, path
        assert _same(built, _ruamel(raw)), path


@pytest.mark.parametrize(("raw", "where"), [
    (b"k: 1\nk: 2\n", (2, 1)),
    (b"a: [1, 2\nb: 3\n", None),
    (b"a: 1\n- b\n", None),
    (b"a: \"unterminated\n", None),
])
def test_problems_are_reported_by_ruamel_as_before(raw: bytes, where: tuple[int, int] | None) -> None:
    with pytest.raises(MarkedYAMLError) as refused:  # what ruamel says is what parse_yaml reports
        list(_yaml().load_all(raw.decode()))
    mark = refused.value.problem_mark or refused.value.context_mark
    assert mark is not None
    with pytest.raises(GoalsError) as caught:
        parse_yaml("x.yaml", raw)
    (problem,) = caught.value.problems
    assert problem.message.startswith("invalid YAML: ")
    assert (problem.line, problem.column) == (mark.line + 1, mark.column + 1)
    if where is not None:
        assert (problem.line, problem.column) == where


def test_positions_of_a_built_document_come_from_ruamel() -> None:
    raw = b"# lead\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\ndata:\n  k: 'v'\n"
    (doc,) = parse_yaml("x.yaml", raw)
    assert isinstance(doc, YamlDocument)
    assert doc.data == {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"k": "v"}}
    assert doc.position(("data", "k")) == (7, 6)
    assert doc.position(("metadata", "name"), key=True) == (5, 3)
    assert doc.start_line == 2


FRAGMENTS = ["a", "b", "k", ":", ": ", "- ", "\n", "\n  ", "  ", "'", '"', "[", "]", "{", "}", ",", "#", "|",
             ">", "-", "---\n", "...\n", "&x ", "*x", "!!str ", "? ", "yes", "no", "on", "0o17", "017", "0x1f",
             "1_0", "1e3", ".inf", "~", "null", "true", "2024-01-02", "<<", "=", "1:20", "\t", "é", "\\n",
             "0b1", ".5", "+1", "-.inf", ".nan", "_", "\r\n", "\r", "\u2028", "\x85", "\ufeff", "%", "@",
             "`", "key with space", "|-", ">+", "|2", "\\", "\\x41", "\\u00e9", "!", "&", "*", "?",
             " #c", "- - ", "x:\n  - y\n  - z\n", ": |\n  t\n", "\"a\n  b\"", "'c\n\n d'", "   "]


@settings(max_examples=400, deadline=None, derandomize=True)
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=40).map("".join))
def test_random_yaml_the_scan_builds_is_what_ruamel_reads(text: str) -> None:
    raw = text.encode()
    try:
        _, built = scan_documents("x.yaml", raw)
    except GoalsError:
        return  # over a limit: refused before either parser runs
    if built is None:
        return
    assert _same(built, _ruamel(raw)), (text, built)


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example])
@given(yaml_files())
def test_fuzzed_goals_files_the_scan_builds_are_what_ruamel_reads(raw: bytes) -> None:
    try:
        _, built = scan_documents("x.yaml", raw)
    except GoalsError:
        return
    if built is not None:
        assert _same(built, _ruamel(raw))


@pytest.mark.parametrize("raw", [
    b"a: &a [x,x,x,x,x,x,x,x,x,x]\n" + b"".join(
        b"%c: &%c [%s]\n" % (c, c, b",".join([b"*%c" % (c - 1)] * 10)) for c in range(ord("b"), ord("j"))),
    b"a: " + b"[" * 150 + b"]" * 150 + b"\n",
    b"a: '" + b"y" * (1024 * 1024) + b"'\n",
    b"a: '" + b"y" * (4 * 1024 * 1024) + b"'\n",
], ids=["alias bomb", "deep", "big document", "big file"])
def test_hostile_documents_are_refused_by_the_scan_as_by_the_limits(raw: bytes) -> None:
    with pytest.raises(GoalsError) as by_limits:
        load_documents("x.yaml", raw)
    with pytest.raises(GoalsError) as by_scan:
        parse_yaml("x.yaml", raw)
    assert by_scan.value.problems == by_limits.value.problems
