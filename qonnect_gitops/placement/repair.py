"""Stage 2, repair: the current placement checked against every hard goal, with today's
goals and today's observations, and restored in this same cycle.

Checked for every running component: health and heartbeat of its clusters, the goal
filters (tier, selector, taints, architecture, cost cap), the latency envelope, whether
a replica fits a node of the cluster at today's per-replica request, the replica count
(scaling bounds, edits, DaemonSets one per cluster), ``minClusters`` and ``spread``.
A breach of a declared goal, of capacity or of health is repaired now, whatever the
cooldown or disruption budget say; a breach seen only in a measured latency once it
has lasted (the component's cooldown has passed). Make before break: replicas leaving
a cluster the goals no longer allow keep running there (draining, capacity charged)
until their replacement runs; replicas that no node holds at today's size, or on a
failed cluster, cannot. ``verify`` lists what no placement could meet as unmet.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np

from qonnect_gitops.model.goals import Component
from qonnect_gitops.model.plan import GoalKind, MoveReason
from qonnect_gitops.placement.carry import DRAINING
from qonnect_gitops.placement.cycle import Cycle
from qonnect_gitops.placement.distribute import Request, distribute, ranked
from qonnect_gitops.placement.evaluate import FILTERS_BY_NAME, NODE_SIZE, replicas_for
from qonnect_gitops.placement.plugins.latency import nearest_goals, unserved
from qonnect_gitops.placement.records import (
    Blocked,
    Cause,
    CauseKind,
    Drain,
    KeepKind,
    PendingMove,
    Rule,
    Shortfall,
    ShortfallKind,
    Why,
    Work,
)
from qonnect_gitops.placement.stability import hold


class Verdict(Enum):
    OK = "ok"  # meets every hard goal
    REPAIR = "repair"  # breaks one that is repaired now
    WAITING = "waiting"  # a measured latency breach that has not lasted yet


def inspect(cycle: Cycle, work: Work) -> Verdict:
    """The quick check every running component gets every cycle (no scoring); the
    ledger must be settled (``Ledger.settle_all``)."""
    c = work.component
    cur = work.current
    if work.undeclared or not cur:
        return Verdict.REPAIR
    healthy = cycle.healthy
    static = cycle.evaluator.static_list_of(c, work.replicas)
    fitted = cycle.ledger.fitted
    key = work.key
    total = 0
    low = high = -1
    measured = False
    for i, n in cur.items():
        if not healthy[i] or fitted.get((i, key), 0) < n:
            return Verdict.REPAIR
        if not static[i]:
            measured = True
        total += n
        if low < 0 or n < low:
            low = n
        high = max(high, n)
    if total != work.replicas or (c.kind == "DaemonSet" and high > 1):
        return Verdict.REPAIR
    availability = c.qos.availability
    if len(cur) < min(availability.min_clusters, total) or (availability.spread and high - low > 1):
        return Verdict.REPAIR
    nearest = nearest_goals(c, cycle.fleet.static.region_index)
    if nearest and unserved(cycle.fleet.region_latency, nearest, cur):
        return Verdict.REPAIR
    if measured:
        ev = cycle.evaluator
        ctx = ev.context(c, work.replicas)
        ok = ev.goal_mask(ctx) & ev.declared_envelope(ctx) & ev.mask(ev.filter(NODE_SIZE), ctx)
        if not all(ok[i] for i in cur):
            return Verdict.REPAIR
        return Verdict.WAITING if hold(cycle, work) is not None else Verdict.REPAIR
    return Verdict.OK


@dataclass
class _Leaving:
    """Replicas that must leave a cluster (or were on one no longer declared)."""

    cluster: int | None
    count: int
    reason: MoveReason
    cause: Cause
    drain: bool = False  # make before break: they keep running until replaced
    name: str | None = None


_ORDER = {"failover": 0, "goals-changed": 1, "rescheduling": 2, "scaling": 3}


def repair(cycle: Cycle, work: Work, beside: np.ndarray | None = None) -> None:
    """Give a running component a target that meets every hard goal it can, keeping as
    many replicas where they are as the goals allow. ``beside``: ``colocateWith``, the
    clusters where every component it follows runs (the only ones it may use)."""
    c = work.component
    key = work.key
    ev = cycle.evaluator
    ledger = cycle.ledger
    work.touched = True
    ctx = ev.context(c, work.replicas)
    allowed = ev.static_mask(ctx)
    goal_ok = ev.goal_mask(ctx)
    if beside is not None:
        allowed, goal_ok = allowed & beside, goal_ok & beside
    declared_ok = ev.declared_envelope(ctx)
    size_ok = ev.mask(ev.filter(NODE_SIZE), ctx)
    total, _ = ev.scores(ctx)
    waits = hold(cycle, work)
    capacity_reason: MoveReason | None = "goals-changed" if cycle.resized(work) else None
    leaving: list[_Leaving] = []
    keep: dict[int, int] = {}
    pinned: dict[int, int] = {}  # kept where the goals are not met (waiting): not counted as allowed
    for name, n in sorted(work.undeclared.items()):
        leaving.append(_Leaving(None, n, "goals-changed", Cause(CauseKind.UNDECLARED), name=name))
    for i, n in sorted(work.current.items()):
        if not cycle.healthy[i]:
            if c.movable:
                leaving.append(_Leaving(i, n, "failover", Cause(CauseKind.FAILOVER, i)))
            else:  # a StatefulSet waits for its cluster: its data is there
                pinned[i] = n
                work.shortfalls.append(Shortfall("health", ShortfallKind.WAITING, replicas=n, cluster=i))
            continue
        if beside is not None and not beside[i]:
            leaving.append(_Leaving(i, n, "goals-changed", Cause(CauseKind.COLOCATION, i), drain=True))
            continue
        if not goal_ok[i]:
            f = ev.exclusion(ctx, i)
            leaving.append(_Leaving(i, n, "goals-changed", Cause(CauseKind.GOALS, i, filter=f.name if f else None),
                                    drain=True))
            continue
        if not declared_ok[i]:
            leaving.append(_Leaving(i, n, "goals-changed", Cause(CauseKind.DECLARED_LATENCY, i), drain=True))
            continue
        fit = 0 if not size_ok[i] else ledger.running_fit(i, key)
        if fit < n:
            reason = capacity_reason or ("failover" if ledger.observed_usage[i] else "goals-changed")
            if reason == "failover" and not c.movable:
                pinned[i] = n  # nodes were lost under a StatefulSet: it waits like on a failed cluster
                work.shortfalls.append(Shortfall("capacity", ShortfallKind.WAITING, replicas=n - fit, cluster=i))
                continue
            # No drain: at today's size these replicas cannot run there at all.
            leaving.append(_Leaving(i, n - fit, reason, Cause(CauseKind.CAPACITY, i, filter=None if size_ok[i] else NODE_SIZE)))
            n = fit
        if not n:
            continue
        if not allowed[i]:  # only the measured latency breaks the envelope
            if waits is not None:
                pinned[i] = n
                kind = ShortfallKind.MEASURED_BREACH if waits.kind == KeepKind.COOLDOWN else ShortfallKind.NOT_MOVABLE
                work.shortfalls.append(Shortfall("latency", kind, replicas=n, cluster=i, until=waits.until))
            else:
                leaving.append(_Leaving(i, n, "rescheduling", Cause(CauseKind.MEASURED_LATENCY, i), drain=True))
            continue
        keep[i] = n
    if c.kind == "DaemonSet":
        for i in sorted(keep):
            if keep[i] > 1:
                work.moves.append(PendingMove(i, None, keep[i] - 1, "goals-changed", Cause(CauseKind.DAEMONSET, i)))
                keep[i] = 1
    _scale_down(work, keep, pinned, total)
    leaving.sort(key=lambda s: _ORDER[s.reason])
    need = work.replicas - sum(keep.values()) - sum(pinned.values())
    per_cluster_max = 1 if c.kind == "DaemonSet" else None
    wanted = ev.wanted_mask(ctx) if beside is None else ev.wanted_mask(ctx) & beside
    dist = distribute(ctx, allowed, total, Request(max(need, 0), existing=keep, per_cluster_max=per_cluster_max),
                      wanted=wanted)
    for i, n in sorted(dist.removed.items()):
        keep[i] -= n
        if not keep[i]:
            del keep[i]
        leaving.append(_Leaving(i, n, "goals-changed", Cause(CauseKind.SPREAD, i), drain=True))
    _commit(cycle, work, dist.replicas)
    work.target = {**pinned, **keep}
    work.why = {i: Why(Rule.KEPT) for i in work.target}
    for i, n in dist.replicas.items():
        work.target[i] = work.target.get(i, 0) + n
        work.why[i] = dist.why.get(i, Why(Rule.BEST))
    work.unplaced, work.blocked, work.preferred = dist.unplaced, dist.blocked, dist.preferred
    _pair(work, leaving, [i for i, n in sorted(dist.replicas.items()) for _ in range(n)])
    _availability(cycle, work, keep, allowed, total, leaving)
    _serve_nearest(cycle, work, keep, allowed, total, leaving)
    cycle.placement[key] = {i: n for i, n in work.target.items() if n > 0}


def _scale_down(work: Work, keep: dict[int, int], pinned: dict[int, int], total: np.ndarray) -> None:
    """Remove replicas beyond the count wanted, keeping minClusters and the spread: from
    the largest cluster with spread, else from the worst-scoring, never the last replica
    of a cluster while that would leave fewer clusters than minClusters."""
    surplus = sum(keep.values()) + sum(pinned.values()) - work.replicas
    if surplus <= 0:
        return
    qos = work.component.qos
    k_min = min(qos.availability.min_clusters, work.replicas)
    removed: dict[int, int] = {}
    for _ in range(surplus):
        if not keep:
            break
        candidates = [i for i in keep if keep[i] > 1 or len(keep) > k_min] or list(keep)
        if qos.availability.spread:
            pick = min(candidates, key=lambda i: (-keep[i], -float(total[i]), i))
        else:
            pick = min(candidates, key=lambda i: (-float(total[i]), i))
        keep[pick] -= 1
        removed[pick] = removed.get(pick, 0) + 1
        if not keep[pick]:
            del keep[pick]
    reason: MoveReason = "scaling" if work.scaled else "goals-changed"
    for i, n in sorted(removed.items()):
        work.moves.append(PendingMove(i, None, n, reason, Cause(CauseKind.SCALE_DOWN, i, count=work.replicas)))


def _commit(cycle: Cycle, work: Work, added: dict[int, int]) -> None:
    c = work.component
    for i, n in sorted(added.items()):
        cycle.ledger.take(i, c.cpu, c.memory, c.architectures, n, work.takes)


def _availability(
    cycle: Cycle, work: Work, keep: dict[int, int], allowed: np.ndarray, total: np.ndarray, leaving: list[_Leaving]
) -> None:
    """When the component still uses fewer clusters than minClusters (e.g. minClusters
    was raised and no replica had to move anyway), move single replicas from its
    fullest clusters to the best allowed clusters with room, make before break."""
    c = work.component
    qos = c.qos
    if qos.availability.spread or c.kind == "DaemonSet" or not c.movable:
        return
    used = {i for i, n in work.target.items() if n > 0 and cycle.healthy[i]}
    missing = min(qos.availability.min_clusters, work.replicas) - len(used)
    if missing <= 0:
        return
    added = 0
    free = allowed.copy()
    free[list(used)] = False
    for dst in ranked(np.flatnonzero(free), total):
        if missing <= 0:
            break
        sources = [i for i in keep if keep[i] > 1]
        if not sources:
            break
        if not cycle.ledger.take(dst, c.cpu, c.memory, c.architectures, 1, work.takes):
            continue
        src = min(sources, key=lambda i: (-keep[i], -float(total[i]), i))
        keep[src] -= 1
        work.target[src] -= 1
        work.target[dst] = 1
        added += 1
        work.why[dst] = Why(Rule.AVAILABILITY, ordinal=len(used) + added, of=qos.availability.min_clusters)
        reason: MoveReason = "failover" if any(s.reason == "failover" for s in leaving) else "goals-changed"
        cause = Cause(CauseKind.AVAILABILITY, src)
        work.moves.append(PendingMove(src, dst, 1, reason, cause))
        d = work.drains.get(src)
        work.drains[src] = Drain((d.replicas if d else 0) + 1, cause)
        missing -= 1


def _serve_nearest(
    cycle: Cycle, work: Work, keep: dict[int, int], allowed: np.ndarray, total: np.ndarray, leaving: list[_Leaving]
) -> None:
    """When no replica serves a ``serve: nearest`` region from nearby (the goal is new,
    or the clusters near it were lost), move one replica there from the fullest cluster
    that is not the only one near another region, make before break."""
    c = work.component
    if c.kind == "DaemonSet" or not c.movable:
        return
    nearest = nearest_goals(c, cycle.fleet.static.region_index)
    if not nearest:
        return
    lat = cycle.fleet.region_latency

    def used() -> list[int]:
        return [i for i, n in work.target.items() if n > 0 and cycle.healthy[i]]

    def may_leave(i: int, dst: int) -> bool:  # no region loses its only nearby replica
        return keep[i] > 1 or all(lat[dst, r] <= m or any(lat[j, r] <= m for j in used() if j != i)
                                  for r, m in nearest if lat[i, r] <= m)

    for region, max_ms in unserved(lat, nearest, used()):
        if not unserved(lat, ((region, max_ms),), used()):
            continue
        for dst in ranked(np.flatnonzero(allowed & (lat[:, region] <= max_ms)), total):
            sources = [i for i in keep if keep[i] > 0 and i != dst and may_leave(i, dst)]
            if sources and cycle.ledger.take(dst, c.cpu, c.memory, c.architectures, 1, work.takes):
                break
        else:
            continue
        src = min(sources, key=lambda i: (-keep[i], -float(total[i]), i))
        keep[src] -= 1
        work.target[src] -= 1
        work.target[dst] = work.target.get(dst, 0) + 1
        work.why[dst] = Why(Rule.NEAREST, region=region)
        reason: MoveReason = "failover" if any(s.reason == "failover" for s in leaving) else "goals-changed"
        cause = Cause(CauseKind.NEAREST, src, region=region)
        work.moves.append(PendingMove(src, dst, 1, reason, cause))
        d = work.drains.get(src)
        work.drains[src] = Drain((d.replicas if d else 0) + 1, cause)


def _pair(work: Work, leaving: list[_Leaving], slots: list[int]) -> None:
    """Moves from the replicas that had to leave (or from nowhere) to where new ones
    went; replicas leaving with make before break drain at their source. A replica
    paired with a new one on its own cluster stays: it is neither a move nor a drain."""
    pos = 0
    for s in leaving:
        dests: dict[int | None, int] = {}
        for _ in range(s.count):
            dst = slots[pos] if pos < len(slots) else None
            pos += 1
            dests[dst] = dests.get(dst, 0) + 1
        for dst, n in sorted(dests.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)):
            if dst is not None and dst == s.cluster:
                continue
            if s.drain and s.cluster is not None:
                d = work.drains.get(s.cluster)
                work.drains[s.cluster] = Drain((d.replicas if d else 0) + n, s.cause, unreplaced=dst is None)
                if dst is None:
                    continue  # nothing moved: the replica keeps running until a replacement fits
            work.moves.append(PendingMove(s.cluster, dst, n, s.reason, s.cause, source_name=s.name))
    if pos < len(slots):
        reason: MoveReason = "scaling" if work.scaled else "goals-changed"
        cause = Cause(CauseKind.SCALE_UP, count=work.replicas)
        extra: dict[int, int] = {}
        for dst in slots[pos:]:
            extra[dst] = extra.get(dst, 0) + 1
        for dst, n in sorted(extra.items()):
            work.moves.append(PendingMove(None, dst, n, reason, cause))


def carry_drains(cycle: Cycle, work: Work) -> None:
    """Replicas the previous plan kept draining whose replacement still could not be
    placed keep running: they hold the service up (and their capacity)."""
    if not work.drained or work.unplaced <= 0:
        return
    left = work.unplaced - sum(d.replicas for d in work.drains.values() if d.unreplaced)
    for i, n in sorted(work.drained.items()):
        if left <= 0:
            break
        if not cycle.healthy[i] or work.target.get(i) or i in work.drains:
            continue
        k = min(n, left, cycle.ledger.running_fit(i, work.key + DRAINING))
        if k > 0:
            f = cycle.evaluator.exclusion(cycle.evaluator.context(work.component, work.replicas), i)
            work.drains[i] = Drain(k, Cause(CauseKind.GOALS, i, filter=f.name if f else None), unreplaced=True)
            left -= k


def verify(cycle: Cycle, work: Work) -> None:
    """List every hard goal the component's final placement does not meet (``unmet``),
    from the structured results of the stages."""
    c = work.component
    qos = c.qos
    if not (work.touched or work.unplaced or work.drains or qos.scaling is not None
            or work.replicas < qos.availability.min_clusters):
        return  # kept as it was: inspect() found every goal met
    ev = cycle.evaluator
    if work.unplaced:
        ctx = ev.context(c, work.replicas)
        census = ev.census(ctx, work.target)
        rule = work.blocked in (Blocked.OFFLOADING_OFF, Blocked.BURSTING_OFF)
        work.census = census
        work.shortfalls.append(Shortfall(
            "capacity" if rule else census.goal, ShortfallKind.UNPLACED, replicas=work.unplaced,
            census=census, blocked=work.blocked, preferred=work.preferred, wanted=work.replicas,
        ))
    for i, d in sorted(work.drains.items()):
        if d.unreplaced:
            work.shortfalls.append(Shortfall(_goal_of(d.cause), ShortfallKind.UNREPLACED, replicas=d.replicas, cluster=i,
                                             filter=d.cause.filter))
    min_clusters = qos.availability.min_clusters
    used = [n for i, n in work.target.items() if n > 0 and cycle.healthy[i]]
    if len(used) < min_clusters and (used or min_clusters > 1):  # running nowhere is the unplaced goal
        if work.replicas < min_clusters:
            work.shortfalls.append(Shortfall("availability", ShortfallKind.TOO_FEW_REPLICAS,
                                             wanted=min_clusters, have=work.replicas))
        elif not work.unplaced or c.kind != "DaemonSet":
            census = work.census or ev.census(ev.context(c, work.replicas), work.target)
            work.shortfalls.append(Shortfall("availability", ShortfallKind.TOO_FEW_CLUSTERS,
                                             wanted=min_clusters, have=len(used), census=census))
    if c.colocate_with:
        beside = colocated(cycle, c)
        apart = sorted(i for i, n in work.target.items() if n > 0 and not beside[i])
        if apart:
            work.shortfalls.append(Shortfall("selector", ShortfallKind.NOT_COLOCATED, replicas=len(apart),
                                             cluster=apart[0]))
    nearest = nearest_goals(c, cycle.fleet.static.region_index)
    if nearest and work.target:
        served_by = [i for i, n in work.target.items() if n > 0 and cycle.healthy[i]]
        for region, max_ms in unserved(cycle.fleet.region_latency, nearest, served_by):
            work.shortfalls.append(Shortfall("latency", ShortfallKind.UNSERVED, region=region, max_ms=max_ms))
    if qos.availability.spread and used and max(used) - min(used) > 1:
        work.shortfalls.append(Shortfall("spread", ShortfallKind.UNEVEN, wanted=max(used) - min(used),
                                         have=len(used)))
    scaling = qos.scaling
    if work.scaled and scaling is not None:
        rps = cycle.rps(work.key) or 0.0
        needed = replicas_for(rps, scaling.target_rps_per_replica)
        if needed > scaling.max_replicas:
            work.shortfalls.append(Shortfall("scaling", ShortfallKind.MAX_REPLICAS, rps=rps, wanted=needed,
                                             have=scaling.max_replicas))


def colocated(cycle: Cycle, c: Component) -> np.ndarray:
    """``colocateWith``: the clusters where every component ``c`` follows has replicas in
    this cycle's decision, its target (none where one of them runs nowhere)."""
    ok = np.ones(len(cycle.fleet.names), dtype=bool)
    for anchor in c.colocate_with:
        here = np.zeros(len(cycle.fleet.names), dtype=bool)
        work = cycle.works.get(anchor)
        here[[i for i, n in (work.target if work is not None else {}).items() if n > 0]] = True
        ok &= here
    return ok


def _goal_of(cause: Cause) -> GoalKind:
    """The goal a replica left its cluster for."""
    if cause.kind in (CauseKind.DECLARED_LATENCY, CauseKind.MEASURED_LATENCY):
        return "latency"
    if cause.kind == CauseKind.SPREAD:
        return "spread"
    if cause.kind == CauseKind.AVAILABILITY:
        return "availability"
    if cause.kind == CauseKind.NEAREST:
        return "latency"
    if cause.kind == CauseKind.COLOCATION:
        return "selector"
    if cause.filter is not None and cause.filter in FILTERS_BY_NAME:
        return FILTERS_BY_NAME[cause.filter].goal
    return "capacity"
