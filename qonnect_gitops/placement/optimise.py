"""Stage 3, optimise: place new components by the distribution rules, then improve
what was placed from scratch this cycle (never running components: their moves are for
the stability rules, ``stability.py``).

Greedy placement decides one component at a time, biggest first. Four bounded steps
then revisit the fresh ones: ``refine`` (re-place a component whose neighbours landed
after it), the local search (``improve.Search``: moves, swaps, ejections, groups),
``make_room`` (move other fresh replicas so an unplaced component fits) and
``resettle`` (components offloaded or burst when clusters were full get their better
place once the steps above freed it); last, ``complete`` gives a component placed in
part the replicas the next cycle's repair would add. All stay within the filters, node
capacity and the availability rules.
"""

from __future__ import annotations

import numpy as np

from qonnect_gitops.model.goals import Component
from qonnect_gitops.placement.cycle import Cycle
from qonnect_gitops.placement.distribute import Distribution, Request, distribute
from qonnect_gitops.placement.improve import Movable, Search
from qonnect_gitops.placement.plugins.closeness import CLOSENESS_WEIGHT
from qonnect_gitops.placement.plugins.latency import nearest_goals, unserved
from qonnect_gitops.placement.records import (
    RULE_PLACED,
    Blocked,
    Cause,
    CauseKind,
    PendingMove,
    Rule,
    Why,
    Work,
)

REFINE_PASSES = 2  # passes of the refinement over freshly placed components
REFINE_BUDGET = 1000  # components revisited per cycle, so huge fleets stay fast
SEARCH_PASSES = 4  # sweeps of the local search
SEARCH_BUDGET = 4500  # evaluated moves per cycle (~0.3 s): huge fleets stay fast
ROOM_BUDGET = 2000  # evaluated moves per cycle to make room for unplaced components
CANDIDATE_CLUSTERS = 8  # best allowed clusters tried when making room
NEW = Cause(CauseKind.NEW)


AGAIN = Cause(CauseKind.AGAIN)


def _arrivals(work: Work) -> list[PendingMove]:
    """The moves of a component placed from scratch: new, or placed again after none of its
    replicas ran (they were unplaced, or lost with their cluster)."""
    if work.seen:
        return [PendingMove(None, i, n, "goals-changed", AGAIN) for i, n in sorted(work.target.items())]
    return [PendingMove(None, i, n, "new", NEW) for i, n in sorted(work.target.items())]


def biggest_first(works: list[Work]) -> list[Work]:
    """The hardest to fit first, once capacity is consumed: CPU x replicas, then memory."""
    return sorted(works, key=lambda w: (-w.component.cpu * w.replicas, -w.component.memory * w.replicas, w.key))


def place_fresh(cycle: Cycle, works: list[Work]) -> None:
    """Place new components, then improve them (see the module doc)."""
    for work in works:
        place(cycle, work)
    fresh = [w for w in works if w.target and not w.unplaced]
    refine(cycle, fresh)
    search(cycle, fresh, works)
    resettle(cycle, fresh)
    rebalance(cycle, fresh)
    complete(cycle, works)


def place(cycle: Cycle, work: Work, beside: np.ndarray | None = None) -> None:
    """Place a component from scratch by the distribution rules; ``beside``: only on
    these clusters (``colocateWith``)."""
    c = work.component
    ev = cycle.evaluator
    work.touched = True
    ctx = ev.context(c, work.replicas)
    total, _ = ev.scores(ctx)
    per_cluster_max = 1 if c.kind == "DaemonSet" else None
    allowed, wanted = ev.static_mask(ctx), ev.wanted_mask(ctx)
    if beside is not None:
        allowed, wanted = allowed & beside, wanted & beside
    if work.stalled:  # where it was sent and does not run, it does not go again
        allowed, wanted = allowed.copy(), wanted.copy()
        allowed[sorted(work.stalled)] = wanted[sorted(work.stalled)] = False
    dist = distribute(ctx, allowed, total, Request(work.replicas, per_cluster_max=per_cluster_max), wanted=wanted)
    if beside is not None:
        dist.why = {i: Why(Rule.COLOCATED) for i in dist.why}
    _commit(cycle, work, dist)


def _commit(cycle: Cycle, work: Work, dist: Distribution) -> None:
    """Consume capacity for a fresh component's distribution and make it its target."""
    c = work.component
    work.target, work.why = {}, {}
    for i, n in sorted(dist.replicas.items()):
        taken = cycle.ledger.take(i, c.cpu, c.memory, c.architectures, n, work.takes)
        if taken:
            work.target[i] = taken
            work.why[i] = dist.why.get(i, Why(Rule.BEST))
    work.unplaced = work.replicas - sum(work.target.values())
    work.blocked = dist.blocked if work.unplaced else None
    work.preferred = dist.preferred
    work.moves = _arrivals(work)
    cycle.placement[work.key] = dict(work.target)


