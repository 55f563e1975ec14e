"""Election, failover, rejoin and durability of a three-lead group (real processes)."""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any

import pytest

from tests.lead.harness import Lead, LeadGroup, http, report


def post_report(group: LeadGroup, lead: Lead, cluster: str) -> dict[str, Any]:
    code, _, body = http("POST", f"{lead.url}/v1/clusters/{cluster}/report", report(cluster),
                         token=group.tokens[cluster])
    assert code == 200, body
    return body


def post_plan(group: LeadGroup, lead: Lead, placements: dict[str, dict[str, int]],
              reason: str = "goals-changed") -> int:
    code, _, body = http("POST", f"{lead.url}/v1/plan",
                         {"placements": placements, "reason": reason,
                          "reasons": {c: f"test {reason}" for c in placements}},
                         token=group.admin_token)
    assert code == 200, body
    return int(body["generation"])


def durable_view(status: dict[str, Any]) -> dict[str, Any]:
    """What must survive any crash: generation, placements, reports, decisions."""
    return {
        "generation": status["generation"],
        "placements": status["placements"],
        "lastMoved": status["lastMoved"],
        "reports": {c["name"]: (c["reports"], c["lastReportAt"]) for c in status["clusters"]},
        "goals": status["goals"]["lastGood"],
    }


def wait_goals(group: LeadGroup, lead: Lead) -> None:
    group.wait_until(lambda: (group.status(lead) or {}).get("goals", {}).get("lastGood"),
                     what="goals loaded")


@pytest.mark.parametrize("compaction", [None, 8], ids=["log", "dump-transfer"])
def test_failover_and_rejoin(make_group: Callable[..., LeadGroup], compaction: int | None) -> None:
    # With compaction after 8 entries the leader has dropped the entries the killed
    # lead missed, so it must catch up from a full dump sent over the wire.
    group = make_group(extra_args=["--compaction-entries", str(compaction)] if compaction else [])
    leader = group.wait_leader()
    wait_goals(group, leader)
    followers = [m for m in group.leads if m is not leader]
    # Writes through a follower are forwarded to the leader and acknowledged after commit.
    post_report(group, followers[0], "edge-1")
    assert post_plan(group, followers[1], {"shop/web": {"edge-1": 2}}) == 1
    before = durable_view(group.status(leader) or {})

    group.kill(leader, signal.SIGKILL)
    # A survivor leads within the wait (how fast: benchmarks/lead.py, reelection_s).
    new_leader = group.wait_leader(timeout=10, among=followers)
    assert new_leader is not leader
    # Everything acknowledged is there (once the new leader applied its first commit).
    group.wait_until(lambda: (st := group.status(new_leader)) and durable_view(st) == before,
                     timeout=5, what="acknowledged state on the new leader")
    # The group keeps taking writes with one member down.
    post_report(group, new_leader, "edge-2")
    assert post_plan(group, new_leader, {"shop/web": {"edge-2": 2}}, "failover") == 2

    if compaction:
        for round_ in range(12):
            post_report(group, followers[round_ % 2], group.clusters[round_ % 3])
        group.wait_until(lambda: (new_leader.data_dir / "raft.dump").exists(), what="a dump")
    group.start(leader)
    expected = durable_view(group.status(new_leader) or {})

    def caught_up() -> bool:
        st = group.status(leader)
        return bool(st and st["self"]["state"] == "follower" and st["leader"]
                    and st["leader"]["raft"] == new_leader.raft
                    and durable_view(st) == expected)

    group.wait_until(caught_up, timeout=15, what="old leader rejoining as follower")
    assert group.wait_leader(timeout=5) is new_leader
    rejoined = group.status(leader) or {}
    assert [d["seq"] for d in rejoined["decisions"]] == [
        d["seq"] for d in (group.status(new_leader) or {})["decisions"]]


