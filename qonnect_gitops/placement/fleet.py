"""The fleet as the planner sees it in one cycle: clusters as numpy arrays indexed in
cluster-name order, health, the latency tables, and the static per-cluster prices.

Everything here is derived from ``Goals`` and ``Observed`` only; nothing reads a clock.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from qonnect_gitops.model.cluster import Cluster
from qonnect_gitops.model.goals import Goals
from qonnect_gitops.model.observed import Observed
from qonnect_gitops.model.status import ClusterState

GIB = float(2**30)
TIER_RANK = {"cloud": 0, "fog": 1, "edge": 2}


ROWS_KEPT = 512  # latency rows a table keeps computed (each is one float per cluster)


class ClusterLatency:
    """Cluster-to-cluster latency in ms, symmetric, finite everywhere, without a dense
    matrix: a pair's latency is its explicit or measured value where one is given, else
    the larger known of each cluster's latency to the other's region (unknown: twice
    the largest known latency, the closeness norm). Rows are computed when asked for
    and a bounded number kept, so memory stays linear in clusters x regions plus the
    pairs that are named.

    Indexing follows the numpy matrix it replaces: ``lat[a]`` is a row, ``lat[[a, b]]``
    rows, ``lat[a, b]`` one value and ``lat[a, idx]`` part of a row."""

    def __init__(self, region_latency: np.ndarray, cluster_region: np.ndarray,
                 pairs: dict[tuple[int, int], float]) -> None:
        self.region_latency = region_latency  # [cluster, region] ms, inf when unknown
        self.cluster_region = cluster_region
        self.pairs = pairs  # (low, high) index -> ms: the named pairs, decided already
        self.by_cluster: dict[int, dict[int, float]] = {}
        for (a, b), ms in sorted(pairs.items()):
            self.by_cluster.setdefault(a, {})[b] = ms
            self.by_cluster.setdefault(b, {})[a] = ms
        self.n = len(cluster_region)
        self.shape = (self.n, self.n)
        self.largest = _largest_known(region_latency, cluster_region, pairs)
        self.norm = 2.0 * max(self.largest, 1.0)
        self._rows: dict[int, np.ndarray] = {}
        self._lists: dict[int, list[float]] = {}
        self._orders: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}

    def derived(self, a: int, b: int) -> float:
        """The latency of a pair from the regions alone (inf when neither is known)."""
        x = float(self.region_latency[a, self.cluster_region[b]])
        y = float(self.region_latency[b, self.cluster_region[a]])
        return max(x, y) if math.isfinite(x) and math.isfinite(y) else min(x, y)

    def row(self, a: int) -> np.ndarray:
        """Latency from ``a`` to every cluster (read only)."""
        row = self._rows.get(a)
        if row is None:
            row = _larger_known_pair(self.region_latency[a, self.cluster_region],
                                     self.region_latency[:, self.cluster_region[a]])
            for b, ms in self.by_cluster.get(a, {}).items():
                row[b] = ms
            row[a] = 0.0
            row[~np.isfinite(row)] = self.norm
            row.setflags(write=False)
            if len(self._rows) >= ROWS_KEPT:
                del self._rows[next(iter(self._rows))]
            self._rows[a] = row
        return row

    def row_list(self, a: int) -> list[float]:
        """``row(a)`` as a list (cheap to index one element at a time)."""
        out = self._lists.get(a)
        if out is None:
            if len(self._lists) >= ROWS_KEPT // 4:
                del self._lists[next(iter(self._lists))]
            out = self._lists[a] = self.row(a).tolist()
        return out

    def nearest_order(self, origin: int, tiebreak: np.ndarray) -> np.ndarray:
        """Every other cluster, nearest to ``origin`` first; ties by ``tiebreak`` (a score
        vector, lower first), then by index. Kept for the last few (origin, vector)
        pairs: components of one class offload from the same cluster with the same
        scores, and one sort serves them all (read only)."""
        key = (origin, id(tiebreak))
        entry = self._orders.get(key)
        if entry is not None and entry[0] is tiebreak:
            return entry[1]
        row = self.row(origin)
        ranked: np.ndarray = np.lexsort((np.arange(self.n), tiebreak, row))
        order: np.ndarray = ranked[ranked != origin]
        order.setflags(write=False)
        if len(self._orders) >= ROWS_KEPT // 4:
            del self._orders[next(iter(self._orders))]
        self._orders[key] = (tiebreak, order)  # holds the vector: its id stays unique
        return order

    def __getitem__(self, key: object) -> Any:
        if isinstance(key, tuple):
            a, rest = key
            return self.row(int(a))[rest]
        if isinstance(key, (int, np.integer)):
            return self.row(int(key))
        return np.stack([self.row(int(a)) for a in key])  # type: ignore[attr-defined]


def _largest_known(region_latency: np.ndarray, cluster_region: np.ndarray,
                   pairs: dict[tuple[int, int], float]) -> float:
    """The largest finite latency between two different clusters (0 when none is known).

    A pair's regional value is the larger known of its two ends' latencies to the other's
    region, so the largest regional value over all pairs is the largest finite latency
    of any cluster to a region holding another cluster, unless every pair that carries
    it is named (its named value counts instead). The named pairs are few: the loop
    below skips at most that many candidates."""
    regions = region_latency.shape[1]
    members = np.bincount(cluster_region, minlength=regions)
    # Clusters in region s other than a itself.
    others = members[None, :] - (np.arange(regions)[None, :] == cluster_region[:, None])
    candidate = np.isfinite(region_latency) & (others > 0)
    best = max(pairs.values(), default=0.0)
    flat = np.flatnonzero(candidate.ravel())
    if flat.size == 0:
        return best
    values = region_latency.ravel()[flat]
    named: dict[tuple[int, int], int] = {}
    for (a, b) in pairs:
        for x, y in ((a, b), (b, a)):
            key = (x, int(cluster_region[y]))
            named[key] = named.get(key, 0) + 1
    for j in np.argsort(-values, kind="stable").tolist():
        if values[j] <= best:
            break
        a, s = divmod(int(flat[j]), regions)
        if named.get((a, s), 0) < int(others[a, s]):
            return float(values[j])  # a pair of a with s carries it, unnamed
    return best


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
    # Explicit cluster-to-cluster latencies, one value per (low, high) pair: the larger
    # of both directions where both are known (one declared direction is compared with
    # the regional value of the pair); measurements are applied on top each cycle.
    declared_pairs: dict[tuple[int, int], float]
    # The table when nothing is measured (shared by every cycle of these goals).
    declared_view: ClusterLatency


def build_static(goals: Goals, named: Iterable[str] | None = None) -> StaticFleet:
    """Arrays of everything the goals declare about clusters and the network. ``named``:
    the regions the components' latency goals name, where the caller has them already
    (a fleet of 100,000 components is not walked twice)."""
    names = tuple(sorted(goals.clusters))
    index = {n: i for i, n in enumerate(names)}
    clusters = tuple(goals.clusters[n] for n in names)
    region_set = {c.spec.region for c in clusters} | set(goals.fleet.spec.regions)
    if named is None:
        for component in goals.components():
            region_set.update(g.region for g in component.qos.latency)
    else:
        region_set.update(named)
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
    directed: dict[tuple[int, int], float] = {}
    for (a, b), ms in sorted(goals.latencies.items()):
        if a in index and b in index:
            directed[(index[a], index[b])] = ms
        elif a in index and b in region_index:
            region_lat[index[a], region_index[b]] = ms
    regional = ClusterLatency(region_lat, cluster_region, {})
    pairs: dict[tuple[int, int], float] = {}
    for (src, dst), ms in sorted(directed.items()):
        if src == dst:
            continue
        key = (min(src, dst), max(src, dst))
        if key in pairs:
            continue
        back = directed.get((dst, src), regional.derived(src, dst))
        pairs[key] = max(ms, back) if math.isfinite(back) else ms
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
        declared_view=ClusterLatency(region_lat, cluster_region, pairs),
    )


@dataclass(frozen=True)
class Failure:
    """Why a cluster counts as gone this cycle: reported unhealthy, or silent too long."""

    reported_unhealthy: bool
    silent_seconds: float | None = None
    grace_seconds: float | None = None
    state: ClusterState | None = None  # the health model's state, when the leads judged it
    reason: str | None = None


@dataclass(frozen=True)
class Cordon:
    """Why a healthy cluster takes no new replicas this cycle: the leads' health model
    judged it Degraded, Stalled or Silent, or it is back from a failover and not Ready long
    enough yet (reason ``Recovering``); what runs there stays."""

    state: ClusterState
    reason: str | None


@dataclass(frozen=True)
class FleetView:
    """One cycle's view: static fleet plus health and measured latencies."""

    static: StaticFleet
    healthy: np.ndarray  # bool per cluster: not gone (healthy, and heartbeat within grace)
    failures: dict[int, Failure]  # why an unhealthy cluster is treated as gone
    # bool per cluster: takes new replicas (healthy and not cordoned: the health filter)
    placeable: np.ndarray
    cordons: dict[int, Cordon]  # why a healthy cluster takes no new replicas
    region_latency: np.ndarray  # [cluster, region] ms; measured overrides declared
    measured_region: frozenset[tuple[int, int]]  # (cluster, region) pairs that were measured
    cluster_latency: ClusterLatency  # [cluster, cluster] ms, finite everywhere
    latency_norm: float  # twice the largest finite cluster-to-cluster latency (>= 2)
    # The preferred cluster per (allowed, wanted, score) vectors shared by a class of
    # components (``distribute``): one argmin per class and cycle, not per component.
    best: dict[tuple[int, int, int, bool], tuple[Any, Any, Any, int]] = field(default_factory=dict, compare=False)

    @property
    def names(self) -> tuple[str, ...]:
        return self.static.names

    def latency_row(self, cluster: int) -> list[float]:
        """``cluster_latency[cluster]`` as a list (cheap to index one element at a time)."""
        return self.cluster_latency.row_list(cluster)