def improve(cycle: Cycle, work: Work, recheck: bool = False) -> bool:
    """Re-place one fresh component if that lowers its objective, or if it misses
    minClusters or its spread and now need not; True if it moved. ``recheck``: its
    preferred cluster has room again, so the rules may decide anew."""
    c = work.component
    ev = cycle.evaluator
    ctx = ev.context(c, work.replicas, own=work.target)
    total, _ = ev.scores(ctx)
    n = max(work.replicas, 1)
    before = sum(total[i] * k for i, k in work.target.items()) / n
    allowed = ev.static_mask(ctx)
    wanted = ev.wanted_mask(ctx) if c.qos.offloading else allowed
    short = _short_of_availability(cycle, work.component, work.replicas, work.target)
    if not short:
        # No replica can do better than the best cluster ignoring capacity: most
        # components stop here without running the distribution.
        if float(np.min(np.where(allowed, total, np.inf))) >= before - 1e-9:
            return False
        preferred = int(np.argmin(np.where(wanted | allowed, total, np.inf)))
        if preferred == work.preferred and c.qos.availability.min_clusters <= 1 and not recheck:
            # The distribution rules would pick the same clusters again: the preferred
            # cluster either still takes all replicas or is still the one offloaded from.
            return False
    per_cluster_max = 1 if c.kind == "DaemonSet" else None
    best = distribute(ctx, allowed, total, Request(work.replicas, per_cluster_max=per_cluster_max),
                      wanted=wanted)
    if best.unplaced or not best.replicas:
        return False
    if short:
        if (_short_of_availability(cycle, c, work.replicas, best.replicas)
                and len(best.replicas) <= len([n for n in work.target.values() if n > 0])):
            return False  # the rules cannot do better now either (more clusters is better)
    else:
        work.preferred = best.preferred
        after = sum(total[i] * k for i, k in best.replicas.items()) / n
        if after >= before - 1e-9:
            return False
    cycle.ledger.release(work.takes, c.cpu, c.memory)
    _commit(cycle, work, best)
    return True


def refine(cycle: Cycle, fresh: list[Work]) -> None:
    """Improve components placed from scratch this cycle, now that every neighbour has
    a place: greedy placement decided early components without knowing where the
    components they talk to would go. Only components with a neighbour placed after
    them are revisited, and then the neighbours of any that moved. A component moves
    only if its objective strictly improves, so this ends."""
    position = {w.key: n for n, w in enumerate(fresh)}
    by_key = {w.key: w for w in fresh}
    neighbours: dict[str, tuple[str, ...]] = {
        w.key: tuple(sorted(set(w.component.calls) | set(cycle.callers.get(w.key, ())))) for w in fresh
    }

    def stale(w: Work) -> bool:
        # Placed before some neighbour that ended up on another cluster: its closeness
        # score was computed without knowing that.
        here = set(w.target)
        mine = position[w.key]
        return any(
            position.get(k, -1) > mine and not set(cycle.placement.get(k, {})) <= here for k in neighbours[w.key]
        )

    queue = [w.key for w in fresh if stale(w)]
    budget = REFINE_BUDGET
    for _ in range(REFINE_PASSES):
        if not queue:
            break
        again: set[str] = set()
        for key in queue:
            if budget <= 0:
                return
            budget -= 1
            if improve(cycle, by_key[key]):
                again.update(k for k in neighbours[key] if k in by_key)
        queue = sorted(again, key=lambda k: position[k])


def search(cycle: Cycle, fresh: list[Work], works: list[Work]) -> None:
    """Local search over fresh replicas (see ``improve.py``) and making room for fresh
    components left unplaced; the components it changed get fresh explanations."""
    ev = cycle.evaluator
    movables = []
    for work in fresh:
        if nearest_goals(work.component, cycle.fleet.static.region_index):
            continue  # placed to serve regions by the rules: a single-replica move could undo that
        ctx = ev.context(work.component, work.replicas, own=work.target)
        movables.append(
            Movable(work.component, work.replicas, work.target, work.takes,
                    ev.static_total(ctx), ev.static_mask(ctx),
                    frozenset(i for i, why in work.why.items() if why.rule in RULE_PLACED),
                    work.preferred)
        )
    s = Search(
        movables, cycle.placement, cycle.calls, cycle.callers, cycle.replicas(),
        cycle.fleet.cluster_latency, cycle.fleet.latency_norm, CLOSENESS_WEIGHT, cycle.ledger,
    )
    changed = s.run(SEARCH_BUDGET, SEARCH_PASSES)
    make_room(cycle, s, changed, works)
    for work in fresh:
        if work.key not in changed:
            continue
        work.target = {i: n for i, n in sorted(work.target.items()) if n > 0}
        work.why = {i: Why(Rule.SEARCH) for i in work.target}
        work.moves = _arrivals(work)


