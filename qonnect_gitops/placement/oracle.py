"""An independent check of one planning cycle: does the plan do what the goals ask?

Written from the user documentation (docs/qos-reference.md, docs/placement.md) alone,
without the planner's stages: it imports nothing of ``placement`` but this module, reads
the goals, the observations, the placement in force and the new plan, and lists every

* hard goal the new plan breaks without listing it in ``unmet`` under that goal
  (health, tier, selector and taints, architecture, cost cap, node size, latency
  envelope, colocation, availability, spread, scaling), and every replica count that is
  not what the goals want (placed + unplaced);
* cluster that gets more replicas than its capacity holds, and new replicas on a
  cordoned cluster (healthy, but reported Degraded, Stalled or Silent);
* replica that disappeared without a move, an unplaced or an unmet entry, and every
  drain that ended before its replacement runs (make before break);
* explanation that contradicts the plan: a move or drain naming a goal the cluster does
  not break, ``new`` for a component that ran or drained before, replicas "shared
  evenly" that are not;
* move that does not do what its reason says: an optimisation inside the cooldown or
  beyond the disruption budget, one that breaks a goal that held, one that does not
  lower the component's score.

Tests run it on every cycle of every property-based sequence (tests/placement); the
finding kinds are structured so that a test can say which one it expects.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum

from qonnect_gitops.model.cluster import Cluster
from qonnect_gitops.model.goals import Component, Goals
from qonnect_gitops.model.observed import Observed
from qonnect_gitops.model.plan import ComponentPlan, CurrentPlacement, GoalKind, Move, Plan
from qonnect_gitops.model.status import WorkloadState

GIB = float(2**30)
EPSILON = 1e-6


class Breach(Enum):
    """What kind of fault the oracle found."""

    UNKNOWN_CLUSTER = "unknown-cluster"  # replicas on a cluster the goals do not declare
    COUNT = "count"  # placed + unplaced is not the replicas wanted
    UNLISTED = "unlisted"  # a hard goal is broken and not listed in unmet under it
    CORDONED = "cordoned"  # new replicas on a cordoned cluster
    OVERCOMMIT = "overcommit"  # a cluster holds more than its capacity
    VANISHED = "vanished"  # replicas gone without a move, unplaced or unmet entry
    DRAIN = "drain"  # a drain ended, or was never made, before its replacement runs
    EXPLANATION = "explanation"  # a reason that contradicts the plan or the inputs
    MOVE = "move"  # a move that does not do what its reason claims
    ROOM = "room"  # replicas unplaced while a cluster that allows them has room for one


@dataclass(frozen=True)
class Finding:
    """One fault of a plan."""

    breach: Breach
    component: str
    detail: str
    cluster: str | None = None
    goal: GoalKind | None = None

    def __str__(self) -> str:
        where = f" on {self.cluster}" if self.cluster else ""
        goal = f" [{self.goal}]" if self.goal else ""
        return f"{self.breach.value}{goal}: {self.component}{where}: {self.detail}"


# ----- the fleet as the documentation describes it ----------------------------------------------


@dataclass(frozen=True)
class _Node:
    arch: str
    cpu: int
    memory: int
    count: int
    ready: bool


class _Fleet:
    """What the docs say the planner must take as true this cycle. Answers are kept for
    the check: a plan of 10,000 components asks the same questions of the same clusters
    (components written alike share their QoS object)."""

    def __init__(self, goals: Goals, observed: Observed) -> None:
        self.goals = goals
        self.observed = observed
        self.grace = goals.fleet.spec.heartbeat.grace_seconds
        self.completed = set(observed.completed_jobs)
        self.measured: dict[frozenset[str], float] = {}
        for m in observed.latencies:
            pair = frozenset((m.from_, m.to))
            self.measured[pair] = max(self.measured.get(pair, 0.0), m.ms)
        self.rps: dict[str, float] = {}
        for t in observed.traffic:
            self.rps[t.component] = self.rps.get(t.component, 0.0) + t.rps
        self._failed: dict[str, bool] = {}
        self._cordoned: dict[str, bool] = {}
        self._nodes: dict[str, list[_Node]] = {}
        self._filters: dict[tuple[object, ...], list[GoalKind]] = {}
        self._holds: dict[tuple[object, ...], bool] = {}
        self._outside: dict[tuple[object, ...], bool] = {}

    def declared(self, name: str) -> bool:
        return name in self.goals.clusters

    def failed(self, name: str) -> bool:
        """Gone: not declared, reported unhealthy, or (without a health state) silent past
        the grace."""
        known = self._failed.get(name)
        if known is None:
            oc = self.observed.clusters.get(name)
            known = self._failed[name] = name not in self.goals.clusters or (oc is not None and (
                not oc.healthy or (oc.state is None and oc.heartbeat_age_seconds is not None
                                   and oc.heartbeat_age_seconds > self.grace)))
        return known

    def cordoned(self, name: str) -> bool:
        """Healthy, but Degraded, Stalled or Silent: keeps what runs, takes nothing new."""
        known = self._cordoned.get(name)
        if known is None:
            oc = self.observed.clusters.get(name)
            known = self._cordoned[name] = not self.failed(name) and oc is not None and oc.cordoned
        return known

    def nodes(self, name: str) -> list[_Node]:
        """The nodes as reported (when the agent reports any), else as declared."""
        known = self._nodes.get(name)
        if known is None:
            oc = self.observed.clusters.get(name)
            if oc is not None and oc.nodes:
                known = [_Node(n.arch, (n.allocatable or n.free).cpu, (n.allocatable or n.free).memory, 1, n.ready)
                         for n in oc.nodes]
            else:
                known = [_Node(s.arch, s.cpu, s.memory, s.count, True) for s in self.goals.clusters[name].spec.nodes]
            self._nodes[name] = known
        return known

    def latency(self, cluster: str, region: str) -> float:
        """Measured overrides declared; both directions count with the larger value; in its
        own region a cluster counts 0 ms unless declared; unknown is infinite."""
        if self.measured:
            measured = self.measured.get(frozenset((cluster, region)))
            if measured is not None:
                return measured
        table = self.goals.latencies
        a, b = table.get((cluster, region)), table.get((region, cluster))
        if a is not None and b is not None:
            return max(a, b)
        if a is not None or b is not None:
            return a if a is not None else b  # type: ignore[return-value]
        return 0.0 if self.goals.clusters[cluster].spec.region == region else math.inf

    def workload_state(self, key: str, name: str) -> WorkloadState | None:
        if not self.observed.workloads:
            return None
        w = self.observed.workload(key, name)
        return w.state if w is not None else None

    def running(self, key: str, name: str, replicas: int) -> bool:
        """Whether replicas placed on a cluster run: observed Running with as many ready, or
        not observed on a live cluster that is not cordoned."""
        if self.failed(name):
            return False
        w = self.observed.workload(key, name) if self.observed.workloads else None
        if w is not None:
            return w.state == WorkloadState.RUNNING and w.ready_replicas >= replicas
        return not self.cordoned(name)

    def not_running(self, key: str, name: str) -> bool:
        return self.workload_state(key, name) == WorkloadState.NOT_RUNNING

    def wanted(self, c: Component) -> int:
        """Replicas the goals want this cycle (docs: replica counts and workload kinds)."""
        if c.kind in ("Job", "CronJob") and c.key in self.completed:
            return 0
        min_clusters = c.qos.availability.min_clusters
        if c.kind == "DaemonSet":
            return max(min_clusters, 1)
        s = c.qos.scaling
        if s is None or c.kind in ("Job", "CronJob"):
            return c.replicas
        count = min(max(_replicas_for(self.rps.get(c.key, 0.0), s.target_rps_per_replica), s.min_replicas),
                    s.max_replicas)
        if count < min_clusters <= s.max_replicas:
            count = min_clusters
        return count

    def goal_filters(self, c: Component, name: str, replicas: int) -> list[GoalKind]:
        """The goals of the goal filters (tier, selector and taints, architecture, cost cap)
        a cluster breaks for a component."""
        key: tuple[object, ...] = (id(c.qos), c.architectures, name)
        if c.qos.max_cost_per_hour is not None:
            key = (*key, c.cpu, c.memory, replicas)
        known = self._filters.get(key)
        if known is None:
            known = self._filters[key] = self._goal_filters(c, name, replicas)
        return known

    def _goal_filters(self, c: Component, name: str, replicas: int) -> list[GoalKind]:
        cluster = self.goals.clusters[name]
        broken: list[GoalKind] = []
        if c.qos.tiers and cluster.spec.tier not in c.qos.tiers:
            broken.append("tier")
        if not c.qos.cluster_selector.matches(cluster.selector_labels) or not _tolerated(c, cluster):
            broken.append("selector")
        if not any(n.arch in c.architectures for n in self.nodes(name)):
            broken.append("architecture")
        cap = c.qos.max_cost_per_hour
        if cap is not None:
            price = c.cpu / 1000 * cluster.spec.cost.cpu_hour + c.memory / GIB * cluster.spec.cost.memory_gib_hour
            if price * max(replicas, 1) > cap + 1e-9:
                broken.append("cost")
        return broken

    def holds_one(self, c: Component, name: str) -> bool:
        """Some node of a supported architecture holds one replica, even empty."""
        key = (c.architectures, c.cpu, c.memory, name)
        known = self._holds.get(key)
        if known is None:
            known = self._holds[key] = any(n.arch in c.architectures and n.cpu >= c.cpu and n.memory >= c.memory
                                           for n in self.nodes(name))
        return known

    def outside_envelope(self, c: Component, name: str) -> bool:
        """``serve: all`` goals: every one within maxMs; ``serve: nearest``: at least one."""
        goals = c.qos.latency
        if not goals:
            return False
        key = (id(c.qos), name)
        known = self._outside.get(key)
        if known is None:
            nearest = [g for g in goals if g.serve == "nearest"]
            known = self._outside[key] = (
                any(g.serve == "all" and self.latency(name, g.region) > g.max_ms for g in goals)
                or (bool(nearest) and all(self.latency(name, g.region) > g.max_ms for g in nearest)))
        return known


def _replicas_for(rps: float, per_replica: float) -> int:
    return math.ceil(rps / per_replica - 1e-9) if rps > 0 else 0


def _tolerated(c: Component, cluster: Cluster) -> bool:
    return all(t.effect == "PreferNoSchedule"
               or any(tol.tolerates(t.key, t.value, t.effect) for tol in c.qos.tolerations)
               for t in cluster.spec.taints)


# ----- the check ---------------------------------------------------------------------------------


def check(goals: Goals, observed: Observed, previous: CurrentPlacement, plan: Plan,
          before: Plan | None = None) -> list[Finding]:
    """Every fault of ``plan``, the plan made from ``previous`` (the placement in force) with
    these goals and observations; ``before``: the plan that ``previous`` came from, if known
    (its scores let a rescheduling's claim be checked)."""
    fleet = _Fleet(goals, observed)
    out: list[Finding] = []
    components = {c.key: c for c in goals.components()}
    unmet: dict[str, set[GoalKind]] = {}
    for u in plan.unmet:
        unmet.setdefault(u.component, set()).add(u.goal)
    unplaced = {u.component: u.replicas for u in plan.unplaced}
    targets = {key: {a.cluster: a.replicas for a in cp.assignments if a.replicas > 0}
               for key, cp in plan.components.items()}
    moves: dict[str, list[Move]] = {}
    for m in plan.moves:
        moves.setdefault(m.component, []).append(m)
    none: set[GoalKind] = set()
    for key, c in components.items():
        _component(fleet, c, targets, unmet.get(key, none), unplaced.get(key, 0), plan, previous, out)
    _capacity(fleet, components, plan, previous, unmet, out)
    _room(fleet, components, plan, previous, unplaced, out)
    for key in sorted(set(previous.placements) | set(previous.draining) | set(components)):
        _continuity(fleet, components.get(key), key, previous, plan, moves.get(key, []), unmet.get(key, none),
                    unplaced.get(key, 0), out)
    _moves(fleet, components, previous, plan, targets, unmet, before, out)
    out.sort(key=lambda f: (f.component, f.breach.value, f.cluster or "", f.detail))
    return out


def _component(fleet: _Fleet, c: Component, targets: Mapping[str, Mapping[str, int]], unmet: set[GoalKind],
               unplaced: int, plan: Plan, previous: CurrentPlacement, out: list[Finding]) -> None:
    key = c.key
    want = fleet.wanted(c)
    where = {name: n for name, n in targets.get(key, {}).items() if n > 0}
    if sum(where.values()) + unplaced != want:
        out.append(Finding(Breach.COUNT, key, f"{sum(where.values())} placed + {unplaced} unplaced, "
                                              f"{want} wanted"))
    if unplaced and not unmet:
        out.append(Finding(Breach.UNLISTED, key, f"{unplaced} replica(s) unplaced, no goal listed", goal="capacity"))

    def need(goal: GoalKind, name: str | None, detail: str) -> None:
        if goal not in unmet:
            out.append(Finding(Breach.UNLISTED, key, detail, cluster=name, goal=goal))

    for name, n in where.items():
        if not fleet.declared(name):
            out.append(Finding(Breach.UNKNOWN_CLUSTER, key, f"{n} replica(s) on an undeclared cluster", cluster=name))
            continue
        if c.kind == "DaemonSet" and n > 1:
            out.append(Finding(Breach.COUNT, key, f"a DaemonSet with {n} copies on one cluster", cluster=name))
        if fleet.failed(name):
            need("health", name, "replicas on a failed cluster")
            continue
        if fleet.cordoned(name):
            ran = previous.placements.get(key, {}).get(name, 0) + previous.draining.get(key, {}).get(name, 0)
            if n > ran:
                out.append(Finding(Breach.CORDONED, key, f"{n} replica(s) where {ran} ran", cluster=name))
        if fleet.not_running(key, name):
            need("health", name, "kept where it does not run")
        for goal in fleet.goal_filters(c, name, want):
            need(goal, name, f"the cluster breaks its {goal} goal")
        if not fleet.holds_one(c, name) and not fleet.cordoned(name):  # cordoned: what runs there stays
            need("capacity", name, "no node holds one replica")
        if fleet.outside_envelope(c, name):
            need("latency", name, "outside the latency envelope")
        for anchor in c.colocate_with:
            if not targets.get(anchor, {}).get(name):
                need("selector", name, f"not beside {anchor} (colocateWith)")
    alive = [n for name, n in where.items() if fleet.declared(name) and not fleet.failed(name)]
    min_clusters = c.qos.availability.min_clusters
    if want and len(alive) < min_clusters and (alive or min_clusters > 1):
        need("availability", None, f"on {len(alive)} cluster(s), minClusters {min_clusters}")
    if c.qos.availability.spread and alive and max(alive) - min(alive) > 1:
        need("spread", None, f"counts {sorted(alive)} differ by more than 1")
    used = [name for name, n in where.items() if fleet.declared(name) and not fleet.failed(name)]
    for g in c.qos.latency:
        if g.serve == "nearest" and used and all(fleet.latency(name, g.region) > g.max_ms for name in used):
            need("latency", None, f"no replica within {g.max_ms:g} ms of {g.region}")
    s = c.qos.scaling
    if s is not None and c.kind not in ("DaemonSet", "Job", "CronJob"):
        if _replicas_for(fleet.rps.get(key, 0.0), s.target_rps_per_replica) > s.max_replicas:
            need("scaling", None, "traffic needs more than maxReplicas")
    cp = plan.components.get(key)
    if cp is not None and c.qos.availability.spread and len(alive) > 1 and max(alive) - min(alive) > 1:
        for a in cp.assignments:
            if "shared evenly" in a.reason:
                out.append(Finding(Breach.EXPLANATION, key, f"'{a.reason}' but counts {sorted(alive)}",
                                   cluster=a.cluster))


def _capacity(fleet: _Fleet, components: Mapping[str, Component], plan: Plan, previous: CurrentPlacement,
              unmet: Mapping[str, set[GoalKind]], out: list[Finding]) -> None:
    """Every live, uncordoned cluster holds what the plan runs there (target and draining)."""
    load: dict[str, dict[str, int]] = {}
    before: dict[str, dict[str, int]] = {}
    for key, cp in plan.components.items():
        for name, n in _running_on(cp).items():
            load.setdefault(name, {})[key] = n
    for table in (previous.placements, previous.draining):
        for key, where in table.items():
            for name, n in where.items():
                before.setdefault(name, {})[key] = before.get(name, {}).get(key, 0) + n
    for name, per in sorted(load.items()):
        if not fleet.declared(name) or fleet.failed(name) or fleet.cordoned(name):
            continue
        known = {k: n for k, n in per.items() if k in components}
        if any("capacity" in unmet.get(k, set()) or "health" in unmet.get(k, set()) for k in known):
            continue  # said: something waits there for capacity it lost
        cpu = sum(components[k].cpu * n for k, n in known.items())
        memory = sum(components[k].memory * n for k, n in known.items())
        oc = fleet.observed.cluster(name) if name in fleet.observed.clusters else None
        if oc is None:
            spec = fleet.goals.clusters[name].spec
            limit = (sum(s.cpu * s.count for s in spec.nodes), sum(s.memory * s.count for s in spec.nodes))
        elif oc.nodes is not None and all(n.allocatable is not None for n in oc.nodes):
            have = [(n.allocatable.cpu, n.allocatable.memory) for n in oc.nodes if n.ready and n.allocatable]
            limit = (sum(a for a, _ in have), sum(b for _, b in have))
        elif oc.nodes is not None or oc.free is not None:
            # Only free capacity is known (net of what runs): what is added must fit in it
            # plus what left.
            free = oc.free if oc.free is not None else None
            free_cpu = free.cpu if free else sum(n.free.cpu for n in oc.nodes or () if n.ready)
            free_memory = free.memory if free else sum(n.free.memory for n in oc.nodes or () if n.ready)
            was = before.get(name, {})
            cpu = sum(components[k].cpu * max(0, n - was.get(k, 0)) for k, n in known.items())
            memory = sum(components[k].memory * max(0, n - was.get(k, 0)) for k, n in known.items())
            gone = [(k, n - known.get(k, 0)) for k, n in was.items() if k in components and n > known.get(k, 0)]
            limit = (free_cpu + sum(components[k].cpu * n for k, n in gone),
                     free_memory + sum(components[k].memory * n for k, n in gone))
        else:
            spec = fleet.goals.clusters[name].spec
            limit = (sum(s.cpu * s.count for s in spec.nodes), sum(s.memory * s.count for s in spec.nodes))
        if cpu > limit[0] or memory > limit[1]:
            out.append(Finding(Breach.OVERCOMMIT, ", ".join(sorted(known)), f"needs {cpu}m CPU and {memory} bytes, "
                               f"holds {limit[0]}m and {limit[1]}", cluster=name, goal="capacity"))


def _room(fleet: _Fleet, components: Mapping[str, Component], plan: Plan, previous: CurrentPlacement,
          unplaced: Mapping[str, int], out: list[Finding]) -> None:
    """Unplaced replicas of a component that ran before, its own rules not holding them
    back (offloading and bursting on, no spread, colocation or region coverage rule),
    while a declared cluster that passes every filter has room for one: first fit
    decreasing of what the plan runs there leaves a node with the room (a packing that
    exists, so the room does). Only clusters that take nothing new in this plan are
    judged: what a cycle places from scratch is packed in the order it is decided, a
    model the next cycle settles again."""
    if not unplaced:
        return
    load: dict[str, list[tuple[int, int, frozenset[str]]]] = {}
    grew: set[str] = set()
    for key, cp in plan.components.items():
        c = components.get(key)
        if c is None:
            continue
        for name, n in _running_on(cp).items():
            load.setdefault(name, []).extend([(c.cpu, c.memory, c.architectures)] * n)
            if n > previous.placements.get(key, {}).get(name, 0) + previous.draining.get(key, {}).get(name, 0):
                grew.add(name)
    for key, n in sorted(unplaced.items()):
        c = components.get(key)
        if (c is None or not n or key not in previous.placements or not c.qos.offloading or not c.qos.bursting
                or c.qos.availability.spread or c.kind == "DaemonSet" or c.colocate_with
                or any(g.serve == "nearest" for g in c.qos.latency)):
            continue
        want = fleet.wanted(c)
        for name in fleet.goals.clusters:
            oc = fleet.observed.clusters.get(name)
            if (name in grew or fleet.failed(name) or fleet.cordoned(name)
                    or (oc is not None and (oc.nodes is not None or oc.free is not None))
                    or fleet.not_running(key, name) or fleet.goal_filters(c, name, want)
                    or fleet.outside_envelope(c, name) or not fleet.holds_one(c, name)):
                continue
            if _packs_one_more(fleet.goals.clusters[name], load.get(name, []), c):
                out.append(Finding(Breach.ROOM, key, f"{n} replica(s) unplaced; room for one here", cluster=name,
                                   goal="capacity"))
                break


def _running_on(cp: ComponentPlan) -> dict[str, int]:
    """What a component's plan runs per cluster, draining replicas included."""
    out = {a.cluster: a.replicas for a in cp.assignments if a.replicas > 0}
    for d in cp.draining:
        out[d.cluster] = out.get(d.cluster, 0) + d.replicas
    return out


@dataclass
class _Room:
    cpu: int
    memory: int
    pods: int
    arch: str

    def takes(self, cpu: int, memory: int, archs: frozenset[str]) -> bool:
        return self.arch in archs and self.cpu >= cpu and self.memory >= memory and self.pods >= 1


def _packs_one_more(cluster: Cluster, load: list[tuple[int, int, frozenset[str]]], c: Component) -> bool:
    """First fit decreasing of ``load`` on the cluster's declared nodes, then one replica of ``c``."""
    if sum(s.count for s in cluster.spec.nodes) > 256:
        return False  # a large pool: not judged here
    nodes = [_Room(s.cpu, s.memory, s.pods, s.arch) for s in cluster.spec.nodes for _ in range(s.count)]
    for cpu, memory, archs in sorted(load, key=lambda r: (len(r[2]), -r[0], -r[1])):
        node = next((n for n in nodes if n.takes(cpu, memory, archs)), None)
        if node is None:
            return False  # the model does not pack what runs: no judgement
        node.cpu -= cpu
        node.memory -= memory
        node.pods -= 1
    return any(n.takes(c.cpu, c.memory, c.architectures) for n in nodes)


def _continuity(fleet: _Fleet, c: Component | None, key: str, previous: CurrentPlacement, plan: Plan,
                moves: list[Move], unmet: set[GoalKind], unplaced: int, out: list[Finding]) -> None:
    """Replicas that ran (placed or draining) either still run, moved with a move that says
    so, or are reported (unplaced, unmet); a drain ends only once its replacement runs."""
    prev_t = {k: n for k, n in previous.placements.get(key, {}).items() if n > 0}
    prev_d = {k: n for k, n in previous.draining.get(key, {}).items() if n > 0}
    if not prev_t and not prev_d:
        return  # nothing ran: nothing can have disappeared
    cp = plan.components.get(key)
    new_t = {a.cluster: a.replicas for a in cp.assignments if a.replicas > 0} if cp else {}
    new_d = {d.cluster: d.replicas for d in cp.draining} if cp else {}
    gone = c is None or (c.kind in ("Job", "CronJob") and key in fleet.completed)
    if gone:
        for name in sorted(set(prev_t) | set(prev_d)):
            n = prev_t.get(name, 0) + prev_d.get(name, 0)
            said = sum(m.replicas for m in moves if m.source == name and m.reason == "removed")
            if said < n and not fleet.failed(name):
                out.append(Finding(Breach.VANISHED, key, f"{n - said} of {n} replica(s) of a removed component "
                                                         "left without a move", cluster=name))
        return
    assert c is not None
    want = fleet.wanted(c)
    # Moves that may end replicas at once: to nowhere (scale-down, removal), off a gone
    # cluster, or replicas that no longer fit there. Everything else is make before break.
    at_once: dict[str, int] = {}
    for m in moves:
        if m.source is None:
            continue
        if m.target is None or fleet.failed(m.source) or m.goal == "capacity":
            at_once[m.source] = at_once.get(m.source, 0) + m.replicas
    running = sum(n for name, n in prev_t.items() if fleet.running(key, name, n))
    required = max(0, want - running)  # drains that must go on: their replacement does not run
    may_end = max(0, sum(prev_d.values()) - required)
    ended = lost = 0
    for name in prev_t.keys() | prev_d.keys():
        before = prev_t.get(name, 0) + prev_d.get(name, 0)
        after = new_t.get(name, 0) + new_d.get(name, 0)
        if fleet.failed(name):
            # Gone with their cluster: the target's replicas are replaced or reported; the
            # drains end as drains do, or are reported.
            moved = sum(m.replicas for m in moves if m.source == name)
            missing = max(0, prev_t.get(name, 0) - new_t.get(name, 0)) - moved
            if missing > 0 and not unplaced and not unmet:
                out.append(Finding(Breach.VANISHED, key, f"{missing} replica(s) on a failed cluster neither "
                                                         "replaced nor reported", cluster=name))
            lost += max(0, prev_d.get(name, 0) - max(0, -missing))  # drains a failover move did not replace
            continue
        if after >= before:
            continue
        left = before - after - at_once.get(name, 0)
        ended += max(0, min(left, prev_d.get(name, 0)))
        from_target = left - min(left, prev_d.get(name, 0))
        if from_target > 0:
            out.append(Finding(Breach.DRAIN, key, f"{from_target} replica(s) left without draining "
                                                  "(make before break)", cluster=name))
    if ended > may_end or (ended + lost > may_end and not unplaced and not unmet):
        out.append(Finding(Breach.DRAIN, key, f"{ended + lost} draining replica(s) ended ({lost} with their "
                                              f"cluster), {running} of {want} wanted run elsewhere"))


def _moves(fleet: _Fleet, components: Mapping[str, Component], previous: CurrentPlacement, plan: Plan,
           targets: Mapping[str, Mapping[str, int]], unmet: Mapping[str, set[GoalKind]], before: Plan | None,
           out: list[Finding]) -> None:
    """Each move's reason and goal against what changed; optimisations against the rules."""
    for m in plan.moves:
        key = m.component
        c = components.get(key)
        ran = bool(previous.placements.get(key)) or bool(previous.draining.get(key))
        if m.reason == "new" and any(n > 0 for table in (previous.placements, previous.draining)
                                     for n in table.get(key, {}).values()):
            out.append(Finding(Breach.EXPLANATION, key, "'new' for a component that ran or drained before",
                               cluster=m.target))
        if m.reason == "removed":
            if c is not None and not (c.kind in ("Job", "CronJob") and key in fleet.completed):
                out.append(Finding(Breach.EXPLANATION, key, "'removed' for a component in the goals"))
            continue
        if c is None:
            out.append(Finding(Breach.EXPLANATION, key, f"a {m.reason} move of a component not in the goals"))
            continue
        if m.reason == "scaling" and c.qos.scaling is None:
            out.append(Finding(Breach.EXPLANATION, key, "'scaling' for a component without qos.scaling"))
        if m.source is not None:
            _claim(fleet, c, m.source, m.goal, f"move to {m.target}", targets, out)
        if m.reason == "failover" and m.source is not None and m.goal not in ("health", "capacity"):
            out.append(Finding(Breach.EXPLANATION, key, f"failover for goal {m.goal}", cluster=m.source))
        if m.reason == "rescheduling" and m.goal is None and ran:
            _optimisation(fleet, c, m.source, m.target, m.replicas, previous, plan, unmet.get(key, set()), before, out)
    for key, cp in plan.components.items():
        c = components.get(key)
        if c is None or not cp.draining:
            continue
        for d in cp.draining:
            _claim(fleet, c, d.cluster, d.goal, "drain", targets, out)


def _claim(fleet: _Fleet, c: Component, source: str, goal: GoalKind | None, what: str,
           targets: Mapping[str, Mapping[str, int]], out: list[Finding]) -> None:
    """A move or drain naming a goal: the source cluster breaks it now (``selector``: or what
    the component runs beside (colocateWith) does not run there in this plan)."""
    if goal is None or not fleet.declared(source):
        return
    if goal in ("tier", "selector", "architecture", "cost"):
        apart = goal == "selector" and any(not targets.get(anchor, {}).get(source) for anchor in c.colocate_with)
        if not apart and goal not in fleet.goal_filters(c, source, fleet.wanted(c)):
            out.append(Finding(Breach.EXPLANATION, c.key, f"{what}: says {source} breaks its {goal} goal; it does not",
                               cluster=source, goal=goal))
    elif goal == "health":
        if not (fleet.failed(source) or fleet.cordoned(source) or fleet.not_running(c.key, source)):
            out.append(Finding(Breach.EXPLANATION, c.key, f"{what}: says {source} is unhealthy or does not run it",
                               cluster=source, goal=goal))
    elif goal == "latency":
        nearest = [g for g in c.qos.latency if g.serve == "nearest"]
        if not fleet.outside_envelope(c, source) and not nearest:
            out.append(Finding(Breach.EXPLANATION, c.key, f"{what}: says {source} breaks the latency envelope",
                               cluster=source, goal=goal))


def _optimisation(fleet: _Fleet, c: Component, source: str | None, target: str | None, replicas: int,
                  previous: CurrentPlacement, plan: Plan, unmet: set[GoalKind], before: Plan | None,
                  out: list[Finding]) -> None:
    """A rescheduling that is an optimisation: out of the cooldown, within the budget, no
    goal that held broken by it, and (with the plan it started from) a better score."""
    key = c.key
    moved = previous.last_moved.get(key)
    if moved is not None and (fleet.observed.now - moved).total_seconds() < c.stability.cooldown_seconds - EPSILON:
        out.append(Finding(Breach.MOVE, key, "an optimisation inside the cooldown", cluster=source))
    if replicas > c.stability.disruption_budget:
        out.append(Finding(Breach.MOVE, key, f"{replicas} replicas moved, budget {c.stability.disruption_budget}",
                           cluster=source))
    if before is not None:
        had = {u.goal for u in before.unmet if u.component == key}
        for goal in sorted(unmet - had):
            out.append(Finding(Breach.MOVE, key, f"an optimisation that breaks its {goal} goal", goal=goal))
        old = _score_at(before, key, source)
        new = _score_at(plan, key, target)
        if old is not None and new is not None and new > old + EPSILON:
            out.append(Finding(Breach.MOVE, key, f"moves from {source} (score {old:g}) to {target} (score {new:g})",
                               cluster=target))


def _score_at(p: Plan, key: str, cluster: str | None) -> float | None:
    cp = p.components.get(key)
    if cp is None or cluster is None:
        return None
    return next((a.score for a in cp.assignments if a.cluster == cluster and a.score is not None), None)


def problems(findings: Iterable[Finding]) -> str:
    """The findings as lines, for an assertion message."""
    return "\n".join(str(f) for f in findings)
