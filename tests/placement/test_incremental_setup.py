"""What a cycle keeps from earlier cycles to start without walking the whole fleet:
the fleet's declared capacity (``capacity.DeclaredCapacity``), made into node segments
only for the clusters a cycle looks at, and the last cycle's targets
(``Carry.targets``), from which a carried cycle fills the placement map of what it
carries (``planner._classify_decided``). Each must give exactly what the walk gave."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest

from qonnect_gitops.model.goals import Goals
from qonnect_gitops.model.observed import Observed
from qonnect_gitops.model.plan import CurrentPlacement
from qonnect_gitops.placement import evaluate, plan, planner
from qonnect_gitops.placement.capacity import DeclaredCapacity, Ledger
from qonnect_gitops.placement.carry import Carry
from qonnect_gitops.placement.cycle import Cycle
from qonnect_gitops.placement.fleet import build_static
from qonnect_gitops.render.describe import plan_json
from tests.placement.builders import NOW, cluster, component, current, goals, observed
from tests.placement.test_carry import _nothing_kept


def _ledger_state(ledger: Ledger) -> tuple[object, ...]:
    return (
        ledger.free_cpu.tolist(), ledger.free_memory.tolist(), ledger.total_cpu.tolist(),
        ledger.capacity_cpu.tolist(), ledger.capacity_memory.tolist(), ledger.observed_usage.tolist(),
        ledger.shapes, ledger.archs, sorted(ledger.allocatable.items()), sorted(ledger.segments_observed),
        [[(s.nodes, None if s.pool is None else (s.pool.cpu, s.pool.memory, s.pool.pods, s.pool.arch, s.pool.count))
          for s in ledger.segments[i]] for i in range(ledger.n)],
    )


def _two_shapes() -> Goals:
    return goals([
        cluster("a", cpu="4", memory="8Gi", count=3),
        cluster("b", nodes=[{"count": 2, "cpu": "2", "memory": "4Gi", "arch": "arm64"},
                            {"count": 1, "cpu": "8", "memory": "16Gi", "arch": "amd64"}]),
        cluster("c", cpu="16", memory="64Gi", count=1),
    ], [component("web")])


def test_a_cluster_s_declared_nodes_become_segments_only_when_asked_for() -> None:
    g = _two_shapes()
    static = build_static(g)
    ledger = Ledger(static, g, observed())
    assert dict(ledger.segments) == {}  # nothing made yet
    assert ledger.fits(1, 1000, 2**30, frozenset({"arm64"}), 4) == 4
    assert set(ledger.segments) == {1}
    # Made from the declared pools, in declared order.
    ledger2 = Ledger(static, g, observed())
    segs = ledger2.segments[1]
    assert [(s.nodes, s.pool.cpu, s.pool.arch, s.pool.count) for s in segs if s.pool] == [
        ([], 2000, "arm64", 2), ([], 8000, "amd64", 1)]


def test_a_ledger_from_kept_declared_capacity_is_the_ledger_made_anew_reports_included() -> None:
    g = _two_shapes()
    static = build_static(g)
    declared = DeclaredCapacity.of(static)
    reports: dict[str, Any] = {
        "a": {"free": {"cpu": "1500m", "memory": "3Gi"}},
        "c": {"nodes": [{"name": "n1", "ready": True, "arch": "amd64", "free": {"cpu": "2", "memory": "4Gi"},
                         "allocatable": {"cpu": "15", "memory": "60Gi"}},
                        {"name": "n2", "ready": False, "arch": "amd64", "free": {"cpu": "8", "memory": "8Gi"}}]},
    }
    obs = observed(clusters=reports)
    kept = Ledger(static, g, obs, declared=declared)
    anew = Ledger(static, g, obs)
    assert _ledger_state(kept) == _ledger_state(anew)
    assert kept.observed_usage.tolist() == [True, False, True]
    assert kept.capacity_cpu.tolist()[2] == 15000 and kept.free_cpu.tolist()[2] == 2000
    # The kept capacity is read only: a ledger changes its own copy.
    kept.take(0, 500, 2**20, frozenset({"amd64"}), 1)
    assert declared.free_cpu.tolist() == [12000, 12000, 16000]
    with pytest.raises(ValueError):
        declared.free_cpu[0] = 1.0


def test_the_declared_capacity_kept_for_a_fleet_is_made_anew_when_a_cluster_s_capacity_changes() -> None:
    evaluate.forget()
    small = goals([cluster("a", cpu="2", memory="4Gi"), cluster("b", cpu="2", memory="4Gi")],
                  [component("web", cpu=3000, memory=2**30)])
    first = Cycle(small, observed(), CurrentPlacement())
    kept = first.fleet_memo["declared"]
    assert first.ledger.free_cpu.tolist() == [2000, 2000]
    # The same goals again: the same object is used.
    assert Cycle(small, observed(), CurrentPlacement()).fleet_memo["declared"] is kept
    p = plan(small, observed(), CurrentPlacement())
    assert p.placements()["shop/web"] == {}  # no node holds 3 CPUs
    # Cluster b grows: goals loaded again with it see the new nodes, never the kept ones.
    bigger = dataclasses.replace(small, clusters={**small.clusters, "b": cluster("b", cpu="8", memory="16Gi")})
    again = Cycle(bigger, observed(), CurrentPlacement())
    assert again.fleet_memo["declared"] is not kept
    assert again.ledger.free_cpu.tolist() == [2000, 8000]
    assert plan(bigger, observed(), CurrentPlacement()).placements()["shop/web"] == {"b": 1}


def _carry(g: Goals) -> Carry:
    entry = evaluate.goal_index(g).fleet_memo["carry"]
    assert isinstance(entry, Carry)
    return entry


def test_the_targets_kept_are_every_component_s_target_object_cycle_after_cycle() -> None:
    evaluate.forget()
    clusters = [cluster(f"fog-{i}", tier="fog", cpu="8", memory="32Gi") for i in range(4)]
    comps = [component(f"c{j}", replicas=1 + j % 2, cpu=250, calls=(f"shop/c{j + 1}",) if j % 3 == 0 else (),
                       cooldown=120.0) for j in range(12)]
    g = goals(clusters, comps)
    obs = Observed.model_validate({"now": NOW.isoformat()})
    p = plan(g, obs, CurrentPlacement())
    fewer = dataclasses.replace(g, apps={"shop": dataclasses.replace(g.apps["shop"], components=tuple(comps[1:]))})
    steps: list[tuple[Goals, dict[str, Any], timedelta, list[str]]] = [
        (g, {}, timedelta(seconds=30), []),
        (g, {"fog-1": {"healthy": False}}, timedelta(seconds=60), []),
        (g, {"fog-1": {"healthy": False}}, timedelta(seconds=300), []),
        (g, {}, timedelta(seconds=330), ["shop/c5"]),  # reported completed: it goes
        (g, {}, timedelta(seconds=360), ["shop/c5"]),
        (g, {}, timedelta(seconds=390), []),  # back in the goals
        # A component left the goals: its target goes too.
        (fewer, {}, timedelta(seconds=600), []),
        (fewer, {"fog-2": {"healthy": False}}, timedelta(seconds=630), []),
    ]
    for step_goals, clusters_seen, at, completed in steps:
        obs = Observed.model_validate({"now": (NOW + at).isoformat(), "clusters": clusters_seen,
                                       "completedJobs": completed})
        p = plan(step_goals, obs, p.current())
        carry = _carry(step_goals)
        assert carry.targets.keys() == carry.works.keys()
        assert all(carry.targets[k] is w.target for k, w in carry.works.items())
        assert carry.unquiet == carry.components.keys() - carry.quiet.keys()
    assert "shop/c0" not in _carry(fewer).targets


def _envelope() -> Goals:
    clusters = [cluster("a", region="us", cpu="16"), cluster("b", region="us", cpu="16"),
                cluster("c", region="us", cpu="16")]
    comps = [component("web", replicas=2, calls=("shop/api",), qos={"latency": [{"region": "eu", "maxMs": 50}]}),
             component("api", calls=("shop/db",)), component("db"), component("zz", calls=("shop/web",))]
    return goals(clusters, comps, links=[("a", "eu", 40), ("b", "eu", 9), ("c", "eu", 30)], regions=("eu", "us"))


def test_a_waiting_component_in_a_carried_cycle_is_classified_in_key_order(monkeypatch: Any) -> None:
    """A measured breach inside the cooldown waits, and its repair reads the placement
    map as far as key order filled it: a carried cycle with a waiting component takes
    the walk in key order (``_classify``), and plans what a cycle from nothing plans."""
    evaluate.forget()
    g = _envelope()
    cur = current({"shop/web": {"b": 2}, "shop/api": {"b": 1}, "shop/db": {"a": 1}, "shop/zz": {"c": 1}},
                  {k: NOW for k in ("shop/web", "shop/api", "shop/db", "shop/zz")})
    measured = [{"from": "b", "to": "eu", "ms": 60}]
    walks: list[str] = []
    real = planner._classify
    def counted(*args: Any) -> None:
        walks.append("key order")
        real(*args)

    monkeypatch.setattr(planner, "_classify", counted)
    plans = []
    for k in range(3):
        obs = observed(now=(NOW + timedelta(seconds=30 + k)).isoformat(), latencies=measured)
        plans.append(plan(g, obs, cur))
        assert "measured latency" in {u.goal: u.message for u in plans[-1].unmet}["latency"]
    assert plans[0].placements()["shop/web"] == {"b": 2} and plans[0].moves == ()
    assert len(walks) == 3  # the first from nothing, the next two carried with a waiting component
    assert _carry(g).carried > 0
    with _nothing_kept():
        cold = plan(dataclasses.replace(g), observed(now=(NOW + timedelta(seconds=32)).isoformat(),
                                                     latencies=measured), cur)
    assert plan_json(plans[-1]) == plan_json(cold)




# ----- evaluator caches across a change of health ------------------------------------------------


def _scored_fleet() -> Goals:
    clusters = [cluster(f"c{i}", tier=("cloud", "fog", "edge")[i % 3], cpu="8", memory="16Gi", cpu_hour=0.01 * (i + 1))
                for i in range(6)]
    comps = [component("cheap", qos={"objective": "cost"}), component("near", qos={"tiers": ["fog", "edge"]}),
             component("big", cpu=6000, qos={"objective": "energy"})]
    return goals(clusters, comps)


def _floors(cycle: Cycle) -> dict[str, float]:
    ev = cycle.evaluator
    return {key: ev.static_floor(ev.context(c, 1)) for key, c in cycle.components.items()}


def _fresh_floors(g: Goals, obs: Observed) -> dict[str, float]:
    with _nothing_kept():
        return _floors(Cycle(dataclasses.replace(g), obs, CurrentPlacement()))


def test_after_failures_the_caches_keep_what_does_not_read_health_and_floors_held_elsewhere() -> None:
    evaluate.forget()
    g = _scored_fleet()
    healthy = Cycle(g, observed(), CurrentPlacement())
    floors = _floors(healthy)
    caches = healthy.fleet_memo["evaluator"][1]  # type: ignore[index]
    at = dict(caches.floor_at)
    assert len(at) == len(caches.floors) == 3
    # The cluster holding the cheapest floor fails: that floor is found again, the
    # others are kept as they were.
    cheap_key = next(k for k, c in healthy.components.items() if c.name == "cheap")
    ev = healthy.evaluator
    held_by = at[ev.floor_key(ev.context(healthy.components[cheap_key], 1))]
    failed = {sorted(g.clusters)[held_by]: {"healthy": False}}
    obs = observed(clusters=failed)
    after = Cycle(g, obs, CurrentPlacement())
    derived = after.fleet_memo["evaluator"][1]  # type: ignore[index]
    assert derived is not caches
    assert derived.goal is caches.goal and derived.static_scores is caches.static_scores
    assert ("health", ()) not in derived.masks
    kept = {k for k in caches.floors if k in derived.floors}
    assert kept and len(kept) < len(caches.floors)  # the failed cluster's floor is gone
    assert all(derived.floors[k] == caches.floors[k] for k in kept)
    assert _floors(after) == _fresh_floors(g, obs)
    assert _floors(after)[cheap_key] > floors[cheap_key]
    # The cluster returns: every floor is found again (one may be lower now).
    back = Cycle(g, observed(), CurrentPlacement())
    assert back.fleet_memo["evaluator"][1].floors == {}  # type: ignore[index]
    assert _floors(back) == floors


def test_reported_nodes_of_another_size_start_the_evaluator_caches_anew() -> None:
    """The node-size masks read each cluster's node shapes: a report that changes a
    cluster's capacity must not find the caches of the declared nodes."""
    evaluate.forget()
    g = _scored_fleet()
    first = Cycle(g, observed(), CurrentPlacement())
    caches = first.fleet_memo["evaluator"][1]  # type: ignore[index]
    assert _floors(first)["shop/big"] < float("inf")
    grown = {"c0": {"nodes": [{"name": "n", "ready": True, "arch": "amd64", "free": {"cpu": "2", "memory": "4Gi"},
                               "allocatable": {"cpu": "2", "memory": "4Gi"}}]}}
    obs = observed(clusters=grown)
    again = Cycle(g, obs, CurrentPlacement())
    fresh = again.fleet_memo["evaluator"][1]  # type: ignore[index]
    assert fresh is not caches and fresh.goal is not caches.goal
    assert _floors(again) == _fresh_floors(g, obs)


