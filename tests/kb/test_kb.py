"""The Knowledge Base's transitions and snapshots (pure, no Raft)."""

from __future__ import annotations

import pickle
from datetime import UTC, datetime
from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from qonnect_gitops.kb import (
    KnowledgeBase,
    ReportEntry,
    ReportRecord,
)
from qonnect_gitops.kb.state import MAX_LOGGED_MOVES, PLAN_BASE_MOVED, placement_changes, saturating_add
from qonnect_gitops.model.observed import Observed
from qonnect_gitops.model.plan import CurrentPlacement
from qonnect_gitops.model.report import AgentReport
from tests.kb.transitions import (
    apply_goals,
    changed_fields,
    dump_fields,
    every_transition,
    filled_kb,
    report_entry,
)
from tests.lead.harness import goals_files, report

T0 = 1_800_000_000.0


def at(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=UTC)


def rep(cluster: str, **kw: Any) -> ReportRecord:
    """A report as it travels through the log: validated, typed."""
    return ReportRecord.from_report(AgentReport.model_validate(report(cluster, **kw)))


def entry(cluster: str, received_at: float, body: dict[str, Any] | None = None,
          **kw: Any) -> ReportEntry:
    """A log entry of a report received at ``received_at`` (the lead's clock)."""
    return report_entry(cluster, received_at, body if body is not None else report(cluster, **kw))


def kb_with_goals(clusters: tuple[str, ...] = ("edge-1", "edge-2"), grace: float = 10.0,
                  leader_since: float = T0, shop: bool = False) -> KnowledgeBase:
    kb = KnowledgeBase()
    kb.apply_leader("lead-1", 1, leader_since)
    assert apply_goals(kb, "c1" * 20, goals_files(list(clusters), grace=grace, shop=shop),
                       leader_since)
    return kb


def test_inventory_and_goals_are_recorded_once() -> None:
    kb = kb_with_goals()
    assert kb.inventory["edge-1"] == {"tier": "edge", "region": "eu-central", "distribution": "k8s",
                                      "nodes": 2, "cpuMillis": 8000, "memoryBytes": 16 * 2**30}
    assert kb.grace_seconds == 10.0
    seq = kb.decision_seq
    assert not kb.apply_goals("c1" * 20, kb.inventory, kb.heartbeat, kb.workloads, T0 + 5)
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
    kb.apply_reports([entry("edge-2", T0, agent_time=T0)])
    apply_goals(kb, "e3" * 20, goals_files(["edge-1"], grace=10), T0 + 1)
    assert "edge-2" not in kb.reports
    assert "removed edge-2" in kb.decisions[-1]["summary"]
    # A report of the removed cluster that commits afterwards is refused, not stored.
    [verdict] = kb.apply_reports([entry("edge-2", T0 + 2)])
    assert not verdict.stored and verdict.refused == "undeclared" and "edge-2" not in kb.reports


def test_reports_are_ordered_by_the_leads_receipt_time_not_the_agents_clock() -> None:
    kb = kb_with_goals()
    # Received at T0+5 (any agent time): stored. One received earlier but committed later
    # (another lead's batch) is dropped, and its verdict says so (the lead answers 409).
    [first] = kb.apply_reports([entry("edge-1", T0 + 5, agent_time=T0 + 5, nodes=3)])
    [late] = kb.apply_reports([entry("edge-1", T0 + 4, agent_time=T0 + 4, nodes=1)])
    assert first.stored and not late.stored and late.refused == "superseded"
    assert len(kb.reports["edge-1"].record.nodes) == 3
    assert kb.reports["edge-1"].received_at == T0 + 5
    assert kb.stale_reports == 1
    # An agent clock a year ahead changes nothing: later receipts keep the cluster alive.
    [future] = kb.apply_reports([entry("edge-1", T0 + 6, agent_time=T0 + 365 * 86400)])
    [honest] = kb.apply_reports([entry("edge-1", T0 + 7, agent_time=T0 + 7)])
    assert future.stored and honest.stored
    assert kb.snapshot(at(T0 + 16)).clusters["edge-1"].healthy  # grace 10 s from T0+7


