"""The Knowledge Base's transitions and snapshots (pure, no Raft)."""

from __future__ import annotations

import pickle
from datetime import UTC, datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from qonnect_gitops.kb import KnowledgeBase, heartbeat_from_goals, inventory_from_goals
from qonnect_gitops.model import load_goals
from qonnect_gitops.model.observed import Observed
from qonnect_gitops.model.plan import CurrentPlacement
from qonnect_gitops.model.report import AgentReport
from tests.lead.harness import goals_files, report

T0 = 1_800_000_000.0


def at(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=UTC)


def rep(cluster: str, **kw: Any) -> dict[str, Any]:
    """A report as it travels through the log: validated, dumped to JSON."""
    return AgentReport.model_validate(report(cluster, **kw)).model_dump(mode="json", by_alias=True)


def kb_with_goals(clusters: tuple[str, ...] = ("edge-1", "edge-2"), grace: float = 10.0,
                  leader_since: float = T0) -> KnowledgeBase:
    goals = load_goals(goals_files(list(clusters), grace=grace))
    kb = KnowledgeBase()
    kb.apply_leader("lead-1", 1, leader_since)
    assert kb.apply_goals("c1" * 20, inventory_from_goals(goals), heartbeat_from_goals(goals),
                          leader_since)
    return kb


def test_inventory_and_goals_are_recorded_once() -> None:
    kb = kb_with_goals()
    assert kb.inventory["edge-1"] == {"tier": "edge", "region": "eu-central", "distribution": "k8s",
                                      "nodes": 2, "cpuMillis": 8000, "memoryBytes": 16 * 2**30}
    assert kb.grace_seconds == 10.0
    seq = kb.decision_seq
    assert not kb.apply_goals("c1" * 20, kb.inventory, kb.heartbeat, T0 + 5)
    assert kb.decision_seq == seq


def test_failed_goals_keep_the_last_good_in_force() -> None:
    kb = kb_with_goals()
    assert kb.apply_goals_failure("d2" * 20, ["qonnect.yaml:3:1: spec: bad"], T0 + 1)
    assert kb.last_good is not None and kb.last_good["commit"] == "c1" * 20
    assert kb.last_failed is not None and kb.last_failed["errors"] == ["qonnect.yaml:3:1: spec: bad"]
    assert set(kb.inventory) == {"edge-1", "edge-2"}
    assert not kb.apply_goals_failure("d2" * 20, ["again"], T0 + 2)


def test_removed_cluster_forgets_its_report() -> None:
    kb = kb_with_goals()
    kb.apply_reports([("edge-2", T0, rep("edge-2", agent_time=T0))], T0)
    goals = load_goals(goals_files(["edge-1"], grace=10))
    kb.apply_goals("e3" * 20, inventory_from_goals(goals), heartbeat_from_goals(goals), T0 + 1)
    assert "edge-2" not in kb.reports
    assert "removed edge-2" in kb.decisions[-1]["summary"]


def test_older_report_does_not_replace_newer() -> None:
    kb = kb_with_goals()
    kb.apply_reports([("edge-1", T0 + 5, rep("edge-1", agent_time=T0 + 5, nodes=3))], T0 + 5)
    kb.apply_reports([("edge-1", T0 + 4, rep("edge-1", agent_time=T0 + 4, nodes=1))], T0 + 6)
    assert len(kb.reports["edge-1"]["report"]["nodes"]) == 3
    assert kb.reports["edge-1"]["receivedAt"] == T0 + 5
    assert kb.stale_reports == 1


def test_never_reported_cluster_is_healthy_for_one_grace_period_then_failed() -> None:
    kb = kb_with_goals(grace=10.0)
    early = kb.snapshot(at(T0 + 9.5)).clusters["edge-1"]
    assert early.healthy and early.nodes is None  # declared nodes apply
    late = kb.snapshot(at(T0 + 10.5)).clusters["edge-1"]
    assert not late.healthy
    assert late.heartbeat_age_seconds == 10.5


def test_reported_cluster_goes_stale_after_grace() -> None:
    kb = kb_with_goals(grace=10.0)
    kb.apply_reports([("edge-1", T0 + 20, rep("edge-1", agent_time=T0 + 20))], T0 + 20)
    fresh = kb.snapshot(at(T0 + 25))
    assert fresh.clusters["edge-1"].healthy
    assert fresh.clusters["edge-1"].heartbeat_age_seconds == 5.0
    assert not fresh.clusters["edge-2"].healthy  # never reported, grace over
    assert not kb.snapshot(at(T0 + 30.5)).clusters["edge-1"].healthy


