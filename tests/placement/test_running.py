"""Issue 31, the planner's side: what runs is the truth.

A healthy cluster the leads judge Degraded, Stalled or Silent is cordoned: what runs there
stays, nothing new goes there. Replicas observed NotRunning do not count as running: they
are replaced elsewhere make before break (they drain, they are not dropped), or listed
unmet (goal ``health``, with the reason) where no room exists. A drain ends only once its
replacement runs (observed Running with as many ready, or not observed on a cluster that
is not cordoned). Every cycle is checked by the independent oracle too.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qonnect_gitops.model.plan import Plan
from qonnect_gitops.placement import oracle, plan
from tests.placement.builders import NOW, cluster, component, current, goals, observed
from tests.placement.test_sequences import Cycles, drains, moves, unmet

GI = 2**30


def _fleet() -> list[Any]:
    return [cluster(f"fog-{k}", tier="fog", cpu="8", cpu_hour=k / 100) for k in (1, 2, 3)]


def _run(**placed: dict[str, int]) -> Cycles:
    web = component("web", replicas=2, cpu=1000, memory=GI, qos={"objective": "cost"})
    return Cycles(goals(_fleet(), [web]), current({f"shop/{k}": v for k, v in placed.items()},
                                                 {f"shop/{k}": NOW for k in placed}))


def _running(cl: str, replicas: int = 2, state: str = "Running", reason: str | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {"component": "shop/web", "cluster": cl, "state": state, "readyReplicas": replicas}
    if reason:
        entry["reason"] = reason
    return entry


def test_a_cordoned_cluster_keeps_what_runs_and_takes_nothing_new() -> None:
    run = _run(web={"fog-1": 2})
    stalled = {"fog-1": {"state": "Stalled", "reason": "PruneLimitExceeded"}}
    p = run.run(clusters=stalled)
    assert p.placements()["shop/web"] == {"fog-1": 2} and p.moves == ()
    assert "cluster fog-1 is Stalled (PruneLimitExceeded): nothing new goes there" in \
        p.components["shop/web"].assignments[0].reason
    scaled = component("web", replicas=3, cpu=1000, memory=GI, qos={"objective": "cost"})
    p = run.run(g=goals(_fleet(), [scaled, component("api", qos={"objective": "cost"})]), clusters=stalled)
    assert p.placements()["shop/web"] == {"fog-1": 2, "fog-2": 1}  # the third one elsewhere
    assert p.placements()["shop/api"] == {"fog-2": 1}  # the cheapest cluster is cordoned


def test_a_cluster_reported_unhealthy_fails_over_whatever_its_state() -> None:
    run = _run(web={"fog-1": 2})
    p = run.run(clusters={"fog-1": {"healthy": False, "state": "Degraded", "reason": "ApiUnavailable"}})
    assert p.placements()["shop/web"] == {"fog-2": 2} and p.reason == "failover"
    assert p.moves[0].detail == "fog-1 failed (Degraded (ApiUnavailable))"


def test_silence_is_judged_by_the_health_state_when_there_is_one() -> None:
    # The leads' health model judged a cluster silent past the grace Silent, yet healthy
    # (evictions held back by the storm guard): cordoned, not failed over. Without a state
    # (a hand-written file) the heartbeat's age against the grace decides, as before.
    run = _run(web={"fog-1": 2})
    p = run.run(clusters={"fog-1": {"heartbeatAgeSeconds": 100, "state": "Silent", "reason": "EvictionsPaused"}})
    assert p.placements()["shop/web"] == {"fog-1": 2} and p.moves == ()
    p = run.run(clusters={"fog-1": {"heartbeatAgeSeconds": 100}})
    assert p.placements()["shop/web"] == {"fog-2": 2} and p.reason == "failover"


def test_replicas_that_do_not_run_are_replaced_and_drain_until_the_replacement_runs() -> None:
    run = _run(web={"fog-1": 2})
    p = run.run(workloads=[_running("fog-1", 0, "NotRunning", "ProgressDeadlineExceeded")])
    assert p.placements()["shop/web"] == {"fog-2": 2} and drains(p) == {"fog-1": 2}
    assert moves(p) == [("fog-1", "fog-2", 2, "failover")] and p.moves[0].goal == "health"
    assert p.moves[0].detail == "shop/web does not run on fog-1 (ProgressDeadlineExceeded)"
    # The replacement is progressing: the not-running replicas drain on (make before break).
    p = run.run(workloads=[_running("fog-1", 0, "NotRunning"), _running("fog-2", 0, "Progressing")])
    assert p.placements()["shop/web"] == {"fog-2": 2} and drains(p) == {"fog-1": 2} and p.moves == ()
    # Running, but one of two ready: not yet.
    p = run.run(workloads=[_running("fog-1", 0, "NotRunning"), _running("fog-2", 1)])
    assert drains(p) == {"fog-1": 2}
    p = run.run(workloads=[_running("fog-1", 0, "NotRunning"), _running("fog-2", 2)])
    assert drains(p) == {} and p.placements()["shop/web"] == {"fog-2": 2} and p.moves == ()


def test_replicas_that_do_not_run_and_fit_nowhere_else_are_unmet_health_with_the_reason() -> None:
    web = component("web", replicas=2, cpu=1000, memory=GI, qos={"objective": "cost", "tiers": ["edge"]})
    run = Cycles(goals([cluster("edge-1", tier="edge"), *_fleet()], [web]), current({"shop/web": {"edge-1": 2}}))
    p = run.run(workloads=[{"component": "shop/web", "cluster": "edge-1", "state": "NotRunning",
                            "reason": "CrashLoopBackOff"}])
    assert drains(p) == {"edge-1": 2} and p.placements()["shop/web"] == {}
    assert "shop/web does not run on edge-1 (CrashLoopBackOff)" in unmet(p)["health"]


def test_the_old_replicas_of_a_move_stay_while_the_new_ones_are_on_a_cordoned_cluster() -> None:
    # A move's new replicas went to a cluster whose agent then refused its branch: the
    # old ones must not be dropped (the component would run nowhere, "unmet: []").
    run = _run(web={"fog-2": 2})
    web = component("web", replicas=2, cpu=1000, memory=GI, qos={"objective": "cost", "tiers": ["cloud"]})
    p = run.run(g=goals(_fleet() + [cluster("cloud-9", cpu="8", cpu_hour=0.04)], [web]))
    assert p.placements()["shop/web"] == {"cloud-9": 2} and drains(p) == {"fog-2": 2}
    p = run.run(clusters={"cloud-9": {"state": "Stalled", "reason": "PruneLimitExceeded"}})
    assert drains(p) == {"fog-2": 2} and p.placements()["shop/web"] == {"cloud-9": 2}
    p = run.run()  # the cluster applied its branch, nothing observed: as before, the drain ends
    assert drains(p) == {}


def test_a_statefulset_that_does_not_run_waits_listed_unmet() -> None:
    db = component("db", kind="StatefulSet", qos={"objective": "cost"})
    run = Cycles(goals(_fleet(), [db]), current({"shop/db": {"fog-1": 1}}))
    p = run.run(workloads=[{"component": "shop/db", "cluster": "fog-1", "state": "NotRunning",
                            "reason": "Unschedulable"}])
    assert p.placements()["shop/db"] == {"fog-1": 1} and p.moves == ()
    assert "shop/db does not run on fog-1 (Unschedulable)" in unmet(p, "shop/db")["health"]


# ----- a cluster driven through random state sequences -------------------------------------------

STATES = ("Ready", "Degraded", "Stalled", "Silent", "Failed")


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(STATES), st.integers(1, 3), st.booleans()), min_size=2, max_size=8),
       st.integers(1, 3))
def test_a_cluster_through_random_states_moves_each_component_at_most_once_per_change_and_never_back(
        states: list[tuple[str, int, bool]], spare: int) -> None:
    """fog-1 goes through random health states, each held one to three cycles (Stalled:
    what it was sent may be reported NotRunning); the rest of the fleet has room. Every
    cycle passes the oracle; no component moves in more than one cycle per state change
    of fog-1, and none moves back to fog-1 after leaving it (ten-second cycles, all inside
    the cooldown: no rule may move it back)."""
    fleet = [cluster("fog-1", cpu="8", cpu_hour=0.01), *(cluster(f"fog-{2 + k}", cpu="8", cpu_hour=0.02 + k / 100)
                                                          for k in range(spare))]
    comps = [component(f"c{j}", replicas=1 + j % 2, cpu=1000, memory=GI, qos={"objective": "cost"}) for j in range(3)]
    g = goals(fleet, comps)
    first = plan(g, observed(), current({}))
    cur, last, now = first.current(), first, NOW
    changes = 0
    moved_in: dict[str, list[int]] = {}
    left: set[str] = set()
    previous = "Ready"
    cycle = 0
    for state, hold, refuse in states:
        if state != previous:
            changes += 1
        previous = state
        for _ in range(hold):
            cycle += 1
            now += timedelta(seconds=10)
            entry: dict[str, Any] = {}
            if state == "Failed":
                entry = {"healthy": False}
            elif state != "Ready":
                entry = {"state": state, "reason": {"Degraded": "ApiUnavailable", "Stalled": "PruneLimitExceeded",
                                                    "Silent": "EvictionsPaused"}[state]}
            in_force = {key for key, cp in last.components.items() if "fog-1" in cp.replicas_by_cluster()}
            workloads = [{"component": key, "cluster": "fog-1", "state": "NotRunning", "reason": "PruneLimitExceeded"}
                         for key in sorted(in_force) if state == "Stalled" and refuse]
            obs = observed(now=now.isoformat(), clusters={"fog-1": entry} if entry else {}, workloads=workloads)
            p: Plan = plan(g, obs, cur)
            findings = oracle.check(g, obs, cur, p, before=last)
            assert not findings, oracle.problems(findings)
            for m in p.moves:
                moved_in.setdefault(m.component, [])
                if not moved_in[m.component] or moved_in[m.component][-1] != cycle:
                    moved_in[m.component].append(cycle)
                if m.source == "fog-1":
                    left.add(m.component)
                assert not (m.target == "fog-1" and m.component in left), f"{m.component} flaps back to fog-1"
            cur, last = p.current(), p
    for key, cycles in moved_in.items():
        assert len(cycles) <= changes, (key, cycles, changes)
