"""Scoring, distribution, scaling, stability, workload kinds and failover."""

from __future__ import annotations

from datetime import timedelta

from qonnect_gitops.placement import plan
from tests.placement.builders import NOW, after, cluster, component, current, goals, observed


def test_cost_and_energy_objectives() -> None:
    clusters = [cluster("a", cpu_hour=0.02, carbon=600), cluster("b", cpu_hour=0.09, carbon=50)]
    p = plan(goals(clusters, [component("web", qos={"objective": "cost"})]), observed(), current({}))
    assert p.placements()["shop/web"] == {"a": 1}
    assert p.components["shop/web"].assignments[0].breakdown["cost"] < 1
    p = plan(goals(clusters, [component("web", qos={"objective": "energy"})]), observed(), current({}))
    assert p.placements()["shop/web"] == {"b": 1}


def test_best_fit_packs_and_worst_fit_spreads() -> None:
    clusters = [cluster("a", cpu="8"), cluster("b", cpu="8")]
    busy = observed(clusters={"b": {"free": {"cpu": "2", "memory": "8Gi"}}})
    best = component("web", qos={"placement": {"policy": "best-fit"}})
    worst = component("web", qos={"placement": {"policy": "worst-fit"}})
    assert plan(goals(clusters, [best]), busy, current({})).placements()["shop/web"] == {"b": 1}
    assert plan(goals(clusters, [worst]), busy, current({})).placements()["shop/web"] == {"a": 1}


def test_traffic_policy_follows_requests() -> None:
    g = goals(
        [cluster("eu-1", region="eu"), cluster("us-1", region="us")],
        [component("web", qos={"placement": {"policy": "traffic"}})],
        links=[("eu-1", "us", 90), ("us-1", "eu", 90)],
        regions=("eu", "us"),
    )
    obs = observed(traffic=[{"component": "shop/web", "region": "us", "rps": 50}, {"component": "shop/web", "region": "eu", "rps": 5}])
    p = plan(g, obs, current({}))
    assert p.placements()["shop/web"] == {"us-1": 1}


def test_communication_aware_productpage_near_reviews_near_ratings() -> None:
    # ratings is pinned to fog-2 by affinity; reviews and productpage have no latency goals
    # and follow their call chain instead of the alphabetically first cluster.
    clusters = [cluster("fog-1", region="r1"), cluster("fog-2", region="r2"), cluster("fog-3", region="r3")]
    links = [("fog-1", "fog-2", 40), ("fog-1", "fog-3", 40), ("fog-2", "fog-3", 40)]
    comps = [
        component("productpage", app="bookinfo", cpu=100, calls=("bookinfo/reviews",)),
        component("reviews", app="bookinfo", cpu=200, calls=("bookinfo/ratings",)),
        component("ratings", app="bookinfo", cpu=300, qos={"placement": {"policy": "affinity", "clusters": ["fog-2"]}}),
    ]
    p = plan(goals(clusters, comps, links=links), observed(), current({}))
    assert p.placements() == {
        "bookinfo/productpage": {"fog-2": 1},
        "bookinfo/ratings": {"fog-2": 1},
        "bookinfo/reviews": {"fog-2": 1},
    }
    assert p.components["bookinfo/reviews"].assignments[0].breakdown["closeness"] == 0.0


def test_availability_spreads_over_min_clusters() -> None:
    g = goals([cluster("a"), cluster("b"), cluster("c")], [component("web", replicas=4, qos={"availability": {"minClusters": 2, "spread": True}})])
    assert plan(g, observed(), current({})).placements()["shop/web"] == {"a": 2, "b": 2}
    g = goals([cluster("a"), cluster("b"), cluster("c")], [component("web", replicas=4, qos={"availability": {"minClusters": 3}})])
    assert plan(g, observed(), current({})).placements()["shop/web"] == {"a": 2, "b": 1, "c": 1}


