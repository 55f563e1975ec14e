"""Stage 3, optimise running components under the stability rules.

A running component that meets every hard goal is kept unless its cooldown has passed
and the best alternative lowers its objective terms by more than ``minImprovement``;
then at most ``disruptionBudget`` replicas move, make before break. Cooldown and budget
limit these optimisation moves only: breaches are repaired (``repair.py``) whatever
they say.
"""

from __future__ import annotations

from qonnect_gitops.model.goals import Component
from qonnect_gitops.placement.cycle import Cycle
from qonnect_gitops.placement.distribute import Request, distribute, offload_of, remembered
from qonnect_gitops.placement.plugins.latency import nearest_goals, unserved
from qonnect_gitops.placement.records import (
    Cause,
    CauseKind,
    Drain,
    Keep,
    KeepKind,
    PendingMove,
    Rule,
    Why,
    Work,
)

GAIN_FLOOR = 0.5  # scores are normalised, most lie between 0.2 and 2: see reschedule()


def in_cooldown(c: Component, moved_at: float | None, now: float) -> float | None:
    """When the component's cooldown ends, if it has not yet, else None (Unix times;
    ``moved_at``: when it last moved)."""
    if moved_at is None:
        return None
    until = moved_at + c.stability.cooldown_seconds
    return until if until > now else None


def optimisable(c: Component) -> bool:
    """Whether rescheduling may move the component at all: StatefulSets only with
    ``allowStateful`` (their data does not move), running Jobs never."""
    return c.movable and c.kind != "Job"


NOT_MOVABLE = Keep(KeepKind.NOT_MOVABLE)


def hold(cycle: Cycle, work: Work) -> Keep | None:
    """Why a running component that meets its goals is not even considered for a move
    this cycle (cooldown, or not movable by rescheduling); None if it may be."""
    until = in_cooldown(work.component, cycle.moved_at.get(work.key), cycle.now)
    if until is not None:
        keep = cycle.cooling.get(until)  # most components share a few move times
        if keep is None:
            keep = cycle.cooling[until] = Keep(KeepKind.COOLDOWN, until=until)
        return keep
    if not optimisable(work.component):
        return NOT_MOVABLE
    return None


