"""The cluster-to-cluster latency table, computed row by row from region latencies and
the named pairs, equals the dense matrix built the straightforward way (every pair from
its ends' regional latencies, explicit pairs on top, measurements on top of those)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from qonnect_gitops.model.goals import Goals
from qonnect_gitops.model.observed import Observed
from qonnect_gitops.placement.fleet import build_static, build_view
from tests.placement.builders import cluster, goals, observed

REGIONS = ("r1", "r2", "r3")


def _larger(x: float, y: float) -> float:
    return max(x, y) if math.isfinite(x) and math.isfinite(y) else min(x, y)


def dense(g: Goals, obs: Observed) -> tuple[np.ndarray, float]:
    """Every pair spelt out: the reference the planner's table must equal."""
    names = sorted(g.clusters)
    n = len(names)
    region_of = {c: g.clusters[c].spec.region for c in names}

    def regional(lat: dict[tuple[str, str], float], a: str, b: str) -> float:
        to_b = 0.0 if region_of[a] == region_of[b] else math.inf
        to_a = to_b
        to_b = lat.get((a, region_of[b]), to_b)
        to_a = lat.get((b, region_of[a]), to_a)
        return _larger(to_b, to_a)

    declared = {k: ms for k, ms in g.latencies.items() if k[0] in g.clusters and k[1] not in g.clusters}
    measured_region: dict[tuple[str, str], float] = {}
    measured_pair: dict[frozenset[str], float] = {}
    for m in obs.latencies:
        if m.from_ in g.clusters and m.to in g.clusters:
            key = frozenset((m.from_, m.to))
            measured_pair[key] = max(measured_pair.get(key, 0.0), m.ms)
        elif m.from_ in g.clusters:
            measured_region[(m.from_, m.to)] = max(measured_region.get((m.from_, m.to), 0.0), m.ms)
        else:
            measured_region[(m.to, m.from_)] = max(measured_region.get((m.to, m.from_), 0.0), m.ms)
    now = {**declared, **measured_region}
    table = np.zeros((n, n))
    for i, a in enumerate(names):
        for j, b in enumerate(names):
            if i == j:
                continue
            there, back = g.latencies.get((a, b)), g.latencies.get((b, a))
            if there is not None or back is not None:
                value = _larger(there if there is not None else regional(declared, a, b),
                                back if back is not None else regional(declared, a, b))
            else:
                value = regional(now, a, b)
            table[i, j] = measured_pair.get(frozenset((a, b)), value)
    finite = table[np.isfinite(table)]
    norm = 2.0 * max(float(finite.max()) if finite.size else 1.0, 1.0)
    table[~np.isfinite(table)] = norm
    return table, norm


@st.composite
def networks(draw: st.DrawFn) -> tuple[Goals, Observed]:
    count = draw(st.integers(1, 6))
    names = [f"c{i}" for i in range(count)]
    clusters = [cluster(name, region=draw(st.sampled_from(REGIONS))) for name in names]
    ms = st.integers(1, 90).map(float)
    links: list[tuple[str, str, float]] = []
    for a in names:
        for r in REGIONS:
            if draw(st.booleans()):
                links.append((a, r, draw(ms)))
    for _ in range(draw(st.integers(0, 4))):
        a, b = draw(st.sampled_from(names)), draw(st.sampled_from(names))
        if a != b:
            links.append((a, b, draw(ms)))
    measured: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(0, 5))):
        a = draw(st.sampled_from(names))
        b = draw(st.sampled_from([*names, *REGIONS]))
        if a != b:
            pair = (a, b) if draw(st.booleans()) else (b, a)
            measured.append({"from": pair[0], "to": pair[1], "ms": draw(ms)})
    return goals(clusters, [], links, regions=REGIONS), observed(latencies=measured)


@settings(max_examples=300, deadline=None)
@given(networks())
def test_rows_equal_the_dense_matrix(case: tuple[Goals, Observed]) -> None:
    g, obs = case
    view = build_view(build_static(g), g, obs)
    expected, norm = dense(g, obs)
    assert view.latency_norm == norm
    got = np.stack([view.cluster_latency[i] for i in range(len(g.clusters))])
    np.testing.assert_array_equal(got, expected)
    if len(g.clusters) > 1:
        assert view.cluster_latency[0, 1] == expected[0, 1]
        np.testing.assert_array_equal(view.cluster_latency[[1, 0]], expected[[1, 0]])