def test_never_reported_cluster_is_healthy_for_one_grace_period_then_failed() -> None:
    kb = kb_with_goals(grace=10.0)
    early = kb.snapshot(at(T0 + 9.5)).clusters["edge-1"]
    assert early.healthy and early.nodes is None  # declared nodes apply
    late = kb.snapshot(at(T0 + 10.5)).clusters["edge-1"]
    assert not late.healthy
    assert late.heartbeat_age_seconds == 10.5


def test_silence_counts_from_when_the_goals_declared_the_cluster() -> None:
    # The group ran for a while before the first goals arrived: agents that reported
    # then were refused (undeclared), so a cluster is not failed the moment it is declared.
    kb = KnowledgeBase()
    kb.apply_leader("lead-1", 1, T0)
    assert apply_goals(kb, "c1" * 20, goals_files(["edge-1"], grace=10.0), T0 + 60)
    assert kb.snapshot(at(T0 + 65)).clusters["edge-1"].healthy
    assert kb.snapshot(at(T0 + 65)).clusters["edge-1"].heartbeat_age_seconds == 5.0
    # A cluster added later gets its own grace; one that stays keeps its date.
    assert apply_goals(kb, "c2" * 20, goals_files(["edge-1", "edge-2"], grace=10.0), T0 + 68)
    assert not kb.snapshot(at(T0 + 71)).clusters["edge-1"].healthy
    assert kb.snapshot(at(T0 + 71)).clusters["edge-2"].healthy
    again = KnowledgeBase.from_dict(kb.to_dict())
    assert again.declared_since == {"edge-1": T0 + 60, "edge-2": T0 + 68}


def test_reported_cluster_goes_stale_after_grace() -> None:
    kb = kb_with_goals(grace=10.0)
    kb.apply_reports([entry("edge-1", T0 + 20, agent_time=T0 + 20)])
    fresh = kb.snapshot(at(T0 + 25))
    assert fresh.clusters["edge-1"].healthy
    assert fresh.clusters["edge-1"].heartbeat_age_seconds == 5.0
    assert not fresh.clusters["edge-2"].healthy  # never reported, grace over
    assert not kb.snapshot(at(T0 + 30.5)).clusters["edge-1"].healthy


def test_new_leader_restarts_the_clock_for_silent_clusters() -> None:
    """Leads that were down could hear nobody: ages count from the new leader's start."""
    kb = kb_with_goals(grace=10.0)
    kb.apply_reports([entry("edge-1", T0, agent_time=T0)])
    assert not kb.snapshot(at(T0 + 100)).clusters["edge-1"].healthy
    kb.apply_leader("lead-2", 2, T0 + 100)
    again = kb.snapshot(at(T0 + 101)).clusters["edge-1"]
    assert again.healthy and again.heartbeat_age_seconds == 1.0


def test_snapshot_carries_nodes_latency_traffic_and_completed_jobs() -> None:
    kb = kb_with_goals(shop=True)
    kb.apply_plan({"shop/web": {"edge-1": 1, "edge-2": 1}, "shop/migrate": {"edge-1": 1}}, {},
                  "goals-changed", None, 1, T0)
    body = report("edge-1", agent_time=T0 + 1, nodes=2)
    body["nodes"][1]["ready"] = False
    body["components"].append({"component": "shop/migrate", "healthy": True, "readyReplicas": 0,
                               "desiredReplicas": 0, "completed": True})
    kb.apply_reports([entry("edge-1", T0 + 1, body), entry("edge-2", T0 + 1)])
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
    assert snap.completed_jobs == ("shop/migrate",)
    # A frozen snapshot: later reports do not change it.
    kb.apply_reports([entry("edge-1", T0 + 3, agent_time=T0 + 3, nodes=5)])
    assert len(one.nodes) == 2


