"""Each filter on a hand-made fleet: the exact placement and the reason."""

from __future__ import annotations

from qonnect_gitops.placement import plan
from tests.placement.builders import cluster, component, current, goals, observed

GI = 2**30


def where(p, key="shop/web"):
    return p.placements()[key]


def test_unhealthy_and_silent_clusters_take_nothing() -> None:
    g = goals([cluster("a"), cluster("b"), cluster("c")], [component("web")], grace=20)
    p = plan(g, observed(clusters={"a": {"healthy": False}, "b": {"heartbeatAgeSeconds": 21}}), current({}))
    assert where(p) == {"c": 1}
    p = plan(g, observed(clusters={"a": {"healthy": False}, "b": {"heartbeatAgeSeconds": 19}}), current({}))
    assert where(p) == {"b": 1}


def test_tier_filter_and_preference_order() -> None:
    g = goals(
        [cluster("cloud-1"), cluster("edge-1", tier="edge"), cluster("fog-1", tier="fog")],
        [component("web", qos={"tiers": ["fog", "edge"]})],
    )
    assert where(plan(g, observed(), current({}))) == {"fog-1": 1}
    g = goals(
        [cluster("cloud-1"), cluster("edge-1", tier="edge"), cluster("fog-1", tier="fog")],
        [component("web", qos={"tiers": ["edge", "fog"]})],
    )
    assert where(plan(g, observed(), current({}))) == {"edge-1": 1}


def test_cluster_selector_matches_labels() -> None:
    g = goals(
        [cluster("a", labels={"gpu": "no"}), cluster("b", labels={"gpu": "yes"})],
        [component("web", qos={"clusterSelector": {"matchLabels": {"gpu": "yes"}}})],
    )
    assert where(plan(g, observed(), current({}))) == {"b": 1}


def test_noschedule_taint_needs_toleration_prefer_only_penalises() -> None:
    hard = ({"key": "edge", "value": "true", "effect": "NoSchedule"},)
    soft = ({"key": "spot", "value": "true", "effect": "PreferNoSchedule"},)
    clusters = [cluster("a", taints=hard), cluster("b", taints=soft)]
    p = plan(goals(clusters, [component("web")]), observed(), current({}))
    assert where(p) == {"b": 1}  # a excluded; b only penalised, still usable
    tolerant = component("web", qos={"tolerations": [{"key": "edge", "operator": "Exists"}]})
    p = plan(goals(clusters, [tolerant]), observed(), current({}))
    assert where(p) == {"a": 1}  # b's PreferNoSchedule penalty makes a better
    assert p.components["shop/web"].assignments[0].breakdown["taint"] == 0.0


def test_amd64_image_never_lands_on_arm64_only_cluster() -> None:
    mixed = cluster(
        "mixed",
        nodes=[
            {"count": 1, "cpu": "4", "memory": "8Gi", "arch": "arm64"},
            {"count": 1, "cpu": "1", "memory": "8Gi", "arch": "amd64"},
        ],
        cpu_hour=0.5,
    )
    g = goals([cluster("arm", arch="arm64", cpu_hour=0.01), mixed], [component("web", cpu=800, qos={"objective": "cost"})])
    assert where(plan(g, observed(), current({}))) == {"mixed": 1}
    # Too big for the mixed cluster's only amd64 node: nothing fits, even with arm64 room.
    g = goals([cluster("arm", arch="arm64"), mixed], [component("web", cpu=1500)])
    p = plan(g, observed(), current({}))
    assert where(p) == {}
    assert p.unplaced[0].replicas == 1 and p.unplaced[0].architectures == ("amd64",)
    assert "no node of a supported CPU architecture" in p.unplaced[0].reason


def test_capacity_is_per_node_and_consumed() -> None:
    # Two 2-CPU nodes: 4 CPU in total, but a 3-CPU replica fits on neither.
    g = goals([cluster("a", cpu="2", count=2), cluster("b", cpu="4", cpu_hour=1.0)], [component("web", cpu=3000, qos={"objective": "cost"})])
    assert where(plan(g, observed(), current({}))) == {"b": 1}
    # Capacity is consumed: four 1-CPU replicas fill a (2 nodes x 2), the fifth bursts.
    g = goals([cluster("a", cpu="2", count=2), cluster("b", cpu="4", cpu_hour=1.0)], [component("web", cpu=1000, replicas=5, qos={"objective": "cost"})])
    assert where(plan(g, observed(), current({}))) == {"a": 4, "b": 1}


def test_measured_latency_overrides_declared_for_the_envelope() -> None:
    g = goals(
        [cluster("a", region="us"), cluster("b", region="us")],
        [component("web", qos={"latency": [{"region": "eu", "maxMs": 50}]})],
        links=[("a", "eu", 30), ("b", "eu", 40)],
        regions=("eu", "us"),
    )
    assert where(plan(g, observed(), current({}))) == {"a": 1}
    p = plan(g, observed(latencies=[{"from": "a", "to": "eu", "ms": 90}]), current({}))
    assert where(p) == {"b": 1}
    p = plan(g, observed(latencies=[{"from": "a", "to": "eu", "ms": 90}, {"from": "b", "to": "eu", "ms": 60}]), current({}))
    assert where(p) == {}
    assert "outside the latency envelope" in p.unplaced[0].reason and p.unplaced[0].near == "eu"


def test_cost_cap_over_all_replicas() -> None:
    # 1 CPU per replica: a costs 0.10/h, b 0.02/h; 3 replicas must stay under 0.2/h.
    g = goals(
        [cluster("a", cpu_hour=0.10), cluster("b", cpu_hour=0.02, region="far")],
        [component("web", cpu=1000, memory=GI // 4, replicas=3, qos={"maxCostPerHour": 0.2})],
        links=[("a", "b", 50)],
    )
    assert where(plan(g, observed(), current({}))) == {"b": 3}
