"""Replica distribution: from a component's scored clusters to replica counts per cluster.

Rules, in order: the best-scoring feasible cluster is the preferred one; when it has no
room at all the work is offloaded to the feasible cluster nearest to it by latency
(``offloading``); further clusters are added, best score first, until ``minClusters``
are used; ``spread`` shares replicas evenly, otherwise the preferred cluster takes all
but one per extra cluster; replicas that do not fit where they were meant to go burst
to the clusters nearest the preferred one (``bursting``). What still fits nowhere is
reported as unplaced. Nothing here mutates the ledger: callers commit the result.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from qonnect_gitops.placement.framework import Context


@dataclass
class Distribution:
    """Where replicas would go, and the story of why."""

    replicas: dict[int, int] = field(default_factory=dict)
    unplaced: int = 0
    preferred: int | None = None
    notes: dict[int, str] = field(default_factory=dict)  # per cluster: why it was used
    skipped: str = ""  # why not the preferred cluster, when it was not used


class Room:
    """Replicas each cluster can still take for one component during one distribution."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.used: dict[int, int] = {}
        self.cache: dict[int, int] = {}

    def left(self, cluster: int, want: int) -> int:
        """How many of ``want`` more replicas fit on the cluster (own replicas count as room)."""
        c = self.ctx.component
        if cluster not in self.cache:
            # Ask for at most what this component could ever need there.
            own = self.ctx.own.get(cluster, 0)
            fit = self.ctx.ledger.fits(cluster, c.cpu, c.memory, c.architectures, self.ctx.replicas)
            self.cache[cluster] = own + fit
        return max(0, min(want, self.cache[cluster] - self.used.get(cluster, 0)))

    def use(self, cluster: int, count: int) -> None:
        self.used[cluster] = self.used.get(cluster, 0) + count


def ranked(candidates: np.ndarray, total: np.ndarray) -> Iterator[int]:
    """Candidate clusters by score, ties by name (index order), lazily: callers mostly
    need the first few, and a full sort per component would dominate a large plan."""
    return _lazy_order(candidates, (total[candidates],))


def by_distance(ctx: Context, origin: int, candidates: np.ndarray, total: np.ndarray) -> Iterator[int]:
    """Candidate clusters nearest to ``origin`` first; ties by score, then name."""
    rest = candidates[candidates != origin]
    return _lazy_order(rest, (ctx.fleet.cluster_latency[origin, rest], total[rest]))


def _lazy_order(candidates: np.ndarray, keys: tuple[np.ndarray, ...]) -> Iterator[int]:
    """Yield candidates ordered by the keys (first key first), then by index."""
    primary = keys[0].astype(float).copy()
    for _ in range(candidates.size):
        best = float(primary.min())
        if not math.isfinite(best) and best > 0:
            return
        ties = np.flatnonzero(primary == best)
        for key in keys[1:]:
            if ties.size > 1:
                sub = key[ties]
                ties = ties[sub == sub.min()]
        pick = int(ties[0])  # candidates are in index order: the first is the lowest name
        primary[pick] = math.inf
        yield int(candidates[pick])


def distribute(
    ctx: Context,
    mask: np.ndarray,
    total: np.ndarray,
    need: int,
    existing: dict[int, int],
    per_cluster_max: int | None = None,
    wanted: np.ndarray | None = None,
) -> Distribution:
    """Distribute ``need`` more replicas over the feasible clusters.

    ``existing`` are replicas the component keeps (they count towards minClusters);
    ``per_cluster_max`` caps replicas per cluster (DaemonSets: 1); ``wanted`` is the
    mask without the capacity filter: its best cluster is the preferred one even when
    full, so that offloading goes to the cluster nearest to it.
    """
    result = Distribution()
    if need <= 0:
        return result
    qos = ctx.component.qos
    room = Room(ctx)
    cap = per_cluster_max if per_cluster_max is not None else need
    for cluster, count in existing.items():
        room.use(cluster, count)
    if per_cluster_max is not None and existing:
        # A DaemonSet already on a cluster cannot take a second slot there.
        mask = mask.copy()
        mask[list(existing)] = False
        if wanted is not None:
            wanted = wanted.copy()
            wanted[list(existing)] = False
    pool = wanted if wanted is not None else mask
    # argmin returns the first minimum: ties go to the lowest index, i.e. cluster name.
    preferred = int(np.argmin(np.where(pool, total, math.inf)))
    if not pool[preferred]:
        result.unplaced = need
        return result
    result.preferred = preferred
    clusters_wanted = max(qos.availability.min_clusters - len(existing), 1 if not existing else 0)
    if clusters_wanted <= 1 and room.left(preferred, min(need, cap)) >= min(need, cap) and need <= cap:
        result.replicas[preferred] = need
        result.notes[preferred] = "best score"
        return result
    candidates = np.flatnonzero(mask)
    if candidates.size == 0:
        result.unplaced = need
        return result
    chosen: list[int] = []
    primary = preferred
    if room.left(preferred, 1) == 0 or preferred in existing and cap <= existing[preferred]:
        if not qos.offloading:
            result.unplaced = need
            result.skipped = f"preferred {ctx.fleet.names[preferred]} is full and offloading is off"
            return result
        primary = -1
        for cluster in by_distance(ctx, preferred, candidates, total):
            if cluster not in existing and room.left(cluster, 1) > 0:
                primary = cluster
                break
        if primary < 0:
            result.unplaced = need
            return result
        result.skipped = f"better-scoring {ctx.fleet.names[preferred]} is full"
        result.notes[primary] = (
            f"offloaded: nearest feasible cluster to {ctx.fleet.names[preferred]}, which is full"
        )
    else:
        result.notes[primary] = "best score"
    chosen.append(primary)
    for cluster in ranked(candidates, total) if len(chosen) < clusters_wanted else ():
        if len(chosen) >= clusters_wanted:
            break
        if cluster in chosen or cluster in existing or room.left(cluster, 1) == 0:
            continue
        chosen.append(cluster)
        result.notes[cluster] = f"availability: cluster {len(chosen) + len(existing)} of at least {qos.availability.min_clusters}"
    # Shares per chosen cluster.
    shares: dict[int, int] = {c: 0 for c in chosen}
    if per_cluster_max == 1 or qos.availability.spread:
        for i in range(need):
            shares[chosen[i % len(chosen)]] += 1
    else:
        for cluster in chosen[1:]:
            shares[cluster] = 1 if need > 0 else 0
        shares[chosen[0]] = max(need - (len(chosen) - 1), 0)
    overflow = 0
    for cluster in chosen:
        want = min(shares[cluster], cap)
        overflow += shares[cluster] - want
        put = room.left(cluster, want)
        if put:
            result.replicas[cluster] = put
            room.use(cluster, put)
        overflow += want - put
    if overflow and qos.bursting:
        for cluster in by_distance(ctx, primary, candidates, total):
            if overflow == 0:
                break
            if cluster in existing and per_cluster_max == 1:
                continue
            already = result.replicas.get(cluster, 0)
            put = room.left(cluster, min(overflow, cap - already))
            if put:
                result.replicas[cluster] = already + put
                room.use(cluster, put)
                overflow -= put
                result.notes.setdefault(
                    cluster, f"burst: overflow from {ctx.fleet.names[primary]}, nearest by latency"
                )
    elif overflow:
        result.skipped = (result.skipped + "; " if result.skipped else "") + "bursting is off"
    result.unplaced = overflow
    return result
