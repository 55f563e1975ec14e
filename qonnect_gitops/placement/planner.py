"""``plan(goals, observed, current) -> Plan``: the placement decision of one cycle.

Pure and deterministic: it reads only its arguments (``observed.now`` is the clock),
iterates in sorted orders, and breaks ties by cluster name (index order).

A cycle: (1) replicas that already run hold their capacity; (2) each component is
classified: kept as it is (stable, or in cooldown), or given work (new, failover of
replicas on a failed cluster, goals changed, scaling, or a rescheduling check once its
cooldown has passed); (3) components with work are placed biggest first, each with its
filters, scores and the replica distribution rules; (4) components placed from scratch
are improved (refine, local search, resettle; see docs/placement.md); (5) moves,
draining replicas, the decision reason and the explanations are assembled.
"""

from __future__ import annotations

import gc
import math
import weakref
from collections.abc import Hashable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TypeVar

import numpy as np

from qonnect_gitops.model.goals import Component, Goals
from qonnect_gitops.model.observed import Observed
from qonnect_gitops.model.plan import (
    Assignment,
    ComponentPlan,
    CurrentPlacement,
    DecisionReason,
    Draining,
    Move,
    MoveReason,
    Plan,
    Unplaced,
)
from qonnect_gitops.model.quantity import format_bytes, format_millicores
from qonnect_gitops.placement.capacity import Ledger
from qonnect_gitops.placement.distribute import Distribution, distribute
from qonnect_gitops.placement.fleet import FleetView, StaticFleet, build_static, build_view
from qonnect_gitops.placement.framework import Context, Filter, Score
from qonnect_gitops.placement.improve import Movable, Search, local_cost
from qonnect_gitops.placement.plugins.closeness import CLOSENESS_WEIGHT
from qonnect_gitops.placement.plugins import (
    DYNAMIC_FILTERS,
    DYNAMIC_SCORES,
    GOAL_FILTERS,
    OBSERVED_FILTERS,
    STATIC_SCORES,
)

@dataclass(frozen=True)
class _GoalIndex:
    """Everything derived from the goals alone: cluster arrays and the call graph."""

    fleet: StaticFleet
    components: dict[str, Component]  # by key, sorted
    calls: dict[str, tuple[str, ...]]
    callers: dict[str, tuple[str, ...]]
    # Plans of components kept as they were, by (key, target, notes): immutable, so the
    # next cycle of the same goals reuses them instead of building 10,000 again.
    kept_plans: dict[tuple[object, ...], ComponentPlan] = field(default_factory=dict)


def _index_goals(goals: Goals) -> _GoalIndex:
    components = {c.key: c for c in sorted(goals.components(), key=lambda c: c.key)}
    callers: dict[str, list[str]] = {}
    for key, c in components.items():
        for callee in c.calls:
            callers.setdefault(callee, []).append(key)
    return _GoalIndex(
        fleet=build_static(goals),
        components=components,
        calls={k: c.calls for k, c in components.items()},
        callers={k: tuple(sorted(v)) for k, v in callers.items()},
    )


# What the last few Goals objects derive to: reusing it for the same (immutable) object
# cannot change any result; it only spares rebuilding it every cycle.
_STATIC: dict[int, tuple[weakref.ref[Goals], _GoalIndex]] = {}
_STATIC_KEEP = 4


def _static_for(goals: Goals) -> _GoalIndex:
    entry = _STATIC.get(id(goals))
    if entry is not None and entry[0]() is goals:
        return entry[1]
    index = _index_goals(goals)
    for key in [k for k, (ref, _) in _STATIC.items() if ref() is None]:
        del _STATIC[key]
    while len(_STATIC) >= _STATIC_KEEP:
        del _STATIC[next(iter(_STATIC))]
    _STATIC[id(goals)] = (weakref.ref(goals), index)
    return index


_M = TypeVar("_M")

REFINE_PASSES = 2  # passes of the improvement step over freshly placed components
REFINE_BUDGET = 1000  # components revisited per cycle, so huge fleets stay fast
GAIN_FLOOR = 0.5  # see decide(): scores are normalised, most lie between 0.2 and 2
RULE_NOTES = ("offloaded", "burst")  # placements made by the offloading/bursting rules
SEARCH_PASSES = 4
REPAIR_BUDGET = 2000  # evaluated moves per cycle to make room for unplaced components
CANDIDATE_CLUSTERS = 8  # best allowed clusters tried when making room  # sweeps of the local search
SEARCH_BUDGET = 4500  # evaluated moves per cycle (~0.3 s): huge fleets stay fast


_set_attribute = object.__setattr__


def _built(cls: type[_M], **values: object) -> _M:
    """A plan model from values that are valid by construction, skipping validation: a
    plan for 10,000 components would otherwise spend most of a failover replan here.
    Every field must be given."""
    obj = cls.__new__(cls)
    _set_attribute(obj, "__dict__", values)
    _set_attribute(obj, "__pydantic_fields_set__", set(values))
    _set_attribute(obj, "__pydantic_extra__", None)
    _set_attribute(obj, "__pydantic_private__", None)
    return obj


