"""A fuzzer of YAML shapes over the one bounded reader (``model.parsing.Reading``): nesting in
flow and block style to around and past the depth limit, anchors, aliases (chained, wide,
recursive, undefined), several documents, sizes, and the characters that make ruamel read a
file alone. Whatever the shape, goals (``parse_yaml``) and branch files (``load_documents``)
either refuse it with a located problem or give data within the limits, and never take more
CPU than the reader's own budget for a file of that size."""

from __future__ import annotations

import time
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qonnect_gitops.model import GoalsError
from qonnect_gitops.model.limits import MAX_DEPTH, MAX_FILE_NODES, parse_cpu_seconds
from qonnect_gitops.model.parsing import load_documents
from qonnect_gitops.model.yamlpos import parse_yaml

SCALARS = st.sampled_from(["x", "1", "''", "yes", "~", "a b", "0o17", "2024-01-02", "'q'", '"d"', "-1.5", "null"])
DEPTHS = st.sampled_from([1, 2, 5, 30, 49, 50, 98, 99, 100, 101, 150, 1_001, 5_000])
PREFIXES = st.sampled_from(["", "", "", "p: x\x85y\n", "p: x\u2028y\n", "p: 'a\tb'\n", "%YAML 1.2\n---\n",
                            "p: !!str 1\n", "p: 2024-01-02\n"])


@st.composite
def flow_nodes(draw: st.DrawFn, anchors: list[str], open_anchors: list[str], depth: int) -> str:
    """One flow node: a scalar, an alias (to an earlier anchor, to one still open, or to none),
    a sequence or mapping (maybe anchored), or a run of brackets nested very deep."""
    kinds = ["scalar", "alias", "seq", "map", "deep"] if depth < 6 else ["scalar", "alias"]
    kind = draw(st.sampled_from(kinds))
    if kind == "scalar":
        return draw(SCALARS)
    if kind == "alias":
        pool = anchors + open_anchors + ["nowhere"]
        return "*" + draw(st.sampled_from(pool))
    if kind == "deep":
        n = draw(DEPTHS)
        inner = draw(flow_nodes(anchors, open_anchors, 6))
        opening, closing = draw(st.sampled_from([("[", "]"), ("{a: ", "}"), ("[{b: ", "}]")]))
        return opening * n + inner + closing * n
    anchor = ""
    if draw(st.booleans()):
        name = f"n{len(anchors) + len(open_anchors)}"
        anchor = f"&{name} "
        open_anchors.append(name)
    children = [draw(flow_nodes(anchors, open_anchors, depth + 1)) for _ in range(draw(st.integers(0, 3)))]
    if anchor:
        open_anchors.pop()
        anchors.append(anchor[1:-1])
    if kind == "seq":
        return anchor + "[" + ", ".join(children) + "]"
    return anchor + "{" + ", ".join(f"k{i}: {c}" for i, c in enumerate(children)) + "}"


@st.composite
def yaml_shapes(draw: st.DrawFn) -> bytes:
    """A whole file: top-level lines (flow values, block nesting, alias chains and bombs),
    repeated to a size, in one or more documents, after a prefix that may hand it to ruamel."""
    anchors: list[str] = []
    lines: list[str] = []
    for i in range(draw(st.integers(1, 6))):
        shape = draw(st.sampled_from(["flow", "flow", "block", "chain", "wide"]))
        if shape == "flow":
            lines.append(f"f{i}: {draw(flow_nodes(anchors, [], 0))}")
        elif shape == "block":
            n = draw(DEPTHS.filter(lambda d: d <= 150))
            lines.append(f"b{i}:\n" + "".join("  " * (d + 1) + f"l{d}:\n" for d in range(n))
                         + "  " * (n + 1) + draw(SCALARS))
        elif shape == "chain":
            levels, width = draw(st.integers(2, 30)), draw(st.sampled_from([1, 5, 30, 60, 99]))
            for level in range(levels):
                inner = f"*c{i}_{level - 1}" if level else "x"
                lines.append(f"c{i}_{level}: &c{i}_{level} " + "[" * width + inner + "]" * width)
        else:
            levels, width = draw(st.integers(2, 9)), draw(st.integers(2, 12))
            lines.append(f"w{i}_0: &w{i}_0 [" + ", ".join(["lol"] * width) + "]")
            lines += [f"w{i}_{level}: &w{i}_{level} [" + ", ".join([f"*w{i}_{level - 1}"] * width) + "]"
                      for level in range(1, levels)]
    body = "\n".join(lines) + "\n"
    repeat = draw(st.sampled_from([1, 1, 1, 10, 200]))
    if repeat > 1:  # a size: the same body in as many documents
        body = "".join(f"---\n{body}" for _ in range(repeat))
    elif draw(st.booleans()):
        body = body + "---\n" + body
    return (draw(PREFIXES) + body).encode()


def _within_limits(data: Any) -> None:
    """Walk the data as a writer would (aliases expanded): bounded depth and nodes, no cycle."""
    nodes = 0
    stack: list[tuple[Any, int, frozenset[int]]] = [(data, 0, frozenset())]
    while stack:
        node, depth, path = stack.pop()
        nodes += 1
        assert nodes <= MAX_FILE_NODES
        if isinstance(node, (dict, list)):
            assert id(node) not in path, "a recursive structure"
            assert depth < MAX_DEPTH, depth
            children = list(node.values()) if isinstance(node, dict) else node
            stack += [(child, depth + 1, path | {id(node)}) for child in children]


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example])
@given(yaml_shapes())
def test_every_shape_is_refused_with_a_position_or_read_within_limits_and_cpu(raw: bytes) -> None:
    budget = parse_cpu_seconds(len(raw))
    for read in (lambda: [d.data for d in parse_yaml("x.yaml", raw, multi=True)],
                 lambda: load_documents("x.yaml", raw)):
        start = time.process_time()
        try:
            documents = read()
        except GoalsError as exc:
            assert exc.problems and all(p.path == "x.yaml" and p.message for p in exc.problems)
            documents = []
        # The reader's own guard: no file takes more than its CPU budget (plus the one
        # stretch between two looks at the clock, and building what was read).
        assert time.process_time() - start < budget + 0.5, (budget, raw[:200])
        for data in documents:
            _within_limits(data)
