"""The fleet as the planner sees it in one cycle: clusters as numpy arrays indexed in
cluster-name order, health, the latency tables, and the static per-cluster prices.

Everything here is derived from ``Goals`` and ``Observed`` only; nothing reads a clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

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
    )


@dataclass(frozen=True)
class FleetView:
    """One cycle's view: static fleet plus health and measured latencies."""

    static: StaticFleet
    healthy: np.ndarray  # bool per cluster: healthy and heartbeat within grace
    failed_reason: dict[int, str]  # why an unhealthy cluster is treated as gone
    region_latency: np.ndarray  # [cluster, region] ms; measured overrides declared
    measured_region: frozenset[tuple[int, int]]  # (cluster, region) pairs that were measured
    cluster_latency: np.ndarray  # [cluster, cluster] ms, finite everywhere
    latency_norm: float  # largest finite cluster-to-cluster latency (>= 1)

    @property
    def names(self) -> tuple[str, ...]:
        return self.static.names


def build_view(static: StaticFleet, goals: Goals, observed: Observed) -> FleetView:
    """Combine the static fleet with what was observed this cycle."""
    n = len(static.names)
    grace = goals.fleet.spec.heartbeat.grace_seconds
    healthy = np.ones(n, dtype=bool)
    failed: dict[int, str] = {}
    for name, oc in sorted(observed.clusters.items()):
        i = static.index.get(name)
        if i is None:
            continue  # the CLI refuses unknown clusters; the planner ignores them
        if not oc.healthy:
            healthy[i] = False
            failed[i] = "reported unhealthy"
        elif oc.heartbeat_age_seconds is not None and oc.heartbeat_age_seconds > grace:
            healthy[i] = False
            failed[i] = f"silent for {oc.heartbeat_age_seconds:g}s (grace {grace:g}s)"
    region_lat = static.declared_region_latency.copy()
    pairs = dict(static.declared_pairs)
    measured_region: set[tuple[int, int]] = set()
    # Sorted, so a pair measured twice resolves the same way whatever the input order:
    # the larger value wins (the later entry in sorted order).
    for lat in sorted(observed.latencies, key=lambda x: (x.from_, x.to, x.ms)):
        a, b = lat.from_, lat.to
        if a in static.index and b in static.index:
            pairs[(static.index[a], static.index[b])] = lat.ms
            pairs[(static.index[b], static.index[a])] = lat.ms
        elif a in static.index and b in static.region_index:
            region_lat[static.index[a], static.region_index[b]] = lat.ms
            measured_region.add((static.index[a], static.region_index[b]))
        elif b in static.index and a in static.region_index:
            region_lat[static.index[b], static.region_index[a]] = lat.ms
            measured_region.add((static.index[b], static.region_index[a]))
    # Cluster to cluster: explicit pairs, else the source's latency to the target's region.
    cl = region_lat[:, static.cluster_region].copy()
    cl = np.minimum(cl, cl.T)  # symmetric: the better known direction
    for (src, dst), ms in pairs.items():  # both directions are present: tables mirror links
        cl[src, dst] = ms
    cl = np.minimum(cl, cl.T)  # symmetric: closeness reads rows as columns
    np.fill_diagonal(cl, 0.0)
    finite = cl[np.isfinite(cl)]
    norm = float(max(finite.max() if finite.size else 1.0, 1.0))
    cl[~np.isfinite(cl)] = 2.0 * norm  # unknown pairs count as far apart
    return FleetView(
        static=static,
        healthy=healthy,
        failed_reason=failed,
        region_latency=region_lat,
        measured_region=frozenset(measured_region),
        cluster_latency=cl,
        latency_norm=2.0 * norm,
    )