def test_new_leader_restarts_the_clock_for_silent_clusters() -> None:
    """Leads that were down could hear nobody: ages count from the new leader's start."""
    kb = kb_with_goals(grace=10.0)
    kb.apply_reports([("edge-1", T0, rep("edge-1", agent_time=T0))], T0)
    assert not kb.snapshot(at(T0 + 100)).clusters["edge-1"].healthy
    kb.apply_leader("lead-2", 2, T0 + 100)
    again = kb.snapshot(at(T0 + 101)).clusters["edge-1"]
    assert again.healthy and again.heartbeat_age_seconds == 1.0


def test_snapshot_carries_nodes_latency_traffic_and_completed_jobs() -> None:
    kb = kb_with_goals()
    body = report("edge-1", agent_time=T0 + 1, nodes=2)
    body["nodes"][1]["ready"] = False
    body["components"].append({"component": "batch/job", "healthy": True, "readyReplicas": 0,
                               "desiredReplicas": 0, "completed": True})
    entry = AgentReport.model_validate(body).model_dump(mode="json", by_alias=True)
    kb.apply_reports([("edge-1", T0 + 1, entry), ("edge-2", T0 + 1, rep("edge-2"))], T0 + 1)
    # Latencies count once measured for a whole window (three 1 s intervals).
    assert kb.snapshot(at(T0 + 2)).latencies == ()
    snap = kb.snapshot(at(T0 + 4))
    assert isinstance(snap, Observed)
    one = snap.clusters["edge-1"]
    assert one.healthy
    assert one.nodes is not None and [n.ready for n in one.nodes] == [True, False]
    assert one.nodes[0].free.cpu == 2500 and one.nodes[0].free.memory == 6 * 2**30
    assert one.free is not None and one.free.cpu == 2500  # only ready nodes count
    assert [(lat.from_, lat.to, lat.ms) for lat in snap.latencies] == [
        ("edge-1", "eu-central", 12.5), ("edge-2", "eu-central", 12.5)]
    assert [(t.component, t.region, t.rps) for t in snap.traffic] == [("shop/web", "eu-central", 80.0)]
    assert snap.completed_jobs == ("batch/job",)
    # A frozen snapshot: later reports do not change it.
    kb.apply_reports([("edge-1", T0 + 3, rep("edge-1", agent_time=T0 + 3, nodes=5))], T0 + 3)
    assert len(one.nodes) == 2


def test_cluster_with_no_ready_node_is_failed() -> None:
    kb = kb_with_goals()
    kb.apply_reports([("edge-1", T0 + 1, rep("edge-1", agent_time=T0 + 1, ready=False))], T0 + 1)
    assert not kb.snapshot(at(T0 + 2)).clusters["edge-1"].healthy


def test_plan_generations_moves_and_fencing() -> None:
    kb = kb_with_goals()
    gen = kb.apply_plan({"shop/web": {"edge-1": 2}, "shop/db": {"edge-2": 1}}, {}, "goals-changed",
                        "c1" * 20, 1, T0 + 1)
    assert gen == 1
    assert kb.cluster_generation("edge-1") == 1 and kb.cluster_generation("edge-2") == 1
    # Same placement again: nothing written, nothing logged.
    seq = kb.decision_seq
    assert kb.apply_plan({"shop/db": {"edge-2": 1}, "shop/web": {"edge-1": 2}}, {}, "rescheduling",
                         None, 1, T0 + 2) == 1
    assert kb.decision_seq == seq
    # Moving web only bumps the clusters whose content changed.
    gen = kb.apply_plan({"shop/web": {"edge-2": 2}, "shop/db": {"edge-2": 1}},
                        {"shop/web": "edge-1 failed"}, "failover", None, 1, T0 + 3)
    assert gen == 2
    assert kb.cluster_generations == {"edge-1": 2, "edge-2": 2}
    assert kb.last_moved["shop/web"] == {"at": T0 + 3, "reason": "edge-1 failed", "generation": 2}
    assert kb.last_moved["shop/db"]["generation"] == 1
    assert kb.decisions[-1]["moves"] == [
        {"component": "shop/web", "from": {"edge-1": 2}, "to": {"edge-2": 2},
         "reason": "edge-1 failed"}]
    current = kb.current_placement()
    assert isinstance(current, CurrentPlacement)
    assert current.placements == {"shop/db": {"edge-2": 1}, "shop/web": {"edge-2": 2}}
    assert current.last_moved["shop/web"] == at(T0 + 3)
    # A deposed leader's plan (older term) is refused by the log.
    kb.apply_leader("lead-2", 5, T0 + 4)
    assert kb.apply_plan({"shop/web": {"edge-1": 1}}, {}, "rescheduling", None, 4, T0 + 5) == -1
    assert kb.generation == 2


