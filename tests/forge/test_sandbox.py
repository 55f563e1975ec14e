"""The leader's previews run in a child process under CPU, memory and time limits
(``forge.sandbox``): a valid head gives the preview the leader would compute itself, a
hostile head fails its own preview with a located problem or the limit it hit, and the next
preview works as before. The child gets no secret from the lead's environment."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from qonnect_gitops.forge import sandbox
from qonnect_gitops.forge.preview import preview
from qonnect_gitops.forge.sandbox import SandboxLimits, Stopped, preview_sandboxed, stopped_text
from qonnect_gitops.gitstore import read_tree_files
from qonnect_gitops.model import CurrentPlacement, Observed
from qonnect_gitops.model.limits import DEFAULT_TREE_LIMITS
from qonnect_gitops.model.observed import empty_observation
from tests.forge.conftest import git
from tests.forge.test_preview import branch, goals  # noqa: F401 - the fixture
from tests.model.test_bounded_yaml import chained

DETAILS = "apps/bookinfo/manifests/details.yaml"
ROOMY = SandboxLimits(cpu_seconds=120, memory_mib=4096, timeout_seconds=300)


def _commit_file(work: Path, name: str, path: str, body: bytes) -> str:
    """Branch ``name`` from main with ``path`` replaced by ``body``; its commit."""
    git("checkout", "-q", "-B", name, "main", cwd=work)
    (work / path).write_bytes(body)
    git("add", "-A", cwd=work)
    git("commit", "-q", "-m", name, cwd=work)
    git("checkout", "-q", "main", cwd=work)
    return git("rev-parse", name, cwd=work)


def _observed() -> Observed:
    return Observed.model_validate({"now": datetime(2026, 1, 1, tzinfo=UTC).isoformat(),
                                    "clusters": {"edge-1": {"healthy": False}, "fog-2": {"healthy": False}}})


def test_a_sandboxed_preview_is_the_preview_the_leader_would_make(goals: tuple[Path, Path]) -> None:  # noqa: F811
    _, work = goals
    head = branch(work, "more-details", DETAILS, "replicas: 1", "replicas: 3")
    base = git("rev-parse", "main", cwd=work)
    observed = _observed()
    boxed = preview_sandboxed(work / ".git", base, head, CurrentPlacement(), observed, DEFAULT_TREE_LIMITS, ROOMY)
    here = preview(read_tree_files(work / ".git", base), read_tree_files(work / ".git", head), CurrentPlacement(),
                   lambda goals: observed)
    assert boxed.stopped is None and boxed.valid
    assert (boxed.changes, boxed.unmet, boxed.errors, boxed.base_valid) == (here.changes, here.unmet, here.errors,
                                                                             here.base_valid)
    assert boxed.head_plan is not None and here.head_plan is not None
    assert boxed.head_plan.placements() == here.head_plan.placements()
    # the observation reached the child: nothing is placed on the clusters seen failed
    assert not {"edge-1", "fog-2"} & {c for change in boxed.changes for c, n in change.after.items() if n}


def test_a_hostile_head_fails_its_own_preview_with_its_position_and_the_next_is_previewed(
        goals: tuple[Path, Path]) -> None:  # noqa: F811
    _, work = goals
    base = git("rev-parse", "main", cwd=work)
    hostile = _commit_file(work, "hostile", DETAILS, chained())
    bad = preview_sandboxed(work / ".git", base, hostile, CurrentPlacement(), empty_observation(datetime.now(UTC)),
                            DEFAULT_TREE_LIMITS, ROOMY)
    assert bad.stopped is None and not bad.valid
    assert any(e.startswith(f"{DETAILS}:2:99: the alias *a0 nests") for e in bad.errors), bad.errors
    good = branch(work, "fine", DETAILS, "replicas: 1", "replicas: 2")
    after = preview_sandboxed(work / ".git", base, good, CurrentPlacement(), empty_observation(datetime.now(UTC)),
                              DEFAULT_TREE_LIMITS, ROOMY)
    assert after.valid and [c.component for c in after.changes] == ["bookinfo/details"]


def test_a_head_that_reads_too_long_is_stopped_at_the_cpu_limit(goals: tuple[Path, Path]) -> None:  # noqa: F811
    _, work = goals
    base = git("rev-parse", "main", cwd=work)
    # Three documents of anchored YAML, each under the 1 MiB document limit: ruamel reads them
    # for over ten seconds of CPU (within the reader's own budget for a file that size), far
    # past the 2 s this sandbox allows.
    slow = b"".join(b"---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: slow-%d}\ndata:\n" % d + b"".join(
        b"  k%d: &a%d value-%d\n" % (i, i, i) for i in range(30_000)) for d in range(3))
    head = _commit_file(work, "slow", DETAILS, slow)
    limits = SandboxLimits(cpu_seconds=2, memory_mib=4096, timeout_seconds=300)
    result = preview_sandboxed(work / ".git", base, head, CurrentPlacement(), empty_observation(datetime.now(UTC)),
                               DEFAULT_TREE_LIMITS, limits)
    assert result.stopped == stopped_text(Stopped.CPU, limits) and not result.valid


def test_a_head_too_large_for_memory_is_stopped_at_the_memory_limit(goals: tuple[Path, Path]) -> None:  # noqa: F811
    _, work = goals
    base = git("rev-parse", "main", cwd=work)
    # Git stores it in about 100 KB; reading it takes 100 MB
    head = _commit_file(work, "big", "data.yaml", b"y" * 100_000_000)
    limits = SandboxLimits(cpu_seconds=120, memory_mib=260, timeout_seconds=300)
    result = preview_sandboxed(work / ".git", base, head, CurrentPlacement(), empty_observation(datetime.now(UTC)),
                               DEFAULT_TREE_LIMITS, limits)
    assert result.stopped == stopped_text(Stopped.MEMORY, limits)


def test_a_preview_past_its_time_is_stopped(goals: tuple[Path, Path]) -> None:  # noqa: F811
    _, work = goals
    head = git("rev-parse", "main", cwd=work)
    limits = SandboxLimits(cpu_seconds=120, memory_mib=4096, timeout_seconds=0.05)  # less than starting Python
    result = preview_sandboxed(work / ".git", head, head, CurrentPlacement(), empty_observation(datetime.now(UTC)),
                               DEFAULT_TREE_LIMITS, limits)
    assert result.stopped == stopped_text(Stopped.TIME, limits)


def test_the_child_inherits_no_secret(goals: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    _, work = goals
    head = git("rev-parse", "main", cwd=work)
    monkeypatch.setenv("QONNECT_FORGE_TOKEN", "s3cret-forge-token")
    monkeypatch.setenv("QONNECT_GIT_PASSWORD", "s3cret-git-password")
    seen: list[dict[str, str]] = []
    run = subprocess.run

    def watched(*args: Any, **kwargs: Any) -> Any:
        seen.append(dict(kwargs["env"]))
        return run(*args, **kwargs)

    monkeypatch.setattr(sandbox.subprocess, "run", watched)
    result = preview_sandboxed(work / ".git", head, head, CurrentPlacement(), empty_observation(datetime.now(UTC)),
                               DEFAULT_TREE_LIMITS, ROOMY)
    assert result.valid and len(seen) == 1
    assert not any("s3cret" in value for value in seen[0].values())
    assert set(seen[0]) <= {"PATH", "PYTHONPATH", "LANG", "LC_ALL", "TZ"}
