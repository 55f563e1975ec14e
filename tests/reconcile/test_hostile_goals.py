"""Hostile goals against the leader's side: `qonnect reconcile --once` and a real lead group
read goals through the same loader as `qonnect validate`, so an alias bomb or a branch
name that collides with `main` is an invalid commit (file:line, nothing written, the last
good plan stays), never a hang, a traceback or an overwritten goals branch."""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.goals_repo import GoalsRepo, served_goals
from tests.lead.harness import LeadGroup, commit_goals, goals_files
from tests.model.test_hostile_input import BOMB

BOMB_CLUSTER = b"""apiVersion: qonnect.io/v1alpha1
kind: Cluster
metadata:
  name: edge-9
  annotations:
""" + b"".join(b"    " + line + b"\n" for line in BOMB.splitlines())


@pytest.fixture
def goals(tmp_path: Path) -> Iterator[GoalsRepo]:
    with served_goals(tmp_path) as repo:
        yield repo


def reconcile(repo: GoalsRepo, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "qonnect_gitops", "reconcile", "--repo", repo.url, "--once", *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)


def _written(repo: GoalsRepo) -> list[str]:
    """Every ref qonnect writes (all but main), with its commit."""
    out = subprocess.run(["git", "-C", str(repo.bare), "for-each-ref", "--format=%(refname) %(objectname)"],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    return [line for line in out if not line.startswith("refs/heads/main ")]


def test_an_alias_bomb_on_main_is_an_invalid_commit_not_a_hang(goals: GoalsRepo) -> None:
    assert reconcile(goals).returncode == 0
    before = _written(goals)
    (goals.work / "clusters" / "edge-9.yaml").write_bytes(BOMB_CLUSTER)
    goals.commit("a bomb")
    before_cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    bad = reconcile(goals)
    after_cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    # The command's CPU (wall-clock on a shared machine says little): the bomb costs a scan, not its expansion.
    assert (after_cpu.ru_utime + after_cpu.ru_stime) - (before_cpu.ru_utime + before_cpu.ru_stime) < 60
    assert bad.returncode == 1
    assert "clusters/edge-9.yaml:" in bad.stderr and "expands this document past 1 MiB" in bad.stderr
    assert "nothing written" in bad.stderr and "Traceback" not in bad.stderr
    assert _written(goals) == before


def test_a_plan_branch_named_main_is_refused_cleanly(goals: GoalsRepo) -> None:
    main = goals.edit("qonnect.yaml", "plan: qonnect/plan", "plan: main", "plan on main")
    result = reconcile(goals)
    assert result.returncode == 1, result.stdout
    assert "Traceback" not in result.stderr
    assert ("qonnect.yaml:11:5: spec.branches: plan branch 'main' collides with the goals branch 'main'"
            in result.stderr)
    assert goals.rev("main") == main and not goals.has("qonnect/plan")


def test_a_cluster_whose_branch_would_be_main_is_refused_and_main_survives(goals: GoalsRepo) -> None:
    (goals.work / "clusters" / "in.yaml").write_text(
        "apiVersion: qonnect.io/v1alpha1\nkind: Cluster\nmetadata: {name: in}\nspec:\n  tier: cloud\n"
        "  region: eu-west\n  nodes: [{count: 1, cpu: '4', memory: 8Gi}]\n  cost: {cpuHour: 0.05}\n"
        "  energy: {wattsPerCpu: 5, carbonIntensity: 100}\n")
    goals.commit("a cluster named in")
    main = goals.edit("qonnect.yaml", "clusterPrefix: cluster/", "clusterPrefix: ma", "prefix ma")
    result = reconcile(goals)
    assert result.returncode == 1
    assert "clusters/in.yaml:3:18: metadata.name: cluster 'in' would follow branch 'main'" in result.stderr
    assert goals.rev("main") == main
    assert (goals.work / "qonnect.yaml").exists()


@pytest.mark.timeout(180)
def test_a_lead_group_shows_the_bomb_as_invalid_keeps_the_plan_and_stays_responsive(tmp_path: Path) -> None:
    group = LeadGroup(tmp_path / "group", clusters=["edge-1", "edge-2", "edge-3"])
    group.start_all()
    try:
        leader = group.wait_leader()
        good = group.wait_until(lambda: ((group.status(leader) or {}).get("goals") or {}).get("lastGood"),
                                what="goals loaded")["commit"]
        files = goals_files(group.clusters)
        files["clusters/edge-9.yaml"] = BOMB_CLUSTER
        bad = commit_goals(group.repo_path, files, "an alias bomb")
        failed = group.wait_until(
            lambda: (((group.status(leader) or {}).get("goals") or {}).get("lastFailed") or {}).get("commit") == bad
            and group.status(leader)["goals"]["lastFailed"], timeout=30, what="the bomb reported")
        assert any("clusters/edge-9.yaml:" in e and "expands this document past 1 MiB" in e
                   for e in failed["errors"]), failed
        assert group.status(leader)["goals"]["lastGood"]["commit"] == good
        # The next leader reads the same commit: it reports it too, and answers all along.
        group.kill(leader)
        successor = group.wait_leader(timeout=20)
        status = group.wait_until(lambda: group.status(successor), what="the new leader answers")
        assert status["goals"]["lastFailed"]["commit"] == bad
        start = time.monotonic()
        assert group.status(successor, timeout=5) is not None and time.monotonic() - start < 5
    finally:
        group.stop()


def test_goals_over_the_tree_limits_are_invalid_until_the_limits_are_raised(goals: GoalsRepo) -> None:
    small = reconcile(goals, "--goals-max-files", "5")
    assert small.returncode == 1
    assert "the goals tree holds more than 5 files" in small.stderr and "--goals-max-files raises it" in small.stderr
    assert "nothing written" in small.stderr and _written(goals) == []
    assert reconcile(goals, "--goals-max-files", "1000").returncode == 0
    assert _written(goals)  # the plan and the cluster branches


def test_a_lead_started_with_lower_goals_limits_reports_the_tree_and_writes_nothing(tmp_path: Path) -> None:
    group = LeadGroup(tmp_path / "group", clusters=["edge-1", "edge-2", "edge-3"], shop=False,
                      extra_args=["--goals-max-files", "3"])
    group.start_all()
    try:
        leader = group.wait_leader()
        failed = group.wait_until(
            lambda: (((group.status(leader) or {}).get("goals") or {}).get("lastFailed") or {}).get("errors"),
            timeout=30, what="the tree refused")
        assert any("the goals tree holds more than 3 files (4 read)" in e and "--goals-max-files raises it" in e
                   for e in failed), failed
        assert ((group.status(leader) or {}).get("goals") or {}).get("lastGood") is None
        refs = subprocess.run(["git", "-C", str(group.repo_path), "for-each-ref", "--format=%(refname)"],
                              capture_output=True, text=True, check=True).stdout.split()
        assert refs == ["refs/heads/main"]
    finally:
        group.stop()
