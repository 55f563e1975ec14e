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
from qonnect_gitops.model.plan import MoveReason
from qonnect_gitops.placement.carry import DRAINING
from qonnect_gitops.placement.cycle import Cycle
from qonnect_gitops.placement.distribute import Request, distribute, ranked
from qonnect_gitops.placement.evaluate import (
    HEALTH,
    LATENCY_FILTER,
    NODE_SIZE,
    STATIC_FILTERS,
    goal_of,
    replicas_for,
)
from qonnect_gitops.placement.framework import Context
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
    if work.undeclared or not cur or work.drained or work.lost or any(i in cur for i in work.stalled):
        return Verdict.REPAIR  # gone clusters, drains whose replacement does not run, replicas that do not run
    healthy = cycle.healthy
    placeable = cycle.placeable
    static = cycle.evaluator.static_list_of(c, work.replicas)
    fitted = cycle.ledger.fitted
    key = work.key
    total = 0
    low = high = -1
    measured = False
    cordoned = False
    for i, n in cur.items():
        if not healthy[i]:
            return Verdict.REPAIR
        if not placeable[i]:
            cordoned = True  # what runs there stays (unless the goals exclude it, below)
        elif fitted.get((i, key), 0) < n:
            return Verdict.REPAIR
        elif not static[i]:
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
    if measured or cordoned:
        ev = cycle.evaluator
        ctx = ev.context(c, work.replicas)
        ok = ev.goal_mask(ctx) & ev.declared_envelope(ctx) & ev.mask(ev.filter(NODE_SIZE), ctx)
        if not all(ok[i] for i in cur):
            return Verdict.REPAIR
        if cordoned and not measured:
            envelope = ev.mask(LATENCY_FILTER, ctx)
            measured = not all(envelope[i] for i in cur)
        if measured:
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
    drained: bool = False  # draining since an earlier plan already


_ORDER = {"failover": 0, "goals-changed": 1, "rescheduling": 2, "scaling": 3}


@dataclass
class Assessment:
    """The first half of a repair: what a running component keeps where it is, where it
    waits (kept though a goal is not met there), which replicas must leave and which
    drains of the previous plan still run. Replicas it gives up for good (a scale-down)
    are given back to the ledger here, so that every repair of the cycle sees that room
    (``plan`` assesses every broken component before placing any)."""

    keep: dict[int, int]
    pinned: dict[int, int]
    leaving: list[_Leaving]
    drained: dict[int, int]  # drains still running on clusters that may keep them
    allowed: np.ndarray
    goal_ok: np.ndarray
    declared_ok: np.ndarray
    total: np.ndarray
    beside: np.ndarray | None


