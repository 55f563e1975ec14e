"""The leader's answer to a report names the head of that cluster's branch as it last pushed
or fetched it (``commit``), so an idle agent need not ask Git; followers, which do not know
it, leave the field out. Real lead processes, the template fleet on git daemon."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.goals_repo import GoalsRepo, served_goals
from tests.lead.fleet import TEMPLATE_CLUSTERS, Agents, agent_report, consistent_at, wait_for
from tests.lead.harness import Lead, LeadGroup, http


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

        # Followers do not know the heads: no field, rather than a guess.
        for follower in (lead for lead in group.leads if lead is not leader):
            doc = wait_for(lambda f=follower: answer(group, f, "edge-1"), 10, "a follower's answer", group)
            assert "commit" not in doc, doc

        # A manifest change moves the branches of the clusters that run it (and only those):
        # the leader's answers follow the push.
        new = goals.edit("apps/bookinfo/manifests/details.yaml", "details-v1:1.20.2", "details-v1:1.20.3",
                         "details")
        wait_for(lambda: consistent_at(goals, TEMPLATE_CLUSTERS, new), 30, "second decision", group)
        second = heads(goals)
        assert second != first
        wait_for(lambda: answers_name(group, leader, second), 10, "answers name the new heads", group)

        # A new leader names the heads once it has fetched them in its own term.
        group.kill(leader)
        successor = group.wait_leader(timeout=20)
        wait_for(lambda: answers_name(group, successor, second), 20, "the new leader's answers", group)
        assert heads(goals) == second
