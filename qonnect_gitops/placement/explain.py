"""Stage 4, explain: the ``Plan`` with every assignment (kept ones too) scored and
explained, every move, draining replica, unplaced replica and unmet goal with its
reason. All text is written here, from the structured records of the other stages.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeVar

from qonnect_gitops.model.goals import Component
from qonnect_gitops.model.plan import (
    Assignment,
    ComponentPlan,
    DecisionReason,
    Draining,
    GoalKind,
    Move,
    Plan,
    ReplicaRequest,
    Unmet,
    Unplaced,
)
from qonnect_gitops.model.quantity import format_bytes, format_millicores
from qonnect_gitops.placement.cycle import Cycle
from qonnect_gitops.placement.evaluate import COLOCATE, FILTERS_BY_NAME, goal_of
from qonnect_gitops.placement.records import (
    Blocked,
    Cause,
    CauseKind,
    Census,
    Drain,
    Keep,
    KeepKind,
    Rule,
    Shortfall,
    ShortfallKind,
    Why,
    Work,
)

_M = TypeVar("_M")
_set_attribute = object.__setattr__


def _built(cls: type[_M], **values: object) -> _M:
    """A plan model from values that are valid by construction, skipping validation: a
    plan for 10,000 components would otherwise spend most of a replan here. Every field
    must be given."""
    obj = cls.__new__(cls)
    _set_attribute(obj, "__dict__", values)
    _set_attribute(obj, "__pydantic_fields_set__", set(values))
    _set_attribute(obj, "__pydantic_extra__", None)
    _set_attribute(obj, "__pydantic_private__", None)
    return obj


class Explainer:
    """Writes the texts of one cycle (names, clock and failures are the cycle's)."""

    def __init__(self, cycle: Cycle) -> None:
        self.cycle = cycle
        self.names = cycle.fleet.names
        self.stamps: dict[float, str] = {}
        self.latencies = cycle.latency_token

    # ----- pieces ---------------------------------------------------------------------------

    def stamp(self, when: float) -> str:
        # An absolute time, not "Ns more": reasons are written to Git, and wording that
        # changed every cycle would make every cycle look like a new decision.
        text = self.stamps.get(when)
        if text is None:
            text = self.stamps[when] = f"{datetime.fromtimestamp(when, UTC):%Y-%m-%dT%H:%M:%SZ}"
        return text

    def why(self, why: Why, even: bool = True) -> str:
        """Why a cluster took replicas; ``even``: whether the component's counts are even
        (a spread that capacity did not allow is not called even)."""
        names = self.names
        rule = why.rule
        if rule == Rule.BEST:
            return "best score"
        if rule == Rule.OFFLOADED:
            state = "whose nodes are too small for it" if why.too_small else "which is full"
            return f"offloaded: nearest cluster with room to {names[why.origin or 0]}, {state}"
        if rule == Rule.AVAILABILITY:
            return f"availability: cluster {why.ordinal} of at least {why.of}"
        if rule == Rule.SPREAD:
            if not even:
                return f"spread: cluster {why.ordinal} of {why.of}, as evenly as capacity allows (see unmet)"
            return f"spread: cluster {why.ordinal} of {why.of}, replicas shared evenly"
        if rule == Rule.BURST:
            return f"burst: overflow from {names[why.origin or 0]}, nearest by latency"
        if rule == Rule.SEARCH:
            return "local search: lowers the objective below the greedy choice"
        if rule == Rule.MADE_ROOM:
            return "placed after moving others to make room"
        if rule == Rule.COLOCATED:
            return "colocateWith: beside the components it follows"
        if rule == Rule.NEAREST:
            return f"serves {self.cycle.fleet.static.regions[why.region]} from nearby (latency goal, serve: nearest)"
        return "kept"

    def keep(self, keep: Keep) -> str:
        kind = keep.kind
        if kind == KeepKind.COOLDOWN:
            return f"kept: in cooldown until {self.stamp(keep.until or 0.0)}"
        if kind == KeepKind.NOT_MOVABLE:
            return "kept: not movable by rescheduling"
        if kind == KeepKind.NO_GAIN:
            return f"kept: the best alternative improves {keep.gain:.1%}, not more than {keep.threshold:.0%}"
        if kind == KeepKind.NO_GAIN_BOUND:
            return f"kept: no alternative improves more than {keep.gain:.1%}, not more than {keep.threshold:.0%}"
        if kind == KeepKind.BUDGET_STALL:
            return (f"kept: the best alternative improves {keep.gain:.1%}, but moved "
                    f"{keep.budget} replica(s) per cycle it would stop half way, the rest gaining "
                    f"no more than {keep.threshold:.0%}")
        if kind == KeepKind.BUDGET_SPREAD:
            return (f"kept: moving within the disruption budget would break minClusters or spread "
                    f"(gain {keep.gain:.1%})")
        return "kept: no better feasible placement"

    def failure(self, cluster: int) -> str:
        f = self.cycle.fleet.failures.get(cluster)
        if f is not None and f.reported_unhealthy and f.state is not None:
            return f"failed ({_state(f.state, f.reason)})"
        if f is None or f.reported_unhealthy:
            return "reported unhealthy"
        return f"silent for {f.silent_seconds:g}s (grace {f.grace_seconds:g}s)"

    def cordon(self, cluster: int) -> str:
        """Why a healthy cluster takes nothing new: 'cluster fog-2 is Stalled (PruneLimitExceeded)'."""
        c = self.cycle.fleet.cordons.get(cluster)
        state = _state(c.state, c.reason) if c is not None else "cordoned"
        return f"cluster {self.names[cluster]} is {state}"

    def not_running(self, cluster: int, note: str | None, work: Work) -> str:
        """Why replicas placed on a cluster do not count as running there."""
        if cluster in self.cycle.fleet.cordons:
            head = f"{self.cordon(cluster)}: {work.key} does not run there"
        else:
            head = f"{work.key} does not run on {self.names[cluster]}"
        return f"{head} ({note})" if note else head

    def lost_nodes(self, cluster: int) -> str:
        """A reported cluster whose nodes are not all ready (its capacity shrank)."""
        down = self.cycle.ledger.not_ready.get(cluster, 0)
        return f" ({down} node(s) not ready)" if down else ""

    def size(self, work: Work) -> str:
        c = work.component
        return f"{format_millicores(c.cpu)} CPU, {format_bytes(c.memory)} per replica"

    def cause(self, cause: Cause, work: Work, source_name: str | None = None) -> str:
        kind = cause.kind
        name = self.names[cause.cluster] if cause.cluster is not None else (source_name or "?")
        if kind == CauseKind.NEW:
            return "new component"
        if kind == CauseKind.AGAIN:
            return "placed again: none of its replicas ran"
        if kind == CauseKind.SCALE_UP:
            return f"scale up to {cause.count}"
        if kind == CauseKind.SCALE_DOWN:
            return f"scale down to {cause.count}"
        if kind == CauseKind.FAILOVER:
            return f"{name} {self.failure(cause.cluster or 0)}"
        if kind == CauseKind.UNDECLARED:
            return f"{name} is no longer declared"
        if kind == CauseKind.GOALS:
            f = FILTERS_BY_NAME.get(cause.filter or "")
            return f"{name} {f.reason if f else 'no longer satisfies the goals'}"
        if kind == CauseKind.DECLARED_LATENCY:
            return f"{name} is outside the latency envelope by its declared latency"
        if kind == CauseKind.MEASURED_LATENCY:
            return f"{name} is outside the latency envelope by measured latency, past the cooldown"
        if kind == CauseKind.CAPACITY:
            if cause.filter is not None:
                return f"no node of {name} holds one replica at {self.size(work)}"
            lost = self.lost_nodes(cause.cluster) if cause.cluster is not None else ""
            return f"{name} no longer holds every replica at {self.size(work)}{lost}"
        if kind == CauseKind.NOT_RUNNING:
            return self.not_running(cause.cluster or 0, cause.note, work)
        if kind == CauseKind.CORDONED:
            return f"{self.cordon(cause.cluster or 0)}: what runs there stays, nothing new goes there"
        if kind == CauseKind.AWAITING:
            return "replaced"
        if kind == CauseKind.AVAILABILITY:
            return f"availability: at least {work.component.qos.availability.min_clusters} clusters"
        if kind == CauseKind.SPREAD:
            return "spread: replica counts evened out"
        if kind == CauseKind.COLOCATION:
            return f"follows {', '.join(work.component.colocate_with)} (colocateWith), which no longer run on {name}"
        if kind == CauseKind.NEAREST:
            return f"a replica serves {self.cycle.fleet.static.regions[cause.region]} from nearby (serve: nearest)"
        if kind == CauseKind.DAEMONSET:
            return "a DaemonSet runs one replica per cluster"
        if kind == CauseKind.IMPROVES:
            text = f"improves the objective by {cause.gain:.1%} (> {cause.threshold:.0%})"
            if cause.budget:
                text += (f" once {cause.budget} more replica(s) move in later cycles "
                         f"(disruption budget {work.component.stability.disruption_budget})")
            return text
        if kind == CauseKind.COMPLETED:
            return "completed Job"
        return "no longer in the goals"

    def drain(self, drain: Drain, work: Work) -> str:
        text = self.cause(drain.cause, work)
        if drain.cause.kind == CauseKind.AWAITING:
            return "replaced; draining until its replacement runs (make before break)"
        if drain.unreplaced:
            return f"{text}; keeps running until a replacement fits elsewhere (make before break)"
        return f"{text}; draining until its replacement runs (make before break)"

    def census(self, census: Census, work: Work | None = None) -> str:
        parts = [self.colocation(n, work) if name == COLOCATE else f"{n} {FILTERS_BY_NAME[name].reason}"
                 for name, n in census.excluded]
        if census.full:
            parts.append(f"{census.full} lack room for one more replica")
        if census.unused:
            parts.append(f"{census.unused} with room left unused by its own rules (offloading, bursting, spread)")
        return ", ".join(parts) if parts else "no clusters"

    def colocation(self, n: int, work: Work | None) -> str:
        """Clusters a follower may not use: what it follows does not run there (and where
        it does, whether those clusters failed)."""
        if work is None:
            return f"{n} without what it follows (colocateWith)"
        anchors = ", ".join(work.component.colocate_with)
        runs = sorted({i for a in work.component.colocate_with
                       for i, k in (self.cycle.works[a].target.items() if a in self.cycle.works else ()) if k > 0})
        failed = [i for i in runs if not self.cycle.healthy[i]]
        text = f"{n} without {anchors} (colocateWith)"
        if runs and len(failed) == len(runs):
            text += f", which runs only on failed cluster(s) {', '.join(self.names[i] for i in failed)}"
        return text

    def latency_breach(self, work: Work, cluster: int) -> str:
        view = self.cycle.fleet
        index = view.static.region_index
        broken: list[str] = []
        near: list[str] = []
        for goal in work.component.qos.latency:
            ms = float(view.region_latency[cluster, index[goal.region]])
            if ms > goal.max_ms:
                (near if goal.serve == "nearest" else broken).append(f"{ms:g} ms to {goal.region} > {goal.max_ms:g}")
        if near and len(near) == sum(1 for g in work.component.qos.latency if g.serve == "nearest"):
            broken.append("near none of the regions it serves: " + ", ".join(near))
        return ", ".join(broken) or "outside the envelope"

    def shortfall(self, sf: Shortfall, work: Work) -> str:
        names = self.names
        kind = sf.kind
        name = names[sf.cluster] if sf.cluster is not None else ""
        if kind == ShortfallKind.UNPLACED:
            head = f"{sf.replicas} of {sf.wanted} replica(s) ({self.size(work)}) fit nowhere"
            if sf.blocked == Blocked.OFFLOADING_OFF and sf.preferred is not None:
                return f"{head}: preferred {names[sf.preferred]} is full and offloading is off"
            if sf.blocked == Blocked.BURSTING_OFF:
                rest = f"; elsewhere: {self.census(sf.census, work)}" if sf.census else ""
                return f"{head}: the clusters chosen are full and bursting is off{rest}"
            return f"{head}: no cluster takes more: {self.census(sf.census, work) if sf.census else 'no clusters'}"
        if kind == ShortfallKind.WAITING:
            c = work.component
            what = "a StatefulSet" if c.kind == "StatefulSet" else f"a stateful {c.kind}"
            if sf.goal == "health":
                return (f"{sf.replicas} replica(s) wait on failed cluster {name} ({self.failure(sf.cluster or 0)}): "
                        f"{what} moves only with qos.migration.allowStateful")
            return (f"{name} lost the capacity for {sf.replicas} replica(s): {what} waits for it "
                    "(qos.migration.allowStateful lets it move)")
        if kind == ShortfallKind.NOT_RUNNING:
            c = work.component
            what = "a StatefulSet" if c.kind == "StatefulSet" else f"a stateful {c.kind}"
            return (f"{sf.replicas} replica(s) wait where they do not run: "
                    f"{self.not_running(sf.cluster or 0, sf.filter, work)}; "
                    f"{what} moves only with qos.migration.allowStateful")
        if kind == ShortfallKind.MEASURED_BREACH:
            return (f"{name} is outside the latency envelope by measured latency ({self.latency_breach(work, sf.cluster or 0)}); "
                    f"kept until {self.stamp(sf.until or 0.0)}: a measured breach moves once it has lasted past the cooldown")
        if kind == ShortfallKind.NOT_MOVABLE:
            return (f"{name} is outside the latency envelope by measured latency ({self.latency_breach(work, sf.cluster or 0)}); "
                    f"a {work.component.kind} is not moved by rescheduling")
        if kind == ShortfallKind.UNREPLACED and sf.cause is not None and sf.cause.kind not in (
                CauseKind.GOALS, CauseKind.DECLARED_LATENCY, CauseKind.MEASURED_LATENCY):
            return (f"{sf.replicas} replica(s) keep running on {name} ({self.cause(sf.cause, work)}): "
                    "no replacement fits elsewhere yet")
        if kind == ShortfallKind.UNREPLACED:
            f = FILTERS_BY_NAME.get(sf.filter or "")
            why = f.reason if f else ("breaks the goal" if sf.goal != "latency" else "is outside the latency envelope")
            return (f"{sf.replicas} replica(s) keep running on {name}, which {why}: no replacement fits elsewhere yet")
        if kind == ShortfallKind.KEPT:
            f = FILTERS_BY_NAME.get(sf.filter or "")
            return f"{sf.replicas} replica(s) stay on {name}, which {f.reason if f else 'breaks the goal'}"
        if kind == ShortfallKind.NOT_COLOCATED:
            return (f"{sf.replicas} cluster(s), {name} first, run it without {', '.join(work.component.colocate_with)} "
                    "(colocateWith): no replacement beside them fits")
        if kind == ShortfallKind.NEAREST_KEPT:
            region = self.cycle.fleet.static.regions[sf.region]
            ms = float(self.cycle.fleet.region_latency[sf.cluster or 0, sf.region])
            return (f"1 replica stays on {name} ({ms:g} ms to {region}), the nearest to {region} "
                    "of the clusters it may use")
        if kind == ShortfallKind.UNSERVED and sf.census is not None and (sf.census.excluded or sf.census.full):
            region = self.cycle.fleet.static.regions[sf.region]
            return (f"no replica within {sf.max_ms:g} ms of {region} (serve: nearest): of the clusters within it, "
                    f"{self.census(sf.census, work)}")
        if kind == ShortfallKind.UNSERVED:
            region = self.cycle.fleet.static.regions[sf.region]
            return (f"no replica within {sf.max_ms:g} ms of {region} (serve: nearest): "
                    f"no cluster in that envelope with room, or too few replicas to serve every region")
        if kind == ShortfallKind.TOO_FEW_REPLICAS:
            return f"{sf.have} replica(s) cannot run on minClusters {sf.wanted} clusters"
        if kind == ShortfallKind.TOO_FEW_CLUSTERS:
            tail = f": {self.census(sf.census, work)}" if sf.census else ""
            return f"runs on {sf.have} cluster(s), minClusters is {sf.wanted}; no more clusters take it{tail}"
        if kind == ShortfallKind.UNEVEN:
            return (f"replica counts differ by {sf.wanted} over {sf.have} clusters (spread allows 1): "
                    "the allowed clusters lack room for an even spread")
        return (f"observed {sf.rps:g} rps needs {sf.wanted} replicas at targetRpsPerReplica; "
                f"maxReplicas is {sf.have}")

    # ----- the plan -----------------------------------------------------------------------

    def component_plan(self, work: Work, scored: ComponentPlan | None = None) -> ComponentPlan:
        """Every assignment scored at the final state, reasons from the records.
        ``scored``: the last cycle's plan of the component where its assignments' scores
        still hold (``_reuse``: the same clusters, neighbours, latencies and traffic)."""
        c = work.component
        used = [(i, n) for i, n in sorted(work.target.items()) if n > 0]
        reasons = self.reasons(work, used)
        names = self.names
        terms: list[tuple[float, dict[str, float]]] | None = None
        if scored is not None:
            last = scored.assignments
            if len(last) == len(used) and all(a.cluster == names[i] and a.score is not None
                                              for a, (i, _) in zip(last, used)):
                terms = [(float(a.score or 0.0), a.breakdown) for a in last]
        if terms is None:
            ev = self.cycle.evaluator
            terms = ev.terms_at(ev.context(c, work.replicas), [i for i, _ in used])
        return _built(
            ComponentPlan,
            component=work.key,
            kind=c.kind,
            assignments=tuple(
                _built(Assignment, cluster=names[i], replicas=n, reason=reason, score=score, breakdown=breakdown)
                for (i, n), reason, (score, breakdown) in zip(used, reasons, terms)
            ),
            draining=tuple(
                _built(Draining, cluster=names[i], replicas=d.replicas, reason=self.drain(d, work),
                       goal=goal_of(d.cause))
                for i, d in sorted(work.drains.items())
            ),
            request=_built(ReplicaRequest, cpu=c.cpu, memory=c.memory, architectures=self.architectures(work)),
        )

    def architectures(self, work: Work) -> tuple[str, ...]:
        """The architectures of what the plan runs of a component: its own, and while
        replicas drain, those they were placed with (the next cycle charges them so)."""
        archs = set(work.component.architectures)
        if work.drains:
            old = self.cycle.current.requests.get(work.key)
            if old is not None and old.architectures is not None:
                archs.update(old.architectures)
            else:  # not recorded (a plan written before): what they drain on, where it is not those
                for i in work.drains:
                    if work.component.architectures.isdisjoint(self.cycle.ledger.archs[i]):
                        archs.update(self.cycle.ledger.archs[i])
        return tuple(sorted(archs))

    def reasons(self, work: Work, used: list[tuple[int, int]]) -> list[str]:
        """Why each cluster of the target holds replicas."""
        notes: dict[int, list[str]] = {}
        for sf in work.shortfalls:
            if sf.cluster is not None and sf.kind in (ShortfallKind.MEASURED_BREACH, ShortfallKind.NOT_MOVABLE,
                                                      ShortfallKind.WAITING, ShortfallKind.NOT_RUNNING,
                                                      ShortfallKind.KEPT, ShortfallKind.NEAREST_KEPT):
                if "goal unmet here (see unmet)" not in notes.get(sf.cluster, ()):
                    notes.setdefault(sf.cluster, []).append("goal unmet here (see unmet)")
        cordons = self.cycle.fleet.cordons
        for i, _ in used:
            if i in cordons:
                notes.setdefault(i, []).append(f"{self.cordon(i)}: nothing new goes there")
        reasons: list[str] = []
        counts = [n for i, n in used if self.cycle.healthy[i]]
        even = not counts or max(counts) - min(counts) <= 1
        for i, _ in used:
            why = work.why.get(i)
            if work.keep is not None and (why is None or why.rule == Rule.KEPT):
                text = self.keep(work.keep)
            else:
                text = self.why(why or Why(Rule.KEPT), even)
            if work.budget_limited:
                text += f"; disruption budget {work.component.stability.disruption_budget} per cycle"
            if i in notes:
                text += "; " + "; ".join(notes[i])
            reasons.append(text)
        return reasons

    def unmet(self, work: Work) -> list[Unmet]:
        """One entry per goal, its messages joined."""
        by_goal: dict[GoalKind, list[str]] = {}
        for sf in work.shortfalls:
            text = self.shortfall(sf, work)
            texts = by_goal.setdefault(sf.goal, [])
            if text not in texts:
                texts.append(text)
        return [Unmet(component=work.key, goal=goal, message="; ".join(texts)) for goal, texts in sorted(by_goal.items())]

    def unplaced(self, work: Work) -> Unplaced | None:
        if not work.unplaced:
            return None
        c = work.component
        reason = next((self.shortfall(sf, work) for sf in work.shortfalls if sf.kind == ShortfallKind.UNPLACED),
                      "no cluster takes it")
        return Unplaced(
            component=work.key,
            replicas=work.unplaced,
            reason=reason,
            cpu=format_millicores(c.cpu),
            memory=format_bytes(c.memory),
            architectures=tuple(sorted(c.architectures)),
            near=c.qos.latency[0].region if c.qos.latency else None,
        )


def _state(state: object, reason: str | None) -> str:
    return f"{state} ({reason})" if reason else str(state)


@dataclass(frozen=True)
class _Shown:
    """What a component's plan was built from in the last cycle."""

    component: Component  # immutable: an edited component is another, unequal one
    target: dict[int, int]
    # Where its neighbours' closeness saw it: the cycle's placement map at the end, which
    # for a component rescheduling moved is still where it ran (its target is not).
    placed: dict[int, int] | None
    keep: Keep | None
    traffic: dict[int, float] | None
    plan: ComponentPlan | None


def _same(a: Component, b: Component) -> bool:
    """The same component: the object, or an equal one from goals loaded again."""
    return a is b or a == b


def _reuse(cycle: Cycle, ex: Explainer) -> tuple[dict[str, _Shown], dict[str, ComponentPlan]]:
    """Plans of the last cycle that still hold: a component kept as it was, with the same
    reason, whose neighbours all run where they ran then (its closeness is the same),
    under the same latencies and traffic. A steady fleet rebuilds almost nothing. Only
    the components decided in this cycle are looked at: the others were carried with
    their plans (``carry.py``). Second: the plans whose scores still hold where only the
    reason changed (the cycle after a decision keeps what it placed: "kept" now, not
    "placed"), so only the reasons are written anew."""
    entry = cycle.fleet_memo.get("shown")
    last: dict[str, _Shown] = {}
    cordons = cycle.fleet.cordons
    cordoned: set[int] = set()  # clusters whose cordon changed: what runs there says so anew
    if isinstance(entry, tuple) and entry[0] is ex.latencies:
        last = entry[1]
        before = entry[2]
        if before != cordons:
            cordoned = {i for i in before.keys() | cordons.keys() if before.get(i) != cordons.get(i)}
    works = cycle.decided_works()
    placement = cycle.placement
    changed = [work.key for work in works
               if (prev := last.get(work.key)) is None or prev.target != work.target
               or prev.placed != placement.get(work.key) or not _same(prev.component, work.component)
               or (cordoned and not cordoned.isdisjoint(work.target))]
    # A component gone since (edited out, or a Job completed) no longer calls anyone.
    # The last cycle's table holds only components of its works: none is gone when this
    # cycle works on the same ones (its carry and this table were left by that cycle).
    gone = set() if cycle.same_works_as_carry() else last.keys() - cycle.works.keys()
    changed.extend(sorted(gone))
    dirty = set(changed)
    for key in changed:
        dirty.update(cycle.calls.get(key, ()))
        dirty.update(cycle.callers.get(key, ()))
        prev = last.get(key)
        if prev is not None:
            dirty.update(prev.component.calls)  # whom it called before an edit
    if cycle.decided is None:
        now: dict[str, _Shown] = {}
    else:
        now = dict(last)
        for key in gone:
            del now[key]
    scored: dict[str, ComponentPlan] = {}
    for work in works:
        key = work.key
        traffic = cycle.traffic.get(key)
        prev = last.get(key)
        short = work.keep is not None and not work.touched and not work.shortfalls and not work.drains
        plan = None
        if (short and key not in dirty and prev is not None and prev.plan is not None
                and _same(prev.component, work.component) and prev.traffic == traffic
                and work.component.qos.placement.policy not in ("best-fit", "worst-fit")):
            if prev.keep == work.keep:
                plan = prev.plan
            else:
                scored[key] = prev.plan
        placed = placement.get(key)
        now[key] = _Shown(work.component, work.target, None if placed is None else dict(placed), work.keep, traffic,
                          plan)
    cycle.fleet_memo["shown"] = (ex.latencies, now, dict(cordons))  # filled in as the plans are built
    return now, scored


def _last_moved_base(cycle: Cycle) -> dict[str, datetime]:
    """When each component of the cycle last moved before it, in key order: the last
    cycle's table again when it read the same ``last_moved`` object for the same
    components (a failover should not filter and sort the whole fleet's), else anew.
    Kept on the cycle for the next one (never changed once made)."""
    carried = cycle.carry
    source = cycle.current.last_moved
    if (carried is not None and carried.last_moved_base is not None and carried.current.last_moved is source
            and carried.components is cycle.components and carried.completed == cycle.completed):
        base = carried.last_moved_base
    else:
        works = cycle.works
        base = dict(sorted((k, v) for k, v in source.items() if k in works))
    cycle.last_moved_base = base
    return base


def assemble(cycle: Cycle) -> Plan:
    """The plan of the cycle: components, unplaced, unmet, moves, decision reason."""
    ex = Explainer(cycle)
    names = cycle.fleet.names
    now = cycle.observed.now
    components: dict[str, ComponentPlan] = {}
    unplaced: list[Unplaced] = []
    unmet: list[Unmet] = []
    moves: list[Move] = []
    reasons: set[str] = set()
    shown, scored = _reuse(cycle, ex)
    carried = cycle.carry
    base = _last_moved_base(cycle)
    moved: list[str] = []
    if carried is not None:
        components = dict(carried.plans)
        if not cycle.same_works_as_carry():
            for key in carried.plans.keys() - cycle.works.keys():
                del components[key]
    for work in cycle.decided_works():
        key = work.key
        plan = shown[key].plan
        if plan is None:
            plan = ex.component_plan(work, scored.get(key))
            shown[key] = _Shown(work.component, work.target, shown[key].placed, work.keep, cycle.traffic.get(key),
                                plan)
        components[key] = plan
        if work.unplaced:
            u = ex.unplaced(work)
            if u is not None:
                unplaced.append(u)
        if work.shortfalls:
            unmet.extend(ex.unmet(work))
        for m in work.moves:
            if m.source is None and m.target is None and m.source_name is None:
                continue
            moves.append(_built(
                Move,
                component=key,
                source=names[m.source] if m.source is not None else m.source_name,
                target=names[m.target] if m.target is not None else None,
                replicas=m.replicas,
                reason=m.reason,
                detail=ex.cause(m.cause, work, m.source_name),
                goal=goal_of(m.cause),
            ))
            reasons.add(m.reason)
        if work.moves:
            moved.append(key)
    for removal in cycle.removed:
        for name, n in removal.where.items():
            moves.append(_built(Move, component=removal.key, source=name, target=None, replicas=n, reason="removed",
                                detail="completed Job" if removal.cause.kind == CauseKind.COMPLETED
                                else "no longer in the goals", goal=None))
    # Nothing ran before: the first placement, not a change of goals.
    first = not any(cycle.current.placements.values()) and not any(cycle.current.draining.values())
    decision: DecisionReason = "initial" if first else "goals-changed"
    if "failover" in reasons:
        decision = "failover"
    elif "scaling" in reasons:
        decision = "scaling"
    elif "rescheduling" in reasons:
        decision = "rescheduling"
    moves.sort(key=lambda m: (m.component, m.source or "", m.target or "", m.reason))
    if carried is None or (not cycle.same_works_as_carry() and (
            len(components) != len(carried.plans) or not components.keys() <= carried.plans.keys())):
        components = dict(sorted(components.items()))  # a carried table is in order already
    last_moved = dict(base)
    for key in moved:
        last_moved[key] = now
    if not base.keys() >= set(moved):
        last_moved = dict(sorted(last_moved.items()))  # a component's first move: its place in order
    return _built(
        Plan,
        reason=decision,
        components=components,
        unplaced=tuple(sorted(unplaced, key=lambda u: u.component)),
        unmet=tuple(sorted(unmet, key=lambda u: (u.component, u.goal))),
        moves=tuple(moves),
        last_moved=last_moved,
        provisioning=None,  # placement.provision adds it when the fleet has cluster pools
    )