def assess(cycle: Cycle, work: Work, beside: np.ndarray | None = None) -> Assessment:
    """Check a running component's replicas cluster by cluster against every hard goal
    (see ``Assessment``). ``beside``: ``colocateWith``, the clusters where every
    component it follows runs (the only ones it may use)."""
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
    if work.stalled:
        allowed = allowed.copy()
        allowed[sorted(work.stalled)] = False  # where it does not run, it is not replaced
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
    nearest_kept = _nearest_kept(cycle, work, goal_ok & size_ok, declared_ok & ev.mask(LATENCY_FILTER, ctx))
    for i, n in sorted(work.current.items()):
        if not cycle.healthy[i]:
            if c.movable:
                leaving.append(_Leaving(i, n, "failover", Cause(CauseKind.FAILOVER, i)))
            else:  # a StatefulSet waits for its cluster: its data is there
                pinned[i] = pinned.get(i, 0) + n
                work.shortfalls.append(Shortfall("health", ShortfallKind.WAITING, replicas=n, cluster=i))
            continue
        if i in work.stalled:
            # Placed there, not running: it counts as not running, and is replaced where
            # room exists (make before break: it drains, it is not dropped).
            cause = Cause(CauseKind.NOT_RUNNING, i, note=work.stalled[i])
            if c.movable:
                leaving.append(_Leaving(i, n, "failover", cause, drain=True))
            else:
                pinned[i] = pinned.get(i, 0) + n
                work.shortfalls.append(Shortfall("health", ShortfallKind.NOT_RUNNING, replicas=n, cluster=i,
                                                 filter=work.stalled[i]))
                fit = ledger.running_fit(i, key) if size_ok[i] else 0
                if fit < n and cycle.placeable[i]:
                    work.shortfalls.append(Shortfall("capacity", ShortfallKind.WAITING, replicas=n - fit, cluster=i))
            continue
        exclusion = _exclusion(cycle, i, beside, goal_ok, declared_ok, ctx)
        if cycle.placeable[i]:  # on a cordoned cluster what runs stays, whatever its nodes report
            # Replicas no node holds at today's size (or that a reported cluster no longer
            # has the room for) cannot run there at all: they leave at once, no drain.
            fit = ledger.running_fit(i, key) if size_ok[i] or exclusion is not None else 0
            if fit < n:
                reason = capacity_reason or ("failover" if ledger.observed_usage[i] else "goals-changed")
                if reason == "failover" and not c.movable and exclusion is None:
                    pinned[i] = pinned.get(i, 0) + n  # nodes were lost under a StatefulSet: it waits like on a failed cluster
                    work.shortfalls.append(Shortfall("capacity", ShortfallKind.WAITING, replicas=n - fit, cluster=i))
                    continue
                leaving.append(_Leaving(i, n - fit, reason,
                                        Cause(CauseKind.CAPACITY, i, filter=None if size_ok[i] else NODE_SIZE)))
                n = fit
            if not n:
                continue
        if i in nearest_kept and (exclusion is None or exclusion.kind == CauseKind.DECLARED_LATENCY):
            # The nearest it may use to a region no allowed cluster serves within its
            # envelope: one replica stays (moving it would serve that region worse).
            pinned[i] = 1
            work.shortfalls.append(Shortfall("latency", ShortfallKind.NEAREST_KEPT, replicas=1, cluster=i,
                                             region=nearest_kept[i]))
            n -= 1
            if not n:
                continue
        if exclusion is not None:
            leaving.append(_Leaving(i, n, "goals-changed", exclusion, drain=True))
            continue
        cordoned = not cycle.placeable[i]
        if cordoned and ev.mask(LATENCY_FILTER, ctx)[i]:
            pinned[i] = pinned.get(i, 0) + n  # cordoned: what runs there stays, nothing new goes there
            continue
        if cordoned or not allowed[i]:  # only the measured latency breaks the envelope
            if waits is not None:
                pinned[i] = pinned.get(i, 0) + n
                kind = ShortfallKind.MEASURED_BREACH if waits.kind == KeepKind.COOLDOWN else ShortfallKind.NOT_MOVABLE
                work.shortfalls.append(Shortfall("latency", kind, replicas=n, cluster=i, until=waits.until))
            else:
                leaving.append(_Leaving(i, n, "rescheduling", Cause(CauseKind.MEASURED_LATENCY, i), drain=True))
            continue
        keep[i] = n
    # The previous plan's drains whose replacement does not run yet: they run on, as far
    # as they still fit there at today's size, until it does.
    drained: dict[int, int] = {}
    for i, n in sorted(work.drained.items()):
        fit = ledger.running_fit(i, key + DRAINING)
        if fit < n:
            reason = capacity_reason or ("failover" if ledger.observed_usage[i] else "goals-changed")
            leaving.append(_Leaving(i, n - fit, reason, Cause(CauseKind.CAPACITY, i), drained=True))
        if fit:
            drained[i] = min(fit, n)
    for name, n in sorted(work.lost.items()):
        j = cycle.static.index.get(name)
        cause = Cause(CauseKind.FAILOVER, j) if j is not None else Cause(CauseKind.UNDECLARED)
        leaving.append(_Leaving(j, n, "failover" if j is not None else "goals-changed", cause,
                                name=None if j is not None else name, drained=True))
    if c.kind == "DaemonSet":
        for i in sorted(keep):
            if keep[i] > 1:
                work.moves.append(PendingMove(i, None, keep[i] - 1, "goals-changed", Cause(CauseKind.DAEMONSET, i)))
                ledger.release_running(i, key, c.cpu, c.memory, keep[i] - 1)
                keep[i] = 1
    _scale_down(cycle, work, keep, pinned, total)
    return Assessment(keep, pinned, leaving, drained, allowed, goal_ok, declared_ok, total, beside)


def _nearest_kept(cycle: Cycle, work: Work, eligible: np.ndarray, envelope: np.ndarray) -> dict[int, int]:
    """``serve: nearest`` regions no cluster the component may use serves within their
    envelope: per such region, the cluster it runs on nearest to it (when that cluster is
    outside the envelope, a replica stays there: the best available). Cluster -> region."""
    c = work.component
    cur = [i for i in work.current if cycle.healthy[i]]
    if not c.qos.latency or not c.movable or c.kind == "DaemonSet" or all(envelope[i] for i in cur):
        return {}
    static = cycle.fleet.static
    nearest = nearest_goals(c, static.region_index)
    if not nearest:
        return {}
    lat = cycle.fleet.region_latency
    ok = eligible & cycle.fleet.placeable
    for goal in c.qos.latency:
        if goal.serve == "all":
            ok = ok & (lat[:, static.region_index[goal.region]] <= goal.max_ms)
    kept: dict[int, int] = {}
    for region, max_ms in nearest:
        if not (ok & (lat[:, region] <= max_ms)).any():
            best = min(cur, key=lambda i: (float(lat[i, region]), i))
            if not envelope[best]:
                kept.setdefault(best, region)
    return kept


