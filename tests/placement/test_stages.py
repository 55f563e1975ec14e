"""Each stage of the planner on its own: the ledger (node pools), the evaluator, the
distribution rules, repair's inspection, the stability rules and the explanations."""

from __future__ import annotations

from datetime import timedelta

import numpy as np

from qonnect_gitops.model.plan import CurrentPlacement
from qonnect_gitops.placement.capacity import Running
from qonnect_gitops.placement.cycle import Cycle
from qonnect_gitops.placement.distribute import Request, distribute
from qonnect_gitops.placement.evaluate import desired_replicas
from qonnect_gitops.placement.explain import Explainer
from qonnect_gitops.placement.records import (
    Blocked,
    Cause,
    CauseKind,
    Census,
    Keep,
    KeepKind,
    Rule,
    Shortfall,
    ShortfallKind,
    Why,
)
from qonnect_gitops.placement.repair import Verdict, inspect
from qonnect_gitops.placement.stability import hold, in_cooldown, reschedule
from tests.placement.builders import NOW, cluster, component, current, goals, observed

GI = 2**30


def _cycle(fleet, comps, cur=None, **obs):  # type: ignore[no-untyped-def]
    return Cycle(goals(fleet, comps), observed(**obs), cur or CurrentPlacement())


# ----- capacity: node pools ------------------------------------------------------------------


def test_a_pool_of_a_million_nodes_is_split_only_where_replicas_land() -> None:
    cy = _cycle([cluster("big", cpu="4", memory="8Gi", count=1_000_000)], [component("web")])
    ledger = cy.ledger
    assert ledger.fits(0, 1000, GI, frozenset({"amd64"}), 5_000_000) == 4_000_000
    taken: list = []
    assert ledger.take(0, 1000, GI, frozenset({"amd64"}), 10, taken) == 10
    segment = ledger.segments[0][0]
    assert len(segment.nodes) == 3 and segment.pool is not None and segment.pool.count == 999_997  # 4+4+2
    assert [t.replicas for t in taken] == [4, 4, 2]
    ledger.release(taken, 1000, GI)
    assert ledger.fits(0, 4000, 8 * GI, frozenset({"amd64"}), 10) == 10 and segment.nodes[0][0] == 4000


def test_first_fit_over_pools_matches_node_by_node() -> None:
    shapes = [{"count": 3, "cpu": "2", "memory": "4Gi", "arch": "amd64"},
              {"count": 2, "cpu": "8", "memory": "16Gi", "arch": "arm64"},
              {"count": 2, "cpu": "4", "memory": "8Gi", "arch": "amd64"}]
    cy = _cycle([cluster("mixed", nodes=shapes)], [component("web")])
    amd = frozenset({"amd64"})
    assert cy.ledger.take(cy.static.index["mixed"], 1500, GI, amd, 8) == 7  # 1 per 2-CPU node, 2 per 4-CPU node
    assert cy.ledger.fits(0, 3000, GI, amd, 1) == 0
    assert cy.ledger.fits(0, 3000, GI, frozenset({"arm64"}), 9) == 4


def test_running_replicas_fit_at_todays_size_or_are_reported() -> None:
    cy = _cycle([cluster("e", cpu="3500m", memory="7Gi", count=2)], [component("web")])
    ledger = cy.ledger
    ledger.occupy(0, Running("shop/a", 2000, GI, frozenset({"amd64"}), 3))
    ledger.occupy(0, Running("shop/b", 1000, GI, frozenset({"amd64"}), 1))
    assert ledger.running_fit(0, "shop/a") == 2  # a 3.5-CPU node holds one 2-CPU replica
    assert ledger.running_fit(0, "shop/b") == 1
    assert ledger.fits(0, 500, GI, frozenset({"amd64"}), 10) == 4  # 0.5 and 1.5 CPU left on the nodes


def test_declared_capacity_keeps_a_packing_the_greedy_order_made() -> None:
    # 3+1 and 2+2 fill two 4-CPU nodes exactly; first fit decreasing puts 3,2 then 2
    # cannot fit with 1 left... the replicas still fit (totals hold, each fits alone).
    cy = _cycle([cluster("c", cpu="4", memory="16Gi", count=2)], [component("web")])
    ledger = cy.ledger
    for key, cpu, n in (("shop/a", 3000, 1), ("shop/b", 2000, 2), ("shop/c", 1000, 1)):
        ledger.occupy(0, Running(key, cpu, GI, frozenset({"amd64"}), n))
    assert [ledger.running_fit(0, k) for k in ("shop/a", "shop/b", "shop/c")] == [1, 2, 1]