def reschedule(cycle: Cycle, work: Work) -> None:
    """Move a running component whose cooldown has passed if the gain clears the
    hysteresis threshold, within the disruption budget; else keep it, saying why."""
    c = work.component
    ev = cycle.evaluator
    cur = work.current
    work.target = dict(cur)
    work.why = {i: Why(Rule.KEPT) for i in cur}
    ctx = ev.context(c, work.replicas, own=cur)
    static = ev.static_total(ctx)
    threshold = c.stability.min_improvement
    cur_cost = cycle.local_cost(work, cur, static)
    # No placement can score below the best allowed cluster's static score (closeness
    # only adds): when even that would not clear the threshold, skip the search.
    bound = (cur_cost - ev.static_floor(ctx)) / max(cur_cost, GAIN_FLOOR)
    if bound <= threshold:
        work.keep = Keep(KeepKind.NO_GAIN_BOUND, gain=max(bound, 0.0), threshold=threshold)
        return
    total, _ = ev.scores(ctx)
    per_cluster_max = 1 if c.kind == "DaemonSet" else None
    allowed, wanted = ev.static_mask(ctx), ev.wanted_mask(ctx)
    if work.stalled:  # where it was sent and does not run, it does not go again
        allowed, wanted = allowed.copy(), wanted.copy()
        allowed[sorted(work.stalled)] = wanted[sorted(work.stalled)] = False
    req = Request(work.replicas, per_cluster_max=per_cluster_max)
    # Most components kept here offload to the same cluster cycle after cycle: where
    # nothing that distribution read changed, it is not run again.
    memo = cycle.offloads_before.get(work.key)
    again = None if memo is None else remembered(memo, ctx, allowed, wanted, total, req, cycle.settled_anew())
    if again is None:
        best = distribute(ctx, allowed, total, req, wanted=wanted)
        memo = offload_of(ctx, allowed, wanted, total, req, best)
    else:
        best, memo = again
        cycle.offloads_reused += 1
    if memo is not None:
        cycle.offloads[work.key] = memo
    if best.unplaced or not best.replicas:
        work.keep = Keep(KeepKind.NO_BETTER)
        return
    # Judged with the exact objective terms of this component (those the local search
    # uses too), relative to the current value but never to less than GAIN_FLOOR: a
    # component whose score is nearly zero would otherwise move for a negligible gain.
    gain = (cur_cost - cycle.local_cost(work, best.replicas, static)) / max(cur_cost, GAIN_FLOOR)
    if gain <= threshold:
        work.keep = Keep(KeepKind.NO_GAIN, gain=gain, threshold=threshold)
        return
    out = {i: n - best.replicas.get(i, 0) for i, n in cur.items() if n > best.replicas.get(i, 0)}
    into = {i: n - cur.get(i, 0) for i, n in best.replicas.items() if n > cur.get(i, 0)}
    out_order = [i for i in sorted(out, key=lambda i: (-total[i], i)) for _ in range(out[i])]
    in_order = [i for i in sorted(into, key=lambda i: (total[i], i)) for _ in range(into[i])]
    steps = list(zip(out_order, in_order))
    budget = c.stability.disruption_budget
    pairs = steps[:budget]
    target = _stepped(cur, pairs)
    if not _keeps_goals(cycle, c, work.replicas, target):
        # Within the budget the move would break the spread or minClusters: a hard goal
        # is worth more than the gain.
        work.keep = Keep(KeepKind.BUDGET_SPREAD, gain=gain, threshold=threshold)
        return
    if len(steps) > budget:
        # A move the budget spreads over cycles is started only if it can finish: from
        # every state it passes through, the rest of it still clears minImprovement (or
        # a later cycle would keep the split it left, "no alternative improves more").
        state = target
        best_cost = cycle.local_cost(work, best.replicas, static)
        for k in range(budget, len(steps), budget):
            if k > budget:
                state = _stepped(state, steps[k - budget:k])
            before = cycle.local_cost(work, state, static)
            if (before - best_cost) / max(before, GAIN_FLOOR) <= threshold:
                work.keep = Keep(KeepKind.BUDGET_STALL, gain=gain, threshold=threshold, budget=budget)
                return
    cause = Cause(CauseKind.IMPROVES, gain=gain, threshold=threshold, budget=max(len(steps) - budget, 0))
    merged: dict[tuple[int, int], int] = {}
    for pair in pairs:
        merged[pair] = merged.get(pair, 0) + 1
    for (src, dst), n in sorted(merged.items()):
        taken = cycle.ledger.take(dst, c.cpu, c.memory, c.architectures, n, work.takes)
        if taken < n:  # cannot happen: the distribution checked the room; stay safe
            work.keep = Keep(KeepKind.NO_BETTER)
            cycle.ledger.release(work.takes, c.cpu, c.memory)
            work.target = dict(cur)
            work.moves.clear()
            work.drains.clear()
            return
        work.moves.append(PendingMove(src, dst, n, "rescheduling", cause))
        drain = work.drains.get(src)
        work.drains[src] = Drain((drain.replicas if drain else 0) + n, cause)
    added = {dst for _, dst in pairs}
    work.target = target
    work.why = {i: (best.why.get(i, Why(Rule.BEST)) if i in added else Why(Rule.KEPT)) for i in target}
    work.budget_limited = len(pairs) < min(len(out_order), len(in_order))
    work.touched = True


def _stepped(cur: dict[int, int], pairs: list[tuple[int, int]]) -> dict[int, int]:
    """``cur`` after one replica moved per (source, destination) pair."""
    target = dict(cur)
    for src, dst in pairs:
        target[src] -= 1
        target[dst] = target.get(dst, 0) + 1
    return {i: n for i, n in target.items() if n > 0}


def _keeps_goals(cycle: Cycle, c: Component, replicas: int, target: dict[int, int]) -> bool:
    counts = [n for n in target.values() if n > 0]
    if len(counts) < min(c.qos.availability.min_clusters, replicas):
        return False
    nearest = nearest_goals(c, cycle.fleet.static.region_index)
    if nearest and unserved(cycle.fleet.region_latency, nearest, (i for i, n in target.items() if n > 0)):
        return False
    return not (c.qos.availability.spread and counts and max(counts) - min(counts) > 1)