def build_view(static: StaticFleet, goals: Goals, observed: Observed) -> FleetView:
    """Combine the static fleet with what was observed this cycle."""
    n = len(static.names)
    grace = goals.fleet.spec.heartbeat.grace_seconds
    healthy = np.ones(n, dtype=bool)
    failed: dict[int, Failure] = {}
    cordons: dict[int, Cordon] = {}
    for name, oc in sorted(observed.clusters.items()):
        i = static.index.get(name)
        if i is None:
            continue  # the CLI refuses unknown clusters; the planner ignores them
        if not oc.healthy:
            healthy[i] = False
            failed[i] = Failure(reported_unhealthy=True, state=oc.state, reason=oc.reason)
        elif oc.state is not None:
            # The leads' health model judged silence already (with hysteresis and a storm
            # guard): a state short of failover cordons the cluster, nothing more.
            if oc.cordoned:  # Degraded, Stalled, Silent held back, or recovering
                cordons[i] = Cordon(oc.state, oc.reason)
        elif oc.heartbeat_age_seconds is not None and oc.heartbeat_age_seconds > grace:
            healthy[i] = False
            failed[i] = Failure(False, oc.heartbeat_age_seconds, grace)
    placeable = healthy.copy()
    if cordons:
        placeable[sorted(cordons)] = False
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
        cl = static.declared_view
    else:
        region_lat = region_lat.copy()
        for (i, r), ms in measured_regions.items():
            region_lat[i, r] = ms
        # A measured pair overrides what is declared; every other pair follows the
        # (measured) regional latencies of its ends, or its explicit value.
        pairs = dict(static.declared_pairs)
        pairs.update({k: ms for k, ms in measured_pairs.items() if k[0] != k[1]})
        cl = ClusterLatency(region_lat, static.cluster_region, pairs)
    return FleetView(
        static=static,
        healthy=healthy,
        failures=failed,
        placeable=placeable,
        cordons=cordons,
        region_latency=region_lat,
        measured_region=frozenset(measured_regions),
        cluster_latency=cl,
        latency_norm=cl.norm,
    )


def _larger_known_pair(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    both = np.isfinite(a) & np.isfinite(b)
    larger: np.ndarray = np.where(both, np.maximum(a, b), np.minimum(a, b))
    return larger
