"""Goals the plan cannot meet reach the operator: the leader records the plan's unmet
list with the decision, every member's ``/v1/status`` shows it and ``qonnect status``
prints it (real lead processes, a goals repository on git daemon)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.goals_repo import GoalsRepo, served_goals
from tests.lead.fleet import TEMPLATE_CLUSTERS, Agents, consistent_at, wait_for
from tests.lead.harness import LeadGroup

IMPOSSIBLE = ("        tiers: [fog, cloud]               # the JVM is too heavy for the shop boards\n",
              "        tiers: [fog, cloud]               # the JVM is too heavy for the shop boards\n"
              "        latency:\n          - {region: eu-central, maxMs: 2}\n")


@pytest.fixture
def goals(tmp_path: Path) -> Iterator[GoalsRepo]:
    with served_goals(tmp_path / "goals") as repo:
        yield repo


def test_unmet_goals_show_in_status_on_every_member(make_group: Callable[..., LeadGroup], goals: GoalsRepo,
                                                    tmp_path: Path) -> None:
    goals.edit("apps/bookinfo/app.yaml", *IMPOSSIBLE, "reviews-v1 within 2 ms: no cluster is")
    group = make_group(clusters=TEMPLATE_CLUSTERS, repo_url=goals.url, extra_args=["--poll-seconds", "0.5"])
    with Agents(group, TEMPLATE_CLUSTERS):
        group.wait_leader()
        wait_for(lambda: consistent_at(goals, TEMPLATE_CLUSTERS, goals.rev("main")), 30, "the decision", group)

        def unmet_everywhere() -> bool:
            for lead in group.leads:
                status = group.status(lead) or {}
                if [(u["component"], u["goal"]) for u in status.get("unmet", [])] != [("bookinfo/reviews-v1", "latency")]:
                    return False
            return True

        wait_for(unmet_everywhere, 20, "unmet in every member's status", group)
        # Reads need a token since the lead hardening (a read-only one will do).
        token_file = tmp_path / "read-token"
        token_file.write_text(group.read_token + "\n")
        shown = subprocess.run([sys.executable, "-m", "qonnect_gitops", "status", "--lead", group.leads[0].url,
                                "--token-file", str(token_file)],
                               capture_output=True, text=True, cwd=ROOT, timeout=60, check=False)
        assert shown.returncode == 0, shown.stderr
        assert "UNMET GOALS" in shown.stdout and "bookinfo/reviews-v1" in shown.stdout
        assert "outside the latency envelope" in shown.stdout

        # Fixed in the goals: the next decision clears it.
        goals.edit("apps/bookinfo/app.yaml", "maxMs: 2}", "maxMs: 20}", "reviews-v1 within 20 ms")
        wait_for(lambda: all(not (group.status(lead) or {"unmet": [1]}).get("unmet") for lead in group.leads), 30,
                 "unmet cleared", group)
