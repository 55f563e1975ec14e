"""The fleet as the planner sees it in one cycle: clusters as numpy arrays indexed in
cluster-name order, health, the latency tables, and the static per-cluster prices.

Everything here is derived from ``Goals`` and ``Observed`` only; nothing reads a clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from qonnect_gitops.model.cluster import Cluster
from qonnect_gitops.model.goals import Goals
from qonnect_gitops.model.observed import Observed

GIB = float(2**30)
TIER_RANK = {"cloud": 0, "fog": 1, "edge": 2}


@dataclass(frozen=True)
class StaticFleet:
    """What depends on the goals alone; reused across cycles of the same ``Goals`` object."""

    names: tuple[str, ...]
    index: dict[str, int]
    clusters: tuple[Cluster, ...]
    regions: tuple[str, ...]  # every region named by clusters, latency goals or the fleet
    region_index: dict[str, int]
    cluster_region: np.ndarray  # int index into regions, per cluster
    tier: tuple[str, ...]
    cpu_price: np.ndarray  # per millicore-hour
    memory_price: np.ndarray  # per byte-hour
    energy_per_millicore: np.ndarray  # watts per millicore x gCO2/kWh
    declared_region_latency: np.ndarray  # [cluster, region] ms, inf when unknown
    declared_pairs: dict[tuple[int, int], float]  # explicit cluster-to-cluster latencies
    # [cluster, cluster] ms by the declarations alone (inf when unknown), and where an
    # explicit pair decides it; measurements are applied on top each cycle.
    declared_cluster_latency: np.ndarray
    explicit: np.ndarray
    # The finished table and its norm when nothing is measured (read only).
    declared_view: tuple[np.ndarray, float]


def build_static(goals: Goals) -> StaticFleet:
    """Arrays of everything the goals declare about clusters and the network."""
    names = tuple(sorted(goals.clusters))
    index = {n: i for i, n in enumerate(names)}
    clusters = tuple(goals.clusters[n] for n in names)
    region_set = {c.spec.region for c in clusters} | set(goals.fleet.spec.regions)
    for component in goals.components():
        region_set.update(g.region for g in component.qos.latency)
    for (a, b) in goals.latencies:
        for end in (a, b):
            if end not in index:
                region_set.add(end)
    regions = tuple(sorted(region_set))
    region_index = {r: i for i, r in enumerate(regions)}
    cluster_region = np.array([region_index[c.spec.region] for c in clusters], dtype=np.int64)
    n = len(names)
    region_lat = np.full((n, len(regions)), math.inf)
    region_lat[np.arange(n), cluster_region] = 0.0  # in-region latency counts as zero unless declared
    pairs: dict[tuple[int, int], float] = {}
    for (a, b), ms in sorted(goals.latencies.items()):
        if a in index and b in index:
            pairs[(index[a], index[b])] = ms
        elif a in index and b in region_index:
            region_lat[index[a], region_index[b]] = ms
    cl = _larger_known(region_lat[:, cluster_region])
    explicit = np.zeros((n, n), dtype=bool)
    for (src, dst), ms in pairs.items():
        cl[src, dst] = ms
        explicit[src, dst] = explicit[dst, src] = True
    cl = _larger_known(cl)  # closeness reads rows as columns: one value per pair
    return StaticFleet(
        names=names,
        index=index,
        clusters=clusters,
        regions=regions,
        region_index=region_index,
        cluster_region=cluster_region,
        tier=tuple(c.spec.tier for c in clusters),
        cpu_price=np.array([c.spec.cost.cpu_hour / 1000.0 for c in clusters]),
        memory_price=np.array([c.spec.cost.memory_gib_hour / GIB for c in clusters]),
        energy_per_millicore=np.array(
            [c.spec.energy.watts_per_cpu * c.spec.energy.carbon_intensity / 1000.0 for c in clusters]
        ),
        declared_region_latency=region_lat,
        declared_pairs=pairs,
        declared_cluster_latency=cl,
        explicit=explicit,
        declared_view=_read_only(_finished(cl.copy())),
    )


@dataclass(frozen=True)
class Failure:
    """Why a cluster counts as gone this cycle: reported unhealthy, or silent too long."""

    reported_unhealthy: bool
    silent_seconds: float | None = None
    grace_seconds: float | None = None


@dataclass(frozen=True)
class FleetView:
    """One cycle's view: static fleet plus health and measured latencies."""

    static: StaticFleet
    healthy: np.ndarray  # bool per cluster: healthy and heartbeat within grace
    failures: dict[int, Failure]  # why an unhealthy cluster is treated as gone
    region_latency: np.ndarray  # [cluster, region] ms; measured overrides declared
    measured_region: frozenset[tuple[int, int]]  # (cluster, region) pairs that were measured
    cluster_latency: np.ndarray  # [cluster, cluster] ms, finite everywhere
    latency_norm: float  # twice the largest finite cluster-to-cluster latency (>= 2)

    rows: dict[int, list[float]] = field(default_factory=dict, compare=False)

    @property
    def names(self) -> tuple[str, ...]:
        return self.static.names

    def latency_row(self, cluster: int) -> list[float]:
        """``cluster_latency[cluster]`` as a list (cheap to index one element at a time)."""
        row = self.rows.get(cluster)
        if row is None:
            row = self.rows[cluster] = self.cluster_latency[cluster].tolist()
        return row


