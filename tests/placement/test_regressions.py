"""Every example of issue 13 ("every hard goal holds on every cycle"), through ``plan()``.

Each test builds the fleet the example describes, the placement in force and the goals
edit or observation that follows, and checks the plan repairs the goal in that cycle or
lists it in ``unmet`` with a true reason.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from qonnect_gitops.model.plan import CurrentPlacement, Plan, ReplicaRequest
from qonnect_gitops.placement import plan
from tests.placement.builders import (
    NOW,
    cluster,
    component,
    current,
    goals,
    observed,
)

GI = 2**30
LATER = NOW + timedelta(seconds=30)  # well inside every cooldown


def unmet(p: Plan, key: str = "shop/web") -> dict[str, str]:
    return {u.goal: u.message for u in p.unmet if u.component == key}


def moved(p: Plan, key: str = "shop/web") -> int:
    return sum(m.replicas for m in p.moves if m.component == key and m.target is not None)


def edge_fleet(cpu: int) -> tuple:
    """edge-1: two 3.5-CPU nodes; fog-1 and cloud-1 nearby with room."""
    clusters = [
        cluster("edge-1", tier="edge", cpu="3500m", memory="7Gi", count=2, cpu_hour=0.01),
        cluster("fog-1", tier="fog", cpu="8", memory="32Gi", count=3, cpu_hour=0.05),
        cluster("cloud-1", cpu="32", memory="128Gi", count=4, cpu_hour=0.08),
    ]
    links = [("edge-1", "fog-1", 5), ("edge-1", "cloud-1", 20), ("fog-1", "cloud-1", 15)]
    web = component("web", replicas=3, cpu=cpu, memory=GI, qos={"objective": "cost"})
    return goals(clusters, [web], links=links), web


# ----- capacity at today's per-replica size ------------------------------------------------


def test_request_raised_past_every_node_moves_all_replicas_at_once() -> None:
    g, _ = edge_fleet(4000)
    cur = current({"shop/web": {"edge-1": 3}}, {"shop/web": LATER - timedelta(seconds=5)})
    p = plan(g, observed(now=LATER.isoformat()), cur)
    assert "edge-1" not in p.placements()["shop/web"]
    assert sum(p.placements()["shop/web"].values()) == 3
    assert moved(p) == 3 and p.unmet == ()
    # No draining on edge-1: at 4 CPU a replica cannot run there at all.
    assert p.components["shop/web"].draining == ()
    assert all("no node of edge-1 holds one replica at 4 CPU" in m.detail for m in p.moves)
    assert not any("kept" in a.reason for a in p.components["shop/web"].assignments)


def test_request_raised_so_only_two_fit_moves_the_third() -> None:
    g, _ = edge_fleet(2000)  # a 3.5-CPU node holds one 2-CPU replica: two fit, not three
    cur = current({"shop/web": {"edge-1": 3}}, {"shop/web": LATER - timedelta(seconds=5)})
    p = plan(g, observed(now=LATER.isoformat()), cur)
    where = p.placements()["shop/web"]
    assert where["edge-1"] == 2 and sum(where.values()) == 3
    assert moved(p) == 1 and p.reason == "goals-changed"


def test_resize_on_an_observed_cluster_uses_the_size_the_replicas_run_at() -> None:
    g, _ = edge_fleet(4000)
    # The agent reports both nodes with 0.5 CPU free: the three 1-CPU replicas use 3 of 7.
    nodes = [{"name": f"n{k}", "arch": "amd64", "allocatable": {"cpu": "3500m", "memory": "7Gi"},
              "free": {"cpu": "500m" if k else "1500m", "memory": "5Gi"}} for k in range(2)]
    obs = observed(now=LATER.isoformat(), clusters={"edge-1": {"nodes": nodes}})
    cur = CurrentPlacement(placements={"shop/web": {"edge-1": 3}},
                           requests={"shop/web": ReplicaRequest.model_validate({"cpu": "1", "memory": "1Gi"})})
    p = plan(g, obs, cur)
    assert "edge-1" not in p.placements()["shop/web"]  # no 3.5-CPU node holds 4 CPU
    # 1.5 CPU: given back their 1 CPU each, node 1 (2 used by them) holds two and node 2
    # (3 used, 1 by them) one more: all three stay.
    g2, _ = edge_fleet(1500)
    assert plan(g2, obs, cur).placements()["shop/web"] == {"edge-1": 3}
    g3, _ = edge_fleet(2000)  # 2 CPU: node 1 holds one; node 2 has 1.5 free once given back
    assert plan(g3, obs, cur).placements()["shop/web"]["edge-1"] == 1


def test_nothing_changed_moves_nothing_even_on_a_full_cluster() -> None:
    g, _ = edge_fleet(1500)  # two per node: the cluster holds four, three run
    cur = current({"shop/web": {"edge-1": 3}}, {"shop/web": NOW - timedelta(hours=1)})
    p = plan(g, observed(), cur)
    assert p.placements()["shop/web"] == {"edge-1": 3} and p.moves == () and p.unmet == ()


# ----- availability --------------------------------------------------------------------------


def _three(**qos: object) -> tuple:
    clusters = [cluster(n, cpu_hour=price) for n, price in (("a", 0.01), ("b", 0.02), ("c", 0.03))]
    return clusters


def test_failover_keeps_min_clusters_on_two_clusters() -> None:
    web = component("web", replicas=2, qos={"objective": "cost", "availability": {"minClusters": 2}})
    g = goals(_three(), [web])
    cur = current({"shop/web": {"a": 1, "b": 1}}, {"shop/web": LATER})
    p = plan(g, observed(now=LATER.isoformat(), clusters={"a": {"healthy": False}}), cur)
    assert p.placements()["shop/web"] == {"b": 1, "c": 1}
    assert p.reason == "failover" and p.unmet == ()


def test_scale_down_keeps_a_replica_on_each_of_min_clusters() -> None:
    qos = {"objective": "cost", "availability": {"minClusters": 2},
           "scaling": {"minReplicas": 2, "maxReplicas": 6, "targetRpsPerReplica": 100}}
    g = goals(_three(), [component("web", replicas=2, qos=qos)])
    cur = current({"shop/web": {"a": 2, "b": 1}}, {"shop/web": NOW - timedelta(hours=1)})
    p = plan(g, observed(), cur)  # no traffic: down to minReplicas 2
    assert p.placements()["shop/web"] == {"a": 1, "b": 1} and p.reason == "scaling"


def test_scaling_never_drops_below_min_clusters_while_max_replicas_allows() -> None:
    qos = {"availability": {"minClusters": 3},
           "scaling": {"minReplicas": 1, "maxReplicas": 6, "targetRpsPerReplica": 100}}
    g = goals(_three(), [component("web", replicas=1, qos=qos)])
    p = plan(g, observed(), current({}))
    assert sorted(p.placements()["shop/web"].values()) == [1, 1, 1] and p.unmet == ()


def test_raising_min_clusters_is_repaired_at_once_not_judged_as_an_improvement() -> None:
    web = component("web", replicas=3, qos={"objective": "cost", "availability": {"minClusters": 2}})
    g = goals(_three(), [web])
    cur = current({"shop/web": {"a": 3}}, {"shop/web": LATER})  # in cooldown
    p = plan(g, observed(now=LATER.isoformat()), cur)
    where = p.placements()["shop/web"]
    assert len(where) == 2 and sum(where.values()) == 3 and where["a"] == 2
    assert p.reason == "goals-changed" and p.unmet == ()
    assert any("availability" in m.detail for m in p.moves)
    # make before break: the replica leaving a drains there
    assert [(d.cluster, d.replicas) for d in p.components["shop/web"].draining] == [("a", 1)]


def test_min_clusters_no_set_of_clusters_can_meet_is_unmet_not_ignored() -> None:
    web = component("web", replicas=3, qos={"tiers": ["fog"], "availability": {"minClusters": 2}})
    g = goals([cluster("fog-1", tier="fog"), cluster("cloud-1")], [web])
    p = plan(g, observed(), current({}))
    assert p.placements()["shop/web"] == {"fog-1": 3}
    assert "runs on 1 cluster(s), minClusters is 2" in unmet(p)["availability"]
    assert "1 is not in one of the component's tiers" in unmet(p)["availability"]


def test_fewer_replicas_than_min_clusters_is_unmet() -> None:
    g = goals(_three(), [component("web", replicas=1, qos={"availability": {"minClusters": 2}})])
    assert "1 replica(s) cannot run on minClusters 2 clusters" in unmet(plan(g, observed(), current({})))["availability"]


# ----- latency envelope and tier edits ---------------------------------------------------------


def _envelope(max_ms: float, replicas: int = 3) -> tuple:
    clusters = [cluster("a", region="us", cpu="16"), cluster("b", region="us", cpu="16")]
    web = component("web", replicas=replicas, budget=1, qos={"latency": [{"region": "eu", "maxMs": max_ms}]})
    return goals(clusters, [web], links=[("a", "eu", 40), ("b", "eu", 9)], regions=("eu", "us"))


def test_envelope_edit_moves_every_replica_at_once_inside_the_cooldown() -> None:
    cur = current({"shop/web": {"a": 3}}, {"shop/web": LATER})  # just moved: in cooldown
    p = plan(_envelope(10), observed(now=LATER.isoformat()), cur)
    assert p.placements()["shop/web"] == {"b": 3}  # not one per cycle (disruption budget 1)
    assert p.reason == "goals-changed" and p.unmet == ()
    assert all("outside the latency envelope by its declared latency" in m.detail for m in p.moves)
    assert [(d.cluster, d.replicas) for d in p.components["shop/web"].draining] == [("a", 3)]


def test_tier_edit_moves_at_once_too() -> None:
    clusters = [cluster("edge-1", tier="edge"), cluster("fog-1", tier="fog")]
    web = component("web", replicas=2, qos={"tiers": ["fog"]})
    p = plan(goals(clusters, [web]), observed(now=LATER.isoformat()), current({"shop/web": {"edge-1": 2}}, {"shop/web": LATER}))
    assert p.placements()["shop/web"] == {"fog-1": 2}
    assert {m.detail for m in p.moves} == {"edge-1 is not in one of the component's tiers"}


def test_an_envelope_nothing_meets_is_unmet_and_the_replicas_keep_running() -> None:
    cur = current({"shop/web": {"a": 3}}, {"shop/web": LATER})
    p = plan(_envelope(5), observed(now=LATER.isoformat()), cur)
    assert p.placements()["shop/web"] == {}
    assert "3 of 3 replica(s)" in unmet(p)["latency"] and "outside the latency envelope" in unmet(p)["latency"]
    # make before break: nothing replaces them, so they keep running (draining) and say so
    assert [(d.cluster, d.replicas) for d in p.components["shop/web"].draining] == [("a", 3)]
    again = plan(_envelope(5), observed(now=(LATER + timedelta(seconds=60)).isoformat()), p.current())
    assert [(d.cluster, d.replicas) for d in again.components["shop/web"].draining] == [("a", 3)]


def test_a_measured_breach_waits_for_the_cooldown_and_is_listed_meanwhile() -> None:
    cur = current({"shop/web": {"b": 3}}, {"shop/web": LATER})
    measured = [{"from": "b", "to": "eu", "ms": 60}]
    p = plan(_envelope(50), observed(now=LATER.isoformat(), latencies=measured), cur)
    assert p.placements()["shop/web"] == {"b": 3} and p.moves == ()
    assert "b is outside the latency envelope by measured latency (60 ms to eu > 50)" in unmet(p)["latency"]
    # Once it has lasted past the cooldown, it moves (all replicas: it is a breach).
    late = plan(_envelope(50), observed(now=(LATER + timedelta(hours=1)).isoformat(), latencies=measured), cur)
    assert late.placements()["shop/web"] == {"a": 3} and late.reason == "rescheduling" and late.unmet == ()


# ----- spread ----------------------------------------------------------------------------------


def test_scale_up_with_spread_stays_even() -> None:
    qos = {"availability": {"minClusters": 2, "spread": True},
           "scaling": {"minReplicas": 1, "maxReplicas": 9, "targetRpsPerReplica": 100}}
    g = goals(_three(), [component("web", replicas=2, qos=qos)])
    cur = current({"shop/web": {"a": 1, "b": 1}}, {"shop/web": NOW - timedelta(hours=1)})
    obs = observed(traffic=[{"component": "shop/web", "region": "eu-central", "rps": 500}])
    where = plan(g, obs, cur).placements()["shop/web"]
    assert sorted(where.values()) == [2, 3] and set(where) == {"a", "b"}


def test_spread_switched_on_rebalances_at_once() -> None:
    g = goals(_three(), [component("web", replicas=5, qos={"availability": {"minClusters": 2, "spread": True}})])
    cur = current({"shop/web": {"a": 4, "b": 1}}, {"shop/web": LATER})
    p = plan(g, observed(now=LATER.isoformat()), cur)
    assert sorted(p.placements()["shop/web"].values()) == [2, 3] and p.unmet == ()


def test_spread_capacity_cannot_hold_is_unmet() -> None:
    clusters = [cluster("a", cpu="8"), cluster("b", cpu="1")]
    web = component("web", replicas=4, cpu=1000, qos={"availability": {"minClusters": 2, "spread": True}})
    p = plan(goals(clusters, [web]), observed(), current({}))
    assert sum(p.placements()["shop/web"].values()) == 4
    assert "spread" in unmet(p)


# ----- explanations ----------------------------------------------------------------------------


def test_without_offloading_the_preferred_cluster_is_one_whose_nodes_hold_a_replica() -> None:
    clusters = [
        cluster("fog-1", tier="fog", cpu="8", count=3, cpu_hour=0.01),
        cluster("cloud-3", cpu="64", memory="256Gi", count=2, cpu_hour=0.05),
    ]
    big = component("big", cpu=40000, memory=GI, qos={"offloading": False, "objective": "cost"})
    p = plan(goals(clusters, [big]), observed(), current({}))
    assert p.placements()["shop/big"] == {"cloud-3": 1} and p.unplaced == ()


def test_rule_excluded_clusters_are_not_called_full() -> None:
    clusters = [cluster("a", cpu="2", cpu_hour=0.01), cluster("b", cpu="16", cpu_hour=0.02)]
    web = component("web", replicas=4, cpu=1000, qos={"objective": "cost", "bursting": False})
    p = plan(goals(clusters, [web]), observed(), current({}))
    assert p.placements()["shop/web"] == {"a": 2}
    reason = p.unplaced[0].reason
    assert "bursting is off" in reason and "1 with room left unused by its own rules" in reason
    assert "lack room" not in reason.split("elsewhere:")[1]


def test_kept_assignments_carry_their_score_and_breakdown() -> None:
    g = goals(_three(), [component("web", replicas=2, qos={"objective": "cost"})])
    p = plan(g, observed(now=LATER.isoformat()), current({"shop/web": {"b": 2}}, {"shop/web": LATER}))
    a = p.components["shop/web"].assignments[0]
    assert a.reason.startswith("kept: in cooldown until") and a.score is not None and a.breakdown["cost"] > 0


def test_statefulset_waiting_on_a_failed_cluster_is_unmet_health() -> None:
    g = goals(_three(), [component("db", kind="StatefulSet")])
    p = plan(g, observed(clusters={"a": {"healthy": False}}), current({"shop/db": {"a": 1}}))
    assert p.placements()["shop/db"] == {"a": 1}
    assert "wait on failed cluster a (reported unhealthy)" in unmet(p, "shop/db")["health"]


# ----- docs and code agree --------------------------------------------------------------------


def test_latency_given_in_both_directions_counts_with_the_larger_value() -> None:
    g = goals([cluster("a", region="us"), cluster("b", region="us")],
              [component("web", qos={"latency": [{"region": "eu", "maxMs": 50}]})],
              links=[("a", "eu", 30), ("b", "eu", 40)], regions=("eu", "us"))
    for order in ([("eu", "a", 60), ("a", "eu", 20)], [("a", "eu", 20), ("eu", "a", 60)]):
        lat = [{"from": s, "to": t, "ms": ms} for s, t, ms in order]
        assert plan(g, observed(latencies=lat), current({})).placements()["shop/web"] == {"b": 1}


def test_tier_nudge_is_a_tenth_of_the_position_over_the_last() -> None:
    clusters = [cluster("e", tier="edge"), cluster("f", tier="fog"), cluster("c")]
    web = component("web", replicas=3, qos={"tiers": ["edge", "fog", "cloud"], "availability": {"minClusters": 3}})
    p = plan(goals(clusters, [web]), observed(), current({}))
    tiers = {a.cluster: a.breakdown.get("tier", 0.0) for a in p.components["shop/web"].assignments}
    assert tiers == {"e": 0.0, "f": 0.05, "c": 0.1}


def test_closeness_divides_by_twice_the_largest_latency() -> None:
    clusters = [cluster("a", region="r1"), cluster("b", region="r2")]
    comps = [
        component("front", calls=("shop/back",), qos={"placement": {"policy": "affinity", "clusters": ["a"]}}),
        component("back", qos={"placement": {"policy": "affinity", "clusters": ["b"]}}),
    ]
    p = plan(goals(clusters, comps, links=[("a", "b", 40)]), observed(), current({}))
    # 0.3 x 40 ms / (2 x 40 ms)
    assert p.components["shop/front"].assignments[0].breakdown["closeness"] == 0.15


def test_reports_lagging_a_decision_do_not_let_a_cluster_take_more_than_it_has() -> None:
    # fog-1 (3 x 8 CPU) was given 40 half-CPU replicas by the last plan; its agent still
    # reports the nodes empty (the pods are not scheduled yet). Scaling to 100 must not
    # put more than its 24 CPU there.
    clusters = [cluster("fog-1", tier="fog", cpu="8", memory="32Gi", count=3, cpu_hour=0.01),
                cluster("cloud-1", cpu="32", memory="128Gi", count=4, cpu_hour=0.05)]
    ingest = component("ingest", replicas=100, cpu=500, memory=2**28, qos={"objective": "cost"})
    nodes = [{"name": f"n{k}", "allocatable": {"cpu": "8", "memory": "32Gi"}, "free": {"cpu": "8", "memory": "32Gi"}}
             for k in range(3)]
    p = plan(goals(clusters, [ingest]), observed(clusters={"fog-1": {"nodes": nodes}}),
             current({"shop/ingest": {"fog-1": 40}}, {"shop/ingest": NOW - timedelta(hours=1)}))
    assert p.placements()["shop/ingest"]["fog-1"] <= 48
    assert sum(p.placements()["shop/ingest"].values()) == 100


def _edge_quad() -> tuple[list, list]:
    shape = [{"count": 1, "cpu": "1000m", "memory": "2Gi", "arch": "amd64"}]
    taint = ({"key": "edge", "value": "true", "effect": "NoSchedule"},)
    fleet = [cluster("edge-0", tier="edge", region="r1", nodes=shape, cpu_hour=0.01),
             cluster("edge-1", tier="edge", region="r1", nodes=shape, taints=taint, cpu_hour=0.01),
             cluster("edge-2", tier="edge", region="r2", nodes=shape, cpu_hour=0.01),
             cluster("edge-3", tier="edge", region="r2", nodes=shape, cpu_hour=0.01)]
    links = [("edge-0", "r2", 2.0), ("edge-1", "r2", 1.0), ("edge-2", "r1", 1.0), ("edge-3", "r1", 1.0)]
    return fleet, links


TOLERATE_EDGE = [{"key": "edge", "operator": "Exists"}]


@pytest.mark.parametrize("crowd", [False, True], ids=["placed-in-part", "placed-nowhere"])
def test_a_component_short_of_replicas_gets_in_its_first_plan_what_a_quiet_replan_adds(crowd: bool) -> None:
    # Found by the property test: shop/c2 (1 GiB replicas, bursting and offloading off)
    # was placed before shop/c1, which calls it: edge-0 held two of three (or, with c0
    # scaled to three replicas there first, none), and the next quiet cycle placed the
    # rest on edge-1 once c1's place was known. The first plan must be that fixpoint.
    fleet, links = _edge_quad()
    rules = {"objective": "latency", "tolerations": TOLERATE_EDGE, "offloading": False, "bursting": False}
    scaled = {"minReplicas": 1, "maxReplicas": 5, "targetRpsPerReplica": 100}
    comps = [
        component("c1", replicas=1, cpu=250, memory=GI // 4, calls=("shop/c2",),
                  qos={"objective": "latency", "offloading": True, "bursting": False}),
        component("c2", replicas=3, cpu=250, memory=GI, cooldown=300.0,
                  qos={**rules, "scaling": scaled} if crowd else rules),
    ]
    traffic = []
    if crowd:
        comps.append(component("c0", replicas=1, cpu=250, memory=GI, cooldown=300.0,
                               qos={**rules, "tiers": ["edge", "fog"], "scaling": scaled}))
        traffic = [{"component": f"shop/{c}", "region": "r1", "rps": 250.0} for c in ("c0", "c2")]
    g = goals(fleet, comps, links=links, regions=("r1", "r2"))
    first = plan(g, observed(traffic=traffic), CurrentPlacement())
    assert first.placements()["shop/c2"]
    replan = plan(g, observed(now=LATER, traffic=traffic), first.current())
    assert replan.moves == ()


def test_running_replicas_go_back_on_the_nodes_only_they_can_use_before_multi_arch_ones() -> None:
    # Found by the property test: edge-1 has an amd64 node (2 CPU, 4 GiB) and an arm64 one
    # (8 CPU, 2 GiB). The first plan put c2 (arm64 only) and two c4 (either arch, 1 CPU)
    # on the arm64 node and c3 (amd64 only, 4 GiB) on the amd64 node, and found no room
    # for a third c4. Putting the running replicas back biggest first packed c4 onto the
    # amd64 node, left room on the arm64 one, and a quiet cycle scaled c4 up there.
    nodes = [{"count": 1, "cpu": "2000m", "memory": "4Gi", "arch": "amd64"},
             {"count": 1, "cpu": "8000m", "memory": "2Gi", "arch": "arm64"}]
    fleet = [cluster("edge-1", tier="edge", region="r1", nodes=nodes, cpu_hour=0.01)]
    rules = {"objective": "latency", "offloading": False, "bursting": False}
    comps = [
        component("c2", replicas=2, cpu=3000, memory=GI // 4, arch=("arm64",), qos=rules),
        component("c3", replicas=1, cpu=250, memory=4 * GI, qos=rules),
        # a follower is placed after what it follows: c3 takes the amd64 node first
        dataclasses.replace(component("c4", replicas=3, cpu=1000, memory=GI // 4, arch=("amd64", "arm64"), qos=rules),
                            colocate_with=("shop/c3",)),
    ]
    g = goals(fleet, comps, regions=("r1",))
    first = plan(g, observed(), CurrentPlacement())
    assert first.placements()["shop/c4"] == {"edge-1": 2}
    assert plan(g, observed(now=LATER), first.current()).moves == ()


# Serves r1 and r2 from within 10 ms, scaled by traffic, offloading and bursting off.
NEAR_BOTH = {"objective": "latency", "latency": [{"region": r, "maxMs": 10.0, "serve": "nearest"} for r in ("r1", "r2")],
             "tolerations": TOLERATE_EDGE, "offloading": False, "bursting": False,
             "scaling": {"minReplicas": 1, "maxReplicas": 5, "targetRpsPerReplica": 100}}


def _pair_c0_c1() -> list:
    """c0 (edge or fog) and c1 beside it: small replicas that fill edge nodes first."""
    return [component("c0", cpu=250, memory=GI // 4, qos={**NEAR_BOTH, "tiers": ["edge", "fog"]}),
            dataclasses.replace(component("c1", cpu=250, memory=GI // 4, qos=NEAR_BOTH), colocate_with=("shop/c0",))]


def test_a_cluster_a_measurement_puts_inside_the_envelope_keeps_its_replicas_next_cycle() -> None:
    # Found by the property test: cloud-2 is declared 11 ms from both r1 and r2 (outside
    # a 10 ms serve-nearest envelope) but measured 0 ms from r1. The plan placed shop/c2
    # there (a measurement overrides the declared latency); the next, quiet cycle judged
    # the running replicas by the declared latency alone, "moved" one from cloud-2 to
    # cloud-2 and dropped the other two.
    shape = [{"count": 1, "cpu": "1000m", "memory": "2Gi", "arch": "amd64"}]
    fleet = [cluster("edge-0", tier="edge", region="r1", nodes=shape, cpu_hour=0.01),
             cluster("edge-1", tier="edge", region="r1", nodes=shape, cpu_hour=0.01),
             cluster("cloud-2", tier="cloud", region="r2", nodes=shape, cpu_hour=0.01)]
    links = [("edge-0", "r2", 1.0), ("edge-1", "r2", 1.0), ("cloud-2", "r1", 11.0), ("cloud-2", "r2", 11.0)]

    comps = [
        *_pair_c0_c1(),
        component("c2", cpu=250, memory=GI // 4, qos={**NEAR_BOTH, "tiers": ["fog", "cloud"]}),
    ]
    g = goals(fleet, comps, links=links, regions=("r1", "r2"))
    traffic = [{"component": c.key, "region": "r1", "rps": 250.0} for c in comps]
    before = plan(g, observed(traffic=traffic), CurrentPlacement())
    assert before.placements()["shop/c2"] == {}  # declared: cloud-2 is near neither region
    measured = [{"from": "cloud-2", "to": "r1", "ms": 0.0}]
    first = plan(g, observed(now=NOW + timedelta(seconds=10), latencies=measured, traffic=traffic),
                 before.current())
    assert first.placements()["shop/c2"] == {"cloud-2": 3}
    replan = plan(g, observed(now=NOW + timedelta(seconds=20), latencies=measured, traffic=traffic),
                  first.current())
    assert replan.moves == ()
    assert replan.placements() == first.placements()
    assert replan.unmet == first.unmet


@pytest.mark.xfail(strict=True, reason="known bug: a follower placed after what it follows packs "
                                        "nodes in another order than the next cycle's settlement")
def test_a_follower_bigger_than_its_anchors_gets_in_its_first_plan_what_a_quiet_replan_adds() -> None:
    # Found by the property test (not fixed yet): edge-0 has two 1-CPU, 2 GiB nodes. c0
    # and c1 (three 256 MiB replicas each) go there first, first fit: four on one node,
    # two on the other; c2 (1 GiB, following c1) is placed last and finds room for one.
    # The quiet cycle after puts the running replicas back biggest first (c2 first),
    # which leaves room for a second c2, and scales it up with nothing changed.
    one = {"count": 1, "cpu": "1000m", "memory": "2Gi", "arch": "amd64"}
    fleet = [cluster("edge-0", tier="edge", region="r1", nodes=[one, one], cpu_hour=0.01),
             cluster("edge-1", tier="edge", region="r1", nodes=[one], cpu_hour=0.01),
             cluster("edge-2", tier="edge", region="r1", nodes=[one], cpu_hour=0.01)]
    links = [("edge-0", "r2", 1.0), ("edge-1", "r2", 1.0), ("edge-2", "r2", 1.0)]
    comps = [
        *_pair_c0_c1(),
        dataclasses.replace(component("c2", cpu=250, memory=GI, qos={**NEAR_BOTH, "tiers": ["edge", "fog"]}),
                            colocate_with=("shop/c1",)),
    ]
    g = goals(fleet, comps, links=links, regions=("r1", "r2"))
    traffic = [{"component": c.key, "region": "r1", "rps": 250.0} for c in comps]
    first = plan(g, observed(traffic=traffic), CurrentPlacement())
    assert first.placements()["shop/c2"]
    replan = plan(g, observed(now=LATER, traffic=traffic), first.current())
    assert replan.moves == ()


def test_a_replaced_draining_replica_frees_its_capacity_in_the_cycle_after_its_replacement() -> None:
    # Found by the property test: shop/c3 (4 GiB replicas) had to leave fog-1 (an edit to
    # its latency goal); one replacement fit on edge-0, so three drained on fog-1. The
    # next cycle kept two draining (the replaced one is gone) but still charged all three
    # to fog-1 for that whole cycle, so shop/c2 scaled up there only one quiet cycle later.
    def node(memory: str) -> list[dict[str, object]]:
        return [{"count": 1, "cpu": "1000m", "memory": memory, "arch": "amd64"}]

    fleet = [cluster("edge-0", tier="edge", region="r1", nodes=node("4Gi"), cpu_hour=0.01),
             cluster("fog-1", tier="fog", region="r1", nodes=node("16Gi"), cpu_hour=0.01)]
    links = [("edge-0", "r1", 1.0), ("edge-0", "r2", 1.0), ("fog-1", "r2", 53.0)]
    scaled = {"objective": "latency", "offloading": False, "bursting": False,
              "scaling": {"minReplicas": 1, "maxReplicas": 5, "targetRpsPerReplica": 100}}
    near = [{"region": r, "maxMs": 10.0, "serve": "nearest"} for r in ("r1", "r2")]
    c2 = component("c2", cpu=250, memory=GI // 4, qos={**scaled, "latency": near, "tiers": ["fog"]})
    c3 = component("c3", cpu=250, memory=4 * GI, qos={**scaled, "latency": [{"region": "r1", "maxMs": 10.0}]})
    traffic = [{"component": c.key, "region": "r1", "rps": 250.0} for c in (c2, c3)]
    first = plan(goals(fleet, [c2, c3], links=links, regions=("r1", "r2")), observed(traffic=traffic),
                 CurrentPlacement())
    assert first.placements() == {"shop/c2": {"fog-1": 1}, "shop/c3": {"fog-1": 3}}
    moved_c3 = component("c3", cpu=250, memory=4 * GI, qos={**scaled, "latency": [{"region": "r2", "maxMs": 52.0}]})
    g = goals(fleet, [c2, moved_c3], links=links, regions=("r1", "r2"))
    edit = plan(g, observed(now=NOW + timedelta(seconds=10), traffic=traffic), first.current())
    assert edit.placements()["shop/c3"] == {"edge-0": 1}
    assert {(d.cluster, d.replicas) for d in edit.components["shop/c3"].draining} == {("fog-1", 3)}
    after_edit = plan(g, observed(now=NOW + timedelta(seconds=20), traffic=traffic), edit.current())
    assert {(d.cluster, d.replicas) for d in after_edit.components["shop/c3"].draining} == {("fog-1", 2)}
    assert after_edit.placements()["shop/c2"] == {"fog-1": 2}  # the room the replaced replica left
    quiet = plan(g, observed(now=NOW + timedelta(seconds=30), traffic=traffic), after_edit.current())
    assert quiet.moves == ()
