"""What one planning cycle works on: the fleet as seen now, the ledger of capacity with
every running replica charged at today's size, the evaluator, and one ``Work`` record
per component. Built once per ``plan()`` call; the stages read and update it."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from qonnect_gitops.model.goals import Component, Goals
from qonnect_gitops.model.observed import Observed, ObservedWorkload
from qonnect_gitops.model.plan import ComponentPlan, CurrentPlacement, ReplicaRequest
from qonnect_gitops.model.status import WorkloadState
from qonnect_gitops.placement.capacity import DeclaredCapacity, Ledger, Running, held
from qonnect_gitops.placement.carry import (
    DRAINING,
    Carry,
    changed_keys,
    clusters_named,
    is_quiet,
    owner,
    quiet_until,
)
from qonnect_gitops.placement.distribute import Offload
from qonnect_gitops.placement.evaluate import (
    EvalCaches,
    Evaluator,
    QosClasses,
    desired_replicas,
    goal_index,
)
from qonnect_gitops.placement.fleet import build_view
from qonnect_gitops.placement.improve import local_cost
from qonnect_gitops.placement.plugins.closeness import CLOSENESS_WEIGHT
from qonnect_gitops.placement.records import Cause, CauseKind, Keep, KeepKind, Run, Work

ANY_ARCH = frozenset({"amd64", "arm64"})


@dataclass(frozen=True)
class Removal:
    """A component that left the goals (or a Job that completed): its replicas go."""

    key: str
    where: dict[str, int]
    cause: Cause


class MovedAt:
    """When each component last moved (Unix time), converted when first asked for."""

    def __init__(self, last_moved: dict[str, datetime]) -> None:
        self.last_moved = last_moved
        self.stamps: dict[datetime, float] = {}  # most components share a few move times

    def get(self, key: str) -> float | None:
        when = self.last_moved.get(key)
        if when is None:
            return None
        ts = self.stamps.get(when)
        if ts is None:
            ts = self.stamps[when] = when.timestamp()
        return ts


class Cycle:
    """Shared state of one planning cycle."""

    def __init__(self, goals: Goals, observed: Observed, current: CurrentPlacement) -> None:
        self.goals = goals
        self.observed = observed
        self.current = current
        self.now = observed.now.timestamp()
        self.moved_at = MovedAt(current.last_moved)
        self.cooling: dict[float, Keep] = {}  # one Keep per cooldown end
        index = goal_index(goals)
        self.static = index.fleet
        self.memo = index.memo  # for cycles of these goals
        self.fleet_memo = index.fleet_memo  # for cycles of any goals with this fleet
        self.components = index.components
        self.calls = index.calls
        self.callers = index.callers
        self.fleet = build_view(self.static, goals, observed)
        settled = self.fleet_memo.setdefault("settled", {})
        settled_last = self.fleet_memo.setdefault("settled_last", {})
        declared = self.fleet_memo.get("declared")
        if not isinstance(declared, DeclaredCapacity):
            declared = self.fleet_memo["declared"] = DeclaredCapacity.of(self.static)
        self.ledger = Ledger(self.static, goals, observed, settled, settled_last, declared)  # type: ignore[arg-type]
        self.healthy: list[bool] = self.fleet.healthy.tolist()  # not gone: failover otherwise
        self.placeable: list[bool] = self.fleet.placeable.tolist()  # takes new replicas
        traffic: dict[str, dict[int, float]] = {}
        for t in sorted(observed.traffic, key=lambda t: (t.component, t.region, t.rps)):
            region = self.static.region_index.get(t.region)
            if region is None:
                continue
            per = traffic.setdefault(t.component, {})
            per[region] = per.get(region, 0.0) + t.rps
        self.traffic = traffic
        self.completed = set(observed.completed_jobs)
        self.workloads: dict[str, tuple[ObservedWorkload, ...]] = {}
        for w in observed.workloads:
            self.workloads[w.component] = (*self.workloads.get(w.component, ()), w)
        # Per component, the clusters where it was placed and observed not running, with
        # the workload's reason.
        self.not_running: dict[str, dict[int, str | None]] = {}
        for w in observed.workloads:
            i = self.static.index.get(w.cluster)
            if w.state == WorkloadState.NOT_RUNNING and i is not None:
                self.not_running.setdefault(w.component, {})[i] = w.reason
        # Decided placement so far (cluster index -> replicas), for closeness.
        self.placement: dict[str, dict[int, int]] = {}
        self.latency_token = self._latency_token()
        self.evaluator = Evaluator(goals, self.fleet, self.ledger, traffic, self.placement, self.callers,
                                   self._evaluator_caches(), self._qos_classes())
        self.works: dict[str, Work] = {}
        self.removed: list[Removal] = []
        # Per cluster, the running replicas charged to the ledger (the next cycle's carry).
        self.charges: dict[int, list[Running]] = {}
        # Clusters whose charges were built anew (None: all of them, a cycle from nothing).
        self.touched: set[int] | None = None
        # The components decided in this cycle; the others are carried verbatim from the
        # last cycle (``carry.py``). None: every component (a cycle from nothing).
        self.decided: set[str] | None = None
        self.carry: Carry | None = None
        # Rescheduling's offloads remembered by the last cycle, and those of this one.
        self.offloads_before: dict[str, Offload] = {}
        self.offloads: dict[str, Offload] = {}
        self.offloads_reused = 0
        self._settled_anew: np.ndarray | None = None
        self.changed_clusters: set[int] = set()  # health or report changed since the last cycle
        self.last_moved_base: dict[str, datetime] | None = None  # set by ``explain.assemble``
        # Taken out: a cycle that fails half way leaves none behind (``remember`` puts it back).
        entry = self.fleet_memo.pop("carry", None)
        if isinstance(entry, Carry) and self._may_carry(entry):
            self._carry_works(entry)
        else:
            self._build_works()

    # ----- set-up ---------------------------------------------------------------------------

    def _removals(self) -> None:
        """Components that left the goals (or Jobs that completed): their replicas go,
        draining ones too."""
        placements, draining = self.current.placements, self.current.draining
        keys = placements.keys() | draining.keys()
        gone = (keys - self.components.keys()) | (keys & self.completed)
        for key in sorted(gone):
            kind = CauseKind.COMPLETED if key in self.completed else CauseKind.GONE
            where = dict(placements.get(key, {}))
            for name, n in draining.get(key, {}).items():
                where[name] = where.get(name, 0) + n
            self.removed.append(Removal(key, {k: n for k, n in sorted(where.items()) if n > 0}, Cause(kind)))

    def _build_works(self) -> None:
        """One ``Work`` per component, its running replicas charged to the ledger."""
        self._removals()
        for key, component in self.components.items():
            if key in self.completed:
                continue
            self.works[key] = self._work(key, component, charge=True)
        self.ledger.settle_all()

    def _work(self, key: str, component: Component, charge: bool) -> Work:
        """A component's ``Work`` from its placement in force; with ``charge`` its running
        replicas are charged to the ledger (and recorded in ``charges``)."""
        index = self.static.index
        replicas, scaled = desired_replicas(component, self.rps(key))
        work = Work(component, key, replicas, scaled, {})
        work.seen = key in self.current.requests or key in self.current.last_moved
        stalled = self.not_running.get(key)
        if stalled:
            # Where it was sent and does not run: not placed there again either.
            work.stalled = {i: note or self._cordon_reason(i) for i, note in stalled.items()}
        if key not in self.current.placements and key not in self.current.draining:
            return work  # new: nothing runs, nothing to charge (a first plan's components)
        old = self.current.requests.get(key)
        resized = old is not None and (old.cpu, old.memory) != (component.cpu, component.memory)
        running = 0  # replicas of the placement in force that run (their drains may end)
        for name, count in sorted(self.current.placements.get(key, {}).items()):
            if count <= 0:
                continue
            i = index.get(name)
            if i is None:
                work.undeclared[name] = count  # the cluster left the goals
                continue
            work.current[i] = count
            if not self.healthy[i]:
                continue
            if self.run_state(key, i, count) == Run.RUNNING:
                running += count
            if charge:
                # Replicas that run now hold their capacity at today's size (make
                # before break: also those about to move, until they are replaced).
                self._occupy(i, self._running(component, key, count, old, resized, i))
        # Draining replicas run on only while the replicas wanted outnumber those that run
        # in place (``repair`` keeps no more): until their replacement runs. The others
        # were replaced and free their capacity in this cycle, not the next.
        short = replicas - running
        gone: list[tuple[str, int]] = []
        for name, count in sorted(self.current.draining.get(key, {}).items()):
            i = index.get(name)
            if count <= 0:
                continue
            if i is None or not self.healthy[i]:
                gone.append((name, count))
                continue
            count = min(count, short)
            if count <= 0:
                continue
            short -= count
            work.drained[i] = count
            if charge:
                self._occupy(i, self._running(component, key + DRAINING, count, old, resized, i))
        for name, count in gone:  # their cluster is gone: they are lost, and said so
            count = min(count, short)
            if count > 0:
                short -= count
                work.lost[name] = count
        return work

    def run_state(self, key: str, cluster: int, replicas: int) -> Run:
        """Whether ``replicas`` of a component placed on a live cluster run there: as the
        agent reports it (Running with as many ready), or, not observed, as long as the
        cluster is not cordoned (what was sent to a cordoned cluster may not be applied)."""
        w = self.observed.workload(key, self.static.names[cluster]) if self.observed.workloads else None
        if w is None:
            return Run.PENDING if not self.placeable[cluster] else Run.RUNNING
        if w.state == WorkloadState.NOT_RUNNING:
            return Run.NOT_RUNNING
        if w.state == WorkloadState.RUNNING and w.ready_replicas >= replicas:
            return Run.RUNNING
        return Run.PENDING

    def _cordon_reason(self, cluster: int) -> str | None:
        cordon = self.fleet.cordons.get(cluster)
        return cordon.reason if cordon is not None else None

    def _occupy(self, cluster: int, running: Running) -> None:
        self.ledger.occupy(cluster, running)
        self.charges.setdefault(cluster, []).append(running)

    # ----- carried from the last cycle ------------------------------------------------------

    def _may_carry(self, carry: Carry) -> bool:
        """Whether the last cycle's results may be reused at all: the same fleet arrays,
        latency tables and node shapes (every mask and score reads them), and time that
        went forward."""
        return (
            carry.static is self.static
            and carry.latency_token is self.latency_token
            and carry.shapes == tuple(self.ledger.shapes)
            and carry.now <= self.now
        )

    def _carry_works(self, carry: Carry) -> None:
        """``_build_works`` for a cycle that follows ``carry``: only the components whose
        inputs changed (and the components around them) are built anew; the quiet rest
        keep their ``Work`` verbatim, their running replicas charged as the last cycle
        charged them (see ``carry.py``)."""
        index = self.static.index
        cur, old = self.current, carry.current
        # 1. Components whose own inputs changed.
        dirty = changed_keys(carry.components, self.components)
        for new_table, old_table in ((cur.placements, old.placements), (cur.draining, old.draining),
                                     (cur.requests, old.requests), (cur.last_moved, old.last_moved)):
            dirty |= changed_keys(old_table, new_table)
        dirty |= changed_keys(carry.traffic, self.traffic)
        dirty |= changed_keys(carry.workloads, self.workloads)
        dirty |= carry.completed ^ self.completed
        dirty |= carry.unquiet if carry.components is self.components else self.components.keys() - carry.quiet.keys()
        if carry.until and min(carry.until.values()) <= self.now:  # mostly none has ended
            dirty.update(k for k, until in carry.until.items() if until <= self.now)
        # Components kept by rescheduling's bound: decided anew where their floor moved.
        ev = self.evaluator
        moved = {key for key, (floor, c, replicas) in carry.floors.items()
                 if ev.static_floor(ev.context(c, replicas)) != floor}
        if moved:
            dirty.update(k for k, key in carry.bounds.items() if key in moved)
        # Clusters whose health or report changed: whatever runs there is decided anew.
        reports = self.observed.clusters
        changed_clusters = {i for i, (a, b) in enumerate(zip(carry.healthy, self.healthy)) if a != b}
        changed_clusters.update(i for i, (a, b) in enumerate(zip(carry.placeable, self.placeable)) if a != b)
        if reports is not carry.reports:
            # What the ledger reads of a report (health is compared above; a heartbeat's
            # age changes every cycle and matters only through it).
            for name in reports.keys() | carry.reports.keys():
                a, b = reports.get(name), carry.reports.get(name)
                same = (a is b or (a is not None and b is not None and a.free == b.free and a.nodes == b.nodes
                                   and a.state == b.state and a.reason == b.reason)
                        or (a is None and b is not None and b.free is None and b.nodes is None and b.state is None)
                        or (b is None and a is not None and a.free is None and a.nodes is None and a.state is None))
                if not same and name in index:
                    changed_clusters.add(index[name])
        for i in changed_clusters:
            dirty.update(owner(r.key) for r in carry.charges.get(i, ()))
        if self.components.keys() <= dirty:
            # Every component is decided anew (the cycle after a decision that placed them
            # all): a cycle from nothing plans the same (``carry.py``) without the work of
            # telling the carried from the rest.
            self._build_works()
            return
        self.changed_clusters = changed_clusters
        # 2. The ledger: the quiet components' replicas as charged last cycle, the others'
        # charged anew. Clusters where a charge changed are settled anew.
        touched: set[int] = set(changed_clusters)
        for key in dirty:
            for table in (old.placements, old.draining):
                touched.update(clusters_named(table.get(key, {}), index))
        sums = carry.sums
        for cluster, runs in carry.charges.items():
            if cluster in touched:
                runs = [r for r in runs if owner(r.key) not in dirty]
                if runs:
                    self.ledger.occupy_all(cluster, runs)
            elif runs:
                self.ledger.occupy_all(cluster, runs, sums.get(cluster))
            if runs:
                self.charges[cluster] = list(runs)
        if cur is old and self._same_works(carry):
            self.removed = list(carry.removed)  # the same placement in force and goals: the same removals
        else:
            self._removals()
        built: dict[str, Work] = {}
        for key in sorted(dirty):
            component = self.components.get(key)
            if component is None or key in self.completed:
                continue
            work = built[key] = self._work(key, component, charge=True)
            touched.update(work.current)
            touched.update(work.drained)
        self.touched = touched
        self.ledger.settle_all()
        # 3. A quiet component on a cluster settled anew still passes only if every
        # replica still fits there (inspect); its neighbours' explanations read its place.
        again: set[str] = set()
        fitted = self.ledger.fitted
        for cluster in touched:
            for r in self.charges.get(cluster, ()):
                key = r.key
                if key in carry.quiet and key not in dirty and fitted.get((cluster, key), 0) < r.replicas:
                    again.add(key)
        dirty |= again
        around: set[str] = set()
        for key in dirty:
            around.update(self.calls.get(key, ()))
            around.update(self.callers.get(key, ()))
            previous = carry.components.get(key)
            if previous is not None:
                around.update(previous.calls)  # whom it called before an edit
        for key in sorted((again | around) - built.keys()):
            component = self.components.get(key)
            if component is None or key in self.completed:
                continue
            built[key] = self._work(key, component, charge=False)  # charged as last cycle
        self.decided = set(built)
        if built.keys() <= carry.works.keys():
            # The last cycle's table (in key order) with what was decided anew put in.
            works = dict(carry.works)
            if not self._same_works(carry):
                for key in (carry.works.keys() - self.components.keys()) | (carry.works.keys() & self.completed):
                    del works[key]
            works.update(built)
            self.works = works
        else:
            quiet = carry.quiet
            for key in self.components:
                if key not in self.completed:
                    self.works[key] = built[key] if key in built else quiet[key]
        self.carry = carry
        self.offloads_before = carry.offloads

    def _running(self, c: Component, key: str, count: int, old: ReplicaRequest | None, resized: bool,
                 cluster: int) -> Running:
        """Running replicas to charge, at today's size; ``old``: what the placement in force
        was sized at (with ``resized``, its size differs from today's)."""
        # Today's architectures where the cluster has nodes of them (rendering pins the
        # replicas there); on a cluster with none, replicas of a component whose
        # architectures the goals changed still run on nodes of the old ones until they are
        # replaced (any node, when the plan in force did not record them).
        archs = c.architectures
        if archs.isdisjoint(self.ledger.archs[cluster]):
            archs = frozenset(old.architectures) if old is not None and old.architectures is not None else ANY_ARCH
        if old is None or not resized:
            return Running(key, c.cpu, c.memory, archs, count)
        return Running(key, c.cpu, c.memory, archs, count, old_cpu=old.cpu, old_memory=old.memory)

    def _latency_token(self) -> object:
        """A token that stays the same while the observed latencies do (for memo keys)."""
        latencies = self.observed.latencies
        entry = self.fleet_memo.get("latencies")
        if isinstance(entry, tuple) and entry[0] == latencies:
            return entry[1]
        token = object()
        self.fleet_memo["latencies"] = (latencies, token)
        return token

    def _evaluator_caches(self) -> EvalCaches:
        """The evaluator's caches of the last cycle when it saw the same health,
        latencies and nodes (masks and static scores depend on nothing else); where
        only health differs, those of them that do not read it."""
        seen = (self.fleet.placeable.tobytes(), self.latency_token, tuple(self.ledger.shapes))
        entry = self.fleet_memo.get("evaluator")
        if isinstance(entry, tuple) and len(entry[1].pins) <= 4 * len(self.components) + 64:
            cached: EvalCaches = entry[1]
            if entry[0] == seen:
                return cached
            if entry[0][1:] == seen[1:]:
                # Only health changed (a failover, a return): what does not read it is kept.
                before = np.frombuffer(entry[0][0], dtype=bool)
                caches = cached.after_failures(before, self.fleet.placeable)
                self.fleet_memo["evaluator"] = (seen, caches)
                return caches
        caches = EvalCaches()
        self.fleet_memo["evaluator"] = (seen, caches)
        return caches

    def _qos_classes(self) -> QosClasses:
        """QoS content keys, kept for every cycle with this fleet (they depend on nothing
        observed); started afresh once it holds far more objects than the goals have."""
        classes = self.fleet_memo.get("qos")
        if not isinstance(classes, QosClasses) or len(classes.by_id) > 4 * len(self.components) + 64:
            classes = self.fleet_memo["qos"] = QosClasses()
        return classes

    def remember(self, plans: dict[str, ComponentPlan]) -> None:
        """Leave this cycle's inputs and quiet results for the next cycle (``carry.py``);
        ``plans``: the components of the plan it made."""
        carry = self.carry
        if carry is None:
            quiet: dict[str, Work] = {}
            until: dict[str, float] = {}
            bounds: dict[str, Hashable] = {}
            floors: dict[Hashable, tuple[float, Component, int]] = {}
            decided: Iterable[Work] = self.works.values()
            targets = {}
        else:
            # Taken over: the old carry is gone.
            quiet, until, bounds, floors = carry.quiet, carry.until, carry.bounds, carry.floors
            targets = carry.targets
            gone = set(self.completed)
            if carry.components is not self.components:
                gone |= carry.components.keys() - self.components.keys()
            for key in (self.decided or set()) | gone:
                quiet.pop(key, None)
                until.pop(key, None)
                bounds.pop(key, None)
                targets.pop(key, None)
            decided = self.decided_works()
        healthy = self.healthy
        ev = self.evaluator
        same = carry is not None and carry.components is self.components
        unquiet = carry.unquiet if carry is not None and same else set()
        if same:
            unquiet.update(self.completed & self.components.keys())  # taken out of quiet above
        for work in decided:
            targets[work.key] = work.target
            if same:
                unquiet.add(work.key)  # taken out below if it is quiet
            if is_quiet(work, healthy):
                unquiet.discard(work.key)
                quiet[work.key] = work
                until[work.key] = quiet_until(work)
                if work.keep is not None and work.keep.kind == KeepKind.NO_GAIN_BOUND:
                    ctx = ev.context(work.component, work.replicas)
                    floor_key = bounds[work.key] = ev.floor_key(ctx)
                    floors[floor_key] = (ev.static_floor(ctx), work.component, work.replicas)
        # Per cluster the CPU and memory its charges hold (what ``occupy_all`` subtracts).
        if carry is None or self.touched is None:
            sums = {cluster: held(runs) for cluster, runs in self.charges.items()}
        else:
            sums = carry.sums
            for cluster in self.touched:
                runs = self.charges.get(cluster)
                if runs:
                    sums[cluster] = held(runs)
                else:
                    sums.pop(cluster, None)
        self.fleet_memo["carry"] = Carry(
            static=self.static, latency_token=self.latency_token, shapes=tuple(self.ledger.shapes),
            components=self.components, current=self.current, healthy=healthy, placeable=self.placeable,
            reports=self.observed.clusters, workloads=self.workloads, traffic=self.traffic,
            completed=self.completed, now=self.now,
            quiet=quiet, until=until, charges=self.charges, plans=dict(plans), bounds=bounds, floors=floors,
            carried=0 if self.decided is None else len(self.works) - len(self.decided), works=self.works,
            sums=sums, offloads=self.offloads, offloads_reused=self.offloads_reused,
            last_moved_base=self.last_moved_base, removed=self.removed, targets=targets,
            unquiet=unquiet if same else set(self.components.keys() - quiet.keys()),
        )

    # ----- questions -----------------------------------------------------------------------

    def carried_placement(self) -> dict[str, dict[int, int]]:
        """The placement map of the components this cycle carries (not decided in it):
        each one's target as the last cycle left it, taken from ``Carry.targets``
        rather than from every ``Work`` of the fleet. Only for a carried cycle."""
        assert self.carry is not None and self.decided is not None
        targets = dict(self.carry.targets)
        for key in self.decided:
            targets.pop(key, None)
        if len(targets) != len(self.works) - len(self.decided):
            # Components left the goals or completed (new ones are all decided).
            works = self.works
            for key in [k for k in targets if k not in works]:
                del targets[key]
        return targets

    def settled_anew(self) -> np.ndarray:
        """Per cluster: whether this cycle's ledger may have started differently there than
        the last cycle's: its health or report changed, or its charges were built anew and
        differ from the last cycle's (every cluster in a cycle from nothing). Elsewhere
        the same report, health and running replicas settled the same way."""
        if self._settled_anew is None:
            n = len(self.healthy)
            carry = self.carry
            if self.touched is None or carry is None:
                self._settled_anew = np.ones(n, dtype=bool)
            else:
                before = carry.charges
                anew = [i for i in self.touched
                        if i in self.changed_clusters or self.charges.get(i, []) != before.get(i, [])]
                self._settled_anew = np.zeros(n, dtype=bool)
                self._settled_anew[sorted(anew)] = True
        return self._settled_anew

    def same_works_as_carry(self) -> bool:
        """Whether this cycle works on the very components of the last one (the same goals
        object, the same completed Jobs): then its ``works`` and the last cycle's have the
        same keys, and no fleet-wide comparison of them is needed."""
        return self.carry is not None and self._same_works(self.carry)

    def _same_works(self, carry: Carry) -> bool:
        """``same_works_as_carry`` against ``carry`` (also while it is being taken over)."""
        return carry.components is self.components and carry.completed == self.completed

    def decided_works(self) -> list[Work]:
        """The components decided in this cycle, in key order (every one in a cycle from
        nothing; the others were carried verbatim)."""
        if self.decided is None:
            return list(self.works.values())
        return [self.works[key] for key in sorted(self.decided)]

    def rps(self, key: str) -> float | None:
        """Observed requests per second for a component, summed over regions."""
        per = self.traffic.get(key)
        return sum(per.values()) if per is not None else None

    def resized(self, work: Work) -> bool:
        """Whether the goals changed the component's per-replica request since the
        placement in force was made."""
        old = self.current.requests.get(work.key)
        c = work.component
        return old is not None and (old.cpu, old.memory) != (c.cpu, c.memory)

    def replicas(self) -> Callable[[str], int]:
        works = self.works
        return lambda key: works[key].replicas if key in works else 1

    def local_cost(self, work: Work, target: dict[int, int], static: np.ndarray) -> float:
        """The objective terms that involve this component, were it placed at ``target``."""
        return local_cost(
            work.key, target, work.replicas, static, self.placement,
            self.calls, self.callers, self.replicas(),
            self.fleet.cluster_latency, CLOSENESS_WEIGHT / self.fleet.latency_norm,
        )