def make_room(cycle: Cycle, s: Search, changed: set[str], works: list[Work]) -> None:
    """New components left (partly) unplaced because the clusters that allow them are
    full get room: replicas of other fresh components there move to clusters of their
    own with room, if they have any. Never when the user turned offloading or bursting
    off (that is their rule). Bounded by ROOM_BUDGET evaluated moves."""
    budget = ROOM_BUDGET
    ev = cycle.evaluator
    for work in works:
        if not work.unplaced or work.component.kind == "DaemonSet" or budget <= 0:
            continue
        if work.blocked in (Blocked.OFFLOADING_OFF, Blocked.BURSTING_OFF):
            continue
        c = work.component
        ctx = ev.context(c, work.replicas, own=work.target)
        allowed = ev.static_mask(ctx)
        total, _ = ev.scores(ctx)
        order = np.flatnonzero(allowed)
        order = order[np.lexsort((order, total[order]))].tolist()[:CANDIDATE_CLUSTERS]
        for cluster in order:
            while work.unplaced and budget > 0:
                if not cycle.ledger.fits(cluster, c.cpu, c.memory, c.architectures, 1):
                    before = s.evaluations
                    mover = s.make_room(c, cluster, budget)
                    budget -= s.evaluations - before
                    if mover is None:
                        break
                    changed.add(mover)
                if cycle.ledger.take(cluster, c.cpu, c.memory, c.architectures, 1, work.takes) != 1:
                    break
                work.target[cluster] = work.target.get(cluster, 0) + 1
                work.why[cluster] = Why(Rule.MADE_ROOM)
                work.unplaced -= 1
        if work.target:
            cycle.placement[work.key] = dict(work.target)
            work.moves = _arrivals(work)
        if not work.unplaced:
            work.blocked = None


def _short_of_availability(cycle: Cycle, c: Component, replicas: int, target: dict[int, int]) -> bool:
    """Fewer clusters than minClusters (while there are replicas for them), uneven, or a
    ``serve: nearest`` region without a replica near it."""
    counts = [n for n in target.values() if n > 0]
    if len(counts) < min(c.qos.availability.min_clusters, replicas):
        return True
    nearest = nearest_goals(c, cycle.fleet.static.region_index)
    if nearest and unserved(cycle.fleet.region_latency, nearest, (i for i, n in target.items() if n > 0)):
        return True
    return c.qos.availability.spread and bool(counts) and max(counts) - min(counts) > 1


def rebalance(cycle: Cycle, fresh: list[Work]) -> None:
    """Greedy placement decided a component while clusters were full that the steps
    above freed: one that misses minClusters or its spread gets the rules' placement
    again if that now meets them."""
    for work in fresh:
        if _short_of_availability(cycle, work.component, work.replicas, work.target):
            improve(cycle, work)


def resettle(cycle: Cycle, fresh: list[Work]) -> None:
    """Moves made by the improvement steps free capacity: a component offloaded or
    burst earlier because clusters were full may now have a better place by the same
    rules. Without this the next cycle would find it and move it (churn right after a
    fresh plan). Bounded like the refinement."""
    budget = REFINE_BUDGET
    ev = cycle.evaluator
    for _ in range(REFINE_PASSES):
        moved = False
        for work in fresh:
            p = work.preferred
            by_rule = any(why.rule in RULE_PLACED for why in work.why.values())
            if p is None or (p in work.target and not by_rule):
                continue
            if not ev.static_mask_of(work.component, work.replicas)[p]:
                continue  # its nodes are too small: it can never take a replica back
            if budget <= 0:
                return
            budget -= 1
            moved |= improve(cycle, work, recheck=True)
        if not moved:
            break


def complete(cycle: Cycle, works: list[Work]) -> None:
    """Components left short of replicas were placed before the components they talk
    to had a place, so their best cluster may have changed since. The next cycle would
    find that: its repair adds the missing replicas of one placed in part (its best
    cluster was full, bursting off), then it places anew one placed nowhere. Do both
    now, in that order, so the first plan is the one a quiet replan keeps instead of a
    plan that reports an unmet goal for one cycle."""
    ev = cycle.evaluator
    for work in works:
        c = work.component
        if not work.target or work.unplaced <= 0 or c.qos.availability.spread or c.kind == "DaemonSet":
            continue
        ctx = ev.context(c, work.replicas)
        total, _ = ev.scores(ctx)
        dist = distribute(ctx, ev.static_mask(ctx), total, Request(work.unplaced, existing=dict(work.target)),
                          wanted=ev.wanted_mask(ctx))
        added = 0
        for i, n in sorted(dist.replicas.items()):
            taken = cycle.ledger.take(i, c.cpu, c.memory, c.architectures, n, work.takes)
            if taken:
                work.target[i] = work.target.get(i, 0) + taken
                work.why.setdefault(i, dist.why.get(i, Why(Rule.BEST)))
                added += taken
        if not added:
            continue
        work.unplaced -= added
        work.blocked = dist.blocked if work.unplaced else None
        work.moves = _arrivals(work)
        cycle.placement[work.key] = dict(work.target)
    for work in biggest_first([w for w in works if not w.target and w.unplaced > 0]):
        place(cycle, work)
