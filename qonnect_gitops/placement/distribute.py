"""Replica distribution: from a component's scored clusters to replica counts per cluster.

Rules, in order: the best-scoring allowed cluster (one whose nodes could hold a replica)
is the preferred one; when it has no room at all the work is offloaded to the allowed
cluster with room nearest to it by latency (``offloading``); further clusters are added,
best score first, until ``minClusters`` are used; the primary cluster takes all but one
replica per extra cluster; replicas that do not fit where they were meant to go burst to
the clusters nearest the primary one (``bursting``). With ``spread`` the replicas are
shared evenly (largest and smallest count differ by at most one) over as few clusters as
capacity allows, at least ``minClusters``, the clusters already used first. What still
fits nowhere is unplaced, with the rule that stopped it (``Blocked``).

Nothing here mutates the ledger: callers commit the result.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np

from qonnect_gitops.model.app import QoS
from qonnect_gitops.model.goals import Component
from qonnect_gitops.placement.framework import Context
from qonnect_gitops.placement.plugins.capacity import CapacityFilter
from qonnect_gitops.placement.plugins.latency import nearest_goals, unserved
from qonnect_gitops.placement.records import Blocked, Rule, Why

CAPACITY = CapacityFilter()


@dataclass
class Distribution:
    """Where replicas would go, and by which rule."""

    replicas: dict[int, int] = field(default_factory=dict)  # added per cluster
    removed: dict[int, int] = field(default_factory=dict)  # taken off existing clusters (spread)
    why: dict[int, Why] = field(default_factory=dict)
    unplaced: int = 0
    preferred: int | None = None
    blocked: Blocked | None = None


@dataclass(frozen=True)
class Request:
    """What to distribute: ``need`` more replicas next to the ``existing`` ones (they count
    towards minClusters and spread); ``per_cluster_max``: 1 for DaemonSets. Replicas of
    the component that run now and count as room when a placement is judged from
    scratch are the context's ``own``."""

    need: int
    existing: Mapping[int, int] = field(default_factory=dict)
    per_cluster_max: int | None = None