def test_offloading_to_nearest_feasible_cluster() -> None:
    clusters = [
        cluster("edge-1", tier="edge", cpu="1", cpu_hour=0.01),
        cluster("far", cpu_hour=0.02),
        cluster("near", cpu_hour=0.05),
    ]
    links = [("edge-1", "near", 5), ("edge-1", "far", 80), ("near", "far", 80)]
    web = component("web", cpu=2000, qos={"objective": "cost"})
    p = plan(goals(clusters, [web], links=links), observed(), current({}))
    assert p.placements()["shop/web"] == {"near": 1}  # not the cheaper "far"
    assert "offloaded" in p.components["shop/web"].assignments[0].reason
    assert "edge-1, whose nodes are too small" in p.components["shop/web"].assignments[0].reason
    # Without offloading the preferred cluster is the best one whose nodes hold a replica.
    off = component("web", cpu=2000, qos={"objective": "cost", "offloading": False})
    p = plan(goals(clusters, [off], links=links), observed(), current({}))
    assert p.placements()["shop/web"] == {"far": 1}
    # ... and when that one is full, the replica is unplaced, saying so truthfully.
    busy = observed(clusters={"far": {"free": {"cpu": "1", "memory": "8Gi"}}})
    p = plan(goals(clusters, [off], links=links), busy, current({}))
    assert p.placements()["shop/web"] == {}
    assert "preferred far is full and offloading is off" in p.unplaced[0].reason
    assert [(u.goal, u.component) for u in p.unmet] == [("capacity", "shop/web")]


def test_bursting_overflow_to_neighbours() -> None:
    clusters = [cluster("a", cpu="2", cpu_hour=0.01), cluster("b", cpu_hour=0.03), cluster("c", cpu_hour=0.02)]
    links = [("a", "b", 5), ("a", "c", 60), ("b", "c", 60)]
    web = component("web", cpu=1000, replicas=4, qos={"objective": "cost"})
    p = plan(goals(clusters, [web], links=links), observed(), current({}))
    assert p.placements()["shop/web"] == {"a": 2, "b": 2}
    assert any("burst" in a.reason for a in p.components["shop/web"].assignments)
    noburst = component("web", cpu=1000, replicas=4, qos={"objective": "cost", "bursting": False})
    p = plan(goals(clusters, [noburst], links=links), observed(), current({}))
    assert p.placements()["shop/web"] == {"a": 2}
    assert p.unplaced[0].replicas == 2 and "bursting is off" in p.unplaced[0].reason


def test_affinity_with_offloading_when_full() -> None:
    clusters = [cluster("a"), cluster("b", cpu="1"), cluster("c")]
    links = [("b", "c", 5), ("b", "a", 50), ("a", "c", 50)]
    web = component("web", cpu=1000, replicas=3, qos={"placement": {"policy": "affinity", "clusters": ["b"]}})
    p = plan(goals(clusters, [web], links=links), observed(), current({}))
    assert p.placements()["shop/web"] == {"b": 1, "c": 2}


def test_unplaced_says_shape_and_where() -> None:
    g = goals([cluster("a", cpu="1")], [component("web", cpu=2000, memory=2**30, replicas=2, qos={"latency": [{"region": "eu-central", "maxMs": 10}]})])
    p = plan(g, observed(), current({}))
    u = p.unplaced[0]
    assert (u.component, u.replicas, u.cpu, u.memory, u.near) == ("shop/web", 2, "2", "1Gi", "eu-central")
    assert "1 has no node large enough for one replica" in u.reason


def test_scaling_follows_observed_rps() -> None:
    web = component("web", replicas=1, qos={"scaling": {"minReplicas": 1, "maxReplicas": 5, "targetRpsPerReplica": 100}})
    g = goals([cluster("a", cpu="8")], [web])
    obs = observed(traffic=[{"component": "shop/web", "region": "eu-central", "rps": 250}])
    p = plan(g, obs, current({"shop/web": {"a": 1}}, {"shop/web": NOW - timedelta(hours=1)}))
    assert p.placements()["shop/web"] == {"a": 3}
    assert p.reason == "scaling"
    obs = observed(traffic=[{"component": "shop/web", "region": "eu-central", "rps": 5000}])
    assert plan(g, obs, current({})).placements()["shop/web"] == {"a": 5}
    # Down to the minimum when traffic stops.
    p = plan(g, observed(), current({"shop/web": {"a": 3}}, {"shop/web": NOW - timedelta(hours=1)}))
    assert p.placements()["shop/web"] == {"a": 1} and p.reason == "scaling"


