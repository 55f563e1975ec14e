"""A goals repository seeded from repo-template, served by ``git daemon`` on loopback.

Shared by every suite that needs the real thing: reconcile, leads, agents, the demo.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from qonnect_gitops.gitstore.daemon import GitDaemon
from tests.conftest import TEMPLATE
from tests.gitstore.helpers import git, trailers_of


class GoalsRepo:
    """A bare repository with a work clone for pushing goals changes as an operator would."""

    def __init__(self, root: Path, daemon: GitDaemon) -> None:
        self.root = root
        self.bare = root / "srv" / "goals.git"
        self.work = root / "work"
        self.daemon = daemon

    @property
    def url(self) -> str:
        return self.daemon.url(self.bare.name)

    def seed(self) -> str:
        git("init", "-q", "--bare", "-b", "main", self.bare)
        git("clone", "-q", self.bare, self.work)
        git("checkout", "-q", "-B", "main", cwd=self.work)
        shutil.copytree(TEMPLATE, self.work, dirs_exist_ok=True)
        return self.commit("goals from repo-template")

    def commit(self, message: str) -> str:
        git("add", "-A", cwd=self.work)
        git("commit", "-q", "-m", message, cwd=self.work)
        git("push", "-q", "origin", "main", cwd=self.work)
        return self.rev("main")

    def edit(self, path: str, old: str, new: str, message: str) -> str:
        """Replace ``old`` (which must occur once) in a goals file, commit and push."""
        target = self.work / path
        text = target.read_text()
        assert text.count(old) == 1, f"{path}: {old!r} occurs {text.count(old)} times"
        target.write_text(text.replace(old, new))
        return self.commit(message)

    def rev(self, ref: str) -> str:
        return git("-C", self.bare, "rev-parse", ref).strip()

    def has(self, ref: str) -> bool:
        return bool(git("-C", self.bare, "for-each-ref", f"refs/heads/{ref}").strip())

    def trailers(self, ref: str) -> dict[str, list[str]]:
        return trailers_of(self.bare, ref)

    def clone_branch(self, branch: str, into: Path) -> set[str]:
        """Files of a fresh clone of one branch, as plain git sees them."""
        git("clone", "-q", "--branch", branch, "--single-branch", self.url, into)
        return {str(p.relative_to(into)) for p in into.rglob("*")
                if p.is_file() and ".git" not in p.relative_to(into).parts}


@contextmanager
def served_goals(root: Path) -> Iterator[GoalsRepo]:
    """Seed a goals repository under ``root`` and serve it until the block ends."""
    (root / "srv").mkdir(parents=True)
    with GitDaemon(root / "srv") as daemon:
        repo = GoalsRepo(root, daemon)
        repo.seed()
        yield repo
