"""What one planning cycle works on: the fleet as seen now, the ledger of capacity with
every running replica charged at today's size, the evaluator, and one ``Work`` record
per component. Built once per ``plan()`` call; the stages read and update it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from qonnect_gitops.model.goals import Component, Goals
from qonnect_gitops.model.observed import Observed
from qonnect_gitops.model.plan import CurrentPlacement, ReplicaRequest
from qonnect_gitops.placement.capacity import Ledger, Running
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
from qonnect_gitops.placement.records import Cause, CauseKind, Keep, Work

DRAINING = "#draining"  # ledger key suffix: the previous plan's draining replicas


@dataclass(frozen=True)
class Removal:
    """A component that left the goals (or a Job that completed): its replicas go."""

    key: str
    where: dict[str, int]
    cause: Cause


class Cycle:
    """Shared state of one planning cycle."""

    def __init__(self, goals: Goals, observed: Observed, current: CurrentPlacement) -> None:
        self.goals = goals
        self.observed = observed
        self.current = current
        self.now = observed.now.timestamp()
        stamps: dict[datetime, float] = {}  # most components share a few move times
        self.moved_at: dict[str, float] = {}
        self.cooling: dict[float, Keep] = {}  # one Keep per cooldown end
        for key, when in current.last_moved.items():
            ts = stamps.get(when)
            if ts is None:
                ts = stamps[when] = when.timestamp()
            self.moved_at[key] = ts
        index = goal_index(goals)
        self.static = index.fleet
        self.memo = index.memo  # for cycles of these goals
        self.fleet_memo = index.fleet_memo  # for cycles of any goals with this fleet
        self.components = index.components
        self.calls = index.calls
        self.callers = index.callers
        self.fleet = build_view(self.static, goals, observed)
        settled = self.fleet_memo.setdefault("settled", {})
        self.ledger = Ledger(self.static, goals, observed, settled)  # type: ignore[arg-type]
        self.healthy: list[bool] = self.fleet.healthy.tolist()
        traffic: dict[str, dict[int, float]] = {}
        for t in sorted(observed.traffic, key=lambda t: (t.component, t.region, t.rps)):
            region = self.static.region_index.get(t.region)
            if region is None:
                continue
            per = traffic.setdefault(t.component, {})
            per[region] = per.get(region, 0.0) + t.rps
        self.traffic = traffic
        self.completed = set(observed.completed_jobs)
        # Decided placement so far (cluster index -> replicas), for closeness.
        self.placement: dict[str, dict[int, int]] = {}
        self.replicas_of: dict[str, int] = {}
        self.latency_token = self._latency_token()
        self.evaluator = Evaluator(goals, self.fleet, self.ledger, traffic, self.placement, self.callers,
                                   self._evaluator_caches(), self._qos_classes())
        self.works: dict[str, Work] = {}
        self.removed: list[Removal] = []
        self._build_works()

    # ----- set-up ---------------------------------------------------------------------------

    def _build_works(self) -> None:
        """One ``Work`` per component, its running replicas charged to the ledger."""
        index = self.static.index
        placements = self.current.placements
        for key, where in sorted(placements.items()):
            if key not in self.components or key in self.completed:
                kind = CauseKind.COMPLETED if key in self.completed else CauseKind.GONE
                self.removed.append(Removal(key, {k: n for k, n in sorted(where.items()) if n > 0}, Cause(kind)))
        for key, component in self.components.items():
            if key in self.completed:
                continue
            replicas, scaled = desired_replicas(component, self.rps(key))
            work = Work(component, key, replicas, scaled, {})
            old = self.current.requests.get(key)
            resized = old is not None and (old.cpu, old.memory) != (component.cpu, component.memory)
            for name, count in sorted(placements.get(key, {}).items()):
                if count <= 0:
                    continue
                i = index.get(name)
                if i is None:
                    work.undeclared[name] = count  # the cluster left the goals
                    continue
                work.current[i] = count
                if self.healthy[i]:
                    # Replicas that run now hold their capacity at today's size (make
                    # before break: also those about to move, until they are replaced).
                    self.ledger.occupy(i, self._running(component, key, count, old if resized else None))
            # Draining replicas run on only while the replicas wanted outnumber those in
            # place (``carry_drains`` keeps no more); the others were replaced once the last
            # plan ran and free their capacity in this cycle, not the next.
            short = replicas - sum(n for i, n in work.current.items() if self.healthy[i])
            for name, count in sorted(self.current.draining.get(key, {}).items()):
                i = index.get(name)
                if i is None or not self.healthy[i] or short <= 0:
                    continue
                count = min(count, short)
                if count <= 0:
                    continue
                short -= count
                work.drained[i] = count
                self.ledger.occupy(i, self._running(component, key + DRAINING, count, old if resized else None))
            self.works[key] = work
            self.replicas_of[key] = replicas

    @staticmethod
    def _running(c: Component, key: str, count: int, old: ReplicaRequest | None) -> Running:
        if old is None:
            return Running(key, c.cpu, c.memory, c.architectures, count)
        return Running(key, c.cpu, c.memory, c.architectures, count, old_cpu=old.cpu, old_memory=old.memory)

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
        latencies and nodes (masks and static scores depend on nothing else)."""
        seen = (self.fleet.healthy.tobytes(), self.latency_token, tuple(self.ledger.shapes))
        entry = self.fleet_memo.get("evaluator")
        if isinstance(entry, tuple) and entry[0] == seen and len(entry[1].pins) <= 4 * len(self.components) + 64:
            cached: EvalCaches = entry[1]
            return cached
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

    # ----- questions -----------------------------------------------------------------------

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
        return lambda key: self.replicas_of.get(key, 1)

    def local_cost(self, work: Work, target: dict[int, int], static: np.ndarray) -> float:
        """The objective terms that involve this component, were it placed at ``target``."""
        return local_cost(
            work.key, target, work.replicas, static, self.placement,
            self.calls, self.callers, self.replicas(),
            self.fleet.cluster_latency, CLOSENESS_WEIGHT / self.fleet.latency_norm,
        )
