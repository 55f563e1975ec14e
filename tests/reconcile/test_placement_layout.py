"""The decision on the plan branch: ``placement.yaml`` with its ``placement/`` shards, and a
plan branch written before the shards (one ``placement.yaml``) still read by a new leader,
which writes its next decision in the new layout on top."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pygit2
import pytest
import yaml

from qonnect_gitops.lead.reconcile import placement_document
from qonnect_gitops.model.plan import Plan
from qonnect_gitops.render.placement_file import (
    PLACEMENT_DIR,
    PLACEMENT_FILE,
    PlacementFileError,
    placement_yaml,
    shard_of,
)
from tests.goals_repo import GoalsRepo, served_goals
from tests.reconcile.test_reconcile_once import reconcile


@pytest.fixture
def goals(tmp_path: Path) -> Iterator[GoalsRepo]:
    with served_goals(tmp_path) as repo:
        yield repo


def _as_before_the_shards(bare: Path, rev: str) -> str:
    """Replace the plan commit at ``rev`` by the one the previous version wrote: the same
    message, parents and clusters, the decision in one ``placement.yaml``."""
    repo = pygit2.Repository(str(bare))
    commit = repo.revparse_single(rev).peel(pygit2.Commit)
    plan = Plan.model_validate(placement_document(repo, str(commit.id)))
    builder = repo.TreeBuilder(commit.tree)
    builder.remove(PLACEMENT_DIR)
    builder.insert(PLACEMENT_FILE, repo.create_blob(placement_yaml(plan)), pygit2.enums.FileMode.BLOB)
    old = repo.create_commit(None, commit.author, commit.committer, commit.message, builder.write(),
                             list(commit.parent_ids))
    repo.references["refs/heads/qonnect/plan"].set_target(old)
    return str(old)


def test_a_new_leader_reads_a_plan_branch_written_before_the_shards(goals: GoalsRepo, tmp_path: Path) -> None:
    assert reconcile(goals).returncode == 0
    first = goals.rev("qonnect/plan")
    header = yaml.safe_load(subprocess.run(["git", "-C", str(goals.bare), "show", f"{first}:{PLACEMENT_FILE}"],
                                           capture_output=True, text=True, check=True).stdout)
    assert header["shards"] == PLACEMENT_DIR and "components" not in header
    decided = placement_document(goals.bare, first)
    assert decided is not None and decided["components"]

    old = _as_before_the_shards(goals.bare, first)
    assert placement_document(goals.bare, old) == decided  # the same decision, either layout
    observed = tmp_path / "observed.yaml"
    observed.write_text('now: "2026-11-29T12:00:00Z"\nclusters:\n  edge-1: {healthy: false}\n')
    result = reconcile(goals, "--observed", str(observed))
    assert result.returncode == 0, result.stderr
    assert goals.trailers("qonnect/plan")["Qonnect-Generation"] == ["2"]
    assert goals.rev("qonnect/plan^") == old
    later = placement_document(goals.bare, "qonnect/plan")
    assert later is not None and set(later["components"]) == set(decided["components"])
    assert all(a["cluster"] != "edge-1" for c in later["components"].values() for a in c["assignments"])
    shards = subprocess.run(["git", "-C", str(goals.bare), "cat-file", "-e", f"qonnect/plan:{PLACEMENT_DIR}"])
    assert shards.returncode == 0


def test_a_symlink_among_the_shards_is_refused(goals: GoalsRepo) -> None:
    assert reconcile(goals).returncode == 0
    repo = pygit2.Repository(str(goals.bare))
    commit = repo.revparse_single("qonnect/plan").peel(pygit2.Commit)
    shards = repo.TreeBuilder(repo[commit.tree[PLACEMENT_DIR].id])
    shards.insert("ff.yaml", repo.create_blob(b"../../etc/passwd"), pygit2.enums.FileMode.LINK)
    root = repo.TreeBuilder(commit.tree)
    root.insert(PLACEMENT_DIR, shards.write(), pygit2.enums.FileMode.TREE)
    bad = repo.create_commit(None, commit.author, commit.committer, "hand-made\n", root.write(), [commit.id])
    with pytest.raises(PlacementFileError, match=r"placement/ff\.yaml: not a regular file"):
        placement_document(repo, str(bad))


def test_a_leader_refuses_to_plan_on_a_shard_it_cannot_validate_and_names_it(goals: GoalsRepo) -> None:
    assert reconcile(goals).returncode == 0
    repo = pygit2.Repository(str(goals.bare))
    commit = repo.revparse_single("qonnect/plan").peel(pygit2.Commit)
    decided = placement_document(repo, str(commit.id))
    assert decided is not None
    key = next(iter(decided["components"]))
    shard = shard_of(key)
    text = repo[commit.tree[shard].id].data.replace(b"replicas: ", b"replicas: -", 1)
    root = repo.TreeBuilder(commit.tree)
    shards = repo.TreeBuilder(repo[commit.tree[PLACEMENT_DIR].id])
    shards.insert(shard.rpartition("/")[2], repo.create_blob(text), pygit2.enums.FileMode.BLOB)
    root.insert(PLACEMENT_DIR, shards.write(), pygit2.enums.FileMode.TREE)
    bad = repo.create_commit(None, commit.author, commit.committer, commit.message, root.write(), [commit.id])
    repo.references["refs/heads/qonnect/plan"].set_target(bad)
    goals.edit("clusters/edge-1.yaml", "tier: edge", "tier: edge  # touched", "a goals change")
    result = reconcile(goals)
    assert result.returncode != 0
    assert f"is unreadable ({shard})" in result.stderr
    assert goals.rev("qonnect/plan") == str(bad)  # nothing written over it
