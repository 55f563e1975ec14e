"""Forge review end to end: a real lead group, a goals repository on git daemon, simulated
agents that report what they applied, and the fake forge (every request validated against
the forge's published description) delivering signed webhooks to the leads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from qonnect_gitops.forge import CommitState, Forge, PullRequestDraft, PullState
from qonnect_gitops.forge.fake import FakeForge, FakeForgeConfig, HookTarget
from qonnect_gitops.forge.preview import MARKER
from tests.conftest import ROOT
from tests.forge.conftest import REPOSITORY, TOKEN, client, forges_file
from tests.goals_repo import GoalsRepo, served_goals
from tests.lead.conftest import make_group  # noqa: F401 - the fixture
from tests.lead.fleet import (
    TEMPLATE_CLUSTERS,
    Agents,
    agent_report,
    fast_heartbeat,
    wait_for,
)
from tests.lead.harness import LeadGroup, http

SECRET = "hook-s3cret"
FORGE_LINE = "    failover: auto        # failover may bypass review\n"


class ApplyingAgents(Agents):
    """Agents that report the commit (and its generation) of their branch as applied."""

    def __init__(self, group: LeadGroup, goals: GoalsRepo) -> None:
        super().__init__(group, TEMPLATE_CLUSTERS)
        self.goals = goals

    def send_round(self) -> None:
        out = subprocess.run(["git", "-C", str(self.goals.bare), "for-each-ref", "refs/heads/cluster/",
                              ("--format=%(refname:lstrip=3) %(objectname) "
                               "%(trailers:key=Qonnect-Generation,valueonly,separator=)")],
                             capture_output=True, text=True, check=False).stdout
        applied = {}
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 3:
                applied[parts[0]] = {"commit": parts[1], "generation": int(parts[2])}
        for cluster in self.clusters:
            body: dict[str, Any] = agent_report(cluster)
            if cluster in applied:
                body["applied"] = applied[cluster]
            for lead in self.group.leads:
                if not lead.alive():
                    continue
                try:
                    code, _, _ = http("POST", f"{lead.url}/v1/clusters/{cluster}/report", body,
                                      token=self.group.tokens[cluster], timeout=2)
                except OSError:
                    continue
                if code == 200:
                    break


@pytest.fixture
def goals(tmp_path: Path) -> Iterator[GoalsRepo]:
    with served_goals(tmp_path / "goals") as repo:
        yield repo


def pulls(fake: FakeForge) -> list[dict[str, Any]]:
    return list(fake.state()["repositories"][REPOSITORY]["pulls"])


def comments(fake: FakeForge, number: int) -> list[dict[str, Any]]:
    return [c for c in fake.state()["repositories"][REPOSITORY]["comments"] if c["pull"] == number]


def latest_status(forge: Forge, sha: str, context: str) -> Any:
    for status in forge.list_statuses(sha):  # newest first
        if status.context == context:
            return status
    return None


def refs(goals: GoalsRepo, prefix: str) -> list[str]:
    out = subprocess.run(["git", "-C", str(goals.bare), "for-each-ref", "--format=%(refname)", prefix],
                         capture_output=True, text=True, check=True).stdout
    return out.split()


def merged_sha(goals: GoalsRepo, number: int) -> str:
    """The forge's merge commit (its subject names the pull request)."""
    out = subprocess.run(["git", "-C", str(goals.bare), "log", "-1", "--format=%H %s", "qonnect/plan"],
                         capture_output=True, text=True, check=True).stdout.split(" ", 1)
    assert out[1].startswith(f"Merge pull request #{number} "), out
    return out[0]


def fanned_out(goals: GoalsRepo) -> bool:
    """Every cluster branch holds its subtree of the plan head (a forge merge commit)."""
    head = goals.rev("qonnect/plan")
    empty = subprocess.run(["git", "hash-object", "-t", "tree", "/dev/null"], capture_output=True, text=True,
                           check=True).stdout.strip()
    for cluster in TEMPLATE_CLUSTERS:
        def tree(rev: str) -> str:
            run = subprocess.run(["git", "-C", str(goals.bare), "rev-parse", rev], capture_output=True, text=True,
                                 check=False)
            return run.stdout.strip() if run.returncode == 0 else empty
        if tree(f"cluster/{cluster}^{{tree}}") != tree(f"{head}:clusters/{cluster}"):
            return False
    return True


