"""Property-based tests over many cycles (hypothesis).

Random fleets (node shapes, architectures, taints, latencies), random apps (replicas,
requests, envelopes, tiers, minClusters, spread, scaling, StatefulSets) and a random
history of events (time passing, clusters failing and returning, goal edits, measured
latencies). After every cycle an independent checker (it does not use the planner's
code) verifies that every hard goal holds or is listed in ``unmet`` under its goal, that
placed plus unplaced equals the replicas wanted, that the same inputs give the same
bytes, and that a cycle where nothing changed moves nothing (the cycle after a plan that
moved replicas make before break is not such a cycle: their drains end in it).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qonnect_gitops.model.app import QoS
from qonnect_gitops.model.goals import Component, Goals
from qonnect_gitops.model.observed import Observed
from qonnect_gitops.model.plan import CurrentPlacement, Plan
from qonnect_gitops.placement import plan
from qonnect_gitops.render.describe import plan_json
from tests.placement.builders import NOW, cluster, component, goals, replaced

REGIONS = ("r1", "r2")
COOLDOWN = 300.0


@st.composite
def fleets(draw: st.DrawFn) -> tuple[list[Any], list[tuple[str, str, float]]]:
    clusters = []
    links: list[tuple[str, str, float]] = []
    for i in range(draw(st.integers(2, 5))):
        tier = draw(st.sampled_from(("edge", "fog", "cloud")))
        name = f"{tier}-{i}"
        shapes = []
        for _ in range(draw(st.integers(1, 2))):
            count = draw(st.sampled_from((1, 2, 3, 1_000_000)))
            shapes.append({"count": count, "cpu": f"{draw(st.sampled_from((1000, 2000, 3500, 8000)))}m",
                           "memory": f"{draw(st.sampled_from((2, 4, 16)))}Gi",
                           "arch": draw(st.sampled_from(("amd64", "amd64", "arm64")))})
        taints = ({"key": "edge", "value": "true", "effect": "NoSchedule"},) if draw(st.booleans()) and tier == "edge" else ()
        region = draw(st.sampled_from(REGIONS))
        clusters.append(cluster(name, tier=tier, region=region, nodes=shapes, taints=taints,
                                cpu_hour=draw(st.sampled_from((0.01, 0.03, 0.05)))))
        for r in REGIONS:
            if r != region or draw(st.booleans()):
                links.append((name, r, float(draw(st.integers(1, 60)))))
    return clusters, links


def qos_of(draw: st.DrawFn) -> dict[str, Any]:
    q: dict[str, Any] = {"objective": draw(st.sampled_from(("latency", "cost", "energy")))}
    if draw(st.booleans()):
        q["latency"] = [{"region": draw(st.sampled_from(REGIONS)), "maxMs": float(draw(st.sampled_from((10, 25, 50))))}]
    elif draw(st.integers(0, 2)) == 0:  # serve each region from nearby
        q["latency"] = [{"region": r, "maxMs": float(draw(st.sampled_from((10, 25, 50)))), "serve": "nearest"}
                        for r in REGIONS]
    if draw(st.integers(0, 3)) == 0:
        q["tiers"] = draw(st.sampled_from((["edge", "fog"], ["fog", "cloud"], ["cloud"])))
    if draw(st.booleans()):
        q["availability"] = {"minClusters": draw(st.integers(1, 3)), "spread": draw(st.booleans())}
    if draw(st.integers(0, 3)) == 0:
        q["tolerations"] = [{"key": "edge", "operator": "Exists"}]
    if draw(st.integers(0, 4)) == 0:
        q["scaling"] = {"minReplicas": 1, "maxReplicas": 5, "targetRpsPerReplica": 100}
    q["offloading"] = draw(st.integers(0, 5)) != 0
    q["bursting"] = draw(st.integers(0, 5)) != 0
    return q


@st.composite
def apps(draw: st.DrawFn) -> list[Component]:
    comps = []
    n = draw(st.integers(1, 5))
    for j in range(n):
        calls = (f"shop/c{j + 1}",) if j + 1 < n and draw(st.booleans()) else ()
        comps.append(component(
            f"c{j}", replicas=draw(st.integers(1, 4)), cpu=draw(st.sampled_from((250, 1000, 3000))),
            memory=draw(st.sampled_from((256, 1024, 4096))) * 2**20,
            kind=draw(st.sampled_from(("Deployment", "Deployment", "Deployment", "StatefulSet"))),
            arch=draw(st.sampled_from((("amd64",), ("arm64",), ("amd64", "arm64")))),
            calls=calls, qos=qos_of(draw), cooldown=COOLDOWN, budget=draw(st.integers(1, 2)),
        ))
        if j > 0 and draw(st.integers(0, 4)) == 0:  # runs beside the one before it
            comps[-1] = dataclasses.replace(comps[-1], colocate_with=(f"shop/c{j - 1}",))
    return comps


EVENTS = ("nothing", "nothing", "later", "fail", "recover", "edit", "measure")


@st.composite
def histories(draw: st.DrawFn) -> tuple[Any, ...]:
    fleet, links = draw(fleets())
    comps = draw(apps())
    events = draw(st.lists(st.tuples(st.sampled_from(EVENTS), st.integers(0, 1000)), min_size=3, max_size=7))
    return fleet, links, comps, events


# ----- the independent checker ------------------------------------------------------------------


def _latency(g: Goals, obs: Observed, c: str, region: str) -> float:
    measured = [m.ms for m in obs.latencies if {m.from_, m.to} == {c, region}]
    if measured:
        return max(measured)
    ms = g.latencies.get((c, region))
    if ms is None:
        return 0.0 if g.clusters[c].spec.region == region else math.inf
    return ms


def _wanted(c: Component, obs: Observed) -> int:
    s = c.qos.scaling
    if s is None:
        return c.replicas
    rps = sum(t.rps for t in obs.traffic if t.component == c.key)
    n = min(max(math.ceil(rps / s.target_rps_per_replica) if rps else 0, s.min_replicas), s.max_replicas)
    return max(n, c.qos.availability.min_clusters) if c.qos.availability.min_clusters <= s.max_replicas else n


def check(g: Goals, obs: Observed, p: Plan) -> None:
    unmet = {(u.component, u.goal) for u in p.unmet}
    unplaced = {u.component: u.replicas for u in p.unplaced}
    healthy = {n: obs.cluster(n).healthy for n in g.clusters}
    assert not [m for m in p.moves if m.source is not None and m.source == m.target], "a move to its own cluster"
    load: dict[str, list[tuple[int, int]]] = {}
    for c in g.components():
        where = p.placements().get(c.key, {})
        assert sum(where.values()) + unplaced.get(c.key, 0) == _wanted(c, obs), c.key
        if unplaced.get(c.key):
            assert any(k == c.key for k, _ in unmet), f"{c.key}: unplaced but no goal listed"
        for name, n in where.items():
            spec = g.clusters[name].spec
            load.setdefault(name, []).extend([(c.cpu, c.memory)] * n)
            if not healthy[name]:
                assert (c.key, "health") in unmet, (c.key, name)
                continue
            if c.qos.tiers and spec.tier not in c.qos.tiers:
                assert (c.key, "tier") in unmet, (c.key, name)
            if any(t.effect != "PreferNoSchedule" and not any(tol.tolerates(t.key, t.value, t.effect)
                                                                for tol in c.qos.tolerations) for t in spec.taints):
                assert (c.key, "selector") in unmet, (c.key, name)
            shapes = [s for s in spec.nodes if s.arch in c.architectures]
            if not shapes:
                assert (c.key, "architecture") in unmet, (c.key, name)
            elif not any(s.cpu >= c.cpu and s.memory >= c.memory for s in shapes):
                assert (c.key, "capacity") in unmet, (c.key, name)
            for goal in c.qos.latency:
                if goal.serve == "all" and _latency(g, obs, name, goal.region) > goal.max_ms:
                    assert (c.key, "latency") in unmet, (c.key, name, goal)
            nearest = [goal for goal in c.qos.latency if goal.serve == "nearest"]
            if nearest and all(_latency(g, obs, name, goal.region) > goal.max_ms for goal in nearest):
                assert (c.key, "latency") in unmet, (c.key, name, "near none of its regions")
        serving = [name for name, n in where.items() if n > 0 and healthy[name]]
        for goal in c.qos.latency:
            if goal.serve == "nearest" and serving and \
                    all(_latency(g, obs, name, goal.region) > goal.max_ms for name in serving):
                assert (c.key, "latency") in unmet, (c.key, goal.region, "served by no replica")
        for anchor in c.colocate_with:
            beside = {name for name, n in p.placements().get(anchor, {}).items() if n > 0}
            if any(n > 0 and healthy[name] and name not in beside for name, n in where.items()):
                assert (c.key, "selector") in unmet, (c.key, "not beside", anchor)
        counts = [n for name, n in where.items() if n > 0 and healthy[name]]
        if len(counts) < c.qos.availability.min_clusters and (counts or c.qos.availability.min_clusters > 1):
            assert (c.key, "availability") in unmet, c.key
        if c.qos.availability.spread and counts and max(counts) - min(counts) > 1:
            assert (c.key, "spread") in unmet, c.key
    # Cluster totals hold everything planned there, draining replicas included.
    for key, cp in p.components.items():
        comp = g.component(key)
        for d in cp.draining:
            load.setdefault(d.cluster, []).extend([(comp.cpu, comp.memory)] * d.replicas)
    for name, replicas in load.items():
        if not healthy[name]:
            continue
        spec = g.clusters[name].spec
        assert sum(cpu for cpu, _ in replicas) <= sum(s.cpu * s.count for s in spec.nodes), name
        assert sum(mem for _, mem in replicas) <= sum(s.memory * s.count for s in spec.nodes), name


# ----- the property ------------------------------------------------------------------------------


def _edit(g: Goals, k: int) -> Goals:
    comps = list(g.components())
    c = comps[k % len(comps)]
    q = c.qos.model_dump(by_alias=True, exclude_unset=True)
    choice = k % 5
    if choice == 0:
        c = dataclasses.replace(c, cpu=max(250, c.cpu * 2 if k % 2 else c.cpu // 2))
    elif choice == 1:
        c = dataclasses.replace(c, replicas=1 + k % 4)
    else:
        if choice == 2:
            q["latency"] = [{"region": REGIONS[k % 2], "maxMs": float(5 + k % 50)}]
        elif choice == 3:
            q["availability"] = {"minClusters": 1 + k % 3, "spread": bool(k % 2)}
        else:
            q["tiers"] = [("edge", "fog", "cloud")[k % 3]]
        c = dataclasses.replace(c, qos=QoS.model_validate(q))
    return replaced(g, c)


@dataclass
class World:
    """What a history has done so far to the goals and the observations."""

    g: Goals
    now: datetime = NOW
    down: set[str] = field(default_factory=set)
    measured: list[dict[str, Any]] = field(default_factory=list)

    def apply(self, event: str, k: int) -> None:
        """One event of ``EVENTS`` (others are left to the caller), then ten seconds."""
        names = sorted(self.g.clusters)
        if event == "later":
            self.now += timedelta(seconds=COOLDOWN + 1)
        elif event == "fail":
            self.down.add(names[k % len(names)])
        elif event == "recover" and self.down:
            self.down.discard(sorted(self.down)[k % len(self.down)])
        elif event == "edit":
            self.g = _edit(self.g, k)
        elif event == "measure":
            self.measured = [{"from": names[k % len(names)], "to": REGIONS[k % 2], "ms": float(k % 90)}]
        self.now += timedelta(seconds=10)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(histories())
def test_every_cycle_meets_every_goal_or_says_which_not(history: tuple[Any, ...]) -> None:
    fleet, links, comps, events = history
    world = World(goals(fleet, comps, links=links, regions=REGIONS))
    traffic = [{"component": c.key, "region": "r1", "rps": 250.0} for c in comps if c.qos.scaling]
    current = CurrentPlacement()
    previous_inputs: tuple[object, ...] = ()
    relocated = False  # the last plan moved replicas make before break: those drains end now
    for event, k in [("nothing", 0), *events]:
        quiet = event == "nothing"
        world.apply(event, k)
        g, now = world.g, world.now
        obs = Observed.model_validate({
            "now": now.isoformat(), "clusters": {n: {"healthy": False} for n in sorted(world.down)},
            "latencies": world.measured, "traffic": traffic,
        })
        p = plan(g, obs, current)
        check(g, obs, p)
        assert plan_json(plan(g, obs, current)) == plan_json(p)  # same inputs, same bytes
        if quiet and not relocated and previous_inputs == (g, obs.clusters, obs.latencies):
            # Nothing changed but the clock (10 s, inside every cooldown): nothing moves.
            assert p.moves == (), p.moves
        # Rescheduling (an optimisation move) only once the cooldown has passed.
        for m in p.moves:
            if m.reason == "rescheduling" and "improves the objective" in m.detail:
                last = current.last_moved.get(m.component)
                assert last is None or (now - last).total_seconds() >= COOLDOWN
        previous_inputs = (g, obs.clusters, obs.latencies)
        relocated = any(m.source is not None and m.target is not None for m in p.moves)
        current = p.current()
