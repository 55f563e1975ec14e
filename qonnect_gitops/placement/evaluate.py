"""Stage 1, evaluate: which clusters pass a component's hard goals, and how the others score.

``Evaluator`` runs the filter and score plugins (``placement.plugins``) over the whole
vector of clusters and caches what is fixed for the cycle: masks by the plugin's key,
static scores by the component's QoS object, size and traffic. It also answers the
questions the later stages ask about a single cluster (which filter rules it out) or a
few clusters (the score and its terms there), and counts why a component found no more
room (``Census``): explanations come from the filters' actual results.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field

import numpy as np

from qonnect_gitops.model.app import QoS
from qonnect_gitops.model.goals import Component, Goals
from qonnect_gitops.model.plan import GoalKind
from qonnect_gitops.placement.capacity import Ledger
from qonnect_gitops.placement.fleet import FleetView, StaticFleet, build_static
from qonnect_gitops.placement.framework import Context, Filter
from qonnect_gitops.placement.plugins import (
    DYNAMIC_FILTERS,
    DYNAMIC_SCORES,
    GOAL_FILTERS,
    OBSERVED_FILTERS,
    STATIC_SCORES,
)
from qonnect_gitops.placement.plugins.health import HealthFilter
from qonnect_gitops.placement.plugins.latency import (
    LatencyEnvelopeFilter,
    envelope_mask,
)
from qonnect_gitops.placement.records import Cause, CauseKind, Census

STATIC_FILTERS: tuple[Filter, ...] = (*GOAL_FILTERS, *OBSERVED_FILTERS)
ALL_FILTERS: tuple[Filter, ...] = (*STATIC_FILTERS, *DYNAMIC_FILTERS)
FILTERS_BY_NAME: dict[str, Filter] = {f.name: f for f in ALL_FILTERS}
LATENCY_FILTER = next(f for f in OBSERVED_FILTERS if isinstance(f, LatencyEnvelopeFilter))
NODE_SIZE = "node-size"
COLOCATE = "colocate"  # a census entry: clusters where what a component follows does not run
HEALTH = HealthFilter.name  # the one filter that reads health

# The hard goal replicas leave their cluster for, per cause (None: not for a goal).
_CAUSE_GOALS: dict[CauseKind, GoalKind] = {
    CauseKind.FAILOVER: "health",
    CauseKind.UNDECLARED: "health",
    CauseKind.DECLARED_LATENCY: "latency",
    CauseKind.MEASURED_LATENCY: "latency",
    CauseKind.NEAREST: "latency",
    CauseKind.CAPACITY: "capacity",
    CauseKind.AVAILABILITY: "availability",
    CauseKind.SPREAD: "spread",
    CauseKind.COLOCATION: "selector",
    CauseKind.NOT_RUNNING: "health",
    CauseKind.CORDONED: "health",
}


def goal_of(cause: Cause) -> GoalKind | None:
    """The hard goal a cause of leaving a cluster breaks (a filter names its own); None for
    a new component, a count change, a removal or an optimisation."""
    if cause.kind == CauseKind.GOALS:
        f = FILTERS_BY_NAME.get(cause.filter or "")
        return f.goal if f is not None else None
    return _CAUSE_GOALS.get(cause.kind)


# ----- what the goals alone derive to --------------------------------------------------------


@dataclass(frozen=True)
class GoalIndex:
    """Everything derived from the goals alone: cluster arrays and the call graph."""

    fleet: StaticFleet
    components: dict[str, Component]  # by key, sorted
    calls: dict[str, tuple[str, ...]]
    callers: dict[str, tuple[str, ...]]
    # What cycles of these goals keep for the next one (evaluator caches keyed by the
    # identity of QoS objects, which live as long as the goals).
    memo: dict[Hashable, object] = field(default_factory=dict)
    # What cycles of any goals with the same clusters, network and fleet settings keep
    # (settled node packings, the plans of components kept as they were).
    fleet_memo: dict[Hashable, object] = field(default_factory=dict)


@dataclass(frozen=True)
class _FleetEntry:
    pins: tuple[object, ...]  # the objects whose identity the key holds: kept alive
    fleet: StaticFleet
    memo: dict[Hashable, object]


# What the last few goals derive to, by identity: reusing it for the same (immutable)
# objects cannot change any result; it only spares rebuilding it every cycle. A goals
# edit that leaves the clusters, the network and the fleet settings as they were (the
# same objects) keeps the fleet's arrays and what cycles learnt about it.
_STATIC: dict[int, tuple[weakref.ref[Goals], GoalIndex]] = {}
_FLEETS: dict[tuple[Hashable, ...], _FleetEntry] = {}
_STATIC_KEEP = 4


def _regions(goals: Goals) -> tuple[str, ...]:
    """The region names the static fleet indexes (components name some of them)."""
    names = {r for c in goals.components() for r in (g.region for g in c.qos.latency)}
    return tuple(sorted(names))


def _fleet_of(goals: Goals) -> _FleetEntry:
    pins = (goals.clusters, goals.latencies, goals.fleet, goals.network)
    regions = _regions(goals)
    key = (*(id(p) for p in pins), regions)
    entry = _FLEETS.get(key)
    if entry is not None and all(a is b for a, b in zip(entry.pins, pins)):
        return entry
    # Goals loaded again (a push that changed an app) bring new objects equal to the
    # last ones: the fleet's arrays and what cycles learnt about it still hold.
    same = next((e for k, e in reversed(_FLEETS.items()) if k[-1] == regions and e.pins == pins), None)
    while len(_FLEETS) >= _STATIC_KEEP:
        del _FLEETS[next(iter(_FLEETS))]
    if same is not None:
        entry = _FLEETS[key] = _FleetEntry(pins, same.fleet, same.memo)
    else:
        entry = _FLEETS[key] = _FleetEntry(pins, build_static(goals, regions), {})
    return entry


def _index_goals(goals: Goals) -> GoalIndex:
    components = {c.key: c for c in sorted(goals.components(), key=lambda c: c.key)}
    callers: dict[str, list[str]] = {}
    for key, c in components.items():
        for callee in c.calls:
            callers.setdefault(callee, []).append(key)
    fleet = _fleet_of(goals)
    return GoalIndex(
        fleet=fleet.fleet,
        components=components,
        calls={k: c.calls for k, c in components.items()},
        callers={k: tuple(sorted(v)) for k, v in callers.items()},
        fleet_memo=fleet.memo,
    )


def forget() -> None:
    """Drop everything derived from earlier goals (benchmarks time cold plans with it)."""
    _STATIC.clear()
    _FLEETS.clear()


def goal_index(goals: Goals) -> GoalIndex:
    """The (cached) ``GoalIndex`` of a goals object."""
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


# ----- replica counts --------------------------------------------------------------------------


def desired_replicas(component: Component, observed_rps: float | None) -> tuple[int, bool]:
    """Replicas wanted this cycle and whether scaling decided it.

    DaemonSets count one per chosen cluster (on max(minClusters, 1) clusters); Jobs are
    placed once. With ``qos.scaling`` the count is ``ceil(rps / targetRpsPerReplica)``
    within the bounds, and never below ``minClusters`` while ``maxReplicas`` allows it
    (availability is a hard goal; the traffic target only sizes).
    """
    scaling = component.qos.scaling
    min_clusters = component.qos.availability.min_clusters
    if component.kind == "DaemonSet":
        return max(min_clusters, 1), False
    if scaling is None or component.kind in ("Job", "CronJob"):
        return component.replicas, False
    wanted = replicas_for(observed_rps or 0.0, scaling.target_rps_per_replica)
    count = min(max(wanted, scaling.min_replicas), scaling.max_replicas)
    if count < min_clusters <= scaling.max_replicas:
        count = min_clusters
    return count, True


def replicas_for(rps: float, per_replica: float) -> int:
    """Replicas that serve ``rps`` at ``per_replica`` each."""
    return math.ceil(rps / per_replica - 1e-9) if rps > 0 else 0


# ----- the evaluator -----------------------------------------------------------------------


_QOS_JSON = QoS.__pydantic_serializer__.to_json


class QosClasses:
    """QoS objects by content: components whose QoS is equal (apps written alike, copied
    defaults) share every mask and static score, so what the evaluator keeps grows with
    the distinct QoS goals, not with the components."""

    def __init__(self) -> None:
        self.by_id: dict[int, tuple[QoS, bytes]] = {}  # holds the object: its id stays unique
        self.contents: dict[bytes, bytes] = {}  # one key per content, shared by the keys

    def of(self, qos: QoS) -> bytes:
        """The content key of a QoS object (computed once per object): its JSON, as
        ``model_dump_json`` writes it, from the serializer itself (a cold plan asks once
        per component, and the method's wrapper costs a fifth of the serializing)."""
        entry = self.by_id.get(id(qos))
        if entry is not None and entry[0] is qos:
            return entry[1]
        text = _QOS_JSON(qos)
        text = self.contents.setdefault(text, text)
        self.by_id[id(qos)] = (qos, text)
        return text


def _class_key(c: Component, replicas: int, qos: bytes) -> Hashable:
    """Components with equal QoS goals, architectures and size share every goal-level and
    observed mask; the replica count matters only to the cost cap."""
    if c.qos.max_cost_per_hour is None:
        return (qos, c.architectures, c.cpu, c.memory)
    return (qos, c.architectures, c.cpu, c.memory, replicas)


def _goal_key(c: Component, replicas: int, qos: bytes) -> Hashable:
    if c.qos.max_cost_per_hour is None:
        return (qos, c.architectures)
    return (qos, c.architectures, c.cpu, c.memory, replicas)


@dataclass
class EvalCaches:
    """Everything the evaluator caches: masks and static scores. They depend on the goals
    and on what is observed of health, latency and nodes (not on decisions), so a cycle
    seeing the same may reuse an earlier cycle's (``Cycle`` decides)."""

    masks: dict[tuple[str, Hashable], np.ndarray] = field(default_factory=dict)
    scores: dict[tuple[str, Hashable], np.ndarray] = field(default_factory=dict)
    goal: dict[Hashable, np.ndarray] = field(default_factory=dict)
    static: dict[Hashable, np.ndarray] = field(default_factory=dict)
    declared: dict[Hashable, np.ndarray] = field(default_factory=dict)
    wanted: dict[Hashable, np.ndarray] = field(default_factory=dict)
    lists: dict[Hashable, list[bool]] = field(default_factory=dict)
    static_scores: dict[Hashable, tuple[np.ndarray, dict[str, np.ndarray]]] = field(default_factory=dict)
    floors: dict[tuple[Hashable, Hashable], float] = field(default_factory=dict)
    rows: dict[Hashable, tuple[list[str], list[list[float]]]] = field(default_factory=dict)
    # (static key, cluster) -> score and terms there, for components without dynamic terms.
    cells: dict[tuple[Hashable, int], tuple[float, dict[str, float]]] = field(default_factory=dict)
    # Every QoS object seen (contexts refer to them): counts what the caches have seen.
    pins: dict[int, object] = field(default_factory=dict)
    # Per floor: the cluster holding it (the first at the lowest score; -1: none is
    # allowed), so a cycle where clusters only failed keeps every floor held elsewhere
    # (``after_failures``).
    floor_at: dict[tuple[Hashable, Hashable], int] = field(default_factory=dict)

    def after_failures(self, before: np.ndarray, now: np.ndarray) -> EvalCaches:
        """The caches for a cycle that sees the same latencies and nodes as the one these
        were filled in, and another health (``before`` and ``now``: per cluster, healthy).
        Health enters only through the health filter: every mask but it, the goal masks,
        the declared envelopes and every score are kept (shared, read only); the masks
        combining health are made anew as asked for. A floor (the lowest static score
        over the allowed clusters) is kept where clusters only failed and the cluster
        holding it did not: the allowed clusters lost some others, which cannot lower
        the minimum nor raise it."""
        only_failed = not bool(np.any(now & ~before))
        floors: dict[tuple[Hashable, Hashable], float] = {}
        floor_at: dict[tuple[Hashable, Hashable], int] = {}
        if only_failed:
            healthy = now.tolist()
            for key, at in self.floor_at.items():
                if at < 0 or healthy[at]:
                    floors[key] = self.floors[key]
                    floor_at[key] = at
        return EvalCaches(
            masks={k: v for k, v in self.masks.items() if k[0] != HEALTH},
            scores=self.scores, goal=self.goal, declared=self.declared, static_scores=self.static_scores,
            rows=self.rows, cells=self.cells, pins=self.pins, floors=floors, floor_at=floor_at,
        )


def _frozen(array: np.ndarray) -> np.ndarray:
    """Cached arrays are shared: nothing may change them in place."""
    array.setflags(write=False)
    return array


class Evaluator:
    """Plugin evaluation for one cycle, with its caches."""

    def __init__(
        self,
        goals: Goals,
        fleet: FleetView,
        ledger: Ledger,
        traffic: Mapping[str, Mapping[int, float]],
        placement: dict[str, dict[int, int]],
        callers: Mapping[str, tuple[str, ...]],
        caches: EvalCaches | None = None,
        qos: QosClasses | None = None,
    ) -> None:
        self.goals = goals
        self.fleet = fleet
        self.ledger = ledger
        self.traffic = traffic
        self.placement = placement  # decided so far (cluster index -> replicas), for closeness
        self.callers = callers
        self.n = len(fleet.names)
        self.contexts: dict[tuple[str, int], Context] = {}
        c = caches if caches is not None else EvalCaches()
        self.mask_cache = c.masks
        self.score_cache = c.scores
        self.goal_cache = c.goal
        self.static_cache = c.static
        self.declared_cache = c.declared
        self.wanted_cache = c.wanted
        self.static_lists = c.lists
        self.static_scores = c.static_scores
        self.floor_cache = c.floors
        self.floor_at = c.floor_at
        self.static_rows = c.rows
        self.static_cells = c.cells
        self.pins = c.pins
        self.qos = qos if qos is not None else QosClasses()

    def context(self, c: Component, replicas: int, own: Mapping[int, int] | None = None) -> Context:
        """What plugins see of a component (shared while ``own`` is empty: a context only
        refers to the cycle's state, it holds none of its own)."""
        if not own:
            ctx = self.contexts.get((c.key, replicas))
            if ctx is None or ctx.component is not c:
                ctx = self.contexts[(c.key, replicas)] = self._context(c, replicas, {})
            return ctx
        return self._context(c, replicas, own)

    def _context(self, c: Component, replicas: int, own: Mapping[int, int]) -> Context:
        self.pins[id(c.qos)] = c.qos
        return Context(
            goals=self.goals,
            fleet=self.fleet,
            ledger=self.ledger,
            component=c,
            replicas=replicas,
            traffic=self.traffic.get(c.key, {}),
            placement=self.placement,
            callers=self.callers.get(c.key, ()),
            own=own,
        )

    # ----- masks --------------------------------------------------------------------------

    @staticmethod
    def filter(name: str) -> Filter:
        """The filter plugin of that name."""
        return FILTERS_BY_NAME[name]

    def static_mask_of(self, c: Component, replicas: int) -> np.ndarray:
        """``static_mask`` by the component alone (cached: the short path of a cycle)."""
        static = self.static_cache.get(_class_key(c, replicas, self.qos.of(c.qos)))
        if static is None:
            static = self.static_mask(self.context(c, replicas))
        return static

    def static_list_of(self, c: Component, replicas: int) -> list[bool]:
        """``static_mask_of`` as a list: indexing one cluster is much cheaper."""
        key = _class_key(c, replicas, self.qos.of(c.qos))
        static = self.static_lists.get(key)
        if static is None:
            static = self.static_lists[key] = self.static_mask_of(c, replicas).tolist()
        return static

    def mask(self, f: Filter, ctx: Context) -> np.ndarray:
        """One filter's mask (cached when the filter has a key)."""
        key = f.key(ctx)
        if key is None:
            return f.mask(ctx)
        cached = self.mask_cache.get((f.name, key))
        if cached is None:
            cached = self.mask_cache[(f.name, key)] = _frozen(f.mask(ctx))
        return cached

    def goal_mask(self, ctx: Context) -> np.ndarray:
        """Where the goals alone allow the component (tier, labels, taints, arch, cost)."""
        key = _goal_key(ctx.component, ctx.replicas, self.qos.of(ctx.component.qos))
        ok = self.goal_cache.get(key)
        if ok is None:
            ok = np.ones(self.n, dtype=bool)
            for f in GOAL_FILTERS:
                ok &= self.mask(f, ctx)
            self.goal_cache[key] = _frozen(ok)
        return ok

    def static_mask(self, ctx: Context) -> np.ndarray:
        """Clusters passing every filter but free capacity (fixed for the cycle)."""
        key = _class_key(ctx.component, ctx.replicas, self.qos.of(ctx.component.qos))
        static = self.static_cache.get(key)
        if static is None:
            static = self.goal_mask(ctx).copy()
            for f in OBSERVED_FILTERS:
                static &= self.mask(f, ctx)
            self.static_cache[key] = _frozen(static)
        return static

    def wanted_mask(self, ctx: Context) -> np.ndarray:
        """``static_mask`` without the node-size check: where the component would go if
        nodes were big enough. Its best cluster is the one offloading starts from."""
        key = _class_key(ctx.component, ctx.replicas, self.qos.of(ctx.component.qos))
        wanted = self.wanted_cache.get(key)
        if wanted is None:
            wanted = self.goal_mask(ctx).copy()
            for f in OBSERVED_FILTERS:
                if f.name != NODE_SIZE:
                    wanted &= self.mask(f, ctx)
            static = self.static_mask(ctx)
            # The same object when nodes are never too small: callers skip the extra work.
            self.wanted_cache[key] = wanted = static if np.array_equal(wanted, static) else _frozen(wanted)
        return wanted

    def declared_envelope(self, ctx: Context) -> np.ndarray:
        """Where the goals do not break the latency envelope: within it by declared
        latencies (network.yaml; a cluster in the region counts as 0 ms), or by the
        latencies in force (a measurement overrides the declared value). A breach outside
        this is a breach of the goals, repaired at once; one seen only in measurements
        waits until it has lasted."""
        key = LATENCY_FILTER.key(ctx)
        ok = self.declared_cache.get(key)
        if ok is None:
            declared = envelope_mask(self.fleet.static.declared_region_latency, ctx)
            ok = self.declared_cache[key] = _frozen(declared | self.mask(LATENCY_FILTER, ctx))
        return ok

    def exclusion(self, ctx: Context, cluster: int) -> Filter | None:
        """The first filter (fixed for the cycle) that rules the cluster out, if any."""
        for f in STATIC_FILTERS:
            if not self.mask(f, ctx)[cluster]:
                return f
        return None

    def census(self, ctx: Context, used: Mapping[int, int], room: bool = True,
               within: np.ndarray | None = None, beside: np.ndarray | None = None) -> Census:
        """Why no more clusters take the component: per filter how many clusters it ruled
        out (each counted at the first filter it fails), then, among the clusters passing
        all of them and not already used, how many have no room for one more replica and
        how many have room but were kept out by a rule (offloading, bursting, spread).
        ``within``: only these clusters (a region's latency envelope: the latency filter
        is not counted, the others say why none of them serves it)."""
        alive = np.ones(self.n, dtype=bool) if within is None else within.copy()
        excluded: list[tuple[str, int]] = []
        goal: GoalKind = "capacity"
        if beside is not None:
            # colocateWith first: the clusters where what it follows does not run.
            dropped = int(np.count_nonzero(alive & ~beside))
            if dropped:
                excluded.append((COLOCATE, dropped))
                alive &= beside
                if not alive.any():
                    goal = "selector"
        for f in STATIC_FILTERS:
            if within is not None and f is LATENCY_FILTER:
                continue
            m = self.mask(f, ctx)
            dropped = int(np.count_nonzero(alive & ~m))
            if dropped:
                excluded.append((f.name, dropped))
                alive &= m
                if not alive.any():
                    goal = f.goal
        full = unused = 0
        c = ctx.component
        for i in np.flatnonzero(alive).tolist():
            if i in used:
                continue
            if room and self.ledger.fits(i, c.cpu, c.memory, c.architectures, 1):
                unused += 1
            else:
                full += 1
        if unused:
            goal = "capacity"  # room exists: a rule of the component's own keeps it out
        return Census(tuple(excluded), full, unused, goal)

    # ----- scores -------------------------------------------------------------------------

    def _static_key(self, ctx: Context) -> Hashable:
        c = ctx.component
        return (self.qos.of(c.qos), c.cpu, c.memory, tuple(sorted(ctx.traffic.items())) if ctx.traffic else ())

    def static_scores_of(self, ctx: Context) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """The part of the score fixed for the cycle, and its weighted terms."""
        key = self._static_key(ctx)
        cached = self.static_scores.get(key)
        if cached is None:
            total = np.zeros(self.n)
            parts: dict[str, np.ndarray] = {}
            for s in STATIC_SCORES:
                w = s.weight(ctx)
                if w <= 0:
                    continue
                skey = s.key(ctx)
                vec = self.score_cache.get((s.name, skey))
                if vec is None:
                    vec = self.score_cache[(s.name, skey)] = _frozen(s.score(ctx))
                parts[s.name] = _frozen(w * vec)
                total += parts[s.name]
            cached = self.static_scores[key] = (_frozen(total), parts)
        return cached

    def static_total(self, ctx: Context) -> np.ndarray:
        return self.static_scores_of(ctx)[0]

    def floor_key(self, ctx: Context) -> tuple[Hashable, Hashable]:
        """What ``static_floor`` depends on besides the cycle's masks and scores."""
        return (_class_key(ctx.component, ctx.replicas, self.qos.of(ctx.component.qos)), self._static_key(ctx))

    def static_floor(self, ctx: Context) -> float:
        """The lowest static score over the clusters the component may use: no placement
        of it can score better (closeness and utilisation only add)."""
        key = self.floor_key(ctx)
        floor = self.floor_cache.get(key)
        if floor is None:
            allowed = self.static_mask(ctx)
            total = self.static_total(ctx)
            if allowed.any():
                values = total[allowed]
                lowest = int(values.argmin())
                floor = float(values[lowest])
                self.floor_at[key] = int(np.flatnonzero(allowed)[lowest])
            else:
                floor = math.inf
                self.floor_at[key] = -1  # no cluster allowed: failures cannot change that
            self.floor_cache[key] = floor
        return floor

    def scores(self, ctx: Context) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Weighted total and the weighted terms behind it, now."""
        total, parts = self.static_scores_of(ctx)
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

    def terms_at(self, ctx: Context, clusters: list[int]) -> list[tuple[float, dict[str, float]]]:
        """The score and its terms at a few clusters, now (rounded, so JSON stays short
        and stable): what every assignment of the plan shows, kept ones included."""
        key = self._static_key(ctx)
        if not any(s.weight(ctx) > 0 for s in DYNAMIC_SCORES):
            # Only static terms: the answer at a cluster is the same for the whole class
            # (most components of a large fleet), computed once per cluster.
            out = []
            for a in clusters:
                cell = self.static_cells.get((key, a))
                if cell is None:
                    cell = self.static_cells[(key, a)] = self._terms_at(ctx, key, [a])[0]
                out.append(cell)
            return out
        return self._terms_at(ctx, key, clusters)

    def _terms_at(self, ctx: Context, key: Hashable, clusters: list[int]) -> list[tuple[float, dict[str, float]]]:
        table = self.static_rows.get(key)
        if table is None:
            _, parts = self.static_scores_of(ctx)
            # Plain lists: one lookup per cluster and term instead of a numpy scalar each.
            table = self.static_rows[key] = (list(parts), [parts[name].tolist() for name in parts])
        names = list(table[0])
        columns = table[1]
        rows = [[column[a] for column in columns] for a in clusters]
        for s in DYNAMIC_SCORES:
            w = s.weight(ctx)
            if w <= 0:
                continue
            names.append(s.name)
            for row, value in zip(rows, s.score_at(ctx, clusters)):
                row.append(w * value)
        out = []
        order = sorted(range(len(names)), key=lambda k: names[k])
        for row in rows:
            out.append((round(sum(row), 6), {names[k]: round(row[k], 6) for k in order}))
        return out
