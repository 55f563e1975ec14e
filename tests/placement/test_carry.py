"""A cycle that carries the last cycle's quiet components (``placement/carry.py``) plans
byte for byte what a cycle from nothing plans with the same inputs.

Random fleets and apps (those of ``test_properties``) go through random histories of
failovers, recoveries, time passing cooldowns, goal edits, measured latencies, reported
capacity, traffic, completed Jobs and clusters added or removed. At every cycle the
planner that kept everything from the cycles before is compared with a planner that
kept nothing."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qonnect_gitops.model.goals import Component, Goals
from qonnect_gitops.model.observed import Observed
from qonnect_gitops.model.plan import CurrentPlacement, Plan
from qonnect_gitops.placement import evaluate, plan
from qonnect_gitops.placement.carry import Carry
from qonnect_gitops.render.describe import plan_json
from tests.placement.builders import NOW, cluster, component, goals
from tests.placement.test_properties import COOLDOWN, REGIONS, World, apps, fleets


@contextmanager
def _nothing_kept() -> Iterator[None]:
    """Plan as a new process would (nothing derived from earlier goals), then give the
    warm planner its state back."""
    saved = dict(evaluate._STATIC), dict(evaluate._FLEETS)
    evaluate.forget()
    try:
        yield
    finally:
        evaluate.forget()
        evaluate._STATIC.update(saved[0])
        evaluate._FLEETS.update(saved[1])


def _cold(g: Goals, obs: Observed, current: CurrentPlacement) -> Plan:
    with _nothing_kept():
        return plan(dataclasses.replace(g), obs, current)


def _carried(g: Goals) -> int:
    entry = evaluate.goal_index(g).fleet_memo.get("carry")
    return entry.carried if isinstance(entry, Carry) else 0


EVENTS = ("nothing", "nothing", "nothing", "nothing", "later", "fail", "recover", "edit", "measure", "report",
          "traffic", "complete", "resize", "cordon", "not-running", "progressing")
STATES = ("Ready", "Degraded", "Stalled", "Silent")


def _resized(g: Goals, k: int) -> Goals:
    """A cluster added (k even) or the last one removed (k odd, while two remain)."""
    clusters = dict(g.clusters)
    if k % 2 == 0:
        name = f"fog-new{k}"
        clusters[name] = cluster(name, tier="fog", region=REGIONS[k % 2], cpu="4")
    elif len(clusters) > 2:
        del clusters[sorted(clusters)[-1]]
    latencies = {pair: ms for pair, ms in g.latencies.items() if pair[0] in clusters or pair[0] in REGIONS}
    return Goals(g.fleet, dict(sorted(clusters.items())), g.network, g.apps, latencies)


def _and_a_copy(comps: list[Component]) -> list[Component]:
    """The components of app shop, and a second app (mall) written like it."""
    def moved(keys: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(k.replace("shop/", "mall/") for k in keys)

    return [*comps, *(dataclasses.replace(c, app="mall", namespace="mall", calls=moved(c.calls),
                                          colocate_with=moved(c.colocate_with)) for c in comps)]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(fleets(), apps(), st.lists(st.tuples(st.sampled_from(EVENTS), st.integers(0, 1000)), min_size=3, max_size=9))
def test_a_carried_cycle_plans_what_a_cycle_from_nothing_plans(fleet: Any, comps: Any, events: Any) -> None:
    clusters, links = fleet
    comps = _and_a_copy(comps)  # more components that stay as they run
    world = World(goals(clusters, comps, links=links, regions=REGIONS))
    evaluate.forget()
    reports: dict[str, dict[str, Any]] = {}
    traffic = [{"component": c.key, "region": "r1", "rps": 250.0} for c in comps if c.qos.scaling]
    completed: list[str] = []
    states: dict[str, str] = {}  # cluster -> its health model's state (issue 31)
    pairs: dict[tuple[str, str], str] = {}  # (component, cluster) -> what agents report it runs
    current = CurrentPlacement()
    for event, k in [("nothing", 0), *events]:
        names = sorted(world.g.clusters)
        placed = sorted((key, n) for key, where in current.placements.items() for n in where)
        if event == "cordon":
            states[names[k % len(names)]] = STATES[k % len(STATES)]
        elif event in ("not-running", "progressing") and placed:
            pairs[placed[k % len(placed)]] = "NotRunning" if event == "not-running" else "Progressing"
        elif event == "report":
            reports[names[k % len(names)]] = {"free": {"cpu": f"{250 * (k % 12)}m", "memory": f"{k % 9}Gi"}}
        elif event == "traffic":
            traffic = [{**t, "rps": float(50 * (k % 11))} for t in traffic]
        elif event == "complete":
            completed = [comps[k % len(comps)].key]
        elif event == "resize":
            world.g = _resized(world.g, k)
            world.down &= set(world.g.clusters)
            reports = {n: r for n, r in reports.items() if n in world.g.clusters}
            world.measured = [m for m in world.measured if m["from"] in world.g.clusters]
        world.apply(event, k)
        g = world.g
        states = {n: s for n, s in states.items() if n in g.clusters}
        clusters_seen = {n: dict(reports.get(n, {})) for n in sorted(set(reports) | world.down | set(states))}
        for n in world.down:
            clusters_seen[n]["healthy"] = False
        for n, state in states.items():
            clusters_seen[n]["state"] = state
        in_force = {(key, n) for table in (current.placements, current.draining) for key, where in table.items()
                    for n in where}
        obs = Observed.model_validate({
            "now": world.now.isoformat(), "clusters": clusters_seen, "latencies": world.measured,
            "traffic": traffic, "completedJobs": completed,
            "workloads": [{"component": key, "cluster": n, "state": state}
                          for (key, n), state in sorted(pairs.items()) if (key, n) in in_force],
        })
        warm = plan(g, obs, current)
        assert plan_json(warm) == plan_json(_cold(g, obs, current)), (event, k)
        current = warm.current()


def _fleet(n: int) -> tuple[Goals, list[str]]:
    clusters = [cluster(f"fog-{i}", tier="fog", region=REGIONS[i % 2], cpu="16", memory="64Gi") for i in range(n)]
    comps = [component(f"c{j}", replicas=1 + j % 2, cpu=250, calls=(f"shop/c{j + 1}",) if j % 5 == 0 else (),
                       qos={"objective": "cost"}, cooldown=COOLDOWN)
             for j in range(4 * n)]
    links = [(c.name, r, 5.0 if c.spec.region == r else 30.0) for c in clusters for r in REGIONS]
    return goals(clusters, comps, links=links, regions=REGIONS), [c.name for c in clusters]


def test_a_failover_decides_anew_only_what_ran_on_the_failed_cluster_and_its_neighbours() -> None:
    evaluate.forget()
    g, names = _fleet(12)
    first = plan(g, Observed.model_validate({"now": NOW.isoformat()}), CurrentPlacement())
    current = first.current()
    later = NOW + timedelta(seconds=60)
    quiet = Observed.model_validate({"now": later.isoformat()})
    plan(g, quiet, current)  # what the first plan placed anew is kept: quiet from now on
    plan(g, quiet, current)
    assert _carried(g) == len(current.placements)  # nothing changed: nothing decided anew
    failed = max(names, key=lambda n: (sum(1 for where in current.placements.values() if where.get(n)), n))
    on_failed = {key for key, where in current.placements.items() if where.get(failed)}
    assert on_failed
    obs = Observed.model_validate({"now": later.isoformat(), "clusters": {failed: {"healthy": False}}})
    p = plan(g, obs, current)
    assert any(m.reason == "failover" for m in p.moves)
    assert 0 < _carried(g) <= len(current.placements) - len(on_failed)
    assert plan_json(p) == plan_json(_cold(g, obs, current))
    # The cycle after: the moved components' new clusters are settled anew, the rest carried.
    after_obs = Observed.model_validate({"now": (later + timedelta(seconds=10)).isoformat(),
                                         "clusters": {failed: {"healthy": False}}})
    q = plan(g, after_obs, p.current())
    assert _carried(g) > 0
    assert plan_json(q) == plan_json(_cold(g, after_obs, p.current()))


def test_once_cooldowns_passed_a_failover_still_carries_what_rescheduling_would_keep() -> None:
    evaluate.forget()
    g, names = _fleet(12)
    first = plan(g, Observed.model_validate({"now": NOW.isoformat()}), CurrentPlacement())
    current = first.current()
    late = NOW + timedelta(seconds=2 * COOLDOWN)
    quiet = Observed.model_validate({"now": late.isoformat()})
    plan(g, quiet, current)
    plan(g, quiet, current)
    assert _carried(g) == len(current.placements)  # kept by rescheduling's bound: carried
    failed = max(names, key=lambda n: (sum(1 for where in current.placements.values() if where.get(n)), n))
    obs = Observed.model_validate({"now": (late + timedelta(seconds=10)).isoformat(),
                                   "clusters": {failed: {"healthy": False}}})
    p = plan(g, obs, current)
    assert any(m.reason == "failover" for m in p.moves)
    assert _carried(g) > 0
    assert plan_json(p) == plan_json(_cold(g, obs, current))


def test_a_kept_callers_explanation_follows_a_callee_that_rescheduling_moved() -> None:
    """Found by the property test (also on the planner before the carry): rescheduling
    moves c2 while its replica still runs where it was, so c1's closeness that cycle is
    scored against the old cluster; the next cycle must not keep that explanation."""
    def node(memory: int, arch: str = "amd64") -> dict[str, Any]:
        return {"count": 1, "cpu": "1000m", "memory": f"{memory}Gi", "arch": arch}

    clusters = [cluster("edge-0", tier="edge", region="r2", nodes=[node(2)], cpu_hour=0.01),
                cluster("edge-1", tier="edge", region="r2", nodes=[node(2, "arm64")], cpu_hour=0.01),
                cluster("fog-2", tier="fog", region="r1", nodes=[node(2)], cpu_hour=0.01),
                cluster("edge-3", tier="edge", region="r2", nodes=[node(2)], cpu_hour=0.01),
                cluster("edge-4", tier="edge", region="r1", nodes=[node(2), node(4)], cpu_hour=0.05)]
    links = [("edge-0", "r1", 1.0), ("edge-0", "r2", 1.0), ("edge-1", "r1", 1.0), ("edge-1", "r2", 1.0),
             ("fog-2", "r2", 1.0), ("edge-3", "r1", 47.0), ("edge-4", "r1", 1.0), ("edge-4", "r2", 1.0)]
    near = [{"region": r, "maxMs": 10.0, "serve": "nearest"} for r in REGIONS]
    base = {"objective": "latency", "tolerations": [{"key": "edge", "operator": "Exists"}], "bursting": False}
    scaled = {**base, "latency": near, "scaling": {"minReplicas": 1, "maxReplicas": 5, "targetRpsPerReplica": 100}}
    follower = {**base, "tiers": ["edge", "fog"], "offloading": False, "scaling": scaled["scaling"]}
    comps = [component("c0", cpu=250, memory=2**30, qos=scaled),
             component("c1", cpu=250, memory=2**30, calls=("shop/c2",), qos=scaled),
             component("c2", cpu=250, memory=2**28, qos=base),
             dataclasses.replace(component("c3", cpu=250, memory=2**28, qos=follower), colocate_with=("shop/c2",))]
    comps = _and_a_copy(comps)
    g = goals(clusters, comps, links=links, regions=REGIONS)
    evaluate.forget()
    traffic = [{"component": c.key, "region": "r1", "rps": 250.0} for c in comps if c.qos.scaling]
    current = CurrentPlacement()
    now = NOW
    for seconds, completed in ((10, []), (COOLDOWN + 11, []), (10, ["shop/c0"]), (10, ["shop/c0"])):
        now += timedelta(seconds=seconds)
        obs = Observed.model_validate({"now": now.isoformat(), "traffic": traffic, "completedJobs": completed})
        warm = plan(g, obs, current)
        assert plan_json(warm) == plan_json(_cold(g, obs, current))
        current = warm.current()


def _offloading_fleet(n: int) -> tuple[list[Any], list[Component], list[tuple[str, str, float]]]:
    """The cheapest clusters fill first, so most components run offloaded and, once their
    cooldown passed, are kept because the nearest cluster with room gains too little."""
    clusters = [cluster(f"fog-{i:02d}", tier="fog", region=REGIONS[i % 2], cpu="2", memory="8Gi",
                        cpu_hour=round(0.01 * (1 + i % 7), 3)) for i in range(n)]
    comps = [_offloaded(f"c{j:03d}", j) for j in range(5 * n)]
    links = [(c.name, r, 2.0 + (i % 5) if c.spec.region == r else 30.0 + i % 3)
             for i, c in enumerate(clusters) for r in REGIONS]
    return clusters, comps, links


def _offloaded(name: str, j: int) -> Component:
    return component(name, replicas=1 + (j % 5 == 0), cpu=250 + 125 * (j % 3), memory=2**28,
                     qos={"objective": "cost"}, cooldown=COOLDOWN)


def _reused(g: Goals) -> int:
    entry = evaluate.goal_index(g).fleet_memo.get("carry")
    return entry.offloads_reused if isinstance(entry, Carry) else 0


OFFLOAD_EVENTS = ("nothing", "fail", "recover", "report", "apply", "add", "remove")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(8, 16), st.lists(st.tuples(st.sampled_from(OFFLOAD_EVENTS), st.integers(0, 1000)),
                                    min_size=2, max_size=8))
def test_a_remembered_offload_plans_what_a_fresh_distribution_plans(n: int, events: Any) -> None:
    """Rescheduling's remembered offloads (``distribute.remembered``) are reused only
    where the distribution would find them again: byte for byte the plan of a cycle
    from nothing, through failovers, recoveries, reported capacity, components added
    (placed before rescheduling runs) or removed (their room comes back) and applied plans."""
    evaluate.forget()
    clusters, comps, links = _offloading_fleet(n)
    g = goals(clusters, comps, links=links, regions=REGIONS)
    names = [c.name for c in clusters]
    current = plan(g, Observed.model_validate({"now": NOW.isoformat()}), CurrentPlacement()).current()
    now = NOW + timedelta(seconds=2 * COOLDOWN)
    down: set[str] = set()
    reports: dict[str, dict[str, Any]] = {}
    reused = 0
    for event, k in [("nothing", 0), ("nothing", 0), *events]:
        now += timedelta(seconds=10)
        name = names[k % len(names)]
        if event == "fail":
            down.add(name)
        elif event == "recover" and down:
            down.discard(sorted(down)[k % len(down)])
        elif event == "report":
            reports[name] = {"free": {"cpu": f"{125 * (k % 9)}m", "memory": "4Gi"}}
        elif event == "add":
            comps = [*comps, *(_offloaded(f"n{k:04d}{j}", k + j) for j in range(1 + k % 3))]
        elif event == "remove":
            comps = [c for j, c in enumerate(comps) if j % 7 != k % 7]
        if event in ("add", "remove"):
            g = goals(clusters, comps, links=links, regions=REGIONS)
        seen = {m: dict(reports.get(m, {})) for m in sorted(set(reports) | down)}
        for m in down:
            seen[m]["healthy"] = False
        obs = Observed.model_validate({"now": now.isoformat(), "clusters": seen})
        warm = plan(g, obs, current)
        reused += _reused(g)
        assert plan_json(warm) == plan_json(_cold(g, obs, current)), (event, k)
        if event == "apply":
            current = warm.current()
    assert reused > 0  # the second quiet cycle reuses what the first remembered


def test_a_remembered_offload_to_another_cluster_is_dropped_once_that_cluster_is_taken() -> None:
    """c4 runs on fog-2 and is kept because offloading to fog-1 (nearer to the full,
    cheapest fog-0, and a little cheaper) gains too little. A new component placed before
    rescheduling runs takes fog-1's room: c4's remembered offload no longer holds, and
    the plan says the best alternative gains nothing, as a cycle from nothing does."""
    clusters = [cluster("fog-0", tier="fog", region="r1", cpu="1", cpu_hour=0.010),
                cluster("fog-1", tier="fog", region="r1", cpu="1", cpu_hour=0.020),
                cluster("fog-2", tier="fog", region="r1", cpu="2", cpu_hour=0.021)]
    links = [(c.name, r, 5.0) for c in clusters for r in REGIONS]
    comps = [component(f"c{j}", cpu=500, memory=2**28, qos={"objective": "cost"}, cooldown=COOLDOWN)
             for j in range(5)]
    evaluate.forget()
    g = goals(clusters, comps, links=links, regions=REGIONS)
    first = plan(g, Observed.model_validate({"now": NOW.isoformat()}), CurrentPlacement())
    assert first.components["shop/c4"].replicas_by_cluster() == {"fog-2": 1}
    current = first.current()
    g = goals(clusters, [c for c in comps if c.name != "c2"], links=links, regions=REGIONS)  # fog-1 has room
    now = NOW + timedelta(seconds=2 * COOLDOWN)
    texts = []
    for added in ((), (), (component("c5", cpu=500, memory=2**28, qos={"objective": "cost"}, cooldown=COOLDOWN),)):
        if added:
            g = goals(clusters, [c for c in comps if c.name != "c2"] + list(added), links=links, regions=REGIONS)
        now += timedelta(seconds=10)
        obs = Observed.model_validate({"now": now.isoformat()})
        warm = plan(g, obs, current)
        assert plan_json(warm) == plan_json(_cold(g, obs, current))
        texts.append((_reused(g), warm.components["shop/c4"].assignments[0].reason))
    assert texts[1][0] > 0 and texts[1][1] == texts[0][1]  # the quiet cycle reused what the first remembered
    assert "improves 0.0%" not in texts[1][1] and "improves 0.0%" in texts[2][1]