def completion(component: str) -> dict[str, Any]:
    return {"component": component, "healthy": True, "readyReplicas": 0, "desiredReplicas": 0,
            "completed": True}


def test_a_report_speaks_only_for_components_placed_on_its_cluster() -> None:
    """The attack of issue 14: edge-3 said productpage completed and the whole fleet lost it."""
    kb = kb_with_goals(("edge-1", "edge-2", "edge-3"), shop=True)
    kb.apply_plan({"shop/web": {"edge-1": 1, "edge-2": 1}, "shop/migrate": {"edge-2": 1}}, {},
                  "goals-changed", None, 1, T0)
    body = report("edge-3", agent_time=T0 + 1)
    body["components"] = [completion("shop/web"), completion("shop/migrate")]
    body["traffic"] = [{"component": "shop/web", "region": "eu-central", "rps": 1e9}]
    [verdict] = kb.apply_reports([entry("edge-3", T0 + 1, body)])
    assert verdict.stored and sorted(verdict.ignored) == ["shop/migrate", "shop/web", "shop/web"]
    snap = kb.snapshot(at(T0 + 2))
    assert snap.completed_jobs == () and snap.traffic == ()
    assert kb.ignored_claims == {"edge-3": 3}
    assert kb.reports["edge-3"].record.components == ()
    # edge-1 runs web, a Deployment: it may report its health, never its completion.
    body = report("edge-1", agent_time=T0 + 2)
    body["components"] = [completion("shop/web")]
    [verdict] = kb.apply_reports([entry("edge-1", T0 + 2, body)])
    assert verdict.ignored == ("shop/web",)
    assert [c.completed for c in kb.reports["edge-1"].record.components] == [False]
    assert kb.snapshot(at(T0 + 3)).completed_jobs == ()
    # edge-2 runs the Job: its completion counts.
    body = report("edge-2", agent_time=T0 + 3)
    body["components"] = [completion("shop/migrate")]
    [verdict] = kb.apply_reports([entry("edge-2", T0 + 3, body)])
    assert verdict.ignored == ()
    assert kb.snapshot(at(T0 + 4)).completed_jobs == ("shop/migrate",)
    assert kb.cluster_rows(T0 + 4)[2]["ignoredClaims"] == 3


def test_dropping_claims_keeps_every_other_field_of_the_report() -> None:
    """The stored record is the report minus the claims not the cluster's to make: every
    other field (built field by field on the Raft thread) equals the report's."""
    kb = kb_with_goals(("edge-1", "edge-2"), shop=True)
    kb.apply_plan({"shop/web": {"edge-1": 1}}, {}, "goals-changed", None, 1, T0)
    body = report("edge-1", agent_time=T0 + 1)
    body["components"] = [completion("shop/web"), completion("shop/migrate")]
    body["traffic"].append({"component": "shop/migrate", "region": "eu-central", "rps": 3.0})
    body["refusals"] = [{"reason": "ProtectedNamespace", "message": "kube-system", "commit": "b" * 40}]
    sent = entry("edge-1", T0 + 1, body)
    [verdict] = kb.apply_reports([sent])
    stored = kb.reports["edge-1"].record
    assert sorted(verdict.ignored) == ["shop/migrate", "shop/migrate", "shop/web"]
    expected = msgspec.structs.replace(
        sent.record,
        components=(msgspec.structs.replace(sent.record.components[0], completed=False),),
        traffic=sent.record.traffic[:1])
    assert stored == expected