def _exclusion(cycle: Cycle, i: int, beside: np.ndarray | None, goal_ok: np.ndarray, declared_ok: np.ndarray,
               ctx: Context) -> Cause | None:
    """Why the goals themselves no longer allow the component on a live cluster (its
    replicas drain there until replaced): colocation, a goal filter, the declared
    latency envelope."""
    if beside is not None and not beside[i]:
        return Cause(CauseKind.COLOCATION, i)
    if not goal_ok[i]:
        f = cycle.evaluator.exclusion(ctx, i)
        return Cause(CauseKind.GOALS, i, filter=f.name if f else None)
    if not declared_ok[i]:
        return Cause(CauseKind.DECLARED_LATENCY, i)
    return None


def _drain_cause(cycle: Cycle, work: Work, i: int, allowed: np.ndarray) -> Cause:
    """Why a drain of the previous plan goes on where the goals still allow it."""
    if i in work.stalled:
        return Cause(CauseKind.NOT_RUNNING, i, note=work.stalled[i])
    if not cycle.placeable[i]:
        return Cause(CauseKind.CORDONED, i)
    if not allowed[i]:
        return Cause(CauseKind.MEASURED_LATENCY, i)
    return Cause(CauseKind.AWAITING, i)


_DRAIN_REASONS: dict[CauseKind, MoveReason] = {
    CauseKind.CORDONED: "failover", CauseKind.NOT_RUNNING: "failover",
    CauseKind.MEASURED_LATENCY: "rescheduling", CauseKind.AWAITING: "rescheduling",
}


def repair(cycle: Cycle, work: Work, beside: np.ndarray | None = None, assessed: Assessment | None = None) -> None:
    """Give a running component a target that meets every hard goal it can, keeping as
    many replicas where they are as the goals allow. ``beside``: ``colocateWith``, the
    clusters where every component it follows runs (the only ones it may use);
    ``assessed``: its ``assess``, made earlier in the cycle."""
    a = assessed if assessed is not None else assess(cycle, work, beside)
    c = work.component
    key = work.key
    ev = cycle.evaluator
    ctx = ev.context(c, work.replicas)
    keep, pinned, leaving, allowed, total = a.keep, a.pinned, a.leaving, a.allowed, a.total
    need = work.replicas - sum(keep.values()) - sum(pinned.values())
    # Drains of the previous plan where the goals allow the component count as kept while
    # replicas are missing: they run (no replacement is cheaper). The others go on
    # draining, as sources of the replacements placed now.
    sources: list[_Leaving] = []
    for i, n in sorted(a.drained.items()):
        take = min(n, need) if allowed[i] else 0
        if take:
            keep[i] = keep.get(i, 0) + take
            need -= take
        if n > take:
            cause = _exclusion(cycle, i, a.beside, a.goal_ok, a.declared_ok, ctx) or _drain_cause(cycle, work, i, allowed)
            sources.append(_Leaving(i, n - take, _DRAIN_REASONS.get(cause.kind, "goals-changed"), cause,
                                    drain=True, drained=True))
    leaving.sort(key=lambda s: (s.drained, _ORDER[s.reason]))
    per_cluster_max = 1 if c.kind == "DaemonSet" else None
    wanted = ev.wanted_mask(ctx) if a.beside is None else ev.wanted_mask(ctx) & a.beside
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
    _pair(work, [*leaving, *sources], [i for i, n in sorted(dist.replicas.items()) for _ in range(n)])
    _availability(cycle, work, keep, allowed, total, leaving)
    _serve_nearest(cycle, work, keep, allowed, total, leaving)
    cycle.placement[key] = {i: n for i, n in work.target.items() if n > 0}


