"""Gitea and Forgejo API v1."""

from __future__ import annotations

import urllib.parse
from typing import Any

from qonnect_gitops.forge.base import (
    BODY_MAX,
    STATUS_DESCRIPTION_MAX,
    TITLE_MAX,
    Comment,
    CommitState,
    CommitStatus,
    ForgeError,
    ForgeKind,
    PullRequest,
    PullRequestDraft,
    PullState,
    clip,
)
from qonnect_gitops.forge.http import Transport

LABEL_COLOR = "#0e8a16"
# Gitea's extra states, read back as the nearest of ours.
_STATES = {"warning": CommitState.FAILURE, "skipped": CommitState.SUCCESS}


class Gitea:
    """Pull requests, issue comments and commit statuses of ``owner/name`` on Gitea/Forgejo."""

    kind = ForgeKind.GITEA

    def __init__(self, transport: Transport, repository: str) -> None:
        owner, _, name = repository.partition("/")
        self.http = transport
        self._repo = f"/repos/{_q(owner)}/{_q(name)}"
        self._label_ids: dict[str, int] = {}

    def open_pull_request(self, draft: PullRequestDraft) -> PullRequest:
        """Open it with its labels (by id; a missing label is created first)."""
        body: dict[str, Any] = {"title": clip(draft.title, TITLE_MAX), "head": draft.head_branch,
                                "base": draft.base_branch, "body": clip(draft.body, BODY_MAX)}
        if draft.labels:
            body["labels"] = [self._label_id(name) for name in draft.labels]
        return _pull(self.http.call("POST", f"{self._repo}/pulls", body=body).body)

    def _label_id(self, name: str) -> int:
        if name not in self._label_ids:
            for label in self.http.get_all(f"{self._repo}/labels", {"limit": 50}):
                self._label_ids[str(label["name"])] = int(label["id"])
        if name not in self._label_ids:
            answer = self.http.call("POST", f"{self._repo}/labels",
                                    body={"name": name, "color": LABEL_COLOR,
                                          "description": "placement proposals from qonnect"})
            self._label_ids[name] = int(answer.body["id"])
        return self._label_ids[name]

    def update_pull_request(self, number: int, *, title: str | None = None,
                            body: str | None = None) -> PullRequest:
        change: dict[str, Any] = {}
        if title is not None:
            change["title"] = clip(title, TITLE_MAX)
        if body is not None:
            change["body"] = clip(body, BODY_MAX)
        return _pull(self.http.call("PATCH", f"{self._repo}/pulls/{number}", body=change).body)

    def close_pull_request(self, number: int) -> PullRequest:
        return _pull(self.http.call("PATCH", f"{self._repo}/pulls/{number}", body={"state": "closed"}).body)

    def merge_pull_request(self, number: int) -> PullRequest:
        self.http.call("POST", f"{self._repo}/pulls/{number}/merge", body={"do": "merge"})
        return self.get_pull_request(number)

    def get_pull_request(self, number: int) -> PullRequest:
        return _pull(self.http.call("GET", f"{self._repo}/pulls/{number}").body)

    def find_pull_requests(self, head_branch: str | None = None, *,
                           only_open: bool = True) -> list[PullRequest]:
        items = self.http.get_all(f"{self._repo}/pulls",
                                  {"state": "open" if only_open else "all", "limit": 50})
        pulls = [_pull(item) for item in items]
        pulls = [p for p in pulls if head_branch is None or p.head_branch == head_branch]
        return sorted(pulls, key=lambda p: -p.number)

    def comment(self, number: int, body: str) -> Comment:
        answer = self.http.call("POST", f"{self._repo}/issues/{number}/comments",
                                body={"body": clip(body, BODY_MAX)})
        return _comment(answer.body)

    def update_comment(self, number: int, comment_id: int, body: str) -> Comment:
        answer = self.http.call("PATCH", f"{self._repo}/issues/comments/{comment_id}",
                                body={"body": clip(body, BODY_MAX)})
        return _comment(answer.body)

    def list_comments(self, number: int) -> list[Comment]:
        return [_comment(item) for item in self.http.get_all(f"{self._repo}/issues/{number}/comments")]

    def set_status(self, sha: str, status: CommitStatus) -> None:
        body: dict[str, Any] = {"state": status.state.value, "context": status.context,
                                "description": clip(status.description, STATUS_DESCRIPTION_MAX)}
        if status.target_url:
            body["target_url"] = status.target_url
        self.http.call("POST", f"{self._repo}/statuses/{_q(sha)}", body=body)

    def list_statuses(self, sha: str) -> list[CommitStatus]:
        items = self.http.get_all(f"{self._repo}/commits/{_q(sha)}/statuses", {"limit": 50})
        out = []
        for item in items:
            raw = str(item.get("status") or "")
            state = _STATES.get(raw) or CommitState(raw)
            out.append(CommitStatus(str(item.get("context") or ""), state,
                                    str(item.get("description") or ""), item.get("target_url")))
        return out


def _q(part: str) -> str:
    return urllib.parse.quote(part, safe="")


def _pull(data: Any) -> PullRequest:
    try:
        state = PullState.MERGED if data.get("merged") else PullState(data["state"])
        return PullRequest(
            number=int(data["number"]), url=str(data["html_url"]), state=state,
            title=str(data.get("title") or ""), body=str(data.get("body") or ""),
            head_branch=str(data["head"]["ref"]), head_sha=str(data["head"]["sha"]),
            base_branch=str(data["base"]["ref"]),
            labels=tuple(str(label["name"]) for label in data.get("labels") or ()))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ForgeError(f"unreadable pull request from Gitea: {exc!r}") from None


def _comment(data: Any) -> Comment:
    try:
        return Comment(int(data["id"]), str(data.get("body") or ""))
    except (KeyError, TypeError, ValueError) as exc:
        raise ForgeError(f"unreadable comment from Gitea: {exc!r}") from None
