"""The provisioning decision: when, which pool, how many nodes, joining, failure and
back-off, linger, drain and removal (pure, cycle by cycle)."""

from __future__ import annotations

from qonnect_gitops.model import load_goals
from qonnect_gitops.model.plan import Plan
from qonnect_gitops.placement.provision import plan_with_pools
from tests.provision.cycles import T0, Fleet
from tests.provision.fleet import POOL, goals_files


def fleet(replicas: int, pool: bytes = POOL) -> Fleet:
    return Fleet(load_goals(goals_files(replicas, pool)))


def joined(replicas: int = 12) -> Fleet:
    """A fleet whose burst-1 has joined and runs the overflow."""
    f = fleet(replicas)
    f.cycle(0)
    f.cycle(5)
    f.set_capi("burst-1", "Provisioned", ready=True)
    f.reporting.add("burst-1")
    f.cycle(20)
    return f


def test_waits_for_the_pool_delay_then_provisions_sized_to_the_demand() -> None:
    f = fleet(30)  # 8 fit on cloud-1; 22 x 500m need 3 nodes of 4 CPUs (8 replicas each)
    f.cycle(0)
    assert f.actions() == [("wait", None)] and f.phases() == {}
    f.cycle(4.9)
    assert f.phases() == {}
    plan = f.cycle(5)
    assert f.actions() == [("provision", "burst-1")]
    assert f.phases() == {"burst-1": ("provisioning", 3)}
    assert plan.provisioning is not None and plan.provisioning.clusters[0].reason.startswith(
        "22 replicas of shop/api unplaced for 5 s")
    # The replicas stay unplaced, saying why they wait.
    assert plan.unplaced[0].replicas == 22
    assert "burst-1 of pool burst is being provisioned" in plan.unplaced[0].reason


def test_a_cluster_being_provisioned_grows_instead_of_a_second_one() -> None:
    f = fleet(12)
    f.cycle(0)
    f.cycle(5)
    assert f.phases() == {"burst-1": ("provisioning", 1)}
    f.cycle(6)
    assert f.phases() == {"burst-1": ("provisioning", 1)} and f.actions() == []
    f.cycle(7, load_goals(goals_files(30)))
    assert f.phases() == {"burst-1": ("provisioning", 3)} and f.actions() == [("scale", "burst-1")]


def test_never_when_a_fixed_cluster_frees_up_first() -> None:
    f = fleet(12)
    f.cycle(0)
    f.cycle(3, load_goals(goals_files(8)))  # the fixed cluster holds everything again
    assert f.plan is not None and f.plan.provisioning is not None
    assert f.plan.provisioning.unplaced_since is None
    f.cycle(6, load_goals(goals_files(12)))  # a new burst: its own delay counts from now
    assert f.phases() == {} and f.actions() == [("wait", None)]


def test_joins_once_ready_and_its_agent_reports_then_takes_the_replicas() -> None:
    f = fleet(12)
    f.cycle(0)
    f.cycle(5)
    f.set_capi("burst-1", "Provisioned", ready=True)
    f.cycle(10)  # ready, but its agent has not reported
    assert f.phases() == {"burst-1": ("provisioning", 1)}
    f.reporting.add("burst-1")
    plan = f.cycle(11)
    assert f.actions() == [("joined", "burst-1")]
    assert plan.placements() == {"shop/api": {"burst-1": 4, "cloud-1": 8}}
    assert plan.unplaced == ()


def test_the_management_cluster_alone_speaks_for_cluster_api() -> None:
    f = fleet(12)
    f.cycle(0)
    f.cycle(5)
    f.reporting.add("burst-1")
    current = f.plan.current() if f.plan else None
    assert current is not None and f.plan is not None
    from datetime import timedelta

    from qonnect_gitops.model.observed import Observed, ObservedCluster
    from qonnect_gitops.model.pool import ClusterApiStatus
    ready = ClusterApiStatus(name="burst-1", namespace="qonnect-pools", phase="Provisioned",
                             control_plane_ready=True, kubeconfig=True)
    observed = Observed(now=T0 + timedelta(seconds=9),
                        clusters={"burst-1": ObservedCluster(heartbeat_age_seconds=1)},
                        cluster_api={"burst-1": (ready,)})  # the new cluster about itself
    plan = plan_with_pools(f.goals, observed, current, f.plan.provisioning)
    assert plan.provisioning is not None and plan.provisioning.clusters[0].phase == "provisioning"