@pytest.mark.parametrize("compaction", [None, 8], ids=["journal", "dump+journal"])
def test_kill_all_loses_nothing_acknowledged(make_group: Callable[..., LeadGroup],
                                             compaction: int | None) -> None:
    # With compaction after 8 entries, state comes back from a full dump plus the
    # journal entries after it; without, from the journal alone.
    extra = ["--compaction-entries", str(compaction)] if compaction else []
    group = make_group(extra_args=extra)
    leader = group.wait_leader()
    wait_goals(group, leader)
    for index, cluster in enumerate(group.clusters):
        post_report(group, group.leads[index % 3], cluster)
    post_plan(group, leader, {"shop/web": {"edge-1": 2}, "shop/db": {"edge-2": 1}})
    last = post_plan(group, group.leads[1], {"shop/web": {"edge-3": 2}, "shop/db": {"edge-2": 1}},
                     "rescheduling")
    if compaction:
        # Enough entries for a dump, then more after it that only the journal holds.
        for round_ in range(6):
            post_report(group, group.leads[round_ % 3], group.clusters[round_ % 3])
        group.wait_until(lambda: all((lead.data_dir / "raft.dump").exists()
                                     for lead in group.leads), what="full dumps written")
    post_report(group, group.leads[2], "edge-1")  # acknowledged just before the crash
    before = durable_view(group.status(leader) or {})
    decisions_before = (group.status(leader) or {})["decisions"]
    assert before["generation"] == last == 2

    for lead in group.leads:  # no grace: SIGKILL right after the last acknowledgement
        group.kill(lead, signal.SIGKILL)
    group.start_all()
    new_leader = group.wait_leader(timeout=15)
    for lead in group.leads:
        group.wait_until(lambda lead=lead: durable_view(group.status(lead) or {
            "generation": None, "placements": None, "lastMoved": None, "clusters": [],
            "goals": {"lastGood": None}}) == before, timeout=10, what=f"{lead.node_id} restored")
    # The old log is intact; the restart only appends (the new leader's term).
    after = group.wait_until(
        lambda: [d for d in ((group.status(new_leader) or {}).get("decisions") or [])
                 if d["seq"] > decisions_before[-1]["seq"]] and
        (group.status(new_leader) or {})["decisions"], what="new term recorded")
    assert after[: len(decisions_before)] == decisions_before
    assert after[len(decisions_before)]["kind"] == "leader"


def test_isolated_leader_steps_down_and_refuses_writes(make_group: Callable[..., LeadGroup]) -> None:
    """Freeze both followers: the leader loses its majority, must stop believing it leads
    (well before pysyncobj's 30 s default), and must not acknowledge reports."""
    group = make_group()
    leader = group.wait_leader()
    wait_goals(group, leader)
    followers = [m for m in group.leads if m is not leader]
    for member in followers:
        assert member.proc is not None
        member.proc.send_signal(signal.SIGSTOP)
    try:
        # Well before pysyncobj's 30 s default, with room for a loaded machine.
        group.wait_until(lambda: (st := group.status(leader)) and st["leader"] is None
                         and st["self"]["state"] != "leader", timeout=15, what="step-down")
        code, headers, body = http("POST", leader.url + "/v1/clusters/edge-1/report",
                                   report("edge-1"), token=group.tokens["edge-1"])
        assert code == 503 and headers["Retry-After"] == "1", body
    finally:
        for member in followers:
            assert member.proc is not None
            member.proc.send_signal(signal.SIGCONT)
    group.wait_leader(timeout=10)
    post_report(group, leader, "edge-1")


def test_five_leads_survive_two_failures(make_group: Callable[..., LeadGroup]) -> None:
    group = make_group(size=5)
    first = group.wait_leader(timeout=20)
    wait_goals(group, first)
    group.kill(first)
    second = group.wait_leader(timeout=10, among=[m for m in group.leads if m is not first])
    group.kill(second)
    survivors = [m for m in group.leads if m not in (first, second)]
    third = group.wait_leader(timeout=10, among=survivors)
    assert third in survivors
    post_report(group, survivors[0], "edge-3")
    assert post_plan(group, survivors[1], {"shop/web": {"edge-3": 1}}) == 1
