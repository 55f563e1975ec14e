"""Gitea and Forgejo API v1: GitHub's shape, with what differs overridden."""

from __future__ import annotations

import urllib.parse
from typing import Any, ClassVar

from qonnect_gitops.forge.base import (
    BODY_MAX,
    TITLE_MAX,
    Comment,
    CommitState,
    CommitStatus,
    ForgeKind,
    PullRequest,
    PullRequestDraft,
    clip,
)
from qonnect_gitops.forge.github import GitHub, _comment, _pull
from qonnect_gitops.forge.http import Transport

LABEL_COLOR = "#0e8a16"
# Gitea's extra states, read back as the nearest of ours.
_STATES = {"warning": CommitState.FAILURE, "skipped": CommitState.SUCCESS}


class Gitea(GitHub):
    """Pull requests, issue comments and commit statuses of ``owner/name`` on Gitea/Forgejo."""

    kind = ForgeKind.GITEA
    page: ClassVar[dict[str, int]] = {"limit": 50}

    def __init__(self, transport: Transport, repository: str) -> None:
        super().__init__(transport, repository)
        self._label_ids: dict[str, int] = {}

    def open_pull_request(self, draft: PullRequestDraft) -> PullRequest:
        """Open it with its labels (by id; a missing label is created first)."""
        body: dict[str, Any] = {"title": clip(draft.title, TITLE_MAX), "head": draft.head_branch,
                                "base": draft.base_branch, "body": clip(draft.body, BODY_MAX)}
        if draft.labels:
            body["labels"] = [self._label_id(name) for name in draft.labels]
        return _pull(self.kind, self.http.call("POST", f"{self._repo}/pulls", body=body).body)

    def _label_id(self, name: str) -> int:
        if name not in self._label_ids:
            for label in self.http.get_all(f"{self._repo}/labels", self.page):
                self._label_ids[str(label["name"])] = int(label["id"])
        if name not in self._label_ids:
            answer = self.http.call("POST", f"{self._repo}/labels",
                                    body={"name": name, "color": LABEL_COLOR,
                                          "description": "placement proposals from qonnect"})
            self._label_ids[name] = int(answer.body["id"])
        return self._label_ids[name]

    def list_comments(self, number: int) -> list[Comment]:
        """Gitea answers every comment of an issue at once (no page parameters)."""
        return [_comment(item, self.kind) for item in self.http.get_all(f"{self._repo}/issues/{number}/comments")]

    def merge_pull_request(self, number: int) -> PullRequest:
        self.http.call("POST", f"{self._repo}/pulls/{number}/merge", body={"do": "merge"})
        return self.get_pull_request(number)

    def find_pull_requests(self, head_branch: str | None = None, *,
                           only_open: bool = True) -> list[PullRequest]:
        """Gitea has no head filter: filter here, newest first."""
        items = self.http.get_all(f"{self._repo}/pulls", {"state": "open" if only_open else "all", **self.page})
        pulls = [_pull(self.kind, item) for item in items]
        pulls = [p for p in pulls if head_branch is None or p.head_branch == head_branch]
        return sorted(pulls, key=lambda p: -p.number)

    def list_statuses(self, sha: str) -> list[CommitStatus]:
        items = self.http.get_all(f"{self._repo}/commits/{urllib.parse.quote(sha, safe='')}/statuses", self.page)
        out = []
        for item in items:
            raw = str(item.get("status") or "")
            state = _STATES.get(raw) or CommitState(raw)
            out.append(CommitStatus(str(item.get("context") or ""), state,
                                    str(item.get("description") or ""), item.get("target_url")))
        return out