def _scale_down(cycle: Cycle, work: Work, keep: dict[int, int], pinned: dict[int, int], total: np.ndarray) -> None:
    """Remove replicas beyond the count wanted, keeping minClusters and the spread: from
    the largest cluster with spread, else from the worst-scoring, never the last replica
    of a cluster while that would leave fewer clusters than minClusters. Their room is
    given back at once."""
    surplus = sum(keep.values()) + sum(pinned.values()) - work.replicas
    if surplus <= 0:
        return
    qos = work.component.qos
    k_min = min(qos.availability.min_clusters, work.replicas)
    removed: dict[int, int] = {}
    while surplus > 0 and keep:
        candidates = [i for i in keep if keep[i] > 1 or len(keep) > k_min] or list(keep)
        if qos.availability.spread:
            pick = min(candidates, key=lambda i: (-keep[i], -float(total[i]), i))
            k = 1
        else:
            pick = min(candidates, key=lambda i: (-float(total[i]), i))
            # All of the worst cluster's replicas at once, but its last while it is needed
            # for minClusters (one step per cluster, not per replica).
            k = min(surplus, keep[pick] if len(keep) > k_min else max(keep[pick] - 1, 1))
        keep[pick] -= k
        surplus -= k
        removed[pick] = removed.get(pick, 0) + k
        if not keep[pick]:
            del keep[pick]
    for i in sorted(pinned, key=lambda i: (-pinned[i], i)):
        # Then replicas kept where they wait or where nothing new goes (a cordoned
        # cluster): a smaller count is never new work there.
        if surplus <= 0:
            break
        k = min(surplus, pinned[i])
        pinned[i] -= k
        surplus -= k
        removed[i] = removed.get(i, 0) + k
        if not pinned[i]:
            del pinned[i]
    reason: MoveReason = "scaling" if work.scaled else "goals-changed"
    c = work.component
    for i, n in sorted(removed.items()):
        work.moves.append(PendingMove(i, None, n, reason, Cause(CauseKind.SCALE_DOWN, i, count=work.replicas)))
        cycle.ledger.release_running(i, work.key, c.cpu, c.memory, n)


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
    paired with a new one on its own cluster stays: it is neither a move nor a drain.
    Draining replicas nothing replaces keep running: while the target is short of the
    replicas wanted they are unreplaced (a goal unmet); else their replacement is placed
    and does not run yet."""
    pos = 0
    missing = work.replicas - sum(work.target.values())
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
                unreplaced = dst is None and missing > 0
                if unreplaced:
                    missing -= n
                work.drains[s.cluster] = Drain((d.replicas if d else 0) + n, s.cause,
                                               unreplaced=unreplaced or (d is not None and d.unreplaced))
                if dst is None:
                    continue  # nothing moved: the replica keeps running until a replacement runs
            work.moves.append(PendingMove(s.cluster, dst, n, s.reason, s.cause, source_name=s.name))
    if pos < len(slots):
        reason: MoveReason = "scaling" if work.scaled else "goals-changed"
        cause = Cause(CauseKind.SCALE_UP, count=work.replicas)
        extra: dict[int, int] = {}
        for dst in slots[pos:]:
            extra[dst] = extra.get(dst, 0) + 1
        for dst, n in sorted(extra.items()):
            work.moves.append(PendingMove(None, dst, n, reason, cause))


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
        census = ev.census(ctx, work.target, beside=colocated(cycle, c) if c.colocate_with else None)
        rule = work.blocked in (Blocked.OFFLOADING_OFF, Blocked.BURSTING_OFF)
        work.census = census
        work.shortfalls.append(Shortfall(
            "capacity" if rule else census.goal, ShortfallKind.UNPLACED, replicas=work.unplaced,
            census=census, blocked=work.blocked, preferred=work.preferred, wanted=work.replicas,
        ))
    for i, d in sorted(work.drains.items()):
        if d.unreplaced:
            work.shortfalls.append(Shortfall(goal_of(d.cause) or "capacity", ShortfallKind.UNREPLACED,
                                             replicas=d.replicas, cluster=i, filter=d.cause.filter, cause=d.cause))
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
            within = cycle.fleet.region_latency[:, region] <= max_ms
            census = ev.census(ev.context(c, work.replicas), work.target, within=within)
            work.shortfalls.append(Shortfall("latency", ShortfallKind.UNSERVED, region=region, max_ms=max_ms,
                                             census=census))
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
    if work.touched:
        _kept_breaking(cycle, work)


def _kept_breaking(cycle: Cycle, work: Work) -> None:
    """Replicas a repair kept where a filter rules the cluster out (a StatefulSet waiting,
    what runs on a cordoned cluster, a measured breach in its cooldown): every goal those
    filters enforce is listed, not only the one that made them wait."""
    ev = cycle.evaluator
    ctx = ev.context(work.component, work.replicas)
    allowed = ev.static_mask(ctx)
    listed = {sf.goal for sf in work.shortfalls}
    for i, n in sorted(work.target.items()):
        if n <= 0 or allowed[i] or not cycle.healthy[i]:
            continue
        for f in STATIC_FILTERS:
            if f.name != HEALTH and f.goal not in listed and not ev.mask(f, ctx)[i]:
                listed.add(f.goal)
                work.shortfalls.append(Shortfall(f.goal, ShortfallKind.KEPT, replicas=n, cluster=i, filter=f.name))


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
