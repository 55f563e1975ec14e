"""Where the lead reads goals from: the ``main`` branch of the goals repository.

This is the one seam between the lead and Git for part 1. It talks to pygit2
directly; when ``qonnect_gitops.gitstore`` (its ``Mirror`` and
``read_tree_files``) lands on main, ``fetch_goals`` becomes a thin call into it
and nothing else in ``lead`` changes.
"""

from __future__ import annotations

import os
from pathlib import Path

import pygit2

from qonnect_gitops.gitstore.remote import credentials_from_env

MIRROR_DIR = "goals-mirror.git"
BRANCH = "main"


class GoalsFetchError(Exception):
    """The goals repository could not be fetched or has no ``main`` branch."""


def fetch_goals(repo_url: str, data_dir: str | os.PathLike[str]) -> tuple[str, dict[str, bytes]]:
    """Fetch ``main`` of ``repo_url`` into a bare mirror under ``data_dir``.

    Returns ``(commit_id, files)`` where ``files`` maps repository paths to
    contents, the shape ``load_goals`` takes.
    """
    path = Path(data_dir) / MIRROR_DIR
    try:
        if (path / "HEAD").exists():
            repo = pygit2.Repository(str(path))
        else:
            repo = pygit2.init_repository(str(path), bare=True)
        if "origin" in [r.name for r in repo.remotes]:
            if repo.remotes["origin"].url != repo_url:
                repo.remotes.set_url("origin", repo_url)
        else:
            repo.remotes.create("origin", repo_url)
        refspec = f"+refs/heads/{BRANCH}:refs/remotes/origin/{BRANCH}"
        # Private goals repositories: the same QONNECT_GIT_* variables the agent reads.
        credentials = credentials_from_env()
        repo.remotes["origin"].fetch([refspec],
                                     callbacks=pygit2.RemoteCallbacks(credentials=credentials))
        ref = repo.references.get(f"refs/remotes/origin/{BRANCH}")
    except (pygit2.GitError, OSError, ValueError) as exc:
        raise GoalsFetchError(f"cannot fetch {repo_url}: {exc}") from exc
    if ref is None:
        raise GoalsFetchError(f"{repo_url} has no branch '{BRANCH}'")
    commit = repo[ref.target].peel(pygit2.Commit)
    files: dict[str, bytes] = {}
    _walk(repo, commit.tree, "", files)
    return str(commit.id), files


def _walk(repo: pygit2.Repository, tree: pygit2.Tree, prefix: str, out: dict[str, bytes]) -> None:
    for entry in tree:
        path = f"{prefix}{entry.name}"
        obj = repo[entry.id]
        if isinstance(obj, pygit2.Tree):
            _walk(repo, obj, path + "/", out)
        elif isinstance(obj, pygit2.Blob):
            out[path] = obj.data
