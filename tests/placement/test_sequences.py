"""Issue 32's defects, each as the multi-cycle sequence that showed it: every plan is fed
back as the placement in force, as the leader (and ``qonnect plan --current``) does, and
every cycle is also checked by the independent oracle (``placement/oracle.py``)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

from qonnect_gitops.model.goals import Goals
from qonnect_gitops.model.observed import Observed
from qonnect_gitops.model.plan import CurrentPlacement, Plan
from qonnect_gitops.placement import oracle, plan
from tests.placement.builders import NOW, cluster, component, current, goals, observed

GI = 2**30


class Cycles:
    """Plans one cycle after another, each from the last plan, each checked by the oracle."""

    def __init__(self, g: Goals, start: CurrentPlacement | None = None) -> None:
        self.g = g
        self.current = start or CurrentPlacement()
        self.last: Plan | None = None
        self.now = NOW

    def run(self, seconds: float = 10.0, g: Goals | None = None, **fields: Any) -> Plan:
        self.now += timedelta(seconds=seconds)
        self.g = g or self.g
        obs: Observed = observed(now=self.now.isoformat(), **fields)
        p = plan(self.g, obs, self.current)
        findings = oracle.check(self.g, obs, self.current, p, before=self.last)
        assert not findings, oracle.problems(findings)
        self.current, self.last = p.current(), p
        return p


def drains(p: Plan, key: str = "shop/web") -> dict[str, int]:
    return {d.cluster: d.replicas for d in p.components[key].draining}


def unmet(p: Plan, key: str = "shop/web") -> dict[str, str]:
    return {u.goal: u.message for u in p.unmet if u.component == key}


def moves(p: Plan, key: str = "shop/web") -> list[tuple[str | None, str | None, int, str]]:
    return [(m.source, m.target, m.replicas, m.reason) for m in p.moves if m.component == key]


# ----- dropped drains --------------------------------------------------------------------------


def test_a_drain_whose_replacement_fits_nowhere_runs_on_every_cycle() -> None:
    # web becomes arm64-only; the only arm64 cluster is full. Cycle 2 kept its two replicas
    # draining; cycle 3, nothing changed, had no placement, no drain, no move, and the
    # architecture goal was no longer listed: 2 running replicas went to 0.
    fleet = [cluster("a", cpu="4", count=2), cluster("b", arch="arm64", cpu="4")]
    web = component("web", replicas=2, cpu=1000, arch=("amd64", "arm64"), qos={"objective": "cost"})
    filler = component("filler", replicas=4, cpu=1000, arch=("arm64",))
    run = Cycles(goals(fleet, [web, filler]))
    assert run.run().placements()["shop/web"] == {"a": 2}
    arm_only = goals(fleet, [dataclasses.replace(web, architectures=frozenset({"arm64"})), filler])
    for _ in range(3):
        p = run.run(g=arm_only)
        assert p.placements()["shop/web"] == {} and drains(p) == {"a": 2}
        assert "architecture" in unmet(p) and "keep running on a" in unmet(p)["architecture"]
        assert moves(p) == []


def test_the_only_replica_draining_on_a_cluster_that_then_fails_is_replaced_as_a_failover() -> None:
    # The only replica drains on a (a tier edit, no room elsewhere); a fails. It vanished
    # with reason goals-changed; it is a failover, replaced where room came back.
    fleet = [cluster("a", tier="edge"), cluster("b", tier="fog", cpu="1")]
    web = component("web", cpu=1000, qos={"objective": "cost"})
    filler = component("filler", cpu=1000, qos={"tiers": ["fog"]})
    run = Cycles(goals(fleet, [web, filler]), current({"shop/web": {"a": 1}, "shop/filler": {"b": 1}}))
    fog_only = goals(fleet, [dataclasses.replace(web, qos=web.qos.model_copy(update={"tiers": ("fog",)})), filler])
    p = run.run(g=fog_only)
    assert drains(p) == {"a": 1} and p.placements()["shop/web"] == {}
    p = run.run(clusters={"a": {"healthy": False}})
    assert moves(p) == [("a", None, 1, "failover")] and p.reason == "failover"
    assert [u.replicas for u in p.unplaced if u.component == "shop/web"] == [1]
    p = run.run(g=goals(fleet, [dataclasses.replace(web, qos=web.qos.model_copy(update={"tiers": ("fog",)}))]),
                clusters={"a": {"healthy": False}})
    assert p.placements()["shop/web"] == {"b": 1}
    assert [(m.reason, m.detail) for m in p.moves if m.component == "shop/web"] == [
        ("goals-changed", "placed again: none of its replicas ran")]


def test_a_replacement_for_a_draining_replica_is_not_a_new_component() -> None:
    # Placed once room comes back, the replacement of a drain is a move from the drain,
    # not "new component".
    fleet = [cluster("a", tier="edge"), cluster("b", tier="fog", cpu="1")]
    web = component("web", cpu=1000, qos={"objective": "cost", "tiers": ["fog"]})
    filler = component("filler", cpu=1000, qos={"tiers": ["fog"]})
    run = Cycles(goals(fleet, [web, filler]), current({"shop/web": {"a": 1}, "shop/filler": {"b": 1}}))
    p = run.run()
    assert drains(p) == {"a": 1}
    p = run.run(g=goals(fleet, [web]))
    assert p.placements()["shop/web"] == {"b": 1}
    assert moves(p) == [("a", "b", 1, "goals-changed")]
    assert "is not in one of the component's tiers" in p.moves[-1].detail
    assert drains(p) == {"a": 1}  # until the replacement runs


# ----- observed capacity and readiness ------------------------------------------------------------


def test_a_node_pool_that_shrank_moves_the_replicas_it_no_longer_holds() -> None:
    # a reports one node of two (free CPU 0): three 2-CPU replicas cannot all run there.
    fleet = [cluster("a", cpu="4", count=2, cpu_hour=0.01), cluster("b", cpu="8", count=2, cpu_hour=0.05)]
    run = Cycles(goals(fleet, [component("web", replicas=3, cpu=2000, memory=GI, qos={"objective": "cost"})]))
    assert run.run().placements()["shop/web"] == {"a": 3}
    nodes = [{"name": "n1", "allocatable": {"cpu": "4", "memory": "8Gi"}, "free": {"cpu": "0", "memory": "6Gi"}}]
    p = run.run(clusters={"a": {"nodes": nodes}})
    assert p.placements()["shop/web"] == {"a": 2, "b": 1} and unmet(p) == {}
    assert moves(p) == [("a", "b", 1, "failover")]
    assert p.moves[0].goal == "capacity"


def test_nodes_not_ready_are_lost_capacity_not_an_architecture() -> None:
    # Every node of a reported not ready: explained as "no node of a supported CPU
    # architecture" with reason goals-changed. They are capacity lost (a failover).
    fleet = [cluster("a", cpu="4", count=2, cpu_hour=0.01), cluster("b", cpu="8", count=2, cpu_hour=0.05)]
    run = Cycles(goals(fleet, [component("web", replicas=2, cpu=1000, memory=GI, qos={"objective": "cost"})]))
    run.run()
    nodes = [{"name": f"n{k}", "ready": False, "allocatable": {"cpu": "4", "memory": "8Gi"},
              "free": {"cpu": "3", "memory": "7Gi"}} for k in range(2)]
    p = run.run(clusters={"a": {"nodes": nodes}})
    assert p.placements()["shop/web"] == {"b": 2}
    assert moves(p) == [("a", "b", 2, "failover")] and p.moves[0].goal == "capacity"
    assert "2 node(s) not ready" in p.moves[0].detail and "architecture" not in p.moves[0].detail


# ----- spread and minClusters -----------------------------------------------------------------


def test_spread_and_min_clusters_come_back_when_the_failed_cluster_returns() -> None:
    # After a failover onto one cluster, minClusters 2 with spread stayed on one cluster
    # forever ("1 with room left unused by its own rules").
    fleet = [cluster("a", cpu="4", count=2, cpu_hour=0.01), cluster("b", cpu="4", cpu_hour=0.02)]
    web = component("web", replicas=4, cpu=1000, memory=GI, cooldown=60,
                    qos={"objective": "cost", "availability": {"minClusters": 2, "spread": True}})
    run = Cycles(goals(fleet, [web]))
    assert run.run().placements()["shop/web"] == {"a": 2, "b": 2}
    p = run.run(clusters={"a": {"healthy": False}})
    assert p.placements()["shop/web"] == {"b": 4} and "availability" in unmet(p)
    p = run.run(seconds=600)
    assert p.placements()["shop/web"] == {"a": 2, "b": 2} and unmet(p) == {}
    assert drains(p) == {"b": 2}  # make before break


def test_raising_min_clusters_of_a_spread_component_is_applied() -> None:
    fleet = [cluster(n, cpu="8", cpu_hour=price) for n, price in (("a", 0.01), ("b", 0.02), ("c", 0.03))]
    web = component("web", replicas=3, cpu=1000, qos={"objective": "cost", "availability": {"spread": True}})
    run = Cycles(goals(fleet, [web]))
    assert run.run().placements()["shop/web"] == {"a": 3}
    raised = dataclasses.replace(web, qos=web.qos.model_copy(
        update={"availability": web.qos.availability.model_copy(update={"min_clusters": 3})}))
    p = run.run(g=goals(fleet, [raised]))
    assert p.placements()["shop/web"] == {"a": 1, "b": 1, "c": 1} and unmet(p) == {}


# ----- repairs and the room of the cycle -----------------------------------------------------------


def test_a_resize_never_evicts_an_unchanged_neighbour() -> None:
    # a has one 4-CPU node; db (2 CPU) is pinned there by its selector, web (1 CPU) runs
    # beside it. web is raised to 3 CPU: the unchanged db was evicted (unmet capacity) while
    # web stayed "in cooldown", though b had two empty nodes.
    fleet = [cluster("a", cpu="4", cpu_hour=0.01, labels={"pin": "yes"}), cluster("b", cpu="4", count=2, cpu_hour=0.05)]
    web = component("web", cpu=1000, memory=GI, qos={"objective": "cost"})
    pin = {"objective": "cost", "clusterSelector": {"matchLabels": {"pin": "yes"}}}
    db = component("db", cpu=2000, memory=GI, qos=pin)
    run = Cycles(goals(fleet, [web, db]))
    p = run.run()
    assert p.placements() == {"shop/db": {"a": 1}, "shop/web": {"a": 1}}
    p = run.run(g=goals(fleet, [dataclasses.replace(web, cpu=3000), db]))
    assert p.placements() == {"shop/db": {"a": 1}, "shop/web": {"b": 1}}
    assert p.unmet == () and moves(p) == [("a", "b", 1, "goals-changed")]


def test_a_failover_places_replicas_where_the_component_already_runs() -> None:
    # a fails, b is full, c (where one replica runs) has 3 CPU free: the failed replicas
    # stayed unplaced ("fit nowhere ... lack room") for as long as the failure lasted,
    # because minClusters asked for a cluster it does not use yet.
    fleet = [cluster(n, cpu="4", cpu_hour=price) for n, price in (("a", 0.01), ("b", 0.02), ("c", 0.03))]
    web = component("web", replicas=3, cpu=1000, memory=GI,
                    qos={"objective": "cost", "availability": {"minClusters": 2}})
    filler = component("filler", replicas=4, cpu=1000, memory=GI, qos={
        "placement": {"policy": "affinity", "clusters": ["b"]}, "offloading": False, "bursting": False})
    run = Cycles(goals(fleet, [web, filler]), current({"shop/web": {"a": 2, "c": 1}, "shop/filler": {"b": 4}}))
    p = run.run(clusters={"a": {"healthy": False}})
    assert p.placements()["shop/web"] == {"c": 3} and p.unplaced == ()
    assert moves(p) == [("a", "c", 2, "failover")]
    assert "runs on 1 cluster(s), minClusters is 2" in unmet(p)["availability"]


def test_room_a_scale_down_frees_is_used_by_the_repairs_of_the_same_cycle() -> None:
    # web scales 3 -> 2 and big 1 -> 2 on the one cluster both may use: big reported
    # "lack room" and got its replica one cycle late.
    fleet = [cluster("a", cpu="4", cpu_hour=0.01, labels={"pin": "yes"}), cluster("b", cpu="4", cpu_hour=0.05)]
    pin = {"objective": "cost", "clusterSelector": {"matchLabels": {"pin": "yes"}}}
    run = Cycles(goals(fleet, [component("web", replicas=3, cpu=1000, qos=pin), component("big", cpu=1000, qos=pin)]))
    assert run.run().placements() == {"shop/big": {"a": 1}, "shop/web": {"a": 3}}
    p = run.run(g=goals(fleet, [component("web", replicas=2, cpu=1000, qos=pin),
                                component("big", replicas=2, cpu=1000, qos=pin)]))
    assert p.placements() == {"shop/big": {"a": 2}, "shop/web": {"a": 2}} and p.unmet == ()


# ----- moves do what they claim -------------------------------------------------------------------


def test_a_budgeted_move_that_could_not_finish_is_not_started() -> None:
    # Two replicas, budget 1: moving both improves 17 %, moving one leaves a split from
    # which the rest gains 9 % (< 15 %). It moved one and never finished.
    fleet = [cluster("a", cpu="8", count=2, cpu_hour=0.05), cluster("b", cpu="8", count=2, cpu_hour=0.0415)]
    web = component("web", replicas=2, cpu=1000, memory=GI, qos={"objective": "cost"}, min_improvement=0.15,
                    cooldown=60)
    run = Cycles(goals(fleet, [web]), current({"shop/web": {"a": 2}}, {"shop/web": NOW - timedelta(hours=1)}))
    for _ in range(3):
        p = run.run(seconds=100)
        assert p.placements()["shop/web"] == {"a": 2} and p.moves == ()
        assert "it would stop half way" in p.components["shop/web"].assignments[0].reason


def test_a_budgeted_move_that_can_finish_finishes() -> None:
    fleet = [cluster("a", cpu="8", count=2, cpu_hour=0.05), cluster("b", cpu="8", count=2, cpu_hour=0.02)]
    web = component("web", replicas=2, cpu=1000, memory=GI, qos={"objective": "cost"}, min_improvement=0.15,
                    cooldown=60)
    run = Cycles(goals(fleet, [web]), current({"shop/web": {"a": 2}}, {"shop/web": NOW - timedelta(hours=1)}))
    p = run.run(seconds=100)
    assert p.placements()["shop/web"] == {"a": 1, "b": 1}
    assert "once 1 more replica(s) move in later cycles" in p.moves[0].detail
    p = run.run(seconds=100)
    assert p.placements()["shop/web"] == {"b": 2} and moves(p) == [("a", "b", 1, "rescheduling")]


def test_an_unmeetable_nearest_envelope_never_moves_a_replica_farther_from_its_region() -> None:
    # eu-central tightened to 5 ms: only arm64 clusters meet it. The amd64 replica at 12 ms
    # moved to a cluster 49 ms away, and the message did not name the architecture.
    fleet = [cluster("edge-1", tier="edge", region="eu-central", arch="arm64"),
             cluster("fog-2", tier="fog", region="eu-central"), cluster("edge-3", tier="edge", region="eu-west"),
             cluster("cloud-2", region="eu-west")]
    links = [("edge-1", "eu-central", 3), ("edge-1", "eu-west", 32), ("fog-2", "eu-central", 12),
             ("fog-2", "eu-west", 41), ("edge-3", "eu-central", 32), ("edge-3", "eu-west", 3),
             ("cloud-2", "eu-central", 49), ("cloud-2", "eu-west", 20)]
    regions = ("eu-central", "eu-west")

    def web(central: float) -> Any:
        return component("web", replicas=2, qos={"availability": {"minClusters": 2, "spread": True}, "latency": [
            {"region": "eu-central", "maxMs": central, "serve": "nearest"},
            {"region": "eu-west", "maxMs": 35, "serve": "nearest"}]})

    run = Cycles(goals(fleet, [web(15)], links=links, regions=regions))
    assert run.run().placements()["shop/web"] == {"edge-3": 1, "fog-2": 1}
    p = run.run(g=goals(fleet, [web(5)], links=links, regions=regions))
    assert p.placements()["shop/web"] == {"edge-3": 1, "fog-2": 1} and p.moves == ()
    message = unmet(p)["latency"]
    assert "1 replica stays on fog-2 (12 ms to eu-central)" in message
    assert "no replica within 5 ms of eu-central" in message
    assert "has no node of a supported CPU architecture" in message


# ----- explanations --------------------------------------------------------------------------------


def test_an_uneven_split_is_not_called_even() -> None:
    fleet = [cluster("a", cpu="8", cpu_hour=0.01), cluster("b", cpu="1", cpu_hour=0.02)]
    web = component("web", replicas=4, cpu=1000,
                    qos={"objective": "cost", "availability": {"minClusters": 2, "spread": True}})
    p = Cycles(goals(fleet, [web])).run()
    assert sorted(p.placements()["shop/web"].values()) == [1, 3] and "spread" in unmet(p)
    assert not any("shared evenly" in a.reason for a in p.components["shop/web"].assignments)


def test_backends_waiting_for_their_database_on_a_failed_cluster_are_told_so() -> None:
    # They were told about tiers and taints.
    fleet = [cluster("a", cpu_hour=0.01), cluster("b", tier="fog", cpu_hour=0.05),
             cluster("c", tier="edge", taints=({"key": "x", "value": "y", "effect": "NoSchedule"},))]
    db = component("db", kind="StatefulSet", qos={"objective": "cost"})
    backend = component("backend", replicas=2, qos={"objective": "cost", "tiers": ["cloud", "fog"]})
    backend = dataclasses.replace(backend, colocate_with=("shop/db",))
    run = Cycles(goals(fleet, [db, backend]))
    assert run.run().placements()["shop/backend"] == {"a": 2}
    p = run.run(clusters={"a": {"healthy": False}})
    reason = p.unplaced[0].reason
    assert "2 without shop/db (colocateWith), which runs only on failed cluster(s) a" in reason
    assert set(unmet(p, "shop/backend")) == {"health"}


# ----- docs and code agree --------------------------------------------------------------------------


def test_a_statefulset_with_fewer_replicas_than_min_clusters_is_unmet_availability() -> None:
    # Validation refuses it for a Deployment (docs/qos-reference.md); a StatefulSet's is
    # listed as unmet availability, as docs/placement.md says.
    db = component("db", kind="StatefulSet", replicas=1, qos={"availability": {"minClusters": 2}})
    p = Cycles(goals([cluster("a"), cluster("b")], [db])).run()
    assert "1 replica(s) cannot run on minClusters 2 clusters" in unmet(p, "shop/db")["availability"]

