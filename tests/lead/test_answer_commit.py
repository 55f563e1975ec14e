"""Every lead's answer to a report names the head of that cluster's branch on the Git server
(``commit``), so an idle agent need not ask Git: the leader's as it pushed or fetched it, a
follower's as the leader recorded it in the KB after the push. Never a commit the server
does not hold. Real lead processes, the template fleet on git daemon."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from qonnect_gitops.lead.loop import MIRROR_DIR
from tests.gitstore.helpers import git
from tests.goals_repo import GoalsRepo, served_goals
from tests.lead.fleet import TEMPLATE_CLUSTERS, Agents, agent_report, consistent_at, wait_for
from tests.lead.harness import Lead, LeadGroup, http
from tests.ports import free_ports


@pytest.fixture
def goals(tmp_path: Path) -> Iterator[GoalsRepo]:
    with served_goals(tmp_path / "goals") as repo:
        yield repo


def answer(group: LeadGroup, lead: Lead, cluster: str) -> dict[str, Any] | None:
    """The lead's 200 answer to one report of ``cluster``; None for anything else (a 429
    when the simulated agents just reported, a 503 during an election)."""
    try:
        code, _, payload = http("POST", f"{lead.url}/v1/clusters/{cluster}/report", agent_report(cluster),
                                token=group.tokens[cluster], timeout=3)
    except OSError:
        return None
    return payload if code == 200 and isinstance(payload, dict) else None


def heads(goals: GoalsRepo) -> dict[str, str]:
    return {c: goals.rev(f"cluster/{c}") for c in TEMPLATE_CLUSTERS}


def answers_name(group: LeadGroup, lead: Lead, expected: dict[str, str]) -> bool:
    for cluster, head in expected.items():
        doc = answer(group, lead, cluster)
        if doc is None or doc.get("commit") != head:
            return False
    return True


def test_the_leaders_answer_names_the_branch_head_it_pushed(
        make_group: Callable[..., LeadGroup], goals: GoalsRepo) -> None:
    group = make_group(clusters=TEMPLATE_CLUSTERS, repo_url=goals.url,
                       extra_args=["--poll-seconds", "1", "--reschedule-seconds", "60"])
    with Agents(group, TEMPLATE_CLUSTERS, interval=1.0):
        leader = group.wait_leader()
        wait_for(lambda: consistent_at(goals, TEMPLATE_CLUSTERS, goals.rev("main")), 30, "first decision", group)
        first = heads(goals)
        wait_for(lambda: answers_name(group, leader, first), 10, "the leader's answers name each head", group)

        # Followers name them too, from the KB.
        for follower in (lead for lead in group.leads if lead is not leader):
            wait_for(partial(answers_name, group, follower, first), 10, "a follower's answers", group)

        # A manifest change moves the branches of the clusters that run it (and only those):
        # every lead's answers follow the push.
        new = goals.edit("apps/bookinfo/manifests/details.yaml", "details-v1:1.20.2", "details-v1:1.20.3",
                         "details")
        wait_for(lambda: consistent_at(goals, TEMPLATE_CLUSTERS, new), 30, "second decision", group)
        second = heads(goals)
        assert second != first
        for lead in group.leads:
            wait_for(partial(answers_name, group, lead, second), 10, "answers name the new heads", group)

        # A new leader names the heads once it has fetched them in its own term.
        group.kill(leader)
        successor = group.wait_leader(timeout=20)
        wait_for(lambda: answers_name(group, successor, second), 20, "the new leader's answers", group)
        assert heads(goals) == second


def git_rev(repo: Path, ref: str) -> str:
    return git("-C", repo, "rev-parse", ref).strip()


def every_lead_names(group: LeadGroup, expected: dict[str, str]) -> bool:
    return all(answers_name(group, lead, expected) for lead in group.leads if lead.alive())


def first_decision_named(group: LeadGroup, goals: GoalsRepo) -> dict[str, str]:
    """Wait until the first decision is out and every lead names its heads; return them."""
    group.wait_leader()
    wait_for(lambda: consistent_at(goals, TEMPLATE_CLUSTERS, goals.rev("main")), 30, "first decision", group)
    first = heads(goals)
    wait_for(lambda: every_lead_names(group, first), 15, "every lead names the heads", group)
    return first


def test_a_restarted_group_names_the_recorded_heads_before_it_reaches_git(
        make_group: Callable[..., LeadGroup], goals: GoalsRepo) -> None:
    """The heads are in the KB's journal and dump: a group restarted with its Git server out
    of reach (so no lead can fetch them again) still answers with them."""
    group = make_group(clusters=TEMPLATE_CLUSTERS, repo_url=goals.url,
                       extra_args=["--poll-seconds", "1", "--reschedule-seconds", "60"])
    with Agents(group, TEMPLATE_CLUSTERS, interval=1.0):
        first = first_decision_named(group, goals)
        group.stop()
        group.repo_url = f"git://127.0.0.1:{free_ports(1)[0]}/goals.git"  # nothing listens there
        group.start_all()
        leader = group.wait_leader(timeout=30)
        wait_for(lambda: every_lead_names(group, first), 20, "the restarted leads name the heads", group)
        status = group.status(leader) or {}
        assert status.get("loop", {}).get("lastError"), status.get("loop")  # it never reached Git


def test_an_unpublished_decision_is_never_named(make_group: Callable[..., LeadGroup], goals: GoalsRepo,
                                                tmp_path: Path) -> None:
    """A decision recorded in the KB and committed in the leader's mirror but not pushed (the
    leader stopped before its push; then the server refusing the push) is named by no lead:
    the answers stay at the server's heads until the push lands."""
    fault = tmp_path / "fault"
    group = make_group(clusters=TEMPLATE_CLUSTERS, repo_url=goals.url, env={"QONNECT_FAULT_FILE": str(fault)},
                       extra_args=["--poll-seconds", "1", "--reschedule-seconds", "60"])
    with Agents(group, TEMPLATE_CLUSTERS, interval=1.0):
        first = first_decision_named(group, goals)

        # 1. The leader stops after recording the decision, before its push.
        fault.write_text("before-publish")
        second = goals.edit("apps/bookinfo/manifests/details.yaml", "details-v1:1.20.2", "details-v1:1.20.3",
                            "details")
        hit = tmp_path / "fault.hit"
        wait_for(lambda: hit.exists() and len(hit.read_text().split()) == 2, 20, "the leader at its push", group)
        stopped = int(hit.read_text().split()[1])
        leader = next(lead for lead in group.leads if lead.proc is not None and lead.proc.pid == stopped)
        local = {c: git_rev(leader.data_dir / MIRROR_DIR, f"refs/heads/cluster/{c}") for c in TEMPLATE_CLUSTERS}
        unpublished = {c: head for c, head in local.items() if head != first[c]}
        assert unpublished, "the leader committed the decision's branches locally"
        assert heads(goals) == first
        assert every_lead_names(group, first)

        # 2. The server refuses every push but main's; the stopped leader is killed and its
        # successor decides again: recorded, refused, never named.
        hook = goals.bare / "hooks" / "pre-receive"
        hook.write_text("#!/bin/sh\nwhile read old new ref; do\n"
                        "  [ \"$ref\" = refs/heads/main ] || { echo refused: $ref; exit 1; }\ndone\n")
        hook.chmod(0o755)
        group.kill(leader)
        group.wait_leader(timeout=30)
        deadline = time.monotonic() + 6  # the successor's cycles are refused meanwhile
        while time.monotonic() < deadline:
            assert heads(goals) == first
            for lead in (lead for lead in group.leads if lead.alive()):
                doc = answer(group, lead, "edge-1")
                assert doc is None or doc.get("commit") == first["edge-1"], doc
            time.sleep(0.2)

        # 3. The server takes the push again: every lead names the new heads.
        hook.unlink()
        wait_for(lambda: consistent_at(goals, TEMPLATE_CLUSTERS, second), 30, "the decision published", group)
        now = heads(goals)
        assert now != first
        wait_for(lambda: every_lead_names(group, now), 15, "every lead names the published heads", group)