def test_failed_provisioning_is_reported_backs_off_and_retries() -> None:
    f = fleet(12)
    f.cycle(0)
    f.cycle(5)
    f.set_capi("burst-1", "Failed", message="quota exceeded")
    plan = f.cycle(8)
    assert f.actions() == [("failed", "burst-1")] and f.phases() == {}
    assert plan.provisioning is not None
    (back,) = plan.provisioning.backoff
    assert (back.pool, back.failures, (back.retry_at - T0).total_seconds()) == ("burst", 1, 68)
    assert "quota exceeded" in back.reason
    assert "pool burst failed" in plan.unplaced[0].reason and plan.unplaced[0].replicas == 4
    f.capi.clear()
    f.cycle(67)
    assert f.phases() == {}
    f.cycle(68)
    assert f.phases() == {"burst-2": ("provisioning", 1)}
    f.set_capi("burst-2", "Failed", message="quota exceeded")
    plan = f.cycle(70)
    assert plan.provisioning is not None
    (back,) = plan.provisioning.backoff
    assert (back.failures, (back.retry_at - T0).total_seconds()) == (2, 70 + 120)
    assert plan.provisioning.requested == 2  # the retry was burst-2: names are never reused


def test_a_cluster_not_ready_in_time_counts_as_failed() -> None:
    f = fleet(12, POOL.replace(b"lingerSeconds: 20", b"lingerSeconds: 20\n  provisioningTimeoutSeconds: 30"))
    f.cycle(0)
    f.cycle(5)
    f.set_capi("burst-1", "Provisioning")
    f.cycle(35)
    assert f.phases() == {"burst-1": ("provisioning", 1)}
    plan = f.cycle(35.5)
    assert f.actions() == [("failed", "burst-1")]
    assert plan.provisioning is not None and "phase Provisioning" in plan.provisioning.backoff[0].reason


def test_idle_cluster_lingers_then_is_removed_once_its_replicas_are_gone() -> None:
    f = joined()
    assert f.phases() == {"burst-1": ("joined", 1)}
    small = load_goals(goals_files(8))
    f.cycle(30, small)  # the burst is over: cloud-1 alone holds every replica
    assert f.actions() == [("idle", "burst-1")] and f.plan is not None
    assert f.plan.clusters_of("shop/api") == {"cloud-1": 8}
    f.cycle(49, small)
    assert f.phases() == {"burst-1": ("joined", 1)}
    f.cycle(50, small)  # 20 s of linger
    assert f.actions() == [("drain", "burst-1")] and f.phases() == {"burst-1": ("draining", 1)}
    f.cycle(51, small)  # nothing runs there: removed
    assert f.actions() == [("remove", "burst-1")] and f.phases() == {}


def test_a_draining_cluster_keeps_its_replicas_until_their_replacements_run() -> None:
    f = joined()
    bigger = load_goals(goals_files(12, nodes=3))  # the fixed cluster grew: room for all 12
    plan = f.cycle(30, bigger)
    assert f.actions() == [("idle", "burst-1")]
    assert plan.clusters_of("shop/api") == {"burst-1": 4, "cloud-1": 8}  # the stability rules keep them
    plan = f.cycle(50, bigger)
    assert f.actions() == [("drain", "burst-1")]
    # The taint sends them home, make before break: still running on burst-1 meanwhile.
    assert plan.placements() == {"shop/api": {"cloud-1": 12}}
    assert plan.clusters_of("shop/api") == {"burst-1": 4, "cloud-1": 12}
    assert f.phases() == {"burst-1": ("draining", 1)}
    # Once the planner drops the draining replicas (here at once: nothing reports them
    # unhealthy), the empty cluster is removed.
    plan = f.cycle(51, bigger)
    assert plan.clusters_of("shop/api") == {"cloud-1": 12}
    assert f.actions() == [("remove", "burst-1")] and f.phases() == {}


def test_demand_returning_before_the_linger_keeps_the_cluster() -> None:
    f = joined()
    f.cycle(30, load_goals(goals_files(8)))
    assert f.actions() == [("idle", "burst-1")]
    f.cycle(40, load_goals(goals_files(12)))
    assert f.plan is not None and f.plan.provisioning is not None
    assert f.plan.provisioning.clusters[0].idle_since is None
    f.cycle(60, load_goals(goals_files(12)))
    assert f.phases() == {"burst-1": ("joined", 1)}


def test_joined_cluster_grows_with_the_demand() -> None:
    f = joined()
    f.cycle(30, load_goals(goals_files(30)))
    assert f.phases() == {"burst-1": ("joined", 3)} and ("scale", "burst-1") in f.actions()