def run_review(make_group: Callable[..., LeadGroup],  # noqa: F811
               goals: GoalsRepo, tmp_path: Path, dialect: str,
               full: bool) -> None:
    fast_heartbeat(goals, interval=0.5, grace=5.0, cooldown=0)
    secret = tmp_path / "webhook-secret"
    secret.write_text(SECRET)
    with FakeForge(FakeForgeConfig({REPOSITORY: goals.bare}, tokens=(TOKEN,))) as fake:
        forge = client(fake, dialect)
        goals.edit("qonnect.yaml", FORGE_LINE, FORGE_LINE + "    forge: {name: fake}\n", "review through the forge")
        source = goals.edit("qonnect.yaml", "mode: auto ", "mode: pull-request ", "review mode")
        forges = forges_file(tmp_path / "forges.yaml", fake, dialect)
        group = make_group(clusters=TEMPLATE_CLUSTERS, repo_url=goals.url,
                           extra_args=["--webhook-secret-file", str(secret), "--forges", str(forges)])
        fake.set_hooks((HookTarget(",".join(f"{lead.url}/v1/hooks/git" for lead in group.leads), SECRET, dialect),))
        with ApplyingAgents(group, goals):
            group.wait_leader()
            # 1. The first decision becomes a pull request into the plan branch.
            first = wait_for(lambda: [p for p in pulls(fake) if p["state"] == "open" and p["labels"]], 30,
                             "a labelled pull request", group)[0]
            assert first["head"].startswith("qonnect/proposals/") and first["base"] == "qonnect/plan"
            assert first["labels"] == ["qonnect"] and first["title"].startswith("initial:")
            assert "| Component | Cluster | Replicas | Score | Why |" in first["body"]
            # The plan branch exists (a pull request needs a base) but places nothing yet.
            assert not goals.has("cluster/edge-1") and goals.trailers("qonnect/plan")["Qonnect-Generation"] == ["0"]
            shown = group.status(group.wait_leader()) or {}
            review = shown["loop"]["review"]
            assert review["forge"]["type"] == dialect and review["forge"]["connected"]
            assert review["forge"]["name"] == "fake"
            assert TOKEN not in json.dumps(shown)
            status = wait_for(lambda: (s := latest_status(forge, source, "qonnect/placed")) is not None
                              and "awaiting review" in s.description and s, 15, "qonnect/placed pending", group)
            assert status.state is CommitState.PENDING

            if full:
                # 2. Closing it without merging rejects it: recorded, closed in Git, not proposed again.
                forge.close_pull_request(first["number"])
                pid = first["head"].removeprefix("qonnect/proposals/")
                wait_for(lambda: f"refs/qonnect/closed/{pid}" in refs(goals, "refs/qonnect/closed/"), 20,
                         "the proposal closed in Git", group)
                leader = group.wait_leader()
                assert any(d["kind"] == "proposal-rejected" for d in group.status(leader)["decisions"])
                failed = wait_for(lambda: latest_status(forge, source, "qonnect/placed").state is CommitState.FAILURE,
                                  10, "qonnect/placed failure after rejection", group)
                assert failed
                time.sleep(3)  # several cycles: the same inputs are not proposed again
                assert [p["number"] for p in pulls(fake)] == [first["number"]]
                assert refs(goals, "refs/heads/qonnect/proposals/") == []
                # 3. A new goals commit is proposed; a newer one supersedes it.
                goals.edit("apps/bookinfo/manifests/details.yaml", "replicas: 1", "replicas: 2", "details: 2")
                second = wait_for(lambda: [p for p in pulls(fake) if p["state"] == "open"], 30, "a new pull request",
                                  group)[0]
                goals.edit("apps/bookinfo/manifests/details.yaml", "replicas: 2", "replicas: 3", "details: 3")
                third = wait_for(lambda: [p for p in pulls(fake) if p["state"] == "open"
                                          and p["number"] != second["number"]], 30, "a superseding pull request",
                                 group)[0]
                wait_for(lambda: next(p for p in pulls(fake) if p["number"] == second["number"])["state"] == "closed",
                         20, "the superseded pull request closed", group)
                notes = [c["body"] for c in comments(fake, second["number"])]
                assert any(f"#{third['number']}" in n and "Superseded" in n for n in notes), notes
                target = third
            else:
                target = first
            # 4. Merging on the forge puts the plan in force; the clusters follow.
            merged = forge.merge_pull_request(target["number"])
            assert merged.state is PullState.MERGED
            main = goals.rev("main")
            assert goals.rev("qonnect/plan") == merged_sha(goals, target["number"])
            wait_for(lambda: fanned_out(goals), 30, "the merged plan fanned out", group)
            pid = target["head"].removeprefix("qonnect/proposals/")
            wait_for(lambda: f"refs/qonnect/closed/{pid}" in refs(goals, "refs/qonnect/closed/"), 20,
                     "the merged proposal closed in Git", group)
            placed = wait_for(lambda: (s := latest_status(forge, main, "qonnect/placed")) is not None
                              and s.state is CommitState.SUCCESS and s, 30, "qonnect/placed success", group)
            assert placed.target_url and placed.target_url.endswith("/v1/status")
            # 5. A goals pull request gets its preview, updated in place on every push.
            subprocess.run(["git", "checkout", "-q", "-b", "more-ratings"], cwd=goals.work, check=True)
            path = goals.work / "apps/bookinfo/manifests/ratings.yaml"
            path.write_text(path.read_text().replace("replicas: 1", "replicas: 2", 1))
            subprocess.run(["git", "commit", "-qam", "ratings: 2"], cwd=goals.work, check=True)
            subprocess.run(["git", "push", "-q", "origin", "more-ratings"], cwd=goals.work, check=True)
            pull = forge.open_pull_request(PullRequestDraft("more-ratings", "main", "more ratings", ""))
            valid = wait_for(lambda: latest_status(forge, pull.head_sha, "qonnect/validate"), 30, "qonnect/validate",
                             group)
            assert valid.state is CommitState.SUCCESS
            previews = [c for c in comments(fake, pull.number) if c["body"].startswith(MARKER)]
            assert len(previews) == 1 and "bookinfo/ratings" in previews[0]["body"]
            cluster_file = goals.work / "clusters/edge-1.yaml"
            cluster_file.write_text(cluster_file.read_text().replace("tier: edge", "tier: moon"))
            subprocess.run(["git", "commit", "-qam", "oops"], cwd=goals.work, check=True)
            subprocess.run(["git", "push", "-q", "origin", "more-ratings"], cwd=goals.work, check=True)
            fake.pushed(REPOSITORY)  # what the forge's own receive hook does
            head = goals.rev("more-ratings")
            invalid = wait_for(lambda: latest_status(forge, head, "qonnect/validate"), 30, "a second preview", group)
            assert invalid.state is CommitState.FAILURE and "clusters/edge-1.yaml" in invalid.description
            again = [c for c in comments(fake, pull.number) if c["body"].startswith(MARKER)]
            assert [c["id"] for c in again] == [previews[0]["id"]] and "invalid" in again[0]["body"]
            subprocess.run(["git", "checkout", "-q", "main"], cwd=goals.work, check=True)
        # 6. qonnect proposals shows the pull requests.
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        shown = subprocess.run([sys.executable, "-m", "qonnect_gitops", "proposals", "--repo", goals.url, "--closed",
                                "--forges", str(forges)], capture_output=True, text=True, env=env, check=True).stdout
        assert f"merged {merged.url}" in shown, shown
        assert fake.violations == []
        for lead in group.leads:  # the token is never logged
            assert TOKEN not in lead.log_path.read_text()


def test_review_through_github(make_group: Callable[..., LeadGroup],  # noqa: F811
                               goals: GoalsRepo, tmp_path: Path) -> None:
    run_review(make_group, goals, tmp_path, "github", full=True)


@pytest.mark.parametrize("dialect", ["gitlab", "gitea"])
def test_review_through_gitlab_and_gitea(make_group: Callable[..., LeadGroup],  # noqa: F811
                                         goals: GoalsRepo, tmp_path: Path,
                                         dialect: str) -> None:
    run_review(make_group, goals, tmp_path, dialect, full=False)