def test_reports_answer_with_the_cluster_generation() -> None:
    kb = kb_with_goals()
    kb.apply_plan({"shop/web": {"edge-2": 1}}, {}, "goals-changed", None, 1, T0)
    got = kb.apply_reports([("edge-1", T0, rep("edge-1")), ("edge-2", T0, rep("edge-2"))], T0)
    assert got == {"edge-1": 0, "edge-2": 1}


def test_decision_log_is_bounded_and_keeps_sequence() -> None:
    kb = KnowledgeBase(decision_log_limit=5)
    for term in range(1, 13):
        kb.apply_leader(f"lead-{term}", term, T0 + term)
    assert len(kb.decisions) == 5
    assert [d["seq"] for d in kb.decisions] == [8, 9, 10, 11, 12]


def test_dump_round_trip_is_exact_and_unaliased() -> None:
    kb = kb_with_goals()
    kb.apply_reports([("edge-1", T0, rep("edge-1"))], T0)
    kb.apply_plan({"shop/web": {"edge-1": 2}}, {}, "goals-changed", None, 1, T0)
    data = pickle.loads(pickle.dumps(kb.to_dict()))
    back = KnowledgeBase.from_dict(data)
    assert back.to_dict() == kb.to_dict()
    back.apply_reports([("edge-2", T0, rep("edge-2"))], T0)
    assert "edge-2" not in kb.reports and "edge-2" not in data["reports"]
    assert back.snapshot(at(T0 + 1)).clusters["edge-1"] == kb.snapshot(at(T0 + 1)).clusters["edge-1"]


_ops = st.lists(
    st.one_of(
        st.tuples(st.just("report"), st.sampled_from(["edge-1", "edge-2", "edge-3"]),
                  st.floats(0, 100)),
        st.tuples(st.just("plan"), st.dictionaries(
            st.sampled_from(["a/x", "a/y"]),
            st.dictionaries(st.sampled_from(["edge-1", "edge-2"]), st.integers(0, 3)))),
        st.tuples(st.just("leader"), st.integers(1, 6)),
    ),
    max_size=30,
)


@settings(max_examples=60, deadline=None)
@given(_ops)
def test_replicas_fed_the_same_log_agree(ops: list[tuple[Any, ...]]) -> None:
    """Determinism: the same entries in the same order give byte-identical state."""
    reports = {name: rep(name) for name in ("edge-1", "edge-2", "edge-3")}
    replicas = [kb_with_goals(("edge-1", "edge-2", "edge-3")) for _ in range(2)]
    for index, op in enumerate(ops):
        now = T0 + index
        for kb in replicas:
            if op[0] == "report":
                kb.apply_reports([(op[1], T0 + op[2], reports[op[1]])], now)
            elif op[0] == "plan":
                kb.apply_plan(op[1], {}, "rescheduling", None, kb.leader_term, now)
            else:
                kb.apply_leader("lead-x", op[1], now)
    first, second = (pickle.dumps(kb.to_dict()) for kb in replicas)
    assert first == second
    snaps = [kb.snapshot(at(T0 + 50)).model_dump_json() for kb in replicas]
    assert snaps[0] == snaps[1]


def test_latency_counts_by_its_lowest_value_over_the_window() -> None:
    kb = kb_with_goals(grace=100.0)  # interval 1 s: window 3 s
    assert kb.latency_window == 3.0

    def measure(ts: float, ms: float) -> None:
        body = report("edge-1", agent_time=ts)
        body["latencies"] = [{"to": "eu-central", "ms": ms}]
        entry = AgentReport.model_validate(body).model_dump(mode="json", by_alias=True)
        kb.apply_reports([("edge-1", ts, entry)], ts)

    def seen(ts: float) -> float | None:
        found = [lat.ms for lat in kb.snapshot(at(ts)).latencies if lat.from_ == "edge-1"]
        return found[0] if found else None

    for i in range(10):  # flapping every second between 5 and 60 ms
        measure(T0 + i, 60.0 if i % 2 == 0 else 5.0)
    assert seen(T0 + 9.5) == 5.0
    measure(T0 + 10, 60.0)  # then held at 60 ms
    measure(T0 + 11, 60.0)
    assert seen(T0 + 11.5) == 5.0  # the 5 ms sample of t=9 is still inside the window
    measure(T0 + 12, 60.0)
    measure(T0 + 13, 60.0)
    assert seen(T0 + 13.5) == 60.0  # three seconds of 60 ms: a sustained breach
    # History stays bounded: the window's samples plus the one in force at its start.
    assert len(kb.latency_history["edge-1"]["eu-central"]) <= 5
    # The replicated dump carries the history.
    assert KnowledgeBase.from_dict(kb.to_dict()).snapshot(at(T0 + 13.5)).latencies == \
        kb.snapshot(at(T0 + 13.5)).latencies