def _two_clusters(ms_a: float, ms_b: float):
    g = goals(
        [cluster("a", region="us"), cluster("b", region="us")],
        [component("web", qos={"latency": [{"region": "eu", "maxMs": 100}]}, cooldown=300, min_improvement=0.1)],
        links=[("a", "eu", ms_a), ("b", "eu", ms_b)],
        regions=("eu", "us"),
    )
    return g


def test_stability_hysteresis_and_cooldown() -> None:
    g = _two_clusters(50, 47)  # b is 6% better: not worth a move
    cur = current({"shop/web": {"a": 1}}, {"shop/web": NOW - timedelta(hours=1)})
    p = plan(g, observed(), cur)
    assert p.placements()["shop/web"] == {"a": 1} and p.moves == ()
    assert "not more than 10%" in p.components["shop/web"].assignments[0].reason
    g = _two_clusters(50, 20)  # much better, but in cooldown
    cur_cool = current({"shop/web": {"a": 1}}, {"shop/web": NOW - timedelta(seconds=100)})
    assert plan(g, observed(), cur_cool).placements()["shop/web"] == {"a": 1}
    p = plan(g, observed(), cur)
    assert p.placements()["shop/web"] == {"b": 1}
    assert p.reason == "rescheduling"
    assert [(d.cluster, d.replicas) for d in p.components["shop/web"].draining] == [("a", 1)]
    assert p.moves[0].source == "a" and p.moves[0].target == "b" and p.last_moved["shop/web"] == NOW


def test_disruption_budget_limits_moves_per_cycle() -> None:
    g = goals(
        [cluster("a", region="us"), cluster("b", region="us")],
        [component("web", replicas=3, budget=1, qos={"latency": [{"region": "eu", "maxMs": 100}]})],
        links=[("a", "eu", 90), ("b", "eu", 10)],
        regions=("eu", "us"),
    )
    p = plan(g, observed(), current({"shop/web": {"a": 3}}, {"shop/web": NOW - timedelta(hours=1)}))
    assert p.placements()["shop/web"] == {"a": 2, "b": 1}
    assert p.clusters_of("shop/web") == {"a": 3, "b": 1}  # make before break
    assert sum(m.replicas for m in p.moves) == 1


def test_own_replicas_count_as_free_capacity() -> None:
    g = goals([cluster("a", cpu="2"), cluster("b", cpu="8")], [component("web", cpu=1000, replicas=2)])
    # The agent reports a full cluster: our two replicas use it all. Nothing may move.
    obs = observed(now=(NOW + timedelta(hours=1)).isoformat(), clusters={"a": {"free": {"cpu": "0", "memory": "0"}}})
    p = plan(g, obs, current({"shop/web": {"a": 2}}, {"shop/web": NOW}))
    assert p.placements()["shop/web"] == {"a": 2} and p.moves == ()


def test_statefulset_stays_daemonset_one_per_cluster_completed_job_gone() -> None:
    clusters = [cluster("a"), cluster("b"), cluster("c")]
    db = component("db", kind="StatefulSet")
    agent = component("agent", kind="DaemonSet", qos={"availability": {"minClusters": 2}})
    job = component("migrate", kind="Job")
    g = goals(clusters, [db, agent, job])
    p = plan(g, observed(completed_jobs=["shop/migrate"]), current({"shop/migrate": {"a": 1}}))
    assert p.placements()["shop/agent"] == {"a": 1, "b": 1}
    assert "shop/migrate" not in p.placements()
    assert any(m.reason == "removed" and m.component == "shop/migrate" for m in p.moves)
    cur = after(p)
    p2 = plan(g, observed(clusters={"a": {"healthy": False}}), cur)
    assert p2.placements()["shop/db"] == {"a": 1}  # not movable: waits for a
    assert p2.placements()["shop/agent"] == {"b": 1, "c": 1}
    movable = component("db", kind="StatefulSet", allow_stateful=True)
    p3 = plan(goals(clusters, [movable]), observed(clusters={"a": {"healthy": False}}), current({"shop/db": {"a": 1}}))
    assert p3.placements()["shop/db"] == {"b": 1} and p3.reason == "failover"