class Room:
    """Replicas each cluster can still take for one component during one distribution."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.credit = ctx.own
        self.used: dict[int, int] = {}
        self.cache: dict[int, int] = {}

    def left(self, cluster: int, want: int) -> int:
        """How many of ``want`` more replicas fit on the cluster."""
        if want <= 0:
            return 0
        if cluster not in self.cache:
            c = self.ctx.component
            # Ask for at most what this component could ever need there.
            fit = self.ctx.ledger.fits(cluster, c.cpu, c.memory, c.architectures, max(self.ctx.replicas, want))
            self.cache[cluster] = self.credit.get(cluster, 0) + fit
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


def nearest_with_room(ctx: Context, origin: int, allowed: np.ndarray, total: np.ndarray) -> Iterator[int]:
    """``by_distance`` over the ``allowed`` clusters with room (``_with_room``): the same
    order. A shared (read-only, cached) score vector is sorted once per origin and kept
    by the latency table, so the components of one class do not sort the fleet each; a
    vector of this component alone (closeness, utilisation) is ordered lazily."""
    if not _shared(total):
        return by_distance(ctx, origin, np.flatnonzero(_with_room(ctx, allowed)), total)
    return _walk(ctx, ctx.fleet.cluster_latency.nearest_order(origin, total), allowed)


def _walk(ctx: Context, order: np.ndarray, allowed: np.ndarray) -> Iterator[int]:
    """The clusters of ``order`` that ``_with_room`` keeps, judged a few at a time:
    callers mostly take one of the first, so a large fleet is not judged whole. (Nothing
    changes the ledger while a distribution runs: later chunks are judged as they
    would have been at the start.)"""
    c = ctx.component
    ledger = ctx.ledger
    full = ledger.full_for(c.cpu, c.memory, c.architectures)
    own = [i for i, n in ctx.own.items() if n > 0 and allowed[i]]
    mine: np.ndarray | None = None
    start, step = 0, 32
    # Where no cluster of the order had room for this shape when last walked: while no
    # capacity came back since (the ledger's generation), those clusters still have none
    # (free capacity only shrank, ``full`` only grew), so the walk starts past them.
    key: tuple[int, int, int, int, frozenset[str]] | None = None
    if own:
        mine = np.zeros(allowed.size, dtype=bool)  # one lookup per chunk, not a set search
        mine[own] = True
    else:
        key = (id(order), id(allowed), c.cpu, c.memory, c.architectures)
        seen = ledger.walk_starts.get(key)
        if seen is not None and seen[0] is order and seen[1] is allowed and seen[2] == ledger.generation:
            start = seen[3]
    if start < order.size:
        # The first cluster alone, by a few scalar reads: the walk starts past the clusters
        # last found without room, so it mostly ends here. The same judgement as a chunk's.
        first = int(order[start])
        if ((allowed[first] and ledger.free_cpu[first] >= c.cpu and ledger.free_memory[first] >= c.memory
             and (full is None or not full[first])) or (mine is not None and mine[first])):
            if key is not None:
                if len(ledger.walk_starts) > 4096:
                    ledger.walk_starts.clear()
                ledger.walk_starts[key] = (order, allowed, ledger.generation, start)
                key = None
            yield first
            start += 1
    while start < order.size:
        # Consecutive chunks, each four times the last: a walk past many full clusters
        # judges each cluster once (the chunks once overlapped, judging the first clusters
        # again with every chunk and yielding them again, which no caller needs: a
        # cluster judged once is judged the same while the distribution runs).
        chunk = order[start:start + step]
        keep = allowed[chunk] & (ledger.free_cpu[chunk] >= c.cpu) & (ledger.free_memory[chunk] >= c.memory)
        if full is not None:
            keep &= ~full[chunk]
        if mine is not None:
            keep |= mine[chunk]  # its own replicas count as room (as in the mask)
        if key is not None:
            # Recorded before any caller looks at a yielded cluster (nothing in between
            # can change the ledger), up to the first cluster with room.
            hits = np.flatnonzero(keep)
            if len(ledger.walk_starts) > 4096:
                ledger.walk_starts.clear()
            ledger.walk_starts[key] = (order, allowed, ledger.generation, start + int(hits[0]) if hits.size
                                       else start + chunk.size)
            if hits.size:
                key = None
        yield from chunk[keep].tolist()
        start += step
        step = min(step * 4, 4096)


def _shared(*vectors: np.ndarray | None) -> bool:
    """Cached, read-only vectors (a class's masks and static scores): what is derived from
    them alone may be kept for the cycle."""
    for v in vectors:  # noqa: SIM110 - a loop, not all() over a generator: asked once per distribution
        if v is not None and v.flags.writeable:
            return False
    return True


def _any(mask: np.ndarray) -> bool:
    """Whether a boolean vector holds a True: ``mask.any()``, which costs several times
    more through numpy's Python wrapper (asked once per component and distribution)."""
    return bool(mask.size) and bool(mask[mask.argmax()])


def _lazy_order(candidates: np.ndarray, keys: tuple[np.ndarray, ...]) -> Iterator[int]:
    """Yield candidates ordered by the keys (first key first), then by index, skipping
    those whose first key is +inf. Lazily, in growing batches: a batch is every candidate
    whose first key is at most the k-th smallest (so ties are never split), sorted."""
    primary = keys[0].astype(float)
    rest = np.flatnonzero(~np.isposinf(primary))
    batch = 8
    while rest.size:
        if rest.size > batch:
            values = primary[rest]
            cut = values[np.argpartition(values, batch - 1)[:batch]].max()
            take = rest[values <= cut]
            rest = rest[values > cut]
        else:
            take, rest = rest, rest[:0]
        # lexsort: the last key is the most significant; positions (index order) last resort
        order = np.lexsort((take, *(key[take] for key in reversed(keys[1:])), primary[take]))
        for j in take[order].tolist():
            yield int(candidates[j])
        batch *= 8


def _with_room(ctx: Context, allowed: np.ndarray) -> np.ndarray:
    """Allowed clusters whose free totals could take one replica (the capacity filter's
    quick vector check) and where the ledger has not found every node full; the exact
    per-node answer comes from ``Room``."""
    room: np.ndarray = allowed & CAPACITY.mask(ctx)
    c = ctx.component
    full = ctx.ledger.full_for(c.cpu, c.memory, c.architectures)
    if full is not None:
        # Clusters the ledger already found without a node for one replica (their totals
        # may still look roomy): skipped here rather than asked again one by one.
        room &= ~full
        for cluster, n in ctx.own.items():
            if n > 0 and allowed[cluster]:
                room[cluster] = True  # its own replicas count as room (as in the mask)
    return room


def distribute(
    ctx: Context, allowed: np.ndarray, total: np.ndarray, req: Request, wanted: np.ndarray | None = None
) -> Distribution:
    """Distribute ``req.need`` more replicas over the ``allowed`` clusters (those passing
    every filter but free capacity), best ``total`` score first; see the module doc.
    With ``serve: nearest`` latency goals, new replicas then move one by one to serve
    every such region from nearby (``serve_nearest``)."""
    room = Room(ctx)
    result = _distribute(ctx, allowed, total, req, wanted, room)
    nearest = nearest_goals(ctx.component, ctx.fleet.static.region_index)
    if nearest and result.replicas:
        serve_nearest(ctx, allowed, total, req, result, room, nearest)
    return result


def serve_nearest(ctx: Context, allowed: np.ndarray, total: np.ndarray, req: Request, result: Distribution,
                  room: Room, nearest: tuple[tuple[int, float], ...]) -> None:
    """For each ``serve: nearest`` region no replica is near yet, move one new replica
    (from the cluster that got the most, never the only one near another region) to the
    best allowed cluster with room within that region's envelope."""
    lat = ctx.fleet.region_latency
    placed = {i: n for i, n in req.existing.items() if n > 0}
    for i, n in result.replicas.items():
        placed[i] = placed.get(i, 0) + n
    for i, n in result.removed.items():
        placed[i] = placed.get(i, 0) - n

    def may_leave(i: int, dst: int) -> bool:  # no region loses its only nearby replica
        return placed[i] > 1 or all(
            lat[dst, r] <= m or any(lat[j, r] <= m for j, k in placed.items() if k > 0 and j != i)
            for r, m in nearest if lat[i, r] <= m)

    for region, max_ms in unserved(lat, nearest, (i for i, n in placed.items() if n > 0)):
        if not unserved(lat, ((region, max_ms),), (i for i, n in placed.items() if n > 0)):
            continue  # served by a move made for another region
        within = np.flatnonzero(allowed & (lat[:, region] <= max_ms))
        dst = next((c for c in ranked(within, total) if room.left(c, 1) > 0), None)
        if dst is None:
            continue
        sources = [i for i, n in result.replicas.items() if n > 0 and i != dst and may_leave(i, dst)]
        if not sources:
            continue
        src = min(sources, key=lambda i: (-result.replicas[i], -float(total[i]), i))
        result.replicas[src] -= 1
        placed[src] -= 1
        room.used[src] = room.used.get(src, 0) - 1
        if not result.replicas[src]:
            del result.replicas[src]
            result.why.pop(src, None)
        result.replicas[dst] = result.replicas.get(dst, 0) + 1
        placed[dst] = placed.get(dst, 0) + 1
        room.use(dst, 1)
        result.why[dst] = Why(Rule.NEAREST, region=region)
        if result.unplaced:
            # The replica that left made room where it was: what fit nowhere may fit now.
            put = room.left(src, result.unplaced)
            if put:
                result.replicas[src] = result.replicas.get(src, 0) + put
                placed[src] += put
                room.use(src, put)
                result.why.setdefault(src, Why(Rule.BEST))
                result.unplaced -= put
                if not result.unplaced:
                    result.blocked = None


def _distribute(
    ctx: Context, allowed: np.ndarray, total: np.ndarray, req: Request, wanted: np.ndarray | None, room: Room,
    more_clusters: bool = True,
) -> Distribution:
    """The distribution rules without ``serve: nearest`` (see ``distribute``).

    ``wanted``: ``allowed`` without the node-size check. With offloading, the preferred
    cluster is the best of these: one whose nodes are too small offloads to the nearest
    cluster with room, as a full one does. Without offloading it is the best cluster
    where a replica fits on a node, so "full" is never said of a cluster too small.
    ``more_clusters``: False when no cluster it does not use yet has room (minClusters
    stays unmet): the replicas go where it runs, by the same rules."""
    result = Distribution()
    need = req.need
    qos = ctx.component.qos
    existing = {i: n for i, n in req.existing.items() if n > 0}
    daemon = req.per_cluster_max == 1
    if qos.availability.spread and not daemon and (need > 0 or _uneven(existing) or _too_few(existing, qos)):
        return _spread(ctx, allowed, total, req, existing, room)
    if need <= 0:
        return result
    cap = req.per_cluster_max if req.per_cluster_max is not None else need
    pool = allowed
    if daemon and existing:
        pool = allowed.copy()
        pool[list(existing)] = False  # a DaemonSet already on a cluster takes no second slot
    if daemon:
        new_clusters = need
    elif not more_clusters:
        new_clusters = 0
    else:
        new_clusters = max(qos.availability.min_clusters - len(existing), 0 if existing else 1)
    first = pool
    if new_clusters > 0 and existing and not daemon:
        first = pool.copy()
        first[list(existing)] = False  # availability asks for clusters it does not use yet
        if not _any(first):
            first, new_clusters = pool, 0  # none left: reported as unmet availability
    if not _any(first):
        result.unplaced, result.blocked = need, Blocked.NO_CLUSTER
        return result
    preferred = result.preferred = _preferred(ctx, first, allowed, wanted, total, existing, daemon, new_clusters)
    holds = bool(allowed[preferred])
    if holds and new_clusters <= 1 and need <= cap and room.left(preferred, need) >= need:
        result.replicas[preferred] = need
        result.why[preferred] = Why(Rule.BEST)
        return result
    if holds and room.left(preferred, 1) > 0:
        primary = preferred
        result.why[primary] = Why(Rule.BEST)
    elif preferred in existing:
        # It runs there already and that is full: more replicas are its overflow, which
        # the bursting rule governs (not offloading: nothing moves off it).
        primary = preferred
    elif existing and new_clusters == 0 and qos.offloading:
        # It was offloaded already: the cluster it runs on nearest to the preferred one
        # is its primary, as when it was placed from scratch; what that cannot take is
        # overflow (bursting), so a replan finds what the first plan found.
        near = np.array(sorted(existing), dtype=np.int64)
        primary = next(by_distance(ctx, preferred, near, total))
        result.why[primary] = Why(Rule.OFFLOADED, origin=preferred, too_small=not holds)
    else:
        if not qos.offloading:
            result.unplaced, result.blocked = need, Blocked.OFFLOADING_OFF
            return result
        primary = next((c for c in nearest_with_room(ctx, preferred, first, total) if room.left(c, 1) > 0), -1)
        if primary < 0:
            if existing and new_clusters > 0 and not daemon and qos.bursting:
                # No cluster it does not use yet has room for minClusters (listed unmet):
                # the replicas still go where it runs, if there is room there.
                return _distribute(ctx, allowed, total, req, wanted, room, more_clusters=False)
            result.unplaced, result.blocked = need, Blocked.NO_ROOM
            return result
        result.why[primary] = Why(Rule.OFFLOADED, origin=preferred, too_small=not holds)
    chosen = [primary]
    if new_clusters > 1:
        for cluster in ranked(np.flatnonzero(_with_room(ctx, first)), total):
            if len(chosen) >= min(new_clusters, need):
                break
            if cluster in chosen or room.left(cluster, 1) == 0:
                continue
            chosen.append(cluster)
            result.why[cluster] = Why(
                Rule.AVAILABILITY, ordinal=len(existing) + len(chosen), of=qos.availability.min_clusters
            )
    shares = {cluster: 1 for cluster in chosen[1:]}
    shares[primary] = need - (len(chosen) - 1)
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
        for cluster in nearest_with_room(ctx, primary, pool, total):
            if overflow == 0:
                break
            already = result.replicas.get(cluster, 0)
            put = room.left(cluster, min(overflow, cap - already))
            if put:
                result.replicas[cluster] = already + put
                room.use(cluster, put)
                overflow -= put
                result.why.setdefault(cluster, Why(Rule.BURST, origin=primary))
    if overflow:
        result.blocked = Blocked.NO_ROOM if qos.bursting else Blocked.BURSTING_OFF
    for cluster in [c for c in result.why if c not in result.replicas]:
        del result.why[cluster]
    result.unplaced = overflow
    return result


def _preferred(ctx: Context, first: np.ndarray, allowed: np.ndarray, wanted: np.ndarray | None, total: np.ndarray,
               existing: Mapping[int, int], daemon: bool, new_clusters: int) -> int:
    """The preferred cluster (see ``_distribute``): the best of ``first``, or with
    offloading of ``wanted`` too; ties to the lowest index, i.e. cluster name."""
    qos = ctx.component.qos
    shared = not existing and _shared(allowed, wanted, total)
    best = ctx.fleet.best.get((id(allowed), id(wanted), id(total), qos.offloading)) if shared else None
    if best is not None and best[0] is allowed and best[1] is wanted and best[2] is total:
        return int(best[3])
    choose = first
    if wanted is not None and qos.offloading and wanted is not allowed:
        choose = first | (wanted & ~allowed)
        if daemon and existing:
            choose[list(existing)] = False
        if new_clusters > 0 and existing and not daemon:
            choose[list(existing)] = False
    # argmin returns the first minimum: ties go to the lowest index, i.e. cluster name.
    preferred = int(np.argmin(np.where(choose, total, math.inf)))
    if shared:
        # The vectors hold the key's ids: no other object can take them meanwhile.
        ctx.fleet.best[(id(allowed), id(wanted), id(total), qos.offloading)] = (allowed, wanted, total, preferred)
    return preferred


@dataclass(frozen=True)
class Offload:
    """A distribution that offloaded every replica to one cluster, the nearest with room
    to the preferred one, and what it read of the ledger: the preferred cluster and the
    clusters the walk judged up to the one it chose (``judged``, in walk order; the last
    is the one chosen). Another cycle that finds the same preferred cluster and the same
    walk distributes the same way if no cluster judged without room may have gained room
    since and the cluster chosen may not have lost it (``remembered``)."""

    component: Component
    replicas: int
    own: dict[int, int]
    need: int
    preferred: int
    too_small: bool
    judged: np.ndarray
    allowed: np.ndarray  # ``allowed`` over ``judged``
    # The clusters found without room whose ledger was read (judged and allowed, and the
    # preferred one unless too small), and whether the cluster chosen is where the
    # component runs (its own replicas are its room there whatever the ledger holds).
    full: np.ndarray
    chose_own: bool
    # The shared vectors it was distributed with: while a cycle offers the same objects,
    # the preferred cluster, the walk and the clusters allowed are the same.
    vectors: tuple[np.ndarray, np.ndarray | None, np.ndarray]


def _offload(c: Component, ctx: Context, need: int, preferred: int, too_small: bool, judged: np.ndarray,
             now: np.ndarray, vectors: tuple[np.ndarray, np.ndarray | None, np.ndarray]) -> Offload:
    full = judged[:-1][now[:-1]]
    if not too_small:
        full = np.concatenate((full, [preferred]))  # np.append's wrapper costs more than the copy
    own = dict(ctx.own)
    return Offload(c, ctx.replicas, own, need, preferred, too_small, judged, now, full,
                   own.get(int(judged[-1]), 0) >= need, vectors)


def offload_of(ctx: Context, allowed: np.ndarray, wanted: np.ndarray | None, total: np.ndarray, req: Request,
               result: Distribution) -> Offload | None:
    """``result`` as an ``Offload`` to remember, if it is one (a single component's
    distribution from scratch that offloaded all of ``req.need`` to one cluster, from
    shared vectors) and the ledger it read was as the cycle found it: else None."""
    c = ctx.component
    qos = c.qos
    if (req.existing or req.per_cluster_max is not None or qos.availability.spread
            or qos.availability.min_clusters > 1 or not qos.offloading or len(result.replicas) != 1
            or result.unplaced or result.removed or not _shared(allowed, wanted, total)
            or nearest_goals(c, ctx.fleet.static.region_index)):
        return None
    ((primary, count),) = result.replicas.items()
    why = result.why.get(primary)
    preferred = result.preferred
    if count != req.need or why is None or why.rule != Rule.OFFLOADED or preferred is None or why.origin != preferred:
        return None
    order = ctx.fleet.cluster_latency.nearest_order(preferred, total)
    at = np.flatnonzero(order == primary)
    if not at.size:
        return None
    judged = order[: int(at[0]) + 1]
    memo = _offload(c, ctx, req.need, preferred, bool(why.too_small), judged, allowed[judged],
                    (allowed, wanted, total))
    ledger = ctx.ledger
    read = memo.full if memo.chose_own else np.concatenate((memo.full, [primary]))
    if _any(ledger.taken[read]) or _any(ledger.returned[read]):
        return None
    return memo


def remembered(memo: Offload, ctx: Context, allowed: np.ndarray, wanted: np.ndarray | None, total: np.ndarray,
               req: Request, settled_anew: np.ndarray) -> tuple[Distribution, Offload] | None:
    """The distribution ``memo`` remembers, and the memo for this cycle, if
    ``distribute`` would find it again now: the same component, replicas and request,
    the same preferred cluster and walk from it, the cluster chosen still allowed and no
    cluster judged allowed that was not then; no cluster found without room (and still
    allowed) settled anew for this cycle (``settled_anew``) or given room back in it; and
    the cluster chosen either where the component runs or neither settled anew nor taken
    from. Else None (distribute anew): taking never makes room, giving back never
    removes it, and a cluster no longer allowed is not asked."""
    c = ctx.component
    if (req.existing or req.per_cluster_max is not None or memo.need != req.need or memo.replicas != ctx.replicas
            or not (memo.component is c or memo.component == c) or memo.own != ctx.own):
        return None
    preferred = memo.preferred
    if memo.vectors[0] is not allowed or memo.vectors[1] is not wanted or memo.vectors[2] is not total:
        # Other filters (health changed): the preferred cluster and the walk again.
        if not _shared(allowed, wanted, total):
            return None
        preferred = _preferred(ctx, allowed, allowed, wanted, total, {}, False, 1)
        if preferred != memo.preferred or bool(allowed[preferred]) == memo.too_small:
            return None
        judged = memo.judged
        order = ctx.fleet.cluster_latency.nearest_order(preferred, total)
        if order.size < judged.size or _any(order[: judged.size] != judged):
            return None
        now = allowed[judged]
        if not now[-1] or _any(now & ~memo.allowed):
            return None
        # Judged against this cycle's filters from now on: a cluster skipped as not
        # allowed was not checked, and must not count as checked when allowed again.
        memo = _offload(c, ctx, memo.need, preferred, memo.too_small, judged, now, (allowed, wanted, total))
    ledger = ctx.ledger
    full = memo.full
    if _any(settled_anew[full]) or _any(ledger.returned[full]):
        return None
    primary = int(memo.judged[-1])
    if not memo.chose_own and (settled_anew[primary] or ledger.taken[primary]):
        return None
    best = Distribution(replicas={primary: memo.need},
                        why={primary: Why(Rule.OFFLOADED, origin=preferred, too_small=memo.too_small)},
                        preferred=preferred)
    return best, memo

def _spread(
    ctx: Context, allowed: np.ndarray, total: np.ndarray, req: Request, existing: dict[int, int], room: Room
) -> Distribution:
    """An even spread of all the component's replicas (existing ones included) over
    as few clusters as capacity allows, at least minClusters, clusters already used first."""
    result = Distribution()
    qos = ctx.component.qos
    n_total = req.need + sum(existing.values())
    if not _any(allowed):
        result.unplaced, result.blocked = req.need, Blocked.NO_CLUSTER
        return result
    preferred = int(np.argmin(np.where(allowed, total, math.inf)))
    result.preferred = preferred
    k_min = min(max(qos.availability.min_clusters, 1), n_total)
    # Capacity of each cluster for the component: what it keeps there plus room.
    order: list[tuple[int, int]] = []
    for cluster in sorted(existing, key=lambda i: (float(total[i]), i)):
        if allowed[cluster]:
            order.append((cluster, existing[cluster] + room.left(cluster, n_total)))
    fresh_room = room.left(preferred, 1) > 0 if preferred not in existing else True
    if not fresh_room and not existing and not qos.offloading:
        result.unplaced, result.blocked = req.need, Blocked.OFFLOADING_OFF
        return result
    limit = n_total + len(existing) + 16  # clusters worth looking at: each takes at least one
    k_max = max(k_min, len(existing)) if not qos.bursting else n_total
    if len(order) < limit:
        others = _with_room(ctx, allowed)
        if existing:
            others[list(existing)] = False
        for cluster in ranked(np.flatnonzero(others), total):
            if len(order) >= min(limit, max(k_max, k_min)):
                break
            cap = room.left(cluster, n_total)
            if cap > 0:
                order.append((cluster, cap))
    targets = _even(order, n_total, k_min, min(k_max, len(order)))
    placed = sum(targets.values())
    for cluster, n in targets.items():
        before = existing.get(cluster, 0)
        if n > before:
            result.replicas[cluster] = n - before
    for cluster, before in existing.items():
        n = targets.get(cluster, 0)
        if n < before:
            result.removed[cluster] = before - n
    used = sorted(targets, key=lambda i: (i not in existing, float(total[i]), i))
    for pos, cluster in enumerate(used, start=1):
        if cluster in result.replicas:
            rule = Rule.BEST if pos == 1 and cluster == preferred else Rule.SPREAD
            result.why[cluster] = Why(rule, ordinal=pos, of=len(used))
    result.unplaced = n_total - placed
    if result.unplaced:
        result.blocked = Blocked.NO_ROOM if qos.bursting or len(order) < k_min else Blocked.BURSTING_OFF
    return result


def _too_few(counts: Mapping[int, int], qos: QoS) -> bool:
    """Fewer clusters than minClusters while there are replicas for more."""
    return len(counts) < min(qos.availability.min_clusters, sum(counts.values()))


def _uneven(counts: Mapping[int, int]) -> bool:
    return bool(counts) and max(counts.values()) - min(counts.values()) > 1


def _even(order: list[tuple[int, int]], n: int, k_min: int, k_max: int) -> dict[int, int]:
    """Counts over clusters (in preference order, each with its capacity) whose largest
    and smallest differ by at most one, on the fewest clusters (>= k_min) that hold all
    ``n``; when none does, the most even placement of as many as capacity holds."""
    for k in range(max(k_min, 1), k_max + 1):
        lo, extra = divmod(n, k)
        if lo == 0:
            break
        picked = [(c, cap) for c, cap in order if cap >= lo][:k]
        if len(picked) < k:
            continue
        high = [c for c, cap in picked if cap >= lo + 1][:extra]
        if len(high) < extra:
            continue
        return {c: lo + (1 if c in high else 0) for c, _ in picked}
    # Water filling: one replica at a time to the emptiest cluster with room left.
    clusters = order[: max(k_max, 1)]
    counts = {c: 0 for c, _ in clusters}
    caps = dict(clusters)
    for _ in range(n):
        open_ = [c for c, _ in clusters if counts[c] < caps[c]]
        if not open_:
            break
        pick = min(open_, key=lambda c: counts[c])
        counts[pick] += 1
    return {c: k for c, k in counts.items() if k > 0}