# ----- evaluate ----------------------------------------------------------------------------------


def test_census_counts_each_cluster_at_the_first_filter_it_fails() -> None:
    clusters = [cluster("edge-1", tier="edge"), cluster("fog-1", tier="fog", cpu="1"),
                cluster("fog-2", tier="fog"), cluster("fog-3", tier="fog")]
    web = component("web", cpu=2000, qos={"tiers": ["fog"]})
    cy = _cycle(clusters, [web], clusters={"fog-3": {"healthy": False}})
    ev = cy.evaluator
    census = ev.census(ev.context(web, 1), {})
    assert census.excluded == (("tier", 1), ("health", 1), ("node-size", 1)) and census.unused == 1
    assert ev.exclusion(ev.context(web, 1), cy.static.index["fog-1"]).name == "node-size"
    assert ev.census(ev.context(web, 1), {cy.static.index["fog-2"]: 1}).goal == "capacity"


def test_desired_replicas_scaling_and_availability_floor() -> None:
    web = component("web", qos={"availability": {"minClusters": 3},
                                "scaling": {"minReplicas": 1, "maxReplicas": 6, "targetRpsPerReplica": 100}})
    assert desired_replicas(web, 150) == (3, True)
    assert desired_replicas(web, 450) == (5, True)
    assert desired_replicas(web, 10_000) == (6, True)
    low = component("web", qos={"availability": {"minClusters": 3},
                                "scaling": {"minReplicas": 1, "maxReplicas": 2, "targetRpsPerReplica": 100}})
    assert desired_replicas(low, 0) == (1, True)  # maxReplicas 2 cannot meet 3: unmet, not raised


def test_terms_at_equal_the_full_score_vector() -> None:
    clusters = [cluster("a", cpu_hour=0.01), cluster("b", cpu_hour=0.03, region="r2")]
    web = component("web", calls=("shop/db",), qos={"objective": {"cost": 1, "latency": 1}})
    db = component("db")
    cy = _cycle(clusters, [web, db])
    cy.placement["shop/db"] = {1: 1}
    ev = cy.evaluator
    ctx = ev.context(web, 1)
    total, _ = ev.scores(ctx)
    assert [s for s, _ in ev.terms_at(ctx, [0, 1])] == [round(float(x), 6) for x in total]


# ----- distribute --------------------------------------------------------------------------------


def _dist(fleet, web, need, existing=None, **obs):  # type: ignore[no-untyped-def]
    cy = _cycle(fleet, [web], **obs)
    ev = cy.evaluator
    ctx = ev.context(web, need)
    total, _ = ev.scores(ctx)
    return cy, distribute(ctx, ev.static_mask(ctx), total, Request(need, existing=existing or {}),
                          wanted=ev.wanted_mask(ctx))


def test_distribution_rules_are_structured() -> None:
    clusters = [cluster("a", cpu="1", cpu_hour=0.01), cluster("b", cpu_hour=0.02), cluster("c", cpu_hour=0.03)]
    _, d = _dist(clusters, component("web", cpu=500, replicas=4, qos={"objective": "cost"}), 4)
    assert d.replicas == {0: 2, 1: 2} and d.why[1] == Why(Rule.BURST, origin=0) and d.blocked is None
    _, d = _dist(clusters, component("web", cpu=500, qos={"objective": "cost", "bursting": False}), 4)
    assert d.replicas == {0: 2} and d.unplaced == 2 and d.blocked == Blocked.BURSTING_OFF
    _, d = _dist(clusters, component("web", cpu=2000, qos={"objective": "cost"}), 1)
    assert d.why[1] == Why(Rule.OFFLOADED, origin=0, too_small=True)


def test_availability_adds_new_clusters_next_to_existing_ones() -> None:
    clusters = [cluster("a", cpu_hour=0.01), cluster("b", cpu_hour=0.02), cluster("c", cpu_hour=0.03)]
    web = component("web", replicas=2, qos={"objective": "cost", "availability": {"minClusters": 2}})
    _, d = _dist(clusters, web, 1, existing={1: 1})
    assert d.replicas == {0: 1}  # a new cluster, not a second replica on b
    _, d = _dist(clusters, web, 1, existing={0: 1})
    assert d.replicas == {1: 1}


