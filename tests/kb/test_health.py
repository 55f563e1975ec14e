"""The one health model (kb.health) and the Knowledge Base's use of it: states, hysteresis,
the adaptive silence detector, the storm guard, and what runs where it is placed."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from qonnect_gitops.kb import KnowledgeBase, ReportRecord
from qonnect_gitops.kb.health import (
    ClusterTrack,
    HealthSettings,
    judge_cluster,
    report_condition,
    silence_threshold,
    storm_guard,
    track_report,
)
from qonnect_gitops.model.report import AgentReport
from qonnect_gitops.model.status import ClusterState, WorkloadState
from tests.kb.transitions import apply_goals, report_entry
from tests.lead.harness import goals_files, report

T0 = 1_800_000_000.0
SETTINGS = HealthSettings(interval=1.0, grace=10.0, degraded=30.0, recovery=10.0,
                          unhealthy_share=0.55, storm_eviction=60.0)


def at(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=UTC)


def body(cluster: str, t: float, condition: str = "Ready", applied: int = 1000, **kw: Any) -> dict[str, Any]:
    """A report of ``cluster`` at ``t`` whose cluster is Ready, Degraded (API server down: no
    nodes, ApiUnavailable) or Stalled (a refused commit), having applied plan generation
    ``applied`` (by default every generation these tests make)."""
    data = report(cluster, agent_time=t, **kw)
    data["applied"] = {"commit": "a" * 40, "generation": applied}
    if condition == "Degraded":
        data["sync"] = {"state": "Stalled", "reason": "ApiUnavailable", "message": "connection refused"}
        data["nodes"] = []
    elif condition == "Stalled":
        data["sync"] = {"state": "Stalled", "reason": "PruneLimitExceeded", "message": "removes 1 of 1"}
    return data


def record(cluster: str, t: float, condition: str = "Ready", **kw: Any) -> ReportRecord:
    return ReportRecord.from_report(AgentReport.model_validate(body(cluster, t, condition, **kw)))


def kb_with(clusters: list[str], grace: float = 10.0, shop: bool = False) -> KnowledgeBase:
    kb = KnowledgeBase()
    kb.apply_leader("lead-1", 1, T0)
    assert apply_goals(kb, "c1" * 20, goals_files(clusters, grace=grace, shop=shop), T0)
    return kb


def send(kb: KnowledgeBase, cluster: str, t: float, condition: str = "Ready", **kw: Any) -> None:
    [verdict] = kb.apply_reports([report_entry(cluster, t, body(cluster, t, condition, **kw))])
    assert verdict.stored


# ------------------------------------------------------------------ one report


def test_a_report_says_ready_degraded_or_stalled() -> None:
    assert report_condition(record("c", T0)) == (ClusterState.READY, None)
    assert report_condition(record("c", T0, "Degraded")) == (ClusterState.DEGRADED, "ApiUnavailable")
    assert report_condition(record("c", T0, ready=False)) == (ClusterState.DEGRADED, "NodesNotReady")
    assert report_condition(record("c", T0, "Stalled")) == (ClusterState.STALLED, "PruneLimitExceeded")
    # A workload failing its health check is the workload's trouble, not the cluster's.
    failing = body("c", T0)
    failing["sync"] = {"state": "Stalled", "reason": "HealthCheckFailed", "message": "CrashLoopBackOff"}
    assert report_condition(ReportRecord.from_report(AgentReport.model_validate(failing)))[0] == "Ready"


# ------------------------------------------------------------- the detector


def test_silence_is_measured_against_the_clusters_own_rhythm() -> None:
    assert silence_threshold((), SETTINGS) == 10.0  # nothing learnt: the grace
    steady = (1.0,) * 16
    assert silence_threshold(steady, SETTINGS) == 10.0  # a steady reporter: the grace is the floor
    late = (1.0, 6.0, 2.0, 7.0, 1.5, 5.0, 8.0, 2.0)  # reports delayed by a loaded machine
    assert 15.0 < silence_threshold(late, SETTINGS) < 100.0
    assert silence_threshold((500.0, 1.0, 500.0, 1.0), SETTINGS) == 100.0  # capped at ten graces


def test_the_detector_learns_gaps_but_not_silences() -> None:
    track = None
    heard = None
    for t in (0, 1, 2, 3):
        track = track_report(track, heard, record("c", T0 + t), T0 + t, SETTINGS)
        heard = T0 + t
    assert track is not None and track.gaps == (1.0, 1.0, 1.0)
    assert not track.recovering
    back = track_report(track, heard, record("c", T0 + 60), T0 + 60, SETTINGS)  # silent 57 s
    assert back.gaps == (1.0, 1.0, 1.0) and back.recovering


# ------------------------------------------------------------- one cluster


def test_api_down_with_the_agent_alive_is_degraded_then_gone_once_then_back_once() -> None:
    """The finding: the KB called a fresh report without nodes healthy while the heartbeat
    deadline called it failed, and decisions flapped. One model, judged every half second:
    cordoned, gone once degradedSeconds passed, cordoned while recovering, schedulable."""
    kb = kb_with(["edge-1", "edge-2"])
    timeline: list[tuple[bool, bool]] = []
    for step in range(0, 240):
        t = T0 + step * 0.5
        if step % 2 == 0:  # a report a second from both clusters
            condition = "Degraded" if 20 <= step < 120 else "Ready"
            send(kb, "edge-1", t, condition)
            send(kb, "edge-2", t)
        edge1 = kb.snapshot(at(t)).clusters["edge-1"]
        timeline.append((edge1.healthy, edge1.cordoned))
    changes = [timeline[i] for i in range(1, len(timeline)) if timeline[i] != timeline[i - 1]]
    # schedulable -> cordoned (degraded) -> gone -> cordoned (recovering) -> schedulable
    assert changes == [(True, True), (False, False), (True, True), (True, False)]
    gone = [i for i, (healthy, _) in enumerate(timeline) if not healthy]
    assert gone[0] * 0.5 - 10 > 30.0  # only after degradedSeconds of Degraded reports
    assert (timeline.index((True, False), gone[-1]) - gone[-1]) * 0.5 >= 10.0  # Ready for recoverySeconds


def test_a_stalled_cluster_is_cordoned_never_evicted() -> None:
    kb = kb_with(["edge-1", "edge-2"])
    for step in range(0, 600):
        send(kb, "edge-1", T0 + step, "Stalled")
    edge1 = kb.snapshot(at(T0 + 600)).clusters["edge-1"]
    assert (edge1.healthy, edge1.state, edge1.reason, edge1.cordoned) == (True, "Stalled", "PruneLimitExceeded", True)


def test_a_cluster_that_never_reported_is_judged_from_the_leaders_start() -> None:
    kb = kb_with(["edge-1", "edge-2"])
    assert kb.snapshot(at(T0 + 9)).clusters["edge-1"].healthy
    assert not kb.snapshot(at(T0 + 11)).clusters["edge-1"].healthy
    assert kb.snapshot(at(T0 + 11)).clusters["edge-1"].state == "Silent"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["Ready", "Degraded", "Stalled", "Silent"]),
                          st.integers(min_value=1, max_value=60)), min_size=1, max_size=8))
def test_judgements_change_at_most_once_per_state_change(spells: list[tuple[str, int]]) -> None:
    """A cluster driven through random spells of states (reports every second, or none while
    Silent), judged every half second: whether it is gone changes at most once per spell,
    and it is never gone while it reports Stalled or has not been Degraded for
    degradedSeconds."""
    kb = kb_with(["edge-1", "edge-2"])
    t = T0
    gone_flips = 0
    last_gone = False
    degraded_since: float | None = None
    for state, seconds in spells:
        for half in range(seconds * 2):
            now = t + half * 0.5
            if half % 2 == 0:
                send(kb, "edge-2", now)
                if state != "Silent":
                    send(kb, "edge-1", now, state)
            if state not in ("Degraded", "Silent"):
                degraded_since = None  # a report of another condition ends a degradation
            elif state == "Degraded" and half % 2 == 0:
                degraded_since = degraded_since or now
            edge1 = kb.snapshot(at(now)).clusters["edge-1"]
            gone = not edge1.healthy
            if gone and state == "Degraded":
                assert degraded_since is not None and now - degraded_since >= SETTINGS.degraded - 1
            if gone and state == "Stalled":
                raise AssertionError("a Stalled cluster was failed over")
            gone_flips += gone != last_gone
            last_gone = gone
        t += seconds
    assert gone_flips <= len(spells) + 1


# ------------------------------------------------------------- the storm guard


def _silent(ages: dict[str, float]) -> dict[str, Any]:
    now = T0 + 1000
    return {name: judge_cluster(ClusterTrack(ClusterState.READY, None, T0), now - age, now, SETTINGS)
            for name, age in ages.items()}


def test_a_fleet_mostly_silent_at_once_fails_nothing_over() -> None:
    now = T0 + 1000
    judged = _silent({"a": 12, "b": 13, "c": 14, "d": 2, "e": 1})
    groups = {n: ("edge", f"r-{n}") for n in judged}
    out, storms = storm_guard(judged, groups, now, SETTINGS)
    assert [s.group for s in storms] == ["fleet", "tier/edge"]
    assert all(not out[n].gone for n in "abc")
    assert {out[n].reason for n in "abc"} == {"EvictionsPaused"}


def test_a_tier_mostly_silent_loses_one_cluster_per_storm_interval() -> None:
    def judged(later: float) -> dict[str, Any]:
        # e2 failed long ago on its own; e1 and e3 fell silent 88 s apart, e1 completing the
        # share (2 of 3 edge clusters) 90 s ago.
        return _silent({"e1": 100 + later, "e2": 300 + later, "e3": 12 + later,
                        **{f"c{i}": 1 for i in range(1, 6)}})
    groups = {n: ("edge" if n.startswith("e") else "cloud", f"r-{n}") for n in judged(0)}
    now = T0 + 1000
    out, storms = storm_guard(judged(0), groups, now, SETTINGS)
    assert [s.group for s in storms] == ["tier/edge"]
    assert out["e2"].gone  # silent long before the storm: failed over on its own
    assert out["e1"].gone  # the first of the storm, released one storm interval after it began
    assert not out["e3"].gone and out["e3"].reason == "EvictionsSlowed"
    assert out["e3"].next_change == now - 90 + 2 * SETTINGS.storm_eviction
    later, _ = storm_guard(judged(31), groups, now + 31, SETTINGS)
    assert later["e3"].gone  # released after a second interval


def test_the_kb_holds_evictions_when_most_agents_go_silent_together() -> None:
    """A lead that cannot take reports (saturated, partitioned) sees every cluster fall
    silent at once: it fails none over, and says so."""
    names = [f"edge-{i}" for i in range(1, 6)]
    kb = kb_with(names)
    for t in range(0, 20):
        for name in names:
            send(kb, name, T0 + t)
    observed = kb.snapshot(at(T0 + 60))
    assert all(c.healthy and c.state == "Silent" and c.cordoned for c in observed.clusters.values())
    _, storms = kb.judge(T0 + 60)
    assert storms and storms[0].paused


# ------------------------------------------------------------- what runs


def test_placed_but_never_ready_is_progressing_then_not_running() -> None:
    kb = kb_with(["edge-1", "edge-2"], shop=True)
    kb.workloads["shop/db"] = kb.workloads["shop/db"].__class__("Deployment", "d" * 16, 120.0)
    kb.apply_plan({"shop/db": {"edge-1": 1}, "shop/web": {"edge-2": 2}}, {}, "initial", "c1" * 20, 1, T0 + 1)
    for t in range(2, 200, 2):
        send(kb, "edge-1", T0 + t)  # reports shop/web only: shop/db never runs
        send(kb, "edge-2", T0 + t)
    early = kb.snapshot(at(T0 + 60))
    assert [(w.component, w.cluster, w.state) for w in early.workloads] == [("shop/db", "edge-1", "Progressing")]
    late = kb.snapshot(at(T0 + 198))
    [db] = late.workloads
    assert (db.state, db.reason, db.ready_replicas) == (WorkloadState.NOT_RUNNING, "ProgressDeadlineExceeded", 0)


def test_what_a_stalled_cluster_was_sent_and_did_not_apply_is_not_running_at_once() -> None:
    kb = kb_with(["edge-1", "edge-2"], shop=True)
    kb.apply_plan({"shop/web": {"edge-1": 3}}, {}, "initial", "c1" * 20, 1, T0 + 1)
    send(kb, "edge-1", T0 + 2, "Stalled", applied=0)  # still runs 2 web replicas; refused the 3
    [web] = kb.snapshot(at(T0 + 3)).workloads
    assert (web.state, web.reason, web.ready_replicas) == ("NotRunning", "PruneLimitExceeded", 2)


def test_ready_where_placed_counts_as_running() -> None:
    kb = kb_with(["edge-1", "edge-2"], shop=True)
    kb.apply_plan({"shop/web": {"edge-1": 2}}, {}, "initial", "c1" * 20, 1, T0 + 1)
    assert [w.state for w in kb.snapshot(at(T0 + 2)).workloads] == ["Progressing"]
    send(kb, "edge-1", T0 + 3)
    assert kb.snapshot(at(T0 + 4)).workloads == ()
    assert kb.next_health_change(T0 + 4) is not None  # the next silence is due


def test_health_state_survives_a_dump() -> None:
    kb = kb_with(["edge-1", "edge-2"], shop=True)
    kb.apply_plan({"shop/web": {"edge-1": 3}}, {}, "initial", "c1" * 20, 1, T0 + 1)
    for t in range(2, 10):
        send(kb, "edge-1", T0 + t, "Degraded")
    again = KnowledgeBase.from_dict(kb.to_dict())
    assert again.cluster_tracks == kb.cluster_tracks
    assert again.unready_since == kb.unready_since
    assert again.snapshot(at(T0 + 10)) == kb.snapshot(at(T0 + 10))


def test_a_lead_that_could_not_take_reports_fails_no_silent_cluster_over() -> None:
    """Issue 30/31: idle connections filled a lead, reports were refused, and after the grace
    the leader failed clusters over. Its own refusals make silence no evidence."""
    kb = kb_with(["edge-1", "edge-2", "edge-3", "edge-4", "edge-5"])
    for t in range(0, 20):
        for name in ("edge-1", "edge-2", "edge-3", "edge-4", "edge-5"):
            send(kb, name, T0 + t)
    for t in range(20, 40):
        send(kb, "edge-1", T0 + t)  # one agent still gets through; edge-2 is silent
        send(kb, "edge-3", T0 + t)
        send(kb, "edge-4", T0 + t)
        send(kb, "edge-5", T0 + t)
    assert not kb.snapshot(at(T0 + 39)).clusters["edge-2"].healthy  # one of five: no storm
    held = kb.snapshot(at(T0 + 39), observer_impaired=True).clusters["edge-2"]
    assert (held.healthy, held.state, held.reason, held.cordoned) == (True, "Silent", "EvictionsPaused", True)


def test_an_agent_waiting_for_its_first_branch_is_not_stalled() -> None:
    """A new fleet: no cluster branch exists before the first decision, every agent says
    SourceUnavailable; none may be cordoned for it, or the first decision places nothing."""
    waiting = body("c", T0)
    waiting["sync"] = {"state": "Stalled", "reason": "SourceUnavailable", "message": "no branch cluster/c"}
    waiting["applied"] = None
    assert report_condition(ReportRecord.from_report(AgentReport.model_validate(waiting))) == ("Ready", None)
    waiting["attempted"] = "b" * 40  # it had a commit once: Git unreachable now is a stall
    assert report_condition(ReportRecord.from_report(AgentReport.model_validate(waiting)))[0] == "Stalled"


def test_replicas_count_only_once_the_agent_applied_the_generation_that_placed_them() -> None:
    """Issue 31: a frontend failed over to a stalled cluster ran 1 of 2 replicas, and the
    leads counted 2. The old replica running there is not the placed pair running."""
    kb = kb_with(["edge-1", "edge-2"], shop=True)
    generation = kb.apply_plan({"shop/web": {"edge-1": 2}}, {}, "initial", "c1" * 20, 1, T0 + 1)
    for t in range(2, 30):
        send(kb, "edge-1", T0 + t, applied=generation - 1)  # still on the commit before
    [web] = kb.snapshot(at(T0 + 30)).workloads
    assert web.state == "Progressing"  # its 2 ready replicas are not the ones placed
    send(kb, "edge-1", T0 + 31, applied=generation)
    assert kb.snapshot(at(T0 + 32)).workloads == ()


def test_an_autoscaler_wanting_fewer_replicas_is_not_a_shortfall() -> None:
    """A HorizontalPodAutoscaler scaled the placed 2 to 1: ready 1 of desired 1 runs."""
    kb = kb_with(["edge-1", "edge-2"], shop=True)
    kb.apply_plan({"shop/web": {"edge-1": 2}}, {}, "initial", "c1" * 20, 1, T0 + 1)
    scaled = body("edge-1", T0 + 2)
    scaled["components"] = [{"component": "shop/web", "healthy": True, "readyReplicas": 1, "desiredReplicas": 1}]
    kb.apply_reports([report_entry("edge-1", T0 + 2, scaled)])
    assert kb.snapshot(at(T0 + 300)).workloads == ()