# ----- the cycle after a decision ---------------------------------------------------------------


def test_the_cycle_after_a_decision_writes_new_reasons_with_the_scores_it_placed_with(monkeypatch: Any) -> None:
    """Every component the decision placed is kept in the next cycle: its reason changes
    (kept, cooling down), its scores do not, and are not computed again; the plan is the
    plan of a cycle from nothing. Where a component's neighbour moved, it is scored anew."""
    from qonnect_gitops.placement.evaluate import Evaluator

    evaluate.forget()
    clusters = [cluster(f"fog-{i}", tier="fog", cpu="8", memory="32Gi", cpu_hour=0.01 * (i + 1)) for i in range(4)]
    comps = [component(f"c{j}", replicas=1 + j % 2, cpu=250, calls=(f"shop/c{j + 1}",) if j % 3 == 0 else (),
                       cooldown=120.0) for j in range(9)]
    g = goals(clusters, comps)
    first = plan(g, observed(), CurrentPlacement())
    scored: list[int] = []
    real = Evaluator.terms_at
    def counted(self: Evaluator, ctx: Any, at: list[int]) -> Any:
        scored.append(len(at))
        return real(self, ctx, at)

    monkeypatch.setattr(Evaluator, "terms_at", counted)
    obs = observed(now=(NOW + timedelta(seconds=30)).isoformat())
    then = plan(g, obs, first.current())
    assert scored == []
    assert plan_json(then) == plan_json(_cold(g, obs, first.current()))
    reasons = {a.reason for cp in then.components.values() for a in cp.assignments}
    assert reasons != {a.reason for cp in first.components.values() for a in cp.assignments}
    # c1 moved by hand since: c0 (its caller) is explained with scores made anew.
    moved = first.current()
    where = dict(moved.placements["shop/c1"])
    name = next(iter(where))
    other = next(n for n in sorted(g.clusters) if n not in where)
    placements = {**moved.placements, "shop/c1": {other if n == name else n: k for n, k in where.items()}}
    edited = moved.model_copy(update={"placements": placements})
    plan(g, obs, first.current())
    scored.clear()
    later = plan(g, obs, edited)
    assert scored  # c1 and its neighbours
    assert plan_json(later) == plan_json(_cold(g, obs, edited))


def _cold(g: Goals, obs: Observed, cur: CurrentPlacement) -> Any:
    with _nothing_kept():
        return plan(dataclasses.replace(g), obs, cur)