def test_a_completed_job_stays_done_until_its_workload_changes() -> None:
    kb = kb_with_goals(shop=True)
    kb.apply_plan({"shop/migrate": {"edge-1": 1}}, {}, "goals-changed", None, 1, T0)
    body = report("edge-1", agent_time=T0 + 1)
    body["components"] = [completion("shop/migrate")]
    kb.apply_reports([entry("edge-1", T0 + 1, body)])
    # The planner drops it from the plan; the agent prunes it and stops reporting it.
    kb.apply_plan({}, {}, "goals-changed", None, 1, T0 + 2)
    kb.apply_reports([entry("edge-1", T0 + 3)])
    assert kb.snapshot(at(T0 + 4)).completed_jobs == ("shop/migrate",)
    # Same goals again: still done. A new image of the Job: it runs again.
    apply_goals(kb, "c2" * 20, goals_files(["edge-1", "edge-2"], grace=10, shop=True), T0 + 5)
    assert kb.snapshot(at(T0 + 6)).completed_jobs == ("shop/migrate",)
    apply_goals(kb, "c3" * 20, goals_files(["edge-1", "edge-2"], grace=10, shop=True, job_tag="2"),
                T0 + 7)
    assert kb.snapshot(at(T0 + 8)).completed_jobs == ()


def test_traffic_sums_saturate() -> None:
    assert saturating_add(1.7e308, 1.7e308) == 1e9
    kb = kb_with_goals(("edge-1", "edge-2"), shop=True)
    kb.apply_plan({"shop/web": {"edge-1": 1, "edge-2": 1}}, {}, "goals-changed", None, 1, T0)
    for name in ("edge-1", "edge-2"):
        body = report(name, agent_time=T0 + 1)
        body["traffic"] = [{"component": "shop/web", "region": "eu-central", "rps": 1e9}]
        kb.apply_reports([entry(name, T0 + 1, body)])
    [traffic] = kb.snapshot(at(T0 + 2)).traffic
    assert traffic.rps == 1e9


def test_cluster_with_no_ready_node_is_degraded_then_failed_once_it_lasts() -> None:
    kb = kb_with_goals()  # grace 10 s: degradedSeconds defaults to 30 s
    kb.apply_reports([entry("edge-1", T0 + 1, agent_time=T0 + 1, ready=False)])
    edge1 = kb.snapshot(at(T0 + 2)).clusters["edge-1"]
    assert (edge1.healthy, edge1.state, edge1.reason, edge1.cordoned) == (True, "Degraded", "NodesNotReady", True)
    for t in range(2, 40, 2):
        kb.apply_reports([entry("edge-1", T0 + t, agent_time=T0 + t, ready=False)])
    assert kb.snapshot(at(T0 + 30)).clusters["edge-1"].healthy
    assert not kb.snapshot(at(T0 + 32)).clusters["edge-1"].healthy


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
    got = kb.apply_reports([entry("edge-1", T0), entry("edge-2", T0)])
    assert [(v.stored, v.generation) for v in got] == [(True, 0), (True, 1)]


def test_decision_log_is_bounded_and_keeps_sequence() -> None:
    kb = KnowledgeBase(decision_log_limit=5)
    for term in range(1, 13):
        kb.apply_leader(f"lead-{term}", term, T0 + term)
    assert len(kb.decisions) == 5
    assert [d["seq"] for d in kb.decisions] == [8, 9, 10, 11, 12]


def test_dump_round_trip_is_exact_and_unaliased() -> None:
    kb = kb_with_goals(shop=True)
    kb.apply_plan({"shop/web": {"edge-1": 2}, "shop/migrate": {"edge-1": 1}}, {}, "goals-changed",
                  None, 1, T0)
    body = report("edge-1")
    body["components"].append(completion("shop/migrate"))
    kb.apply_reports([entry("edge-1", T0, body)])
    data = pickle.loads(pickle.dumps(kb.to_dict()))
    back = KnowledgeBase.from_dict(data)
    assert back.to_dict() == kb.to_dict()
    assert back.reports["edge-1"] == kb.reports["edge-1"] and back.completed_jobs == kb.completed_jobs
    back.apply_reports([entry("edge-2", T0)])
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
                kb.apply_reports([ReportEntry(op[1], T0 + op[2], reports[op[1]])])
            elif op[0] == "plan":
                kb.apply_plan(op[1], {}, "rescheduling", None, kb.leader_term, now)
            else:
                kb.apply_leader("lead-x", op[1], now)
    first, second = (pickle.dumps(kb.to_dict()) for kb in replicas)
    assert first == second
    snaps = [kb.snapshot(at(T0 + 50)).model_dump_json() for kb in replicas]
    assert snaps[0] == snaps[1]


