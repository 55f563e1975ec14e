"""``qonnect preview`` on a real repository: valid and invalid heads, the JSON shape,
observations, and the plan in force as the current placement."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, TEMPLATE
from tests.forge.conftest import ENV, git


@pytest.fixture
def goals(tmp_path: Path) -> tuple[Path, Path]:
    bare, work = tmp_path / "goals.git", tmp_path / "work"
    git("init", "-q", "--bare", "-b", "main", bare)
    git("init", "-q", "-b", "main", work)
    git("remote", "add", "origin", str(bare), cwd=work)
    shutil.copytree(TEMPLATE, work, dirs_exist_ok=True)
    git("add", "-A", cwd=work)
    git("commit", "-q", "-m", "template", cwd=work)
    git("push", "-q", "origin", "main", cwd=work)
    return bare, work


def branch(work: Path, name: str, path: str, old: str, new: str, start: str = "main") -> str:
    git("checkout", "-q", "-B", name, start, cwd=work)
    target = work / path
    text = target.read_text()
    assert text.count(old) >= 1
    target.write_text(text.replace(old, new, 1))
    git("commit", "-q", "-am", f"{name}: {path}", cwd=work)
    git("push", "-q", "-f", "origin", name, cwd=work)
    git("checkout", "-q", "main", cwd=work)
    return git("rev-parse", name, cwd=work)


def preview(bare: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "qonnect_gitops", "preview", "--repo", str(bare), *args],
                          capture_output=True, text=True, cwd=ROOT, env={**ENV, "PYTHONPATH": str(ROOT)},
                          timeout=120, check=False)


def test_a_valid_change_lists_what_moves(goals: tuple[Path, Path]) -> None:
    bare, work = goals
    branch(work, "more-details", "apps/bookinfo/manifests/details.yaml", "replicas: 1", "replicas: 3")
    run = preview(bare, "--base", "main", "--head", "more-details", "--format", "json")
    assert run.returncode == 0, run.stderr
    data = json.loads(run.stdout)
    assert set(data) == {"valid", "errors", "changes", "unmet"}
    assert data["valid"] is True and data["errors"] == []
    assert [c["component"] for c in data["changes"]] == ["bookinfo/details"]
    change = data["changes"][0]
    assert sum(change["before"].values()) == 1 and sum(change["after"].values()) == 3
    md = preview(bare, "--base", "main", "--head", "more-details")
    assert md.returncode == 0 and "| `bookinfo/details` |" in md.stdout and "qonnect preview: valid" in md.stdout


def test_an_invalid_head_names_file_line_column_and_field(goals: tuple[Path, Path]) -> None:
    bare, work = goals
    head = branch(work, "bad", "clusters/edge-1.yaml", "tier: edge", "tier: moon")
    run = preview(bare, "--base", "main", "--head", head, "--format", "json")
    assert run.returncode == 1
    data = json.loads(run.stdout)
    assert data["valid"] is False and data["changes"] == [] and data["unmet"] == []
    assert data["errors"] and data["errors"][0].startswith("clusters/edge-1.yaml:")
    assert "spec.tier" in data["errors"][0]
    _, line, column = data["errors"][0].split(":")[:3]
    assert line.isdigit() and column.isdigit()


def test_unmet_goals_and_the_plan_in_force_as_current(goals: tuple[Path, Path]) -> None:
    bare, work = goals
    # More brokers than the fleet holds: the head cannot place them all.
    branch(work, "huge", "apps/sensor-pipeline/manifests/ingest.yaml", "replicas: 6", "replicas: 400")
    data = json.loads(preview(bare, "--base", "main", "--head", "huge", "--format", "json").stdout)
    assert data["valid"] and any(u["component"] == "sensor-pipeline/ingest" for u in data["unmet"])
    # With a plan in force, the base is planned against it: an unchanged head changes nothing.
    placed = subprocess.run([sys.executable, "-m", "qonnect_gitops", "reconcile", "--repo", str(bare), "--once"],
                            capture_output=True, text=True, cwd=ROOT, env={**ENV, "PYTHONPATH": str(ROOT)},
                            timeout=120, check=False)
    assert placed.returncode == 0, placed.stderr + placed.stdout
    same = json.loads(preview(bare, "--base", "main", "--head", "main", "--format", "json").stdout)
    assert same == {"valid": True, "errors": [], "changes": [], "unmet": []}


def test_observations_change_the_preview(goals: tuple[Path, Path], tmp_path: Path) -> None:
    bare, work = goals
    branch(work, "more-details", "apps/bookinfo/manifests/details.yaml", "replicas: 1", "replicas: 3")
    declared = json.loads(preview(bare, "--base", "main", "--head", "more-details", "--format", "json").stdout)
    where = set(declared["changes"][0]["after"])
    observed = tmp_path / "observed.yaml"
    observed.write_text("now: 2026-01-01T00:00:00Z\nclusters:\n" + "".join(
        f"  {c}: {{healthy: false}}\n" for c in sorted(where)))
    run = preview(bare, "--base", "main", "--head", "more-details", "--observed", str(observed), "--format", "json")
    assert run.returncode == 0, run.stderr
    after = json.loads(run.stdout)["changes"]
    details = next(c for c in after if c["component"] == "bookinfo/details")
    assert not set(details["after"]) & where  # planned away from the clusters seen failed


def test_unreadable_revisions_exit_2(goals: tuple[Path, Path]) -> None:
    bare, _ = goals
    run = preview(bare, "--base", "main", "--head", "no-such-branch")
    assert run.returncode == 2 and "no-such-branch" in run.stderr