def test_limits_cap_nodes_and_a_second_cluster_takes_the_rest() -> None:
    f = fleet(70)  # 62 unplaced: 8 nodes' worth; at most 6 nodes per cluster, 2 clusters
    f.cycle(0)
    f.cycle(5)
    assert f.phases() == {"burst-1": ("provisioning", 6), "burst-2": ("provisioning", 2)}
    f = fleet(200)
    f.cycle(0)
    plan = f.cycle(5)
    assert f.phases() == {"burst-1": ("provisioning", 6), "burst-2": ("provisioning", 6)}
    assert plan.unplaced[0].replicas == 192


def test_which_pool_near_first_then_cheapest_and_only_one_that_holds_the_replicas() -> None:
    cheap_small = POOL.replace(b"name: burst", b"name: small").replace(b'cpu: "4"', b'cpu: 250m')
    files = goals_files(12)
    files["clusterPools/small.yaml"] = cheap_small.replace(b"cpuHour: 0.09", b"cpuHour: 0.01")
    f = Fleet(load_goals(files))
    f.cycle(0)
    f.cycle(5)
    assert f.phases() == {"burst-1": ("provisioning", 1)}  # small's nodes hold no 500m replica
    files["clusterPools/cheap.yaml"] = POOL.replace(b"name: burst", b"name: cheap").replace(
        b"cpuHour: 0.09", b"cpuHour: 0.05")
    f = Fleet(load_goals(files))
    f.cycle(0)
    f.cycle(5)
    assert f.phases() == {"cheap-1": ("provisioning", 1)}


def test_replicas_blocked_by_a_goal_a_new_cluster_cannot_meet_provision_nothing() -> None:
    files = goals_files(12)
    files["apps/shop/app.yaml"] = files["apps/shop/app.yaml"] + b"      qos: {tiers: [edge]}\n"
    f = Fleet(load_goals(files))
    f.cycle(0)
    f.cycle(10)
    assert f.phases() == {}


def test_same_inputs_same_decision() -> None:
    def run() -> Plan:
        f = fleet(30)
        f.cycle(0)
        f.cycle(5)
        f.set_capi("burst-1", "Provisioned", ready=True)
        f.reporting.add("burst-1")
        return f.cycle(12)
    a, b = run(), run()
    assert a.model_dump_json() == b.model_dump_json()
    assert a.placements() == {"shop/api": {"burst-1": 22, "cloud-1": 8}}


def test_without_pools_the_plan_is_the_planners() -> None:
    goals = load_goals(goals_files(12, pool=None))
    f = Fleet(goals)
    plan = f.cycle(0)
    assert plan.provisioning is None


def test_a_joined_cluster_offers_its_pool_node_shape() -> None:
    from qonnect_gitops.placement.provision import member, with_members
    f = joined()
    assert f.plan is not None and f.plan.provisioning is not None
    fleet = with_members(f.goals, f.plan.provisioning)
    node = fleet.clusters["burst-1"].spec.nodes[0]
    assert (node.count, node.cpu, node.memory) == (1, 4000, 16 * 2**30)
    assert fleet.latencies[("burst-1", "eu-central")] == 15
    draining = f.plan.provisioning.clusters[0].model_copy(update={"phase": "draining"})
    assert member(f.goals.pools["burst"], draining).spec.taints[0].key == "qonnect.io/draining"


def test_the_leader_is_woken_at_the_next_provisioning_deadline() -> None:
    from datetime import timedelta

    from qonnect_gitops.placement.provision import next_deadline, state_key
    f = fleet(12)
    plan = f.cycle(0)
    assert next_deadline(f.goals, plan.provisioning, T0) == T0 + timedelta(seconds=5)  # the pool's delay
    requested = f.cycle(5)
    # The delay is past (it was decided at): next, the provisioning timeout; never a moment
    # already past, which would make the leader plan again and again.
    now = T0 + timedelta(seconds=5)
    assert next_deadline(f.goals, requested.provisioning, now) == T0 + timedelta(seconds=5 + 900)
    assert state_key(plan.provisioning) != state_key(requested.provisioning)
    f.cycle(6)
    assert f.plan is not None and state_key(f.plan.provisioning) == state_key(requested.provisioning)
    j = joined()
    assert j.plan is not None
    j.cycle(30, load_goals(goals_files(8)))
    now = T0 + timedelta(seconds=30)
    assert next_deadline(j.goals, j.plan.provisioning, now) == T0 + timedelta(seconds=30 + 20)  # the linger