def _mask_key(c: Component, replicas: int) -> Hashable:
    """Components sharing a QoS object (app defaults) and architectures share every
    goal-level and observed mask (QoS objects live as long as the goals); size and
    replica count matter only to the cost cap."""
    if c.qos.max_cost_per_hour is None:
        return (id(c.qos), c.architectures)
    return (id(c.qos), c.architectures, c.cpu, c.memory, replicas)


def desired_replicas(component: Component, observed_rps: float | None) -> tuple[int, bool]:
    """Replicas wanted this cycle and whether scaling decided it.

    DaemonSets and Jobs count one per chosen cluster; with ``qos.scaling`` the count is
    ``ceil(rps / targetRpsPerReplica)`` within the bounds.
    """
    scaling = component.qos.scaling
    if component.kind == "DaemonSet":
        return max(component.qos.availability.min_clusters, 1), False
    if scaling is None or component.kind in ("Job", "CronJob"):
        return component.replicas, False
    rps = observed_rps or 0.0
    wanted = math.ceil(rps / scaling.target_rps_per_replica - 1e-9) if rps > 0 else 0
    return min(max(wanted, scaling.min_replicas), scaling.max_replicas), True


@dataclass(slots=True)
class _Work:
    """One component's decision in progress."""

    component: Component
    replicas: int
    scaled: bool
    current: dict[int, int]  # replicas running now, per cluster index
    key: str = ""  # app/name (the component's property builds a new string each time)
    target: dict[int, int] = field(default_factory=dict)
    notes: dict[int, str] = field(default_factory=dict)
    draining: dict[int, tuple[int, str]] = field(default_factory=dict)
    moves: list[tuple[int | None, int | None, int, MoveReason, str]] = field(default_factory=list)
    unplaced: int = 0
    unplaced_reason: str = ""
    near: str | None = None
    total: np.ndarray | None = None
    breakdown: dict[str, np.ndarray] = field(default_factory=dict)
    kept_note: str = ""
    taken: list[tuple[int, int, int]] = field(default_factory=list)  # capacity consumed
    preferred: int | None = None  # the best cluster ignoring capacity, when last placed
    rule_blocked: bool = False  # left unplaced by offloading/bursting being off


