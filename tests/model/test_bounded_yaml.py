"""The one bounded YAML reader (``model.parsing.Reading``): every hostile shape of issue 30 is
refused at its ``file:line:column``, in little CPU, whichever parser reads it and whoever
asks (goals, branch files, ``qonnect validate``, ``qonnect plan --observed``)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from qonnect_gitops.cli import main
from qonnect_gitops.model import GoalsError, load_goals, parsing, yamlpos
from qonnect_gitops.model.limits import MAX_DEPTH, MAX_FILE_NODES, PARSE_CPU_SECONDS
from qonnect_gitops.model.parsing import Reading, load_documents, ruamel_nodes
from qonnect_gitops.model.yamlpos import parse_yaml, to_plain
from tests.conftest import TEMPLATE

BOTH = pytest.mark.parametrize("read", [parse_yaml, load_documents], ids=["goals", "branch"])


def chained(levels: int = 40, depth: int = 90) -> bytes:
    """Each line nests ``depth`` levels around an alias of the line before: shallow as written,
    ``levels * depth`` deep once expanded (issue 30, defect 8)."""
    lines = [b"k0: &a0 " + b"[" * depth + b"x" + b"]" * depth]
    lines += [f"k{i}: &a{i} ".encode() + b"[" * depth + f"*a{i - 1}".encode() + b"]" * depth for i in range(1, levels)]
    return b"\n".join(lines) + b"\n"


def flow(depth: int, before: bytes = b"") -> bytes:
    """Flow sequences nested ``depth`` deep on one line (issue 30, defect 5)."""
    return before + b"a: " + b"[" * depth + b"]" * depth + b"\n"


def _refused(read, raw: bytes) -> tuple[object, float]:  # type: ignore[no-untyped-def]
    """The one problem ``read`` raises for ``raw``, and the CPU seconds it took."""
    start = time.process_time()
    with pytest.raises(GoalsError) as caught:
        read("x.yaml", raw)
    cpu = time.process_time() - start
    (problem,) = caught.value.problems
    return problem, cpu


@BOTH
def test_alias_chained_nesting_is_refused_at_the_alias(read) -> None:  # type: ignore[no-untyped-def]
    problem, cpu = _refused(read, chained())
    assert (problem.path, problem.line, problem.column) == ("x.yaml", 2, 99)
    assert f"the alias *a0 nests this document deeper than {MAX_DEPTH} levels" in problem.message
    assert cpu < PARSE_CPU_SECONDS


@BOTH
@pytest.mark.parametrize("raw", [b"a: &r {self: *r}\n", b"a: &x [*x]\n", b"- &m\n  k: [1, {again: *m}]\n"],
                         ids=["mapping", "sequence", "block"])
def test_a_recursive_alias_is_refused(read, raw: bytes) -> None:  # type: ignore[no-untyped-def]
    problem, _ = _refused(read, raw)
    assert problem.line is not None and problem.column is not None
    assert "refers to a collection that contains it" in problem.message


@BOTH
def test_an_alias_within_the_depth_limit_is_read(read) -> None:  # type: ignore[no-untyped-def]
    raw = b"a: &a " + b"[" * 50 + b"x" + b"]" * 50 + b"\nb: " + b"[" * 49 + b"*a" + b"]" * 49 + b"\n"
    (data,) = read("x.yaml", raw) if read is load_documents else [d.data for d in read("x.yaml", raw)]
    node, depth = data["b"], 0
    while isinstance(node, list):
        node, depth = node[0], depth + 1
    assert (node, depth) == ("x", 99)


@pytest.mark.parametrize("before", [b"", "b: x\u2028y\n".encode(), "b: x\x85y\n".encode()],
                         ids=["libyaml", "ruamel-u2028", "ruamel-x85"])
def test_flow_nesting_past_libyamls_own_limit_is_refused_at_the_limit_in_little_cpu(before: bytes) -> None:
    # Over 1,000 levels libyaml gives up; ruamel used to read on (3.5 s for 2 KB, then a
    # RecursionError without a line). Text with U+2028 or U+0085 is read by ruamel alone.
    line = 1 + before.count(b"\n")
    for depth in (MAX_DEPTH + 1, 1_100, 50_000):
        problem, cpu = _refused(parse_yaml, flow(depth, before))
        # at the bracket past the limit: the 100th (the document's mapping is a level too) as
        # libyaml's events count, or the 101st as ruamel's scanner counts flow levels
        assert problem.line == line and problem.column in (3 + MAX_DEPTH, 3 + MAX_DEPTH + 1), problem
        assert problem.message == f"nests deeper than {MAX_DEPTH} levels"
        assert cpu < PARSE_CPU_SECONDS / 4, cpu


def test_a_branch_file_nested_past_libyamls_limit_is_refused_with_its_position() -> None:
    problem, cpu = _refused(load_documents, flow(5_000))
    assert problem.line == 1 and problem.column is not None and cpu < PARSE_CPU_SECONDS


def test_flow_nesting_within_the_limit_costs_linear_time_in_ruamel() -> None:
    # ruamel's look-ahead over possible simple keys was quadratic in the flow depth: 8 ms per
    # line of 99 nested brackets. The guarded scanner finds them in constant time.
    line = b"- " + b"[" * (MAX_DEPTH - 1) + b"]" * (MAX_DEPTH - 1) + b"\n"
    text = ("- x\x85y\n".encode() + line * 40).decode()
    start = time.process_time()
    guarded = ruamel_nodes("x.yaml", text, Reading("x.yaml", len(text)))
    cpu = time.process_time() - start
    plain = YAML(typ="rt")
    assert to_plain(guarded) == to_plain(list(plain.load_all(text)))
    assert cpu < 1.0, cpu


def test_nodes_of_a_file_are_counted_with_aliases_expanded() -> None:
    # Two documents, each under the 1 MiB document limit, together past the file's nodes.
    half = MAX_FILE_NODES // 2 + 1_000
    width = 1_000
    doc = (b"---\nrow: &r [" + b",".join([b"[]"] * width) + b"]\nall: [" +
           b",".join([b"*r"] * (half // (width + 1) + 1)) + b"]\n")
    for read in (parse_yaml, load_documents):
        with pytest.raises(GoalsError) as caught:
            read("x.yaml", doc * 2) if read is load_documents else read("x.yaml", doc * 2, True)
        (problem,) = caught.value.problems
        assert problem.line is not None and problem.line > doc.count(b"\n")  # in the second document
        assert f"past {MAX_FILE_NODES:,} nodes" in problem.message
    assert load_documents("x.yaml", doc)  # one alone is fine


def test_the_cpu_limit_refuses_a_slow_file_within_its_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    # The structural limits refuse every known hostile shape long before; this is the backstop
    # for the unknown ones. A tiny budget stands in for a file that reads too slowly.
    budget = 0.05
    monkeypatch.setattr(parsing, "parse_cpu_seconds", lambda size: budget)
    line = b"- [" + b"[], " * 50 + b"x]\n"
    for raw in (line * 4_000, b"- &a 1\n" + line * 4_000, "- x\x85y\n".encode() + line * 4_000):
        problem, cpu = _refused(lambda p, r: parse_yaml(p, r, True), raw)
        assert "took more than 0.05 s of CPU" in problem.message
        assert problem.line is not None and problem.line > 1
        assert cpu < budget + 0.25, cpu  # checked every 256 events or tokens


def test_the_template_reads_well_within_the_cpu_limit() -> None:
    files = [p for p in TEMPLATE.rglob("*.yaml") if p.is_file()]
    start = time.process_time()
    for path in files:
        parse_yaml(str(path), path.read_bytes(), multi=True)
    assert (time.process_time() - start) / len(files) < PARSE_CPU_SECONDS / 20


def _template_tree(tmp_path: Path, path: str, body: bytes) -> Path:
    tree = tmp_path / "goals"
    for source in TEMPLATE.rglob("*"):
        if source.is_file():
            target = tree / source.relative_to(TEMPLATE)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(source.read_bytes())
    (tree / path).write_bytes(body)
    return tree


@pytest.mark.parametrize("body", [chained(), b"apiVersion: qonnect.io/v1\nkind: Fleet\nmetadata: &m {name: x, "
                                  b"again: *m}\n", flow(1_100, b"apiVersion: qonnect.io/v1\nkind: Fleet\n")],
                         ids=["chained aliases", "recursive alias", "deep flow"])
def test_validate_reports_hostile_goals_as_file_line_column(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                            body: bytes) -> None:
    tree = _template_tree(tmp_path, "qonnect.yaml", body)
    assert main(["validate", str(tree)]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "RecursionError" not in err
    first = err.splitlines()[0]
    assert first.startswith("qonnect.yaml:") and first.split(":")[1].isdigit() and first.split(":")[2].isdigit()


def test_goals_with_a_hostile_manifest_are_invalid_not_a_crash(template_files: dict[str, bytes]) -> None:
    files = dict(template_files)
    files["apps/bookinfo/manifests/details.yaml"] = chained()
    with pytest.raises(GoalsError) as caught:
        load_goals(files)
    assert any(p.path == "apps/bookinfo/manifests/details.yaml" and p.line == 2 for p in caught.value.problems)


@pytest.mark.parametrize("option", ["--observed", "--current"])
def test_plan_reports_a_hostile_observed_or_current_file(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         option: str) -> None:
    hostile = tmp_path / "hostile.yaml"
    hostile.write_bytes(chained())
    assert main(["plan", str(TEMPLATE), option, str(hostile)]) == 1
    err = capsys.readouterr().err
    assert f"{hostile}:2:99: the alias *a0 nests" in err and "Traceback" not in err


def test_positions_ruamel_cannot_give_in_time_fall_back_once_per_file(monkeypatch: pytest.MonkeyPatch) -> None:
    # libyaml read the file (quickly); positions re-read it with ruamel, slower. When that runs
    # out of CPU, each problem points at its document's start, and the file is not re-read for
    # every problem (each re-reading may take the whole budget).
    monkeypatch.setattr(parsing, "parse_cpu_seconds", lambda size: 0.0)
    readings: list[str] = []
    real = yamlpos.ruamel_nodes

    def counted(path: str, text: str, reading: Reading) -> list[object]:
        readings.append(path)
        return real(path, text, reading)

    monkeypatch.setattr(yamlpos, "ruamel_nodes", counted)
    raw = b"# positions\na:\n" + b"".join(b"  k%d: [%d]\n" % (i, i) for i in range(1_500))  # libyaml alone reads it
    (doc,) = parse_yaml("positions.yaml", raw)
    assert [doc.position(("a", f"k{i}")) for i in range(50)] == [(2, 1)] * 50
    assert readings == ["positions.yaml"]
