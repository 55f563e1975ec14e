"""GitHub REST v3 (github.com and GitHub Enterprise Server)."""

from __future__ import annotations

import urllib.parse
from typing import Any, ClassVar

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

API_VERSION = "2022-11-28"


class GitHub:
    """Pull requests, issue comments and commit statuses of ``owner/name`` on GitHub.
    Gitea's API follows GitHub's closely; ``gitea.Gitea`` overrides what differs."""

    kind = ForgeKind.GITHUB
    page: ClassVar[dict[str, int]] = {"per_page": 100}  # the page-size parameter this API describes

    def __init__(self, transport: Transport, repository: str) -> None:
        owner, _, name = repository.partition("/")
        self.owner, self.name = owner, name
        self.http = transport
        self._repo = f"/repos/{_q(owner)}/{_q(name)}"

    def open_pull_request(self, draft: PullRequestDraft) -> PullRequest:
        """Open it, then label it (GitHub creates a missing label)."""
        answer = self.http.call("POST", f"{self._repo}/pulls", body={
            "title": clip(draft.title, TITLE_MAX), "head": draft.head_branch,
            "base": draft.base_branch, "body": clip(draft.body, BODY_MAX)})
        pull = _pull(self.kind, answer.body)
        if draft.labels:
            self.http.call("POST", f"{self._repo}/issues/{pull.number}/labels",
                           body={"labels": list(draft.labels)})
            pull = self.get_pull_request(pull.number)
        return pull

    def update_pull_request(self, number: int, *, title: str | None = None,
                            body: str | None = None) -> PullRequest:
        change: dict[str, Any] = {}
        if title is not None:
            change["title"] = clip(title, TITLE_MAX)
        if body is not None:
            change["body"] = clip(body, BODY_MAX)
        return _pull(self.kind, self.http.call("PATCH", f"{self._repo}/pulls/{number}", body=change).body)

    def close_pull_request(self, number: int) -> PullRequest:
        answer = self.http.call("PATCH", f"{self._repo}/pulls/{number}", body={"state": "closed"})
        return _pull(self.kind, answer.body)

    def merge_pull_request(self, number: int) -> PullRequest:
        self.http.call("PUT", f"{self._repo}/pulls/{number}/merge", body={"merge_method": "merge"})
        return self.get_pull_request(number)

    def get_pull_request(self, number: int) -> PullRequest:
        return _pull(self.kind, self.http.call("GET", f"{self._repo}/pulls/{number}").body)

    def find_pull_requests(self, head_branch: str | None = None, *,
                           only_open: bool = True) -> list[PullRequest]:
        query: dict[str, Any] = {"state": "open" if only_open else "all", "per_page": 100}
        if head_branch is not None:
            query["head"] = f"{self.owner}:{head_branch}"
        items = self.http.get_all(f"{self._repo}/pulls", query)
        return [_pull(self.kind, item) for item in items]

    def comment(self, number: int, body: str) -> Comment:
        answer = self.http.call("POST", f"{self._repo}/issues/{number}/comments",
                                body={"body": clip(body, BODY_MAX)})
        return _comment(answer.body, self.kind)

    def update_comment(self, number: int, comment_id: int, body: str) -> Comment:
        answer = self.http.call("PATCH", f"{self._repo}/issues/comments/{comment_id}",
                                body={"body": clip(body, BODY_MAX)})
        return _comment(answer.body, self.kind)

    def list_comments(self, number: int) -> list[Comment]:
        items = self.http.get_all(f"{self._repo}/issues/{number}/comments", self.page)
        return [_comment(item, self.kind) for item in items]

    def set_status(self, sha: str, status: CommitStatus) -> None:
        body: dict[str, Any] = {"state": status.state.value, "context": status.context,
                                "description": clip(status.description, STATUS_DESCRIPTION_MAX)}
        if status.target_url:
            body["target_url"] = status.target_url
        self.http.call("POST", f"{self._repo}/statuses/{_q(sha)}", body=body)

    def list_statuses(self, sha: str) -> list[CommitStatus]:
        items = self.http.get_all(f"{self._repo}/commits/{_q(sha)}/statuses", {"per_page": 100})
        return [CommitStatus(str(i.get("context") or ""), CommitState(i["state"]),
                             str(i.get("description") or ""), i.get("target_url")) for i in items]


def _q(part: str) -> str:
    return urllib.parse.quote(part, safe="")


def _pull(kind: ForgeKind, data: Any) -> PullRequest:
    try:
        merged = bool(data.get("merged")) or data.get("merged_at") is not None
        state = PullState.MERGED if merged else PullState(data["state"])
        return PullRequest(
            number=int(data["number"]), url=str(data["html_url"]), state=state,
            title=str(data.get("title") or ""), body=str(data.get("body") or ""),
            head_branch=str(data["head"]["ref"]), head_sha=str(data["head"]["sha"]),
            base_branch=str(data["base"]["ref"]),
            labels=tuple(str(label["name"]) for label in data.get("labels") or ()))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ForgeError(f"unreadable pull request from {kind.value}: {exc!r}") from None


def _comment(data: Any, kind: ForgeKind) -> Comment:
    try:
        return Comment(int(data["id"]), str(data.get("body") or ""))
    except (KeyError, TypeError, ValueError) as exc:
        raise ForgeError(f"unreadable comment from {kind.value}: {exc!r}") from None