class _Cycle:
    def __init__(
        self, goals: Goals, observed: Observed, current: CurrentPlacement
    ) -> None:
        self.goals = goals
        self.observed = observed
        self.current = current
        goal_index = _static_for(goals)
        self.static = goal_index.fleet
        self.fleet: FleetView = build_view(self.static, goals, observed)
        self.ledger = Ledger(self.static, goals, observed)
        self.components = goal_index.components
        self.callers = goal_index.callers
        self.calls = goal_index.calls
        self.kept_plans = goal_index.kept_plans
        traffic: dict[str, dict[int, float]] = {}
        for t in sorted(observed.traffic, key=lambda t: (t.component, t.region, t.rps)):
            region = self.static.region_index.get(t.region)
            if region is None:
                continue
            per = traffic.setdefault(t.component, {})
            per[region] = per.get(region, 0.0) + t.rps
        self.traffic = traffic
        self.completed = set(observed.completed_jobs)
        self.mask_cache: dict[tuple[str, Hashable], np.ndarray] = {}
        self.score_cache: dict[tuple[str, Hashable], np.ndarray] = {}
        self.goal_mask_cache: dict[Hashable, np.ndarray] = {}
        self.static_mask_cache: dict[Hashable, np.ndarray] = {}
        self.static_score_cache: dict[Hashable, tuple[np.ndarray, dict[str, np.ndarray]]] = {}
        # Decided placement so far (cluster index -> replicas), for closeness.
        self.placement: dict[str, dict[int, int]] = {}
        self.replicas_of: dict[str, int] = {}
        self.todo: list[_Work] = []

    # ----- plugin evaluation -------------------------------------------------------------

    def context(self, work: _Work, own: dict[int, int]) -> Context:
        c = work.component
        return Context(
            goals=self.goals,
            fleet=self.fleet,
            ledger=self.ledger,
            component=c,
            replicas=work.replicas,
            traffic=self.traffic.get(c.key, {}),
            placement=self.placement,
            callers=self.callers.get(c.key, ()),
            own=own,
        )

    def _mask(self, f: Filter, ctx: Context) -> np.ndarray:
        key = f.key(ctx)
        if key is None:
            return f.mask(ctx)
        cached = self.mask_cache.get((f.name, key))
        if cached is None:
            cached = self.mask_cache[(f.name, key)] = f.mask(ctx)
        return cached

    def _class_key(self, ctx: Context) -> Hashable:
        return _mask_key(ctx.component, ctx.replicas)

    def goal_mask(self, ctx: Context) -> np.ndarray:
        """Where the goals alone allow the component (tier, labels, taints, arch, cost)."""
        key = self._class_key(ctx)
        ok = self.goal_mask_cache.get(key)
        if ok is None:
            masks = [self._mask(f, ctx) for f in GOAL_FILTERS]
            ok = masks[0].copy()
            for m in masks[1:]:
                ok &= m
            self.goal_mask_cache[key] = ok
        return ok

    def masks(self, ctx: Context) -> list[tuple[Filter, np.ndarray]]:
        """Every filter's mask, in order (for explanations)."""
        return [(f, self._mask(f, ctx)) for f in (*GOAL_FILTERS, *OBSERVED_FILTERS, *DYNAMIC_FILTERS)]

    def static_mask(self, ctx: Context) -> np.ndarray:
        """Clusters passing every filter but capacity (fixed for the cycle)."""
        key = self._class_key(ctx)
        static = self.static_mask_cache.get(key)
        if static is None:
            static = self.goal_mask(ctx).copy()
            for f in OBSERVED_FILTERS:
                static &= self._mask(f, ctx)
            self.static_mask_cache[key] = static
        return static

    def feasible(self, ctx: Context) -> tuple[np.ndarray, np.ndarray]:
        """Clusters passing every filter now, and those passing all but capacity."""
        static = self.static_mask(ctx)
        ok = static
        for f in DYNAMIC_FILTERS:
            ok = ok & f.mask(ctx)  # a new array: the cached static mask stays intact
        return ok, static

    def static_total(self, ctx: Context) -> np.ndarray:
        """The part of the score fixed for the cycle."""
        c = ctx.component
        key = (id(c.qos), c.cpu, c.memory, tuple(sorted(ctx.traffic.items())))
        if key not in self.static_score_cache:
            self.scores(ctx)
        return self.static_score_cache[key][0]

    def scores(self, ctx: Context) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Weighted total and the weighted terms behind it."""
        c = ctx.component
        key = (id(c.qos), c.cpu, c.memory, tuple(sorted(ctx.traffic.items())) if ctx.traffic else ())
        cached = self.static_score_cache.get(key)
        if cached is None:
            total = np.zeros(len(self.fleet.names))
            parts: dict[str, np.ndarray] = {}
            for s in STATIC_SCORES:
                w = s.weight(ctx)
                if w <= 0:
                    continue
                skey = s.key(ctx)
                vec = self.score_cache.get((s.name, skey))
                if vec is None:
                    vec = self.score_cache[(s.name, skey)] = s.score(ctx)
                parts[s.name] = w * vec
                total += parts[s.name]
            cached = self.static_score_cache[key] = (total, parts)
        total, parts = cached
        dynamic = False
        for s in DYNAMIC_SCORES:
            w = s.weight(ctx)
            if w <= 0:
                continue
            if not dynamic:
                total, parts, dynamic = total.copy(), dict(parts), True
            term = w * s.score(ctx)
            parts[s.name] = term
            total += term
        return total, parts

    # ----- the cycle --------------------------------------------------------------------

    def run(self) -> Plan:
        now = self.observed.now
        works: dict[str, _Work] = {}
        removed: list[tuple[str, dict[str, int], str]] = []
        index = self.static.index
        healthy = self.fleet.healthy.tolist()
        placements = self.current.placements
        for key, where in sorted(placements.items()):
            if key not in self.components or key in self.completed:
                why = "completed Job" if key in self.completed else "no longer in the goals"
                removed.append((key, dict(sorted(where.items())), why))
        for key, component in self.components.items():
            if key in self.completed:
                continue
            rps = sum(self.traffic[key].values()) if key in self.traffic else None
            replicas, scaled = desired_replicas(component, rps)
            current: dict[int, int] = {}
            lost_unknown = 0
            for name, count in sorted(placements.get(key, {}).items()):
                if count <= 0:
                    continue
                i = index.get(name)
                if i is None:
                    lost_unknown += count  # the cluster left the goals
                    continue
                current[i] = count
                if healthy[i]:
                    # Replicas that run now hold their capacity (make before break: also
                    # those about to move run until their replacement is healthy).
                    self.ledger.occupy(i, component.cpu, component.memory, component.architectures, count)
            work = works[key] = _Work(component, replicas, scaled, current, key)
            self.replicas_of[key] = replicas
            if lost_unknown:
                work.kept_note = f"{lost_unknown} replica(s) on clusters no longer declared"

        kept, todo = self.classify(works, now)
        for key in kept:
            self.placement[key] = dict(works[key].target)
        # Biggest first: they are the hardest to fit once capacity is consumed.
        todo.sort(key=lambda w: (-w.component.cpu * w.replicas, -w.component.memory * w.replicas, w.key))
        self.todo = todo
        for work in todo:
            self.decide(work, now)
            self.placement[work.key] = dict(work.target)
        fresh = [w for w in todo if not w.current and w.target and not w.unplaced]
        self.refine(fresh)
        self.search(fresh)
        self.resettle(fresh)
        return self.assemble(works, removed)

    def resettle(self, fresh: list[_Work]) -> None:
        """Moves made by the improvement steps free capacity: a component offloaded or
        burst earlier because clusters were full may now have a better place by the
        same rules. Without this the next cycle would find it and move it (churn right
        after a fresh plan). Bounded like the refinement."""
        budget = REFINE_BUDGET
        for _ in range(REFINE_PASSES):
            moved = False
            for work in fresh:
                p = work.preferred
                by_rule = any(note.startswith(RULE_NOTES) for note in work.notes.values())
                if p is None or (p in work.target and not by_rule):
                    continue
                if budget <= 0:
                    return
                budget -= 1
                moved |= self.improve(work, recheck=True)
            if not moved:
                break

    def search(self, fresh: list[_Work]) -> None:
        """Local search over fresh replicas (see ``improve.py``), then fresh explanations."""
        movables = []
        for work in fresh:
            ctx = self.context(work, work.target)
            movables.append(
                Movable(work.component, work.replicas, work.target, work.taken,
                        self.static_total(ctx), self.static_mask(ctx),
                        frozenset(i for i, note in work.notes.items() if note.startswith(RULE_NOTES)),
                        work.preferred)
            )
        search = Search(
            movables,
            self.placement,
            self.calls,
            self.callers,
            lambda key: self.replicas_of.get(key, 1),
            self.fleet.cluster_latency,
            self.fleet.latency_norm,
            CLOSENESS_WEIGHT,
            self.ledger,
        )
        changed = search.run(SEARCH_BUDGET, SEARCH_PASSES)
        self.repair(search, changed)
        for work in fresh:
            if work.key not in changed:
                continue
            work.target = {i: n for i, n in sorted(work.target.items()) if n > 0}
            ctx = self.context(work, work.target)
            work.total, work.breakdown = self.scores(ctx)
            work.notes = {i: "local search: lowers the objective below the greedy choice" for i in work.target}
            work.moves = [(None, i, n, "new", "new component") for i, n in work.target.items()]

    def repair(self, search: Search, changed: set[str]) -> None:
        """New components left (partly) unplaced because the clusters that allow them are
        full: move replicas of other fresh components elsewhere to make room, if they
        have room elsewhere. Bounded by REPAIR_BUDGET evaluated moves."""
        budget = REPAIR_BUDGET
        for work in self.todo:
            if not work.unplaced or work.current or work.component.kind == "DaemonSet" or budget <= 0:
                continue
            if work.rule_blocked:
                continue  # the user turned offloading or bursting off: respect it
            c = work.component
            ctx = self.context(work, work.target)
            allowed = self.static_mask(ctx)
            total = work.total if work.total is not None else self.scores(ctx)[0]
            order = np.flatnonzero(allowed)
            order = order[np.lexsort((order, total[order]))].tolist()[:CANDIDATE_CLUSTERS]
            for cluster in order:
                while work.unplaced and budget > 0:
                    if not self.ledger.fits(cluster, c.cpu, c.memory, c.architectures, 1):
                        before = search.evaluations
                        mover = search.make_room(c, cluster, budget)
                        budget -= search.evaluations - before
                        if mover is None:
                            break
                        changed.add(mover)
                    if self.ledger.take(cluster, c.cpu, c.memory, c.architectures, 1, work.taken) != 1:
                        break
                    work.target[cluster] = work.target.get(cluster, 0) + 1
                    work.notes[cluster] = "placed after moving others to make room"
                    work.unplaced -= 1
            if work.target:
                self.placement[work.key] = dict(work.target)
                work.moves = [(None, i, n, "new", "new component") for i, n in sorted(work.target.items())]
            if not work.unplaced:
                work.unplaced_reason = ""

    def refine(self, fresh: list[_Work]) -> None:
        """Improve components placed from scratch this cycle, now that every neighbour has
        a place: greedy placement decided early components without knowing where the
        components they talk to would go. Only components with a neighbour placed after
        them are revisited, and then the neighbours of any that moved. A component moves
        only if its objective strictly improves, so this ends; components already running
        are left to the stability rules."""
        position = {w.key: n for n, w in enumerate(fresh)}
        by_key = {w.key: w for w in fresh}
        # Neighbours in the call graph, both directions.
        neighbours: dict[str, tuple[str, ...]] = {
            w.key: tuple(sorted(set(w.component.calls) | set(self.callers.get(w.key, ()))))
            for w in fresh
        }
        def stale(w: _Work) -> bool:
            # Placed before some neighbour that ended up on another cluster: its
            # closeness score was computed without knowing that.
            here = set(w.target)
            mine = position[w.key]
            return any(
                position.get(k, -1) > mine and not set(self.placement.get(k, {})) <= here
                for k in neighbours[w.key]
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
                if self.improve(by_key[key]):
                    again.update(k for k in neighbours[key] if k in by_key)
            queue = sorted(again, key=lambda k: position[k])

    def improve(self, work: _Work, recheck: bool = False) -> bool:
        """Re-place one fresh component if that lowers its objective; True if it moved.
        ``recheck``: its preferred cluster has room again, so the rules may decide anew."""
        c = work.component
        ctx = self.context(work, work.target)
        total, parts = self.scores(ctx)
        work.total, work.breakdown = total, parts
        n = max(work.replicas, 1)
        before = sum(total[i] * k for i, k in work.target.items()) / n
        # No replica can do better than the best cluster ignoring capacity: most
        # components stop here without running the distribution.
        wanted = self.static_mask(ctx)
        preferred = int(np.argmin(np.where(wanted, total, np.inf)))
        if float(total[preferred]) >= before - 1e-9:
            return False
        if preferred == work.preferred and c.qos.availability.min_clusters <= 1 and not recheck:
            # The distribution rules would pick the same clusters again: the preferred
            # cluster either still takes all replicas or is still the one offloaded from.
            return False
        mask, wanted = self.feasible(ctx)
        per_cluster_max = 1 if c.kind == "DaemonSet" else None
        best = distribute(ctx, mask, total, work.replicas, {}, per_cluster_max, wanted)
        if best.unplaced or not best.replicas:
            return False
        work.preferred = best.preferred
        after = sum(total[i] * k for i, k in best.replicas.items()) / n
        if after >= before - 1e-9:
            return False
        self.ledger.release(work.taken, c.cpu, c.memory)
        work.target = {}
        work.notes = {}
        self.commit(work, best)
        work.moves = [(None, i, k, "new", "new component") for i, k in sorted(best.replicas.items())]
        self.placement[c.key] = dict(work.target)
        return True

    def classify(self, works: dict[str, _Work], now: datetime) -> tuple[list[str], list[_Work]]:
        """Split components into those kept untouched and those needing work.

        This runs for every component every cycle, so it stays cheap: no scoring, just
        health, replica count, cooldown and the goal-level filters at its clusters.
        """
        kept: list[str] = []
        todo: list[_Work] = []
        failed = {int(i) for i in np.flatnonzero(~self.fleet.healthy)}
        now_ts = now.timestamp()
        last_moved = self.current.last_moved
        until_notes: dict[float, str] = {}  # most kept components share a few move times
        for key, work in works.items():
            c = work.component
            cur = work.current
            if not cur or work.kept_note or (failed and not failed.isdisjoint(cur)):
                todo.append(work)
                continue
            count_ok = sum(cur.values()) == work.replicas and (
                c.kind != "DaemonSet" or all(v == 1 for v in cur.values())
            )
            last = last_moved.get(key)
            left = last.timestamp() + c.stability.cooldown_seconds - now_ts if last is not None else 0.0
            cooling = left > 0
            if count_ok and (cooling or not c.movable or c.kind == "Job"):
                gm = self.goal_mask_cache.get(_mask_key(c, work.replicas))
                if gm is None:
                    gm = self.goal_mask(self.context(work, cur))
                if all(gm[i] for i in cur):
                    work.target = dict(cur)
                    # An absolute time, not "Ns more": the reason is written to Git, and
                    # wording that changes every cycle would make every cycle a decision.
                    if cooling:
                        until = now_ts + left
                        note = until_notes.get(until)
                        if note is None:
                            stamp = datetime.fromtimestamp(until, timezone.utc)
                            note = until_notes[until] = f"kept: in cooldown until {stamp:%Y-%m-%dT%H:%M:%SZ}"
                        work.kept_note = note
                    else:
                        work.kept_note = "kept: not movable by rescheduling"
                    kept.append(key)
                    continue
            todo.append(work)
        return kept, todo

    def decide(self, work: _Work, now: datetime) -> None:
        """Place one component that needs work."""
        c = work.component
        cur = work.current
        healthy = self.fleet.healthy
        names = self.fleet.names
        ctx = self.context(work, cur)
        total, parts = self.scores(ctx)
        work.total = total
        work.breakdown = parts
        per_cluster_max = 1 if c.kind == "DaemonSet" else None
        if c.qos.latency:
            work.near = c.qos.latency[0].region
        if not cur:
            # Most new components fit their preferred cluster: the full mask with the
            # capacity filter is computed only when the distribution needs it.
            dist = distribute(
                ctx, lambda: self.feasible(ctx)[0], total, work.replicas, {}, per_cluster_max,
                self.static_mask(ctx),
            )
            self.apply(work, {}, dist, "new", ctx)
            return
        mask, wanted = self.feasible(ctx)
        goal_ok = self.goal_mask(ctx)

        # Forced changes first: failover and goals that exclude a current cluster.
        keep: dict[int, int] = {}
        lost: dict[int, int] = {}
        invalid: dict[int, int] = {}
        for i, count in sorted(cur.items()):
            if not healthy[i]:
                if c.movable:
                    lost[i] = count
                else:
                    keep[i] = count  # a StatefulSet waits for its cluster to return
                    work.notes[i] = (
                        f"kept on failed cluster ({self.fleet.failed_reason.get(i, 'unhealthy')}): "
                        "StatefulSet not movable"
                    )
            elif not goal_ok[i]:
                invalid[i] = count
            else:
                keep[i] = count
        kept_total = sum(keep.values())
        if c.kind == "DaemonSet":
            keep = {i: 1 for i in keep}
            kept_total = len(keep)
        forced = bool(lost or invalid)
        if kept_total > work.replicas:
            # Scale down: remove from the worst-scoring clusters first.
            surplus = kept_total - work.replicas
            for i in sorted(keep, key=lambda i: (-total[i], i)):
                if surplus == 0:
                    break
                take = min(surplus, keep[i])
                keep[i] -= take
                surplus -= take
                reason: MoveReason = "scaling" if work.scaled else "goals-changed"
                work.moves.append((i, None, take, reason, f"scale down to {work.replicas}"))
            keep = {i: v for i, v in keep.items() if v > 0}
            kept_total = sum(keep.values())
        add = work.replicas - kept_total
        if forced or add > 0 or work.moves:  # work.moves: scaled down above
            dist = distribute(ctx, mask, total, add, keep, per_cluster_max, wanted)
            work.target = dict(keep)
            for i in keep:
                work.notes.setdefault(i, "kept")
            self.commit(work, dist)
            # Pair the replicas that had to leave with where the new ones went.
            sources: list[tuple[int, int, MoveReason, str]] = []
            for i, count in sorted(lost.items()):
                sources.append((i, count, "failover", f"{names[i]} {self.fleet.failed_reason.get(i, 'is unhealthy')}"))
            for i, count in sorted(invalid.items()):
                sources.append((i, count, "goals-changed", f"{names[i]} no longer satisfies the goals"))
                work.draining[i] = (count, "goals no longer allow this cluster; remove once the replacement is healthy")
            extra = add - sum(n for _, n, _, _ in sources)
            reason_new: MoveReason = "scaling" if work.scaled else ("goals-changed" if cur else "new")
            if extra > 0:
                sources.append((-1, extra, reason_new, f"scale up to {work.replicas}" if cur else "new component"))
            self.pair_moves(work, sources, dist)
            return

        # Nothing forced: is a move worth it? Only past the cooldown (classify kept the rest).
        last = self.current.last_moved.get(c.key)
        cooling = last is not None and (now - last).total_seconds() < c.stability.cooldown_seconds
        breach = [i for i in cur if not mask[i]]
        work.target = dict(cur)
        if cooling or not c.movable or c.kind == "Job":
            for i in cur:
                work.notes[i] = "kept: in cooldown" if cooling else "kept: not movable"
            if breach:
                masks = self.masks(ctx)
                for i in breach:
                    work.notes[i] += f"; {self.why_not(masks, i)}"
            return
        best = distribute(ctx, mask, total, work.replicas, {}, per_cluster_max, wanted)
        if best.unplaced or not best.replicas:
            for i in cur:
                work.notes[i] = "kept: no better feasible placement"
            return
        # Judged with the exact objective terms of this component (those the local
        # search uses too), so the two never disagree about what is better.
        cur_cost = self.local_cost(work, cur, ctx)
        new_cost = self.local_cost(work, best.replicas, ctx)
        # Relative to the current score, but never to less than GAIN_FLOOR: a component
        # whose score is nearly zero would otherwise move for a negligible gain.
        gain = (cur_cost - new_cost) / max(cur_cost, GAIN_FLOOR)
        threshold = c.stability.min_improvement
        if not breach and gain <= threshold:
            for i in cur:
                work.notes[i] = (
                    f"kept: the best alternative improves {gain:.1%}, not more than {threshold:.0%}"
                )
            return
        why = (
            f"{', '.join(names[i] for i in breach)} {self.why_not(self.masks(ctx), breach[0])}"
            if breach
            else f"improves the objective by {gain:.1%} (> {threshold:.0%})"
        )
        self.reschedule(work, best, why)

    def local_cost(self, work: _Work, target: dict[int, int], ctx: Context) -> float:
        """The objective terms that involve this component, were it placed at ``target``."""
        return local_cost(
            work.key, target, work.replicas, self.static_total(ctx), self.placement,
            self.calls, self.callers, lambda k: self.replicas_of.get(k, 1),
            self.fleet.cluster_latency, CLOSENESS_WEIGHT / self.fleet.latency_norm,
        )

    def reschedule(self, work: _Work, best: Distribution, why: str) -> None:
        """Move at most the disruption budget of replicas towards ``best``, make before break."""
        total = work.total
        assert total is not None
        cur = work.current
        out = {i: n - best.replicas.get(i, 0) for i, n in cur.items() if n > best.replicas.get(i, 0)}
        into = {i: n - cur.get(i, 0) for i, n in best.replicas.items() if n > cur.get(i, 0)}
        budget = work.component.stability.disruption_budget
        pairs: list[tuple[int, int]] = []
        out_order = [i for i in sorted(out, key=lambda i: (-total[i], i)) for _ in range(out[i])]
        in_order = [i for i in sorted(into, key=lambda i: (total[i], i)) for _ in range(into[i])]
        for src, dst in zip(out_order, in_order):
            if len(pairs) >= budget:
                break
            pairs.append((src, dst))
        target = dict(cur)
        added: dict[int, int] = {}
        for src, dst in pairs:
            target[src] -= 1
            target[dst] = target.get(dst, 0) + 1
            added[dst] = added.get(dst, 0) + 1
            d = work.draining.get(src, (0, ""))[0]
            work.draining[src] = (d + 1, "draining: remove once the replacement is healthy")
        work.target = {i: n for i, n in target.items() if n > 0}
        for i in work.target:
            work.notes[i] = best.notes.get(i, "kept") if i in added else "kept"
        c = work.component
        for dst, n in sorted(added.items()):
            self.ledger.take(dst, c.cpu, c.memory, c.architectures, n)
        merged: dict[tuple[int, int], int] = {}
        for p in pairs:
            merged[p] = merged.get(p, 0) + 1
        for (src, dst), n in sorted(merged.items()):
            work.moves.append((src, dst, n, "rescheduling", why))
        if len(pairs) < min(len(out_order), len(in_order)):
            for i in work.target:
                work.notes[i] += f"; disruption budget {c.stability.disruption_budget} per cycle"

    def commit(self, work: _Work, dist: Distribution) -> None:
        """Consume capacity for the distributed replicas and record them in the target."""
        c = work.component
        work.preferred = dist.preferred
        for i, n in sorted(dist.replicas.items()):
            own = work.current.get(i, 0) if self.fleet.healthy[i] else 0
            already = work.target.get(i, 0)
            new_here = max(0, already + n - own) - max(0, already - own)
            if new_here > 0:
                self.ledger.take(i, c.cpu, c.memory, c.architectures, new_here, work.taken)
            work.target[i] = already + n
            work.notes[i] = dist.notes.get(i, "") or work.notes.get(i, "")
        if dist.unplaced:
            work.unplaced = dist.unplaced
            work.unplaced_reason = dist.skipped
            work.rule_blocked = "is off" in dist.skipped

    def apply(self, work: _Work, keep: dict[int, int], dist: Distribution, reason: MoveReason, ctx: Context) -> None:
        work.target = dict(keep)
        self.commit(work, dist)
        for i, n in sorted(dist.replicas.items()):
            work.moves.append((None, i, n, reason, "new component" if reason == "new" else reason))
        if dist.unplaced:
            why = self.unplaced_reason(self.masks(ctx))
            work.unplaced_reason = f"{work.unplaced_reason}; {why}" if work.unplaced_reason else why

    def pair_moves(self, work: _Work, sources: list[tuple[int, int, MoveReason, str]], dist: Distribution) -> None:
        """Moves from the replicas that had to go (or from nowhere) to where new ones went."""
        slots = [i for i, n in sorted(dist.replicas.items()) for _ in range(n)]
        pos = 0
        for src, count, reason, detail in sources:
            dests: dict[int | None, int] = {}
            for _ in range(count):
                dst = slots[pos] if pos < len(slots) else None
                pos += 1
                dests[dst] = dests.get(dst, 0) + 1
            for dst, n in sorted(dests.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)):
                if dst is None and src < 0:
                    continue  # a new replica that fits nowhere: reported as unplaced
                work.moves.append((src if src >= 0 else None, dst, n, reason, detail))
        if dist.unplaced:
            masks = self.masks(self.context(work, work.current))
            work.unplaced_reason = "; ".join(
                r for r in (work.unplaced_reason, self.unplaced_reason(masks)) if r
            )

    # ----- explanations -----------------------------------------------------------------

    def why_not(self, masks: list[tuple[Filter, np.ndarray]], cluster: int) -> str:
        for f, m in masks:
            if not m[cluster]:
                return f.reason
        return "lacks room on a node of a supported architecture"

    def unplaced_reason(self, masks: list[tuple[Filter, np.ndarray]]) -> str:
        counts: dict[str, int] = {}
        alive = np.ones(len(self.fleet.names), dtype=bool)
        for f, m in masks:
            dropped = int(np.count_nonzero(alive & ~m))
            if dropped:
                counts[f.reason] = dropped
            alive &= m
        left = int(np.count_nonzero(alive))
        if left:
            counts["lacks room on a node of a supported architecture"] = left
        detail = ", ".join(f"{n} {r}" for r, n in counts.items())
        return f"no cluster takes more: {detail}" if detail else "no clusters"

    def breakdowns(self, work: _Work, clusters: list[int]) -> list[tuple[float | None, dict[str, float]]]:
        """Score and its terms (rounded, so JSON stays short and stable) per cluster."""
        if work.total is None or not clusters:
            return [(None, {}) for _ in clusters]
        names = sorted(work.breakdown)
        picked = [work.total[clusters]] + [work.breakdown[k][clusters] for k in names]
        rows = np.round(np.array(picked), 6).T.tolist()
        return [(row[0], dict(zip(names, row[1:]))) for row in rows]

    def assemble(self, works: dict[str, _Work], removed: list[tuple[str, dict[str, int], str]]) -> Plan:
        names = self.fleet.names
        components: dict[str, ComponentPlan] = {}
        unplaced: list[Unplaced] = []
        moves: list[Move] = []
        last_moved = {
            k: v for k, v in sorted(self.current.last_moved.items()) if k in works
        }
        reasons: set[str] = set()
        for key, work in works.items():
            c = work.component
            if work.total is None and not work.draining and not work.moves and not work.unplaced:
                # Kept as it was (most components in a steady fleet): the short path.
                note = work.kept_note or "kept"
                memo_key = (key, note, tuple(sorted(work.target.items())), tuple(sorted(work.notes.items())))
                kept = self.kept_plans.get(memo_key)
                if kept is None:
                    if len(self.kept_plans) > 4 * len(self.components):
                        self.kept_plans.clear()  # bounded: stale entries go with the rest
                    kept = self.kept_plans[memo_key] = _built(
                        ComponentPlan,
                        component=key,
                        kind=c.kind,
                        assignments=tuple(
                            _built(Assignment, cluster=names[i], replicas=n, reason=work.notes.get(i, note), score=None, breakdown={})
                            for i, n in sorted(work.target.items())
                            if n > 0
                        ),
                        draining=(),
                    )
                components[key] = kept
                continue
            assignments = []
            used = [(i, n) for i, n in sorted(work.target.items()) if n > 0]
            table = self.breakdowns(work, [i for i, _ in used])
            for (i, n), (score, breakdown) in zip(used, table):
                note = work.notes.get(i) or work.kept_note or "kept"
                if score is not None:
                    terms = ", ".join(f"{k} {v:.3f}" for k, v in breakdown.items() if v)
                    note = f"{note}; score {score:.3f}" + (f" ({terms})" if terms else "")
                # Built without re-validation: every field comes from validated inputs.
                assignments.append(
                    _built(
                        Assignment,
                        cluster=names[i], replicas=n, reason=note, score=score, breakdown=breakdown
                    )
                )
            draining = tuple(
                _built(Draining, cluster=names[i], replicas=n, reason=r)
                for i, (n, r) in sorted(work.draining.items())
            )
            components[key] = _built(
                ComponentPlan,
                component=key, kind=c.kind, assignments=tuple(assignments), draining=draining
            )
            if work.unplaced:
                unplaced.append(
                    Unplaced(
                        component=key,
                        replicas=work.unplaced,
                        reason=work.unplaced_reason or "no cluster takes it",
                        cpu=format_millicores(c.cpu),
                        memory=format_bytes(c.memory),
                        architectures=tuple(sorted(c.architectures)),
                        near=work.near,
                    )
                )
            for src, dst, n, reason, detail in work.moves:
                if dst is None and src is None:
                    continue
                moves.append(
                    _built(
                        Move,
                        component=key,
                        source=names[src] if src is not None else None,
                        target=names[dst] if dst is not None else None,
                        replicas=n,
                        reason=reason,
                        detail=detail,
                    )
                )
                reasons.add(reason)
            if work.moves:
                last_moved[key] = self.observed.now
        for key, where, why in removed:
            for name, n in where.items():
                if n > 0:
                    moves.append(
                        _built(Move, component=key, source=name, target=None, replicas=n, reason="removed", detail=why)
                    )
        decision: DecisionReason = "goals-changed"
        if "failover" in reasons:
            decision = "failover"
        elif "scaling" in reasons:
            decision = "scaling"
        elif "rescheduling" in reasons:
            decision = "rescheduling"
        moves.sort(key=lambda m: (m.component, m.source or "", m.target or "", m.reason))
        return _built(
            Plan,
            reason=decision,
            components=dict(sorted(components.items())),
            unplaced=tuple(sorted(unplaced, key=lambda u: u.component)),
            moves=tuple(moves),
            last_moved=dict(sorted(last_moved.items())),
        )


def plan(goals: Goals, observed: Observed, current: CurrentPlacement) -> Plan:
    """Decide where every component runs this cycle, and explain why.

    Pure: the same arguments give the same ``Plan``; ``observed.now`` is the only clock.
    """
    # A plan allocates many small objects and no reference cycles worth collecting; the
    # cyclic collector would otherwise rescan the goals' large object graph repeatedly.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _Cycle(goals, observed, current).run()
    finally:
        if was_enabled:
            gc.enable()
