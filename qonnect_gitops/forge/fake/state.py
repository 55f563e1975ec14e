"""What the fake forge keeps in memory: pull requests, comments, statuses and labels."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from qonnect_gitops.forge.fake.git import GitRepo

# The state every dialect speaks about, in our words; each dialect renders its own.
CANONICAL = {"pending": "pending", "running": "pending", "success": "success", "failure": "failure",
             "failed": "failure", "error": "error", "canceled": "error", "warning": "failure",
             "skipped": "success"}


@dataclass
class Pull:
    number: int
    title: str
    body: str
    head: str
    base: str
    head_sha: str
    base_sha: str
    labels: list[str]
    created: float
    updated: float
    state: str = "open"  # open | closed
    merged: bool = False
    merged_at: float | None = None
    closed_at: float | None = None
    merge_sha: str | None = None


@dataclass
class Note:
    id: int
    pull: int
    body: str
    created: float
    updated: float


@dataclass
class Status:
    id: int
    sha: str
    context: str
    state: str  # canonical: pending | success | failure | error
    description: str
    target_url: str | None
    created: float


@dataclass
class Label:
    id: int
    name: str
    color: str
    description: str


@dataclass
class Repository:
    """One hosted repository: its Git directory and its forge records."""

    name: str
    id: int
    git: GitRepo
    pulls: dict[int, Pull] = field(default_factory=dict)
    notes: dict[int, Note] = field(default_factory=dict)
    statuses: list[Status] = field(default_factory=list)
    labels: dict[str, Label] = field(default_factory=dict)


class ForgeState:
    """All repositories; one lock serialises every change (the fake serves a handful of clients)."""

    def __init__(self, repositories: dict[str, Path]) -> None:
        self.lock = threading.RLock()
        self.repos = {name: Repository(name, i + 1, GitRepo(Path(path)))
                      for i, (name, path) in enumerate(sorted(repositories.items()))}
        self._ids = 0

    def next_id(self) -> int:
        self._ids += 1
        return self._ids

    def repo(self, name: str) -> Repository | None:
        """By ``owner/name`` or GitLab's numeric id."""
        if name.isdigit():
            return next((r for r in self.repos.values() if r.id == int(name)), None)
        return self.repos.get(name)

    def open_pull(self, repo: Repository, title: str, body: str, head: str, base: str,
                  labels: list[str]) -> Pull | str:
        """A new pull request, or why not (the reason a forge gives)."""
        head_sha, base_sha = repo.git.branch_sha(head), repo.git.branch_sha(base)
        if head_sha is None:
            return f"head branch {head} does not exist"
        if base_sha is None:
            return f"base branch {base} does not exist"
        if head == base:
            return "head and base are the same branch"
        for other in repo.pulls.values():
            if other.state == "open" and other.head == head and other.base == base:
                return f"a pull request already exists for {head} (#{other.number})"
        now = time.time()
        number = max(repo.pulls, default=0) + 1
        pull = Pull(number, title, body, head, base, head_sha, base_sha, list(labels), now, now)
        repo.pulls[number] = pull
        for name in labels:
            self.label(repo, name)
        return pull

    def label(self, repo: Repository, name: str, color: str = "ededed", description: str = "") -> Label:
        if name not in repo.labels:
            repo.labels[name] = Label(self.next_id(), name, color.lstrip("#"), description)
        return repo.labels[name]

    def add_note(self, repo: Repository, pull: Pull, body: str) -> Note:
        now = time.time()
        note = Note(self.next_id(), pull.number, body, now, now)
        repo.notes[note.id] = note
        return note

    def add_status(self, repo: Repository, sha: str, context: str, state: str, description: str,
                   target_url: str | None) -> Status:
        status = Status(self.next_id(), sha, context, CANONICAL[state], description, target_url, time.time())
        repo.statuses.insert(0, status)
        return status
