"""``serve: nearest``: a replica within the envelope of each listed region, every replica
near one of them."""

from __future__ import annotations

from qonnect_gitops.placement import plan
from tests.placement.builders import after, cluster, component, current, goals, observed

# Two regions 40 ms apart; one cluster in each, and a cheap one far from both.
CLUSTERS = [cluster("central", region="eu-central", cpu_hour=0.05),
            cluster("west", region="eu-west", cpu_hour=0.05),
            cluster("far", region="us-east", cpu_hour=0.01)]
LINKS = [("central", "eu-central", 3.0), ("central", "eu-west", 40.0),
         ("west", "eu-west", 4.0), ("west", "eu-central", 40.0),
         ("far", "eu-central", 90.0), ("far", "eu-west", 85.0)]
REGIONS = ("eu-central", "eu-west")
NEAREST = {"latency": [{"region": "eu-central", "maxMs": 15, "serve": "nearest"},
                       {"region": "eu-west", "maxMs": 15, "serve": "nearest"}]}


def _goals(replicas: int = 3, qos: dict | None = None):
    web = component("web", replicas=replicas, qos={**NEAREST, **(qos or {})})
    return goals(CLUSTERS, [web], links=LINKS, regions=REGIONS)


def test_each_region_gets_a_replica_near_it() -> None:
    p = plan(_goals(), observed(), current({}))
    where = p.placements()["shop/web"]
    assert set(where) == {"central", "west"} and sum(where.values()) == 3
    assert p.unmet == ()
    reasons = {a.cluster: a.reason for a in p.components["shop/web"].assignments}
    assert any("serves eu-" in r for r in reasons.values())


def test_serve_all_would_need_a_cluster_near_both_and_finds_none() -> None:
    both = {"latency": [{"region": "eu-central", "maxMs": 15}, {"region": "eu-west", "maxMs": 15}]}
    web = component("web", replicas=3, qos=both)
    p = plan(goals(CLUSTERS, [web], links=LINKS, regions=REGIONS), observed(), current({}))
    assert p.placements()["shop/web"] == {}
    assert {u.goal for u in p.unmet} == {"latency"}


def test_too_few_replicas_is_an_unmet_latency_goal() -> None:
    p = plan(_goals(replicas=1), observed(), current({}))
    assert sum(p.placements()["shop/web"].values()) == 1
    (unmet,) = p.unmet
    assert unmet.goal == "latency" and "(serve: nearest)" in unmet.message


def test_a_lost_region_is_served_again_by_repair_and_nothing_churns() -> None:
    g = _goals()
    p0 = plan(g, observed(), current({}))
    # All replicas ran in central only (say the goal is new): repair moves one to west.
    p1 = plan(g, observed(), current({"shop/web": {"central": 3}}))
    assert set(p1.placements()["shop/web"]) == {"central", "west"}
    assert any(m.target == "west" and m.source == "central" for m in p1.moves)
    # A settled placement stays as it is.
    p2 = plan(g, observed(), after(p0))
    assert p2.placements() == p0.placements() and p2.moves == ()


def test_failover_keeps_the_regions_served_where_it_can() -> None:
    g = _goals()
    p0 = plan(g, observed(), current({}))
    p1 = plan(g, observed(clusters={"west": {"healthy": False}}), after(p0))
    # west is gone: its replica goes where it can (central), and eu-west is reported unserved.
    assert set(p1.placements()["shop/web"]) == {"central"}
    assert [(u.goal, "eu-west" in u.message) for u in p1.unmet if u.goal == "latency"] == [("latency", True)]