_plans = st.lists(
    st.dictionaries(
        st.sampled_from(["a/x", "a/y", "b/x", "b/y", "c/z"]),
        st.dictionaries(st.sampled_from(["edge-1", "edge-2", "edge-3"]), st.integers(0, 3))),
    min_size=1, max_size=12,
)


@settings(max_examples=80, deadline=None)
@given(_plans)
def test_a_plan_updates_only_what_changed_and_ends_where_a_rebuild_would(
        plans: list[dict[str, dict[str, int]]]) -> None:
    """``apply_plan`` works from what changed; after every plan its state equals what a
    rebuild from the placement alone gives (a replica loaded from a dump), and only the
    clusters whose components or replica counts changed get the new generation."""
    kb = KnowledgeBase()
    for index, plan in enumerate(plans):
        before = {comp: dict(where) for comp, where in kb.placements.items()}
        old_generations = dict(kb.cluster_generations)
        generation = kb.apply_plan(plan, {}, "rescheduling", None, 0, T0 + index)
        expected = {comp: {cl: n for cl, n in sorted(where.items()) if n > 0}
                    for comp, where in sorted(plan.items())}
        expected = {comp: where for comp, where in expected.items() if where}
        assert kb.placements == expected
        rebuilt = KnowledgeBase.from_dict(pickle.loads(pickle.dumps(kb.to_dict())))
        assert kb._placed_on == rebuilt._placed_on
        changed = {cl for comp in before.keys() | expected.keys()
                   for cl in before.get(comp, {}).keys() | expected.get(comp, {}).keys()
                   if before.get(comp, {}).get(cl) != expected.get(comp, {}).get(cl)}
        assert {cl for cl, g in kb.cluster_generations.items() if g != old_generations.get(cl)} == (
            changed if expected != before else set())
        assert all(kb.cluster_generations[cl] == generation for cl in changed)


def test_a_decision_logs_its_first_moves_and_counts_them_all() -> None:
    kb = KnowledgeBase()
    many = {f"app/c{i:04d}": {"edge-1": 1} for i in range(MAX_LOGGED_MOVES + 50)}
    kb.apply_plan(many, {}, "goals-changed", None, 0, T0)
    logged = kb.decisions[-1]
    assert logged["movesTotal"] == MAX_LOGGED_MOVES + 50
    assert [m["component"] for m in logged["moves"]] == sorted(many)[:MAX_LOGGED_MOVES]
    one_more = dict(many, **{"app/c0003": {"edge-2": 1}})
    kb.apply_plan(one_more, {"app/c0003": "edge-1 failed"}, "failover", None, 0, T0 + 1)
    assert kb.decisions[-1]["movesTotal"] == 1
    assert kb.decisions[-1]["moves"] == [{"component": "app/c0003", "from": {"edge-1": 1},
                                          "to": {"edge-2": 1}, "reason": "edge-1 failed"}]


def test_latency_counts_by_its_lowest_value_over_the_window() -> None:
    kb = kb_with_goals(grace=100.0)  # interval 1 s: window 3 s
    assert kb.latency_window == 3.0

    def measure(ts: float, ms: float) -> None:
        body = report("edge-1", agent_time=ts)
        body["latencies"] = [{"to": "eu-central", "ms": ms}]
        kb.apply_reports([entry("edge-1", ts, body)])

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


