"""The planner's objective as a plain function of a placement, so that a placement can
be scored after the fact (benchmarks compare against an exact solver with it; operators
can compare two plans with it).

    J = sum over components i of  (1/n_i) * sum_a x_ia * s_ia
      + sum over calls i -> j of  w_c * (1/n_i) * sum_a x_ia * min_{b in S_j} L_ab / L_norm

``s_ia`` is the weighted sum of the static score plugins (latency, cost, energy, tier
and taint preference, traffic, affinity), ``S_j`` the clusters that run j, ``L`` the
cluster-to-cluster latency and ``w_c`` the closeness weight. Utilisation (best-fit /
worst-fit) depends on the order of decisions and is not part of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from qonnect_gitops.model.goals import Goals
from qonnect_gitops.model.observed import Observed
from qonnect_gitops.model.plan import CurrentPlacement
from qonnect_gitops.placement.cycle import Cycle
from qonnect_gitops.placement.evaluate import desired_replicas
from qonnect_gitops.placement.fleet import ClusterLatency
from qonnect_gitops.placement.plugins.closeness import CLOSENESS_WEIGHT


@dataclass(frozen=True)
class Terms:
    """The static data of the objective for one goals/observed pair."""

    clusters: tuple[str, ...]
    components: tuple[str, ...]  # app/name, sorted
    replicas: np.ndarray  # desired replicas per component
    scores: np.ndarray  # [component, cluster] static score s_ia
    feasible: np.ndarray  # [component, cluster] all filters but free capacity
    latency: ClusterLatency  # [cluster, cluster] ms
    latency_norm: float
    calls: tuple[tuple[int, int], ...]  # (caller, callee) component indices
    closeness_weight: float = CLOSENESS_WEIGHT


def terms(goals: Goals, observed: Observed) -> Terms:
    """Static scores and feasibility of every component on every cluster."""
    cycle = Cycle(goals, observed, CurrentPlacement())
    ev = cycle.evaluator
    keys = tuple(cycle.components)
    n = len(cycle.fleet.names)
    scores = np.zeros((len(keys), n))
    feasible = np.zeros((len(keys), n), dtype=bool)
    replicas = np.zeros(len(keys), dtype=np.int64)
    for row, key in enumerate(keys):
        c = cycle.components[key]
        count, _ = desired_replicas(c, cycle.rps(key))
        replicas[row] = count
        ctx = ev.context(c, count)
        scores[row] = ev.static_total(ctx)  # no placement yet: closeness contributes 0
        feasible[row] = ev.static_mask(ctx)
    index = {k: i for i, k in enumerate(keys)}
    calls = tuple(
        (index[k], index[callee])
        for k in keys
        for callee in cycle.components[k].calls
        if callee in index
    )
    return Terms(
        clusters=cycle.fleet.names,
        components=keys,
        replicas=replicas,
        scores=scores,
        feasible=feasible,
        latency=cycle.fleet.cluster_latency,
        latency_norm=cycle.fleet.latency_norm,
        calls=calls,
    )


def evaluate(t: Terms, placements: Mapping[str, Mapping[str, int]]) -> float:
    """J of a placement (``{component: {cluster: replicas}}``); unplaced replicas add nothing."""
    col = {name: i for i, name in enumerate(t.clusters)}
    row = {k: i for i, k in enumerate(t.components)}
    where: dict[int, dict[int, int]] = {}
    total = 0.0
    for key, per in sorted(placements.items()):
        if key not in row:
            continue
        i = row[key]
        where[i] = {col[c]: n for c, n in sorted(per.items()) if n > 0}
        n_i = max(int(t.replicas[i]), 1)
        total += sum(n * t.scores[i, a] for a, n in where[i].items()) / n_i
    for i, j in t.calls:
        if not where.get(i) or not where.get(j):
            continue
        n_i = max(int(t.replicas[i]), 1)
        targets = sorted(where[j])
        total += t.closeness_weight * sum(
            n * float(t.latency[a, targets].min()) for a, n in where[i].items()
        ) / n_i / t.latency_norm
    return total
