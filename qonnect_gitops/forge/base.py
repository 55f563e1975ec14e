"""The forge interface every dialect implements, and the values it speaks in.

Values are plain frozen dataclasses and enums: the leader decides on ``PullState`` and
``CommitState``, never on a forge's wording. Each dialect maps its own vocabulary
(GitHub's ``closed`` + ``merged``, GitLab's ``opened``/``merged``/``closed``, Gitea's
``merged`` flag) onto these.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

# Limits the forges document (GitHub: 140 characters for a status description,
# 65536 for a comment or pull request body); the other two accept at least as much.
STATUS_DESCRIPTION_MAX = 140
BODY_MAX = 65_000
TITLE_MAX = 250


class ForgeKind(StrEnum):
    """Which API dialect a forge speaks."""

    GITHUB = "github"
    GITLAB = "gitlab"
    GITEA = "gitea"


class PullState(StrEnum):
    """Where a pull (merge) request stands."""

    OPEN = "open"
    CLOSED = "closed"  # closed without merging
    MERGED = "merged"


class CommitState(StrEnum):
    """A commit status (GitLab's ``running``/``failed`` map onto pending/failure)."""

    PENDING = "pending"
    SUCCESS = "success"
    FAILURE = "failure"
    ERROR = "error"


@dataclass(frozen=True)
class PullRequest:
    """A pull request as qonnect needs it: number, web URL, state, head and base."""

    number: int
    url: str
    state: PullState
    title: str
    body: str
    head_branch: str
    head_sha: str
    base_branch: str
    labels: tuple[str, ...] = ()


@dataclass(frozen=True)
class PullRequestDraft:
    """What opening a pull request takes."""

    head_branch: str
    base_branch: str
    title: str
    body: str
    labels: tuple[str, ...] = ()


@dataclass(frozen=True)
class Comment:
    """A comment on a pull request (GitLab: a note on a merge request)."""

    id: int
    body: str


@dataclass(frozen=True)
class CommitStatus:
    """A commit status: one ``context`` per check, latest wins."""

    context: str
    state: CommitState
    description: str = ""
    target_url: str | None = None


class ForgeError(Exception):
    """A forge call failed: ``status`` is the HTTP status (None: no answer at all)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class ForgeRateLimited(ForgeError):
    """The forge asked us to wait longer than we may block; ``retry_at`` is Unix time."""

    def __init__(self, message: str, status: int | None, retry_at: float) -> None:
        super().__init__(message, status)
        self.retry_at = retry_at


class Forge(Protocol):
    """A forge's pull requests, comments and commit statuses for one repository."""

    kind: ForgeKind

    def open_pull_request(self, draft: PullRequestDraft) -> PullRequest:
        """Open a pull request from ``draft.head_branch`` into ``draft.base_branch``."""
        ...

    def update_pull_request(self, number: int, *, title: str | None = None,
                            body: str | None = None) -> PullRequest:
        """Change the title and/or body of an open pull request."""
        ...

    def close_pull_request(self, number: int) -> PullRequest:
        """Close a pull request without merging it."""
        ...

    def merge_pull_request(self, number: int) -> PullRequest:
        """Merge a pull request (what a reviewer does; qonnect itself never merges)."""
        ...

    def get_pull_request(self, number: int) -> PullRequest:
        """One pull request with its current head commit."""
        ...

    def find_pull_requests(self, head_branch: str | None = None, *,
                           only_open: bool = True) -> list[PullRequest]:
        """Pull requests of this repository, newest first, optionally from one head branch."""
        ...

    def comment(self, number: int, body: str) -> Comment:
        """Add a comment to a pull request."""
        ...

    def update_comment(self, number: int, comment_id: int, body: str) -> Comment:
        """Replace the body of a comment (in place: same id)."""
        ...

    def list_comments(self, number: int) -> list[Comment]:
        """The comments of a pull request, oldest first."""
        ...

    def set_status(self, sha: str, status: CommitStatus) -> None:
        """Set the commit status ``status.context`` on commit ``sha``."""
        ...

    def list_statuses(self, sha: str) -> list[CommitStatus]:
        """The statuses set on ``sha``, newest first (several per context possible)."""
        ...


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, with an ellipsis when cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"
