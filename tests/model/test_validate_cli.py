"""`qonnect validate` as a command: exit codes and output, in a real subprocess."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT, TEMPLATE


def _validate(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "qonnect_gitops", "validate", str(path)],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
    )


def test_template_is_valid() -> None:
    result = _validate(TEMPLATE)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith(
        "valid: 9 clusters, 2 regions, 2 apps, 10 components, 24 manifest objects"
    )


def test_invalid_tree_exits_1_with_every_problem(tmp_path: Path) -> None:
    tree = tmp_path / "goals"
    shutil.copytree(TEMPLATE, tree)
    edge = tree / "clusters" / "edge-1.yaml"
    edge.write_text(edge.read_text().replace("tier: edge", "tier: mist"))
    app = tree / "apps" / "bookinfo" / "app.yaml"
    app.write_text(app.read_text().replace("maxMs: 15", "maxMs: fifteen"))
    result = _validate(tree)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert lines == [
        "apps/bookinfo/app.yaml:21:41: spec.components[0].qos.latency[0].maxMs: got 'fifteen'; "
        "expected a valid number, unable to parse string as a number",
        "clusters/edge-1.yaml:10:9: spec.tier: got 'mist'; expected 'cloud', 'fog' or 'edge'",
        f"{tree}: invalid: 2 problems",
    ]
    assert result.stdout == ""


def test_missing_directory_exits_1(tmp_path: Path) -> None:
    result = _validate(tmp_path / "nope")
    assert result.returncode == 1 and "not a directory" in result.stderr


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def test_validates_a_repository_at_a_revision(tmp_path: Path) -> None:
    work = tmp_path / "work"
    shutil.copytree(TEMPLATE, work)
    _git(work, "init", "-q", "-b", "main")
    _git(work, "add", "-A")
    _git(work, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "good goals")
    good = _git(work, "rev-parse", "HEAD")
    edge = work / "clusters" / "edge-1.yaml"
    edge.write_text(edge.read_text().replace("tier: edge", "tier: mist"))
    _git(work, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "bad goals")
    url = f"file://{work}"

    def run(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "qonnect_gitops", "validate", "--repo", url, *extra],
                              capture_output=True, text=True, cwd=ROOT, timeout=60)

    latest = run()
    assert latest.returncode == 1
    assert "clusters/edge-1.yaml:10:9: spec.tier: got 'mist'" in latest.stderr
    older = run("--rev", good[:10])
    assert older.returncode == 0, older.stderr
    assert older.stdout.startswith(f"{url}@{good[:12]}: valid: 9 clusters")
    missing = run("--rev", "no-such-branch")
    assert missing.returncode == 1 and "no-such-branch" in missing.stderr
    gone = subprocess.run([sys.executable, "-m", "qonnect_gitops", "validate", "--repo",
                           f"file://{tmp_path}/nothing-here"], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert gone.returncode == 1 and gone.stderr.startswith("qonnect validate: ")