def test_unschedulable_components_show_in_the_cluster_rows_and_status() -> None:
    """What `qonnect status` prints for a component whose pods the cluster cannot schedule."""
    from qonnect_gitops.cli.status import render as render_status

    kb = kb_with_goals(("edge-1", "edge-2"), shop=True)
    kb.apply_plan({"shop/web": {"edge-1": 1}}, {}, "goals-changed", None, 1, T0)
    body = report("edge-1", agent_time=T0 + 1)
    body["components"] = [{"component": "shop/web", "healthy": False, "readyReplicas": 0, "desiredReplicas": 1,
                           "reason": "Unschedulable",
                           "message": "Deployment web: 1 pod(s) unschedulable for 130s: 0/2 nodes are available"}]
    kb.apply_reports([entry("edge-1", T0 + 1, body)])
    rows = {r["name"]: r for r in kb.cluster_rows(T0 + 2)}
    assert rows["edge-1"]["unhealthy"] == [{"component": "shop/web", "reason": "Unschedulable", "ready": 0,
                                           "desired": 1, "message": body["components"][0]["message"]}]
    assert rows["edge-2"]["unhealthy"] == []
    status = {"leader": None, "self": {"id": "a", "state": "leader", "commitIndex": 1, "lastApplied": 1,
                                       "hasQuorum": True},
              "term": 1, "generation": 1, "pending": {"reportsQueued": 0, "reportBatchesInFlight": 0},
              "goals": {"lastGood": None, "lastFailed": None}, "members": [], "clusters": list(rows.values()),
              "placements": {}, "lastMoved": {}, "goalsSource": {"lastFetchError": None},
              "tokens": {"fileError": None}}
    text = render_status(status)
    section = text.split("UNHEALTHY COMPONENTS", 1)[1]
    assert "edge-1" in section and "shop/web" in section and "0/1" in section and "Unschedulable" in section


def test_a_capture_gives_the_planner_the_same_snapshot_and_shares_nothing_mutable() -> None:
    kb = kb_with_goals(shop=True, grace=100.0)
    kb.apply_leader("lead-1", 1, T0)
    kb.apply_plan({"shop/web": {"edge-1": 1}, "shop/migrate": {"edge-1": 1}}, {}, "goals-changed",
                  None, 1, T0)
    for i in range(6):
        body = report("edge-1", agent_time=T0 + i)
        body["latencies"] = [{"to": "eu-central", "ms": 20.0 + i}]
        body["components"].append(completion("shop/migrate"))
        kb.apply_reports([entry("edge-1", T0 + i, body), entry("edge-2", T0 + i)])
    view = kb.capture()
    for ts in (T0 + 5.5, T0 + 200):  # in the grace, and long after it
        assert view.snapshot(at(ts)) == kb.snapshot(at(ts))
    before = view.snapshot(at(T0 + 9))
    body = report("edge-1", agent_time=T0 + 7, nodes=5)
    body["latencies"] = [{"to": "eu-central", "ms": 1.0}]
    kb.apply_reports([entry("edge-1", T0 + 7, body)])
    assert view.snapshot(at(T0 + 9)) == before  # the live KB moved on; the view did not
    assert kb.snapshot(at(T0 + 9)) != before


def test_a_capture_keeps_the_state_it_was_taken_at_while_every_transition_moves_on() -> None:
    """What a full dump stores is built from ``capture()`` on another thread while the
    Raft thread applies the next entries: none of them may reach the capture."""
    kb = filled_kb()
    taken = pickle.dumps(kb.to_dict())
    view = kb.capture()
    assert pickle.dumps(view.to_dict()) == taken
    every_transition(kb, T0 + 10)
    live = kb.to_dict()
    # Every part of the state moved (the test would see a leak anywhere)...
    assert changed_fields(pickle.loads(taken), live) == set(dump_fields()) - {"version",
                                                                              "decisionLogLimit"}
    # ...and the capture still holds the state it was taken at, byte for byte.
    assert pickle.dumps(view.to_dict()) == taken
    restored = KnowledgeBase.from_dict(pickle.loads(pickle.dumps(view.to_dict())))
    assert restored.to_dict() == pickle.loads(taken)