def build_view(static: StaticFleet, goals: Goals, observed: Observed) -> FleetView:
    """Combine the static fleet with what was observed this cycle."""
    n = len(static.names)
    grace = goals.fleet.spec.heartbeat.grace_seconds
    healthy = np.ones(n, dtype=bool)
    failed: dict[int, Failure] = {}
    for name, oc in sorted(observed.clusters.items()):
        i = static.index.get(name)
        if i is None:
            continue  # the CLI refuses unknown clusters; the planner ignores them
        if not oc.healthy:
            healthy[i] = False
            failed[i] = Failure(reported_unhealthy=True)
        elif oc.heartbeat_age_seconds is not None and oc.heartbeat_age_seconds > grace:
            healthy[i] = False
            failed[i] = Failure(False, oc.heartbeat_age_seconds, grace)
    region_lat = static.declared_region_latency
    # A measurement overrides what is declared for its pair, in both directions; a pair
    # measured more than once (or in both directions) counts with its largest value.
    measured_pairs: dict[tuple[int, int], float] = {}
    measured_regions: dict[tuple[int, int], float] = {}
    for lat in observed.latencies:
        a, b = lat.from_, lat.to
        if a in static.index and b in static.index:
            key = (min(static.index[a], static.index[b]), max(static.index[a], static.index[b]))
            measured_pairs[key] = max(measured_pairs.get(key, 0.0), lat.ms)
        elif a in static.index and b in static.region_index:
            key = (static.index[a], static.region_index[b])
            measured_regions[key] = max(measured_regions.get(key, 0.0), lat.ms)
        elif b in static.index and a in static.region_index:
            key = (static.index[b], static.region_index[a])
            measured_regions[key] = max(measured_regions.get(key, 0.0), lat.ms)
    if not measured_pairs and not measured_regions:
        cl, norm = static.declared_view
    else:
        region_lat = region_lat.copy()
        for (i, r), ms in measured_regions.items():
            region_lat[i, r] = ms
        # Cluster to cluster: an explicit pair, else the latency of each to the other's
        # region; only the rows of clusters with a measured region latency change.
        cl = static.declared_cluster_latency.copy()
        reg = static.cluster_region
        for k in sorted({i for i, _ in measured_regions}):
            row = _larger_known_pair(region_lat[k, reg], region_lat[:, reg[k]])
            row = np.where(static.explicit[k], cl[k], row)
            cl[k, :] = row
            cl[:, k] = row
        for (i, j), ms in measured_pairs.items():
            cl[i, j] = cl[j, i] = ms
        cl, norm = _finished(cl)
    return FleetView(
        static=static,
        healthy=healthy,
        failures=failed,
        region_latency=region_lat,
        measured_region=frozenset(measured_regions),
        cluster_latency=cl,
        latency_norm=norm,
    )


def _larger_known(table: np.ndarray) -> np.ndarray:
    """Symmetric: where both directions are known the larger counts (a latency given in
    both directions is judged by its worse one), else the known one."""
    return _larger_known_pair(table, table.T)


def _larger_known_pair(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    both = np.isfinite(a) & np.isfinite(b)
    larger: np.ndarray = np.where(both, np.maximum(a, b), np.minimum(a, b))
    return larger


def _read_only(view: tuple[np.ndarray, float]) -> tuple[np.ndarray, float]:
    view[0].setflags(write=False)  # shared by every cycle of these goals
    return view


def _finished(cl: np.ndarray) -> tuple[np.ndarray, float]:
    """Zero on the diagonal; unknown pairs count as twice the largest known latency, and
    that is the norm closeness divides by (so each of its terms stays within [0, 1])."""
    np.fill_diagonal(cl, 0.0)
    finite = cl[np.isfinite(cl)]
    norm = float(max(finite.max() if finite.size else 1.0, 1.0))
    cl[~np.isfinite(cl)] = 2.0 * norm
    return cl, 2.0 * norm
