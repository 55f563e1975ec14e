"""`qonnect reconcile --once` against a goals repository served by git daemon."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from qonnect_gitops.lead.reconcile import placement_document
from tests.conftest import ROOT
from tests.goals_repo import GoalsRepo, served_goals


@pytest.fixture
def goals(tmp_path: Path) -> Iterator[GoalsRepo]:
    with served_goals(tmp_path) as repo:
        yield repo


def reconcile(repo: GoalsRepo, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "qonnect_gitops", "reconcile", "--repo", repo.url, "--once", *extra],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )


def test_first_cycle_writes_plan_and_cluster_branches_second_writes_nothing(goals: GoalsRepo, tmp_path: Path) -> None:
    first = reconcile(goals)
    assert first.returncode == 0, first.stderr
    assert "generation 1" in first.stdout and "refs/heads/qonnect/plan" in first.stdout
    plan = goals.rev("qonnect/plan")
    trailers = goals.trailers("qonnect/plan")
    assert trailers["Qonnect-Source"] == [goals.rev("main")]
    assert trailers["Qonnect-Generation"] == ["1"] and trailers["Qonnect-Reason"] == ["initial"]
    placement = placement_document(goals.bare, plan)
    assert placement is not None
    hosting = sorted({a["cluster"] for c in placement["components"].values() for a in c["assignments"]})
    assert hosting, "nothing placed"
    for cluster in hosting:
        assert goals.trailers(f"cluster/{cluster}")["Qonnect-Plan"] == [plan]
        files = goals.clone_branch(f"cluster/{cluster}", tmp_path / f"clone-{cluster}")
        assert any(f.startswith("_cluster/namespace-") for f in files)
    # A cluster hosting nothing still gets its branch, empty and saying so.
    empty = sorted(({f"edge-{i}" for i in (1, 2, 3)} | {"cloud-3"}) - set(hosting))
    assert empty
    for cluster in empty:
        assert goals.trailers(f"cluster/{cluster}").get("Qonnect-Allow-Empty") == ["true"]

    second = reconcile(goals)
    assert second.returncode == 0, second.stderr
    assert "nothing changed" in second.stdout
    assert goals.rev("qonnect/plan") == plan


def test_invalid_goals_write_nothing_and_keep_the_plan(goals: GoalsRepo) -> None:
    assert reconcile(goals).returncode == 0
    plan = goals.rev("qonnect/plan")
    edge = goals.rev("cluster/edge-1")
    goals.edit("clusters/edge-1.yaml", "tier: edge", "tier: mist", "typo")
    bad = reconcile(goals)
    assert bad.returncode == 1
    assert "clusters/edge-1.yaml:10:9: spec.tier: got 'mist'" in bad.stderr
    assert "nothing written" in bad.stderr
    assert (goals.rev("qonnect/plan"), goals.rev("cluster/edge-1")) == (plan, edge)


def test_failover_drains_the_failed_cluster_and_says_so(goals: GoalsRepo, tmp_path: Path) -> None:
    assert reconcile(goals).returncode == 0
    observed = tmp_path / "observed.yaml"
    observed.write_text('now: "2026-11-29T12:00:00Z"\nclusters:\n  edge-1: {healthy: false}\n')
    before = goals.rev("cluster/edge-1")
    result = reconcile(goals, "--observed", str(observed))
    assert result.returncode == 0, result.stderr
    assert goals.trailers("qonnect/plan")["Qonnect-Reason"] == ["failover"]
    assert goals.trailers("qonnect/plan")["Qonnect-Generation"] == ["2"]
    edge = goals.trailers("cluster/edge-1")
    assert goals.rev("cluster/edge-1") != before
    assert edge["Qonnect-Allow-Empty"] == ["true"]
    removed = int(edge["Qonnect-Prune-Limit"][0])
    listed = subprocess.run(["git", "-C", str(goals.bare), "ls-tree", "-r", "--name-only", before],
                            capture_output=True, text=True, check=True).stdout.split()
    assert removed == len(listed) > 0


def test_bad_observed_file_names_line_and_exits_1(goals: GoalsRepo, tmp_path: Path) -> None:
    observed = tmp_path / "observed.yaml"
    observed.write_text('now: "2026-11-29T12:00:00Z"\nclusters:\n  edge-7: {healthy: false}\n')
    result = reconcile(goals, "--observed", str(observed))
    assert result.returncode == 1
    assert f"{observed}:3:3: clusters.edge-7: unknown cluster 'edge-7'" in result.stderr
    assert not goals.has("qonnect/plan")


def test_review_mode_proposes_and_approve_publishes(goals: GoalsRepo) -> None:
    goals.edit("qonnect.yaml", "mode: auto            # auto | pull-request",
               "mode: pull-request", "review every decision")
    result = reconcile(goals)
    assert result.returncode == 0, result.stderr
    assert not goals.has("qonnect/plan")
    proposals = subprocess.run(["git", "-C", str(goals.bare), "for-each-ref", "--format=%(refname)",
                                "refs/heads/qonnect/proposals/"], capture_output=True, text=True).stdout.split()
    assert len(proposals) == 1
    proposal_id = proposals[0].rsplit("/", 1)[1]
    body = subprocess.run(["git", "-C", str(goals.bare), "log", "-1", "--format=%b", proposals[0]],
                          capture_output=True, text=True).stdout
    assert "| `bookinfo/productpage` |" in body  # the markdown table reviewers read
    again = reconcile(goals)
    assert "nothing changed" in again.stdout  # the same open proposal is not pushed twice
    approve = subprocess.run([sys.executable, "-m", "qonnect_gitops", "approve", proposal_id,
                              "--repo", goals.url], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert approve.returncode == 0, approve.stderr
    assert goals.trailers("qonnect/plan")["Qonnect-Generation"] == ["1"]
    assert goals.has("cluster/edge-1")


def test_decision_commits_carry_the_readable_table(goals: GoalsRepo) -> None:
    assert reconcile(goals).returncode == 0
    body = subprocess.run(["git", "-C", str(goals.bare), "log", "-1", "--format=%b", "qonnect/plan"],
                          capture_output=True, text=True, check=True).stdout
    assert "### Proposed placement (initial)" in body
    assert "| `bookinfo/productpage` |" in body


def _placement(goals: GoalsRepo, ref: str) -> dict[str, object]:
    return placement_document(goals.bare, ref) or {}


def _proposals(goals: GoalsRepo) -> list[str]:
    return subprocess.run(["git", "-C", str(goals.bare), "for-each-ref", "--format=%(refname)",
                           "refs/heads/qonnect/proposals/"], capture_output=True, text=True).stdout.split()


def test_review_mode_drops_draining_after_approval_without_another_review(goals: GoalsRepo) -> None:
    assert reconcile(goals).returncode == 0
    goals.edit("qonnect.yaml", "mode: auto            # auto | pull-request", "mode: pull-request", "review on")
    goals.edit("apps/bookinfo/app.yaml", "        tiers: [fog, cloud]               # the JVM is too heavy for the shop boards\n",
               "        tiers: [fog, cloud]               # the JVM is too heavy for the shop boards\n"
               "        latency:\n          - {region: eu-central, maxMs: 11}\n", "reviews-v1 within 11 ms")
    assert reconcile(goals).returncode == 0
    (proposal,) = _proposals(goals)
    assert _placement(goals, proposal)["components"]["bookinfo/reviews-v1"]["draining"]  # make before break
    approve = subprocess.run([sys.executable, "-m", "qonnect_gitops", "approve", proposal.rsplit("/", 1)[1],
                              "--repo", goals.url], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert approve.returncode == 0, approve.stderr
    approved = goals.rev("qonnect/plan")
    # The next cycle drops the draining replica on its own: the reviewer approved that target.
    result = reconcile(goals)
    assert result.returncode == 0, result.stderr
    assert goals.rev("qonnect/plan") != approved and _proposals(goals) == []  # no new review
    after = _placement(goals, "qonnect/plan")
    assert after["components"]["bookinfo/reviews-v1"]["draining"] == []
    where = [(a["cluster"], a["replicas"]) for a in after["components"]["bookinfo/reviews-v1"]["assignments"]]
    approved_where = [(a["cluster"], a["replicas"])
                      for a in _placement(goals, approved)["components"]["bookinfo/reviews-v1"]["assignments"]]
    assert where == approved_where


def test_decision_commits_say_which_goals_they_cannot_meet(goals: GoalsRepo) -> None:
    goals.edit("apps/bookinfo/app.yaml", "        tiers: [fog, cloud]               # the JVM is too heavy for the shop boards\n",
               "        tiers: [fog, cloud]               # the JVM is too heavy for the shop boards\n"
               "        latency:\n          - {region: eu-central, maxMs: 2}\n", "reviews-v1 within 2 ms: impossible")
    assert reconcile(goals).returncode == 0
    body = subprocess.run(["git", "-C", str(goals.bare), "log", "-1", "--format=%b", "qonnect/plan"],
                          capture_output=True, text=True, check=True).stdout
    assert "#### Unmet goals" in body and "| `bookinfo/reviews-v1` | latency |" in body
    assert [(u["component"], u["goal"]) for u in _placement(goals, "qonnect/plan")["unmet"]] == \
        [("bookinfo/reviews-v1", "latency")]
