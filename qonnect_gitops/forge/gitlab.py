"""GitLab API v4: merge requests, notes and commit statuses."""

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

_TO_GITLAB = {CommitState.PENDING: "pending", CommitState.SUCCESS: "success",
              CommitState.FAILURE: "failed", CommitState.ERROR: "failed"}
_FROM_GITLAB = {"pending": CommitState.PENDING, "running": CommitState.PENDING,
                "created": CommitState.PENDING, "success": CommitState.SUCCESS,
                "failed": CommitState.FAILURE, "canceled": CommitState.ERROR,
                "skipped": CommitState.SUCCESS, "manual": CommitState.PENDING}
_MR_STATES = {"opened": PullState.OPEN, "locked": PullState.OPEN, "closed": PullState.CLOSED,
              "merged": PullState.MERGED}


class GitLab:
    """Merge requests, notes and commit statuses of project ``group/name`` (or a numeric id)."""

    kind = ForgeKind.GITLAB

    def __init__(self, transport: Transport, repository: str) -> None:
        self.http = transport
        self._project = f"/projects/{urllib.parse.quote(repository, safe='')}"

    def open_pull_request(self, draft: PullRequestDraft) -> PullRequest:
        body: dict[str, Any] = {"source_branch": draft.head_branch, "target_branch": draft.base_branch,
                                "title": clip(draft.title, TITLE_MAX),
                                "description": clip(draft.body, BODY_MAX)}
        if draft.labels:
            body["labels"] = list(draft.labels)
        return _merge_request(self.http.call("POST", f"{self._project}/merge_requests", body=body).body)

    def update_pull_request(self, number: int, *, title: str | None = None,
                            body: str | None = None) -> PullRequest:
        change: dict[str, Any] = {}
        if title is not None:
            change["title"] = clip(title, TITLE_MAX)
        if body is not None:
            change["description"] = clip(body, BODY_MAX)
        return _merge_request(self.http.call("PUT", f"{self._project}/merge_requests/{number}",
                                             body=change).body)

    def close_pull_request(self, number: int) -> PullRequest:
        return _merge_request(self.http.call("PUT", f"{self._project}/merge_requests/{number}",
                                             body={"state_event": "close"}).body)

    def merge_pull_request(self, number: int) -> PullRequest:
        return _merge_request(self.http.call("PUT", f"{self._project}/merge_requests/{number}/merge",
                                             body={}).body)

    def get_pull_request(self, number: int) -> PullRequest:
        return _merge_request(self.http.call("GET", f"{self._project}/merge_requests/{number}").body)

    def find_pull_requests(self, head_branch: str | None = None, *,
                           only_open: bool = True) -> list[PullRequest]:
        query: dict[str, Any] = {"state": "opened" if only_open else "all", "per_page": 100}
        if head_branch is not None:
            query["source_branch"] = head_branch
        items = self.http.get_all(f"{self._project}/merge_requests", query)
        return [_merge_request(item) for item in items]

    def comment(self, number: int, body: str) -> Comment:
        answer = self.http.call("POST", f"{self._project}/merge_requests/{number}/notes",
                                body={"body": clip(body, BODY_MAX)})
        return _note(answer.body)

    def update_comment(self, number: int, comment_id: int, body: str) -> Comment:
        answer = self.http.call("PUT", f"{self._project}/merge_requests/{number}/notes/{comment_id}",
                                body={"body": clip(body, BODY_MAX)})
        return _note(answer.body)

    def list_comments(self, number: int) -> list[Comment]:
        items = self.http.get_all(f"{self._project}/merge_requests/{number}/notes",
                                  {"sort": "asc", "order_by": "created_at", "per_page": 100})
        # System notes ("changed the description"...) are GitLab's, not comments.
        return [_note(item) for item in items if not item.get("system")]

    def set_status(self, sha: str, status: CommitStatus) -> None:
        body: dict[str, Any] = {"state": _TO_GITLAB[status.state], "name": status.context,
                                "description": clip(status.description, STATUS_DESCRIPTION_MAX)}
        if status.target_url:
            body["target_url"] = status.target_url
        self.http.call("POST", f"{self._project}/statuses/{urllib.parse.quote(sha, safe='')}", body=body)

    def list_statuses(self, sha: str) -> list[CommitStatus]:
        items = self.http.get_all(
            f"{self._project}/repository/commits/{urllib.parse.quote(sha, safe='')}/statuses",
            {"per_page": 100})
        return [CommitStatus(str(i.get("name") or ""), _FROM_GITLAB.get(str(i.get("status")), CommitState.ERROR),
                             str(i.get("description") or ""), i.get("target_url")) for i in items]


def _merge_request(data: Any) -> PullRequest:
    try:
        labels = data.get("labels") or ()
        if isinstance(labels, str):  # the published description types labels as a string
            labels = [part for part in labels.split(",") if part]
        return PullRequest(
            number=int(data["iid"]), url=str(data["web_url"]), state=_MR_STATES[str(data["state"])],
            title=str(data.get("title") or ""), body=str(data.get("description") or ""),
            head_branch=str(data["source_branch"]), head_sha=str(data.get("sha") or ""),
            base_branch=str(data["target_branch"]),
            labels=tuple(str(label if isinstance(label, str) else label["name"]) for label in labels))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ForgeError(f"unreadable merge request from GitLab: {exc!r}") from None


def _note(data: Any) -> Comment:
    try:
        return Comment(int(data["id"]), str(data.get("body") or ""))
    except (KeyError, TypeError, ValueError) as exc:
        raise ForgeError(f"unreadable note from GitLab: {exc!r}") from None