def test_failover_then_nothing_moves_back_until_stability_allows() -> None:
    g = goals([cluster("a", cpu_hour=0.01), cluster("b", cpu_hour=0.05)], [component("web", replicas=2, qos={"objective": "cost"})])
    p0 = plan(g, observed(), current({}))
    assert p0.placements()["shop/web"] == {"a": 2}
    t1 = NOW + timedelta(hours=1)
    p1 = plan(g, observed(now=t1.isoformat(), clusters={"a": {"heartbeatAgeSeconds": 60}}), after(p0))
    assert p1.reason == "failover" and p1.placements()["shop/web"] == {"b": 2}
    assert {(m.source, m.target, m.replicas, m.reason) for m in p1.moves} == {("a", "b", 2, "failover")}
    # a is back, but the cooldown since the failover has not passed: stay.
    p2 = plan(g, observed(now=(t1 + timedelta(seconds=60)).isoformat()), after(p1))
    assert p2.placements()["shop/web"] == {"b": 2} and p2.moves == ()
    # After the cooldown, cost improves by far more than 10%: one replica (budget) moves back.
    p3 = plan(g, observed(now=(t1 + timedelta(seconds=400)).isoformat()), after(p2))
    assert p3.placements()["shop/web"] == {"a": 1, "b": 1} and p3.reason == "rescheduling"


def test_decision_reason_initial_for_a_first_placement_then_goals_changed() -> None:
    g = goals([cluster("a")], [component("web")])
    assert plan(g, observed(), current({})).reason == "initial"
    g2 = goals([cluster("a")], [component("web"), component("api")])
    assert plan(g2, observed(), current({"shop/web": {"a": 1}})).reason == "goals-changed"
    p = plan(g, observed(), current({"shop/web": {"a": 1}}))
    assert p.reason == "goals-changed" and p.moves == ()


def test_goals_change_moves_at_once_make_before_break() -> None:
    clusters = [cluster("edge-1", tier="edge"), cluster("fog-1", tier="fog")]
    web = component("web", qos={"tiers": ["fog"]})
    cur = current({"shop/web": {"edge-1": 1}}, {"shop/web": NOW})  # in cooldown
    p = plan(goals(clusters, [web]), observed(), cur)
    assert p.placements()["shop/web"] == {"fog-1": 1}
    assert [(d.cluster, d.replicas) for d in p.components["shop/web"].draining] == [("edge-1", 1)]
    assert p.reason == "goals-changed" and p.moves[0].reason == "goals-changed"


def test_local_search_swaps_when_the_greedy_order_gave_a_cluster_to_the_wrong_component() -> None:
    # "a" fits one of the two. The bigger "batch" comes first and takes it for a tiny
    # cost gain; "web" needs it far more (latency 5 ms vs 50 ms of a 60 ms envelope).
    clusters = [cluster("a", region="r", cpu="1", cpu_hour=0.010), cluster("b", region="s", cpu="8", cpu_hour=0.011)]
    batch = component("batch", cpu=1000, qos={"objective": "cost"})
    web = component("web", cpu=900, qos={"latency": [{"region": "users", "maxMs": 60}]})
    g = goals(clusters, [batch, web], links=[("a", "users", 5), ("b", "users", 50), ("a", "b", 45)], regions=("users",))
    p = plan(g, observed(), current({}))
    assert p.placements() == {"shop/batch": {"b": 1}, "shop/web": {"a": 1}}
    assert "local search" in p.components["shop/web"].assignments[0].reason