def test_spread_keeps_existing_clusters_and_evens_out() -> None:
    clusters = [cluster("a", cpu_hour=0.01), cluster("b", cpu_hour=0.02), cluster("c", cpu_hour=0.03)]
    web = component("web", replicas=6, qos={"objective": "cost", "availability": {"minClusters": 2, "spread": True}})
    _, d = _dist(clusters, web, 0, existing={1: 5, 2: 1})
    assert d.replicas == {2: 2} and d.removed == {1: 2}  # 3 and 3 on the clusters it uses
    _, d = _dist(clusters, web, 3, existing={1: 1, 2: 1})
    assert d.replicas == {1: 2, 2: 1} and d.removed == {}


# ----- repair and stability ----------------------------------------------------------------------


def test_inspect_tells_ok_repair_and_waiting() -> None:
    clusters = [cluster("a", region="us"), cluster("b", region="us")]
    web = component("web", replicas=2, qos={"latency": [{"region": "eu", "maxMs": 50}]})
    g = goals(clusters, [web], links=[("a", "eu", 40), ("b", "eu", 40)], regions=("eu", "us"))

    def verdict(cur, **obs):  # type: ignore[no-untyped-def]
        cy = Cycle(g, observed(**obs), cur)
        cy.ledger.settle_all()
        return inspect(cy, cy.works["shop/web"])

    cool = current({"shop/web": {"a": 2}}, {"shop/web": NOW})
    assert verdict(cool) == Verdict.OK
    assert verdict(current({"shop/web": {"a": 1}}, {"shop/web": NOW})) == Verdict.REPAIR  # count
    assert verdict(cool, clusters={"a": {"healthy": False}}) == Verdict.REPAIR
    slow = [{"from": "a", "to": "eu", "ms": 80}]
    assert verdict(cool, latencies=slow) == Verdict.WAITING  # measured: waits for the cooldown
    assert verdict(current({"shop/web": {"a": 2}}, {"shop/web": NOW - timedelta(hours=1)}), latencies=slow) == Verdict.REPAIR


def test_cooldown_and_hold() -> None:
    web = component("web", cooldown=300)
    assert in_cooldown(web, NOW.timestamp(), NOW.timestamp() + 100) == NOW.timestamp() + 300
    assert in_cooldown(web, NOW.timestamp(), NOW.timestamp() + 300) is None
    cy = _cycle([cluster("a")], [component("db", kind="StatefulSet")],
                current({"shop/db": {"a": 1}}, {"shop/db": NOW - timedelta(hours=1)}))
    assert hold(cy, cy.works["shop/db"]) == Keep(KeepKind.NOT_MOVABLE)


def test_reschedule_respects_the_budget_and_the_spread() -> None:
    clusters = [cluster(n, region="us") for n in ("a", "b", "c", "d")]
    web = component("web", replicas=6, budget=1, qos={"latency": [{"region": "eu", "maxMs": 100}],
                                                      "availability": {"minClusters": 2, "spread": True}})
    g = goals(clusters, [web], links=[("a", "eu", 90), ("b", "eu", 90), ("c", "eu", 5), ("d", "eu", 5)],
              regions=("eu", "us"))
    cy = Cycle(g, observed(), current({"shop/web": {"a": 3, "b": 3}}, {"shop/web": NOW - timedelta(hours=1)}))
    cy.ledger.settle_all()
    work = cy.works["shop/web"]
    reschedule(cy, work)
    # One replica a -> c would give 2/3/1: the spread breaks, so it stays and says why.
    assert work.keep is not None and work.keep.kind == KeepKind.BUDGET_SPREAD and work.moves == []


# ----- explain -----------------------------------------------------------------------------------


def test_texts_come_from_the_records() -> None:
    cy = _cycle([cluster("a"), cluster("b")], [component("web")])
    ex = Explainer(cy)
    work = cy.works["shop/web"]
    assert ex.why(Why(Rule.OFFLOADED, origin=0)) == "offloaded: nearest cluster with room to a, which is full"
    assert ex.cause(Cause(CauseKind.GOALS, 1, filter="tier"), work) == "b is not in one of the component's tiers"
    assert ex.keep(Keep(KeepKind.COOLDOWN, until=NOW.timestamp())) == "kept: in cooldown until 2026-11-29T12:00:00Z"
    census = Census((("tier", 2), ("latency", 1)), full=1, unused=0, goal="capacity")
    text = ex.shortfall(Shortfall("capacity", ShortfallKind.UNPLACED, replicas=2, census=census, wanted=3), work)
    assert text == ("2 of 3 replica(s) (500m CPU, 512Mi per replica) fit nowhere: no cluster takes more: "
                    "2 is not in one of the component's tiers, 1 is outside the latency envelope, "
                    "1 lack room for one more replica")
    assert np.array_equal(cy.fleet.healthy, [True, True])
