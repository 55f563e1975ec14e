"""The Git side of the fake forge: branches behind pull requests, pull refs, merges."""

from __future__ import annotations

import time
from pathlib import Path

import pygit2

from qonnect_gitops.gitstore.store import cas_update_refs


class NotMergeable(Exception):
    """The head cannot be merged into the base (conflict, or a branch is gone)."""


class GitRepo:
    """One bare repository the forge hosts."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _repo(self) -> pygit2.Repository:
        return pygit2.Repository(str(self.path))

    def branch_sha(self, branch: str) -> str | None:
        """The commit of ``refs/heads/<branch>``, or None when there is no such branch."""
        try:
            ref = self._repo().references.get(f"refs/heads/{branch}")
        except (pygit2.GitError, ValueError):
            return None
        return None if ref is None else str(ref.resolve().target)

    def set_ref(self, ref: str, sha: str) -> None:
        """Point a forge-owned ref (``refs/pull/N/head``) at ``sha``."""
        self._repo().references.create(ref, pygit2.Oid(hex=sha), force=True)

    def merge(self, base: str, head_sha: str, message: str) -> str:
        """A merge commit of ``head_sha`` into branch ``base`` (the base moves with CAS)."""
        repo = self._repo()
        ref = f"refs/heads/{base}"
        current = repo.references.get(ref)
        if current is None:
            raise NotMergeable(f"base branch {base} is gone")
        base_oid = current.resolve().target
        assert isinstance(base_oid, pygit2.Oid)
        head_oid = pygit2.Oid(hex=head_sha)
        if base_oid == head_oid or repo.descendant_of(base_oid, head_oid):
            raise NotMergeable("nothing to merge: the base already contains the head")
        if repo.descendant_of(head_oid, base_oid):
            tree = repo[head_oid].peel(pygit2.Commit).tree_id
        else:
            index = repo.merge_commits(base_oid, head_oid)
            if index.conflicts is not None:
                raise NotMergeable("merge conflict")
            tree = index.write_tree(repo)
        sig = pygit2.Signature("Fake Forge", "forge@fake.invalid", int(time.time()), 0)
        merged = repo.create_commit(None, sig, sig, message, tree, [base_oid, head_oid])
        cas_update_refs(repo, {ref: (base_oid, merged)}, f"fake forge: {message.splitlines()[0]}")
        return str(merged)