@settings(max_examples=80, deadline=None)
@given(_plans)
def test_a_plan_given_as_its_changes_ends_where_the_whole_plan_does(
        plans: list[dict[str, dict[str, int]]]) -> None:
    """A leader proposes what its decision changed against the one it recorded before
    (``placement_changes``, ``apply_plan_changes``): every lead must end exactly where
    ``apply_plan`` of the whole placement ends, generations, moves and views included."""
    whole, by_changes = KnowledgeBase(), KnowledgeBase()
    before: dict[str, dict[str, int]] = {}
    for index, plan in enumerate(plans):
        reasons = {comp: f"reason {index}" for comp in list(plan)[:1]}
        generation = whole.apply_plan(plan, reasons, "rescheduling", None, 0, T0 + index)
        changed, removed = placement_changes(before, plan)
        assert by_changes.apply_plan_changes(by_changes.generation, changed, removed, reasons,
                                             "rescheduling", None, 0, T0 + index) == generation
        before = plan
        for name in ("placements", "generation", "cluster_generations", "last_moved", "_placed_on",
                     "decisions", "unmet"):
            assert getattr(by_changes, name) == getattr(whole, name), name


def test_a_plan_change_against_another_generation_or_from_an_old_term_is_refused() -> None:
    kb = KnowledgeBase()
    kb.apply_leader("lead-2", 3, T0)
    first = kb.apply_plan({"shop/web": {"edge-1": 1}}, {}, "initial", None, 3, T0)
    assert first == 1
    kb.apply_plan({"shop/web": {"edge-2": 1}}, {}, "rescheduling", None, 3, T0 + 1)  # an operator's plan
    # The leader's change was made against generation 1: the plan in force moved since.
    assert kb.apply_plan_changes(first, {"shop/web": {"edge-3": 1}}, [], {}, "failover", None, 3,
                                 T0 + 2) == PLAN_BASE_MOVED
    assert kb.placements == {"shop/web": {"edge-2": 1}} and kb.generation == 2
    assert kb.apply_plan_changes(2, {"shop/web": {"edge-3": 1}}, [], {}, "failover", None, 2, T0 + 3) == -1
    assert kb.apply_plan_changes(2, {"shop/db": {"edge-1": 1}}, ["shop/web"], {}, "failover", None, 3,
                                 T0 + 4) == 3
    assert kb.placements == {"shop/db": {"edge-1": 1}}


def test_a_cronjob_never_completes_whatever_its_cluster_claims() -> None:
    """Issue 30: one cluster removed a CronJob fleet-wide by claiming it completed."""
    files = goals_files(["edge-1", "edge-2"], shop=True)
    files["apps/shop/manifests/migrate.yaml"] = b"""apiVersion: batch/v1
kind: CronJob
metadata: {name: migrate}
spec:
  schedule: "*/5 * * * *"
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: Never
          containers:
            - {name: m, image: busybox:1.36, resources: {requests: {cpu: 100m, memory: 64Mi}}}
"""
    kb = KnowledgeBase()
    kb.apply_leader("lead-1", 1, T0)
    assert apply_goals(kb, "c1" * 20, files, T0)
    assert kb.workloads["shop/migrate"].kind == "CronJob"
    kb.apply_plan({"shop/migrate": {"edge-1": 1}}, {}, "goals-changed", None, 1, T0)
    body = report("edge-1", agent_time=T0 + 1)
    body["components"] = [completion("shop/migrate")]
    body["traffic"] = []
    [verdict] = kb.apply_reports([entry("edge-1", T0 + 1, body)])
    assert verdict.ignored == ("shop/migrate",)
    assert kb.snapshot(at(T0 + 2)).completed_jobs == ()
