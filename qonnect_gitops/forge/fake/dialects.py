"""The three dialects: each operation the fake serves, and how each forge renders its records.

A handler gets a ``Call`` (repository, path and query parameters, JSON body) and returns a
``Reply``; the server validates both against the forge's description. Records are rendered
with the fields qonnect and a reviewer look at; ``Spec.complete`` adds the other fields
the schema requires.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from qonnect_gitops.forge.fake.git import NotMergeable
from qonnect_gitops.forge.fake.state import (
    ForgeState,
    Label,
    Note,
    Pull,
    Repository,
    Status,
)

BOT = "qonnect-bot"


@dataclass
class Reply:
    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Event:
    """A pull request event for the webhooks: ``action`` in our words (opened, synchronize,
    closed, reopened, edited; ``closed`` with ``pull.merged`` for a merge)."""

    repo: Repository
    pull: Pull
    action: str
    before: str | None = None


@dataclass
class Call:
    state: ForgeState
    repo: Repository
    params: dict[str, str]
    query: dict[str, list[str]]
    body: Any
    web: str  # the forge's web base URL
    api: str  # this dialect's API base URL
    events: list[Event] = field(default_factory=list)

    def q(self, name: str, default: str | None = None) -> str | None:
        values = self.query.get(name)
        return values[-1] if values else default


def iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, tz=UTC).isoformat().replace("+00:00", "Z")


def _error(status: int, message: str, dialect: str) -> Reply:
    if dialect == "gitlab":
        return Reply(status, {"message": message})
    if dialect == "gitea":
        return Reply(status, {"message": message, "url": "http://fake.invalid/api/swagger"})
    body: dict[str, Any] = {"message": message, "documentation_url": "https://docs.github.com/rest"}
    if status == 422:
        body["errors"] = [{"resource": "PullRequest", "code": "custom", "message": message}]
    return Reply(status, body)


def paginate(items: list[Any], call: Call, per_page_name: str, default: int) -> tuple[list[Any], dict[str, str]]:
    """One page of ``items`` and its ``Link`` header (rel=next/last), as the forges paginate."""
    try:
        per_page = max(1, min(100, int(call.q(per_page_name) or default)))
        page = max(1, int(call.q("page") or 1))
    except ValueError:
        per_page, page = default, 1
    start = (page - 1) * per_page
    chunk = items[start:start + per_page]
    last = max(1, -(-len(items) // per_page))
    headers = {}
    if page < last:
        base = {k: v[-1] for k, v in call.query.items() if k != "page"}
        from urllib.parse import urlencode

        def link(p: int) -> str:
            return f"<{call.api}{call.params['_path']}?{urlencode({**base, 'page': p})}>"

        headers["Link"] = f'{link(page + 1)}; rel="next", {link(last)}; rel="last"'
    return chunk, headers


Handler = Callable[[Call], Reply]


# ---------------------------------------------------------------------- GitHub


class GitHubDialect:
    name = "github"

    def user(self, web: str) -> dict[str, Any]:
        return {"login": BOT, "id": 1, "node_id": "U_1", "type": "Bot", "site_admin": False,
                "html_url": f"{web}/{BOT}", "url": f"{web}/users/{BOT}"}

    def repository(self, call: Call) -> dict[str, Any]:
        owner, _, name = call.repo.name.partition("/")
        return {"id": call.repo.id, "node_id": f"R_{call.repo.id}", "name": name, "full_name": call.repo.name,
                "owner": {**self.user(call.web), "login": owner}, "private": False, "fork": False,
                "html_url": f"{call.web}/{call.repo.name}", "default_branch": "main",
                "url": f"{call.api}/repos/{call.repo.name}", "description": None}

    def label(self, call: Call, label: Label) -> dict[str, Any]:
        return {"id": label.id, "node_id": f"L_{label.id}", "name": label.name, "color": label.color,
                "description": label.description, "default": False,
                "url": f"{call.api}/repos/{call.repo.name}/labels/{label.name}"}

    def pull(self, call: Call, pull: Pull) -> dict[str, Any]:
        repo = self.repository(call)
        owner = call.repo.name.partition("/")[0]
        url = f"{call.api}/repos/{call.repo.name}/pulls/{pull.number}"
        return {
            "id": 1000 + pull.number, "node_id": f"PR_{pull.number}", "number": pull.number,
            "state": pull.state, "title": pull.title, "body": pull.body, "locked": False,
            "html_url": f"{call.web}/{call.repo.name}/pull/{pull.number}", "url": url,
            "user": self.user(call.web), "labels": [self.label(call, call.repo.labels[n]) for n in pull.labels],
            "head": {"ref": pull.head, "sha": pull.head_sha, "label": f"{owner}:{pull.head}",
                     "repo": repo, "user": self.user(call.web)},
            "base": {"ref": pull.base, "sha": pull.base_sha, "label": f"{owner}:{pull.base}",
                     "repo": repo, "user": self.user(call.web)},
            "merged": pull.merged, "merged_at": iso(pull.merged_at), "closed_at": iso(pull.closed_at),
            "created_at": iso(pull.created), "updated_at": iso(pull.updated),
            "merge_commit_sha": pull.merge_sha, "mergeable": None if pull.state != "open" else True,
            "mergeable_state": "clean" if pull.state == "open" else "unknown", "draft": False,
            "author_association": "OWNER", "auto_merge": None, "milestone": None, "assignee": None,
            "merged_by": self.user(call.web) if pull.merged else None,
        }

    def comment(self, call: Call, note: Note) -> dict[str, Any]:
        return {"id": note.id, "node_id": f"IC_{note.id}", "body": note.body, "user": self.user(call.web),
                "html_url": f"{call.web}/{call.repo.name}/pull/{note.pull}#issuecomment-{note.id}",
                "issue_url": f"{call.api}/repos/{call.repo.name}/issues/{note.pull}",
                "url": f"{call.api}/repos/{call.repo.name}/issues/comments/{note.id}",
                "created_at": iso(note.created), "updated_at": iso(note.updated),
                "author_association": "OWNER"}

    def status(self, call: Call, status: Status) -> dict[str, Any]:
        return {"id": status.id, "node_id": f"S_{status.id}", "state": status.state, "context": status.context,
                "description": status.description, "target_url": status.target_url,
                "url": f"{call.api}/repos/{call.repo.name}/statuses/{status.sha}",
                "avatar_url": None, "created_at": iso(status.created), "updated_at": iso(status.created),
                "creator": self.user(call.web)}

    def error(self, status: int, message: str) -> Reply:
        return _error(status, message, self.name)

    def handlers(self) -> dict[tuple[str, str], Handler]:
        r = "/repos/{owner}/{repo}"
        return {
            ("GET", f"{r}/pulls"): self.list_pulls, ("POST", f"{r}/pulls"): self.create_pull,
            ("GET", f"{r}/pulls/{{pull_number}}"): self.get_pull,
            ("PATCH", f"{r}/pulls/{{pull_number}}"): self.edit_pull,
            ("PUT", f"{r}/pulls/{{pull_number}}/merge"): self.merge_pull,
            ("GET", f"{r}/issues/{{issue_number}}/comments"): self.list_comments,
            ("POST", f"{r}/issues/{{issue_number}}/comments"): self.create_comment,
            ("PATCH", f"{r}/issues/comments/{{comment_id}}"): self.edit_comment,
            ("POST", f"{r}/issues/{{issue_number}}/labels"): self.add_labels,
            ("POST", f"{r}/statuses/{{sha}}"): self.create_status,
            ("GET", f"{r}/commits/{{ref}}/statuses"): self.list_statuses,
        }

    def _pull_of(self, call: Call, key: str) -> Pull | None:
        try:
            return call.repo.pulls.get(int(call.params[key]))
        except ValueError:
            return None

    def list_pulls(self, call: Call) -> Reply:
        state = call.q("state", "open")
        head = call.q("head")
        pulls = [p for p in sorted(call.repo.pulls.values(), key=lambda p: -p.number)
                 if (state == "all" or p.state == state)
                 and (head is None or head.partition(":")[2] == p.head or head == p.head)
                 and (call.q("base") is None or call.q("base") == p.base)]
        page, headers = paginate([self.pull(call, p) for p in pulls], call, "per_page", 30)
        return Reply(200, page, headers)

    def create_pull(self, call: Call) -> Reply:
        body = call.body
        head = str(body["head"]).partition(":")[2] or str(body["head"])
        made = call.state.open_pull(call.repo, str(body.get("title") or ""), str(body.get("body") or ""),
                                    head, str(body["base"]), [])
        if isinstance(made, str):
            return self.error(422, made)
        call.events.append(Event(call.repo, made, "opened"))
        return Reply(201, self.pull(call, made))

    def get_pull(self, call: Call) -> Reply:
        pull = self._pull_of(call, "pull_number")
        return self.error(404, "Not Found") if pull is None else Reply(200, self.pull(call, pull))

    def edit_pull(self, call: Call) -> Reply:
        pull = self._pull_of(call, "pull_number")
        if pull is None:
            return self.error(404, "Not Found")
        edit_pull(call, pull, call.body.get("title"), call.body.get("body"), call.body.get("state"))
        return Reply(200, self.pull(call, pull))

    def merge_pull(self, call: Call) -> Reply:
        pull = self._pull_of(call, "pull_number")
        if pull is None:
            return self.error(404, "Not Found")
        problem = merge_pull(call, pull)
        if problem is not None:
            return Reply(405, {"message": problem, "documentation_url": "https://docs.github.com/rest"})
        return Reply(200, {"sha": pull.merge_sha, "merged": True, "message": "Pull Request successfully merged"})

    def list_comments(self, call: Call) -> Reply:
        number = int(call.params["issue_number"])
        notes = [self.comment(call, n) for n in sorted(call.repo.notes.values(), key=lambda n: n.id)
                 if n.pull == number]
        page, headers = paginate(notes, call, "per_page", 30)
        return Reply(200, page, headers)

    def create_comment(self, call: Call) -> Reply:
        pull = self._pull_of(call, "issue_number")
        if pull is None:
            return self.error(404, "Not Found")
        return Reply(201, self.comment(call, call.state.add_note(call.repo, pull, str(call.body["body"]))))

    def edit_comment(self, call: Call) -> Reply:
        note = call.repo.notes.get(int(call.params["comment_id"]))
        if note is None:
            return self.error(404, "Not Found")
        note.body, note.updated = str(call.body["body"]), time.time()
        return Reply(200, self.comment(call, note))

    def add_labels(self, call: Call) -> Reply:
        pull = self._pull_of(call, "issue_number")
        if pull is None:
            return self.error(404, "Not Found")
        raw = call.body["labels"] if isinstance(call.body, dict) else call.body
        for item in raw:
            name = item if isinstance(item, str) else item["name"]
            call.state.label(call.repo, name)
            if name not in pull.labels:
                pull.labels.append(name)
        return Reply(200, [self.label(call, call.repo.labels[n]) for n in pull.labels])

    def create_status(self, call: Call) -> Reply:
        body = call.body
        status = call.state.add_status(call.repo, call.params["sha"], str(body.get("context") or "default"),
                                       str(body["state"]), str(body.get("description") or ""),
                                       body.get("target_url"))
        return Reply(201, self.status(call, status))

    def list_statuses(self, call: Call) -> Reply:
        sha = resolve_ref(call.repo, call.params["ref"])
        items = [self.status(call, s) for s in call.repo.statuses if s.sha == sha]
        page, headers = paginate(items, call, "per_page", 30)
        return Reply(200, page, headers)

    def event(self, event: Event, web: str, api: str, call: Call) -> tuple[dict[str, str], dict[str, Any]]:
        """``pull_request`` webhook: the event header and payload."""
        payload = {"action": event.action, "number": event.pull.number,
                   "pull_request": self.pull(call, event.pull), "repository": self.repository(call),
                   "sender": self.user(web)}
        if event.before:
            payload["before"], payload["after"] = event.before, event.pull.head_sha
        return {"X-GitHub-Event": "pull_request"}, payload


# ---------------------------------------------------------------------- Gitea


class GiteaDialect(GitHubDialect):
    name = "gitea"

    def user(self, web: str) -> dict[str, Any]:
        return {"id": 1, "login": BOT, "username": BOT, "full_name": "qonnect", "email": "bot@fake.invalid",
                "html_url": f"{web}/{BOT}", "avatar_url": f"{web}/avatars/1"}

    def repository(self, call: Call) -> dict[str, Any]:
        owner, _, name = call.repo.name.partition("/")
        return {"id": call.repo.id, "name": name, "full_name": call.repo.name,
                "owner": {**self.user(call.web), "login": owner, "username": owner},
                "html_url": f"{call.web}/{call.repo.name}", "default_branch": "main", "private": False}

    def label(self, call: Call, label: Label) -> dict[str, Any]:
        return {"id": label.id, "name": label.name, "color": label.color, "description": label.description,
                "exclusive": False, "is_archived": False,
                "url": f"{call.api}/repos/{call.repo.name}/labels/{label.id}"}

    def pull(self, call: Call, pull: Pull) -> dict[str, Any]:
        repo = self.repository(call)
        out = {
            "id": 1000 + pull.number, "number": pull.number, "state": pull.state, "title": pull.title,
            "body": pull.body, "html_url": f"{call.web}/{call.repo.name}/pulls/{pull.number}",
            "url": f"{call.web}/{call.repo.name}/pulls/{pull.number}", "user": self.user(call.web),
            "labels": [self.label(call, call.repo.labels[n]) for n in pull.labels],
            "head": {"ref": pull.head, "sha": pull.head_sha, "label": pull.head, "repo_id": call.repo.id,
                     "repo": repo},
            "base": {"ref": pull.base, "sha": pull.base_sha, "label": pull.base, "repo_id": call.repo.id,
                     "repo": repo},
            "merged": pull.merged, "merged_at": iso(pull.merged_at), "closed_at": iso(pull.closed_at),
            "created_at": iso(pull.created), "updated_at": iso(pull.updated),
            "merge_commit_sha": pull.merge_sha, "mergeable": pull.state == "open", "draft": False,
        }
        return {k: v for k, v in out.items() if v is not None}  # Gitea's schema has no nullable fields

    def comment(self, call: Call, note: Note) -> dict[str, Any]:
        return {"id": note.id, "body": note.body, "user": self.user(call.web),
                "html_url": f"{call.web}/{call.repo.name}/pulls/{note.pull}#issuecomment-{note.id}",
                "pull_request_url": f"{call.web}/{call.repo.name}/pulls/{note.pull}",
                "issue_url": "", "created_at": iso(note.created), "updated_at": iso(note.updated)}

    def status(self, call: Call, status: Status) -> dict[str, Any]:
        return {"id": status.id, "status": status.state, "context": status.context,
                "description": status.description, "target_url": status.target_url or "",
                "url": f"{call.api}/repos/{call.repo.name}/statuses/{status.sha}",
                "created_at": iso(status.created), "updated_at": iso(status.created),
                "creator": self.user(call.web)}

    def handlers(self) -> dict[tuple[str, str], Handler]:
        r = "/repos/{owner}/{repo}"
        return {
            ("GET", f"{r}/pulls"): self.list_pulls, ("POST", f"{r}/pulls"): self.create_pull,
            ("GET", f"{r}/pulls/{{index}}"): self.get_pull, ("PATCH", f"{r}/pulls/{{index}}"): self.edit_pull,
            ("POST", f"{r}/pulls/{{index}}/merge"): self.merge_pull,
            ("GET", f"{r}/issues/{{index}}/comments"): self.list_comments,
            ("POST", f"{r}/issues/{{index}}/comments"): self.create_comment,
            ("PATCH", f"{r}/issues/comments/{{id}}"): self.edit_comment,
            ("POST", f"{r}/issues/{{index}}/labels"): self.add_labels,
            ("GET", f"{r}/labels"): self.list_labels, ("POST", f"{r}/labels"): self.create_label,
            ("POST", f"{r}/statuses/{{sha}}"): self.create_status,
            ("GET", f"{r}/commits/{{ref}}/statuses"): self.list_statuses,
        }

    def list_pulls(self, call: Call) -> Reply:
        state = call.q("state", "open")
        pulls = [self.pull(call, p) for p in sorted(call.repo.pulls.values(), key=lambda p: -p.number)
                 if state == "all" or p.state == state]
        page, headers = paginate(pulls, call, "limit", 30)
        return Reply(200, page, headers)

    def create_pull(self, call: Call) -> Reply:
        body = call.body
        by_id = {label.id: label.name for label in call.repo.labels.values()}
        labels = [by_id[i] for i in body.get("labels") or () if i in by_id]
        made = call.state.open_pull(call.repo, str(body.get("title") or ""), str(body.get("body") or ""),
                                    str(body.get("head") or ""), str(body.get("base") or ""), labels)
        if isinstance(made, str):
            return self.error(409 if "already exists" in made else 422, made)
        call.events.append(Event(call.repo, made, "opened"))
        return Reply(201, self.pull(call, made))

    def get_pull(self, call: Call) -> Reply:
        pull = self._pull_of(call, "index")
        return self.error(404, "not found") if pull is None else Reply(200, self.pull(call, pull))

    def edit_pull(self, call: Call) -> Reply:
        pull = self._pull_of(call, "index")
        if pull is None:
            return self.error(404, "not found")
        edit_pull(call, pull, call.body.get("title"), call.body.get("body"), call.body.get("state"))
        return Reply(201, self.pull(call, pull))

    def merge_pull(self, call: Call) -> Reply:
        pull = self._pull_of(call, "index")
        if pull is None:
            return self.error(404, "not found")
        problem = merge_pull(call, pull)
        return Reply(405) if problem is not None else Reply(200)

    def list_comments(self, call: Call) -> Reply:
        number = int(call.params["index"])
        notes = [self.comment(call, n) for n in sorted(call.repo.notes.values(), key=lambda n: n.id)
                 if n.pull == number]
        return Reply(200, notes)

    def create_comment(self, call: Call) -> Reply:
        pull = self._pull_of(call, "index")
        if pull is None:
            return self.error(404, "not found")
        return Reply(201, self.comment(call, call.state.add_note(call.repo, pull, str(call.body["body"]))))

    def edit_comment(self, call: Call) -> Reply:
        note = call.repo.notes.get(int(call.params["id"]))
        if note is None:
            return self.error(404, "not found")
        note.body, note.updated = str(call.body["body"]), time.time()
        return Reply(200, self.comment(call, note))

    def add_labels(self, call: Call) -> Reply:
        pull = self._pull_of(call, "index")
        if pull is None:
            return self.error(404, "not found")
        by_id = {label.id: label.name for label in call.repo.labels.values()}
        for item in call.body.get("labels") or ():
            name = by_id.get(item) if isinstance(item, int) else str(item)
            if name is not None and name not in pull.labels:
                call.state.label(call.repo, name)
                pull.labels.append(name)
        return Reply(200, [self.label(call, call.repo.labels[n]) for n in pull.labels])

    def list_labels(self, call: Call) -> Reply:
        labels = [self.label(call, label) for label in call.repo.labels.values()]
        page, headers = paginate(labels, call, "limit", 30)
        return Reply(200, page, headers)

    def create_label(self, call: Call) -> Reply:
        body = call.body
        if body["name"] in call.repo.labels:
            return self.error(422, f"label {body['name']} already exists")
        label = call.state.label(call.repo, str(body["name"]), str(body["color"]), str(body.get("description") or ""))
        return Reply(201, self.label(call, label))

    def list_statuses(self, call: Call) -> Reply:
        sha = resolve_ref(call.repo, call.params["ref"])
        items = [self.status(call, s) for s in call.repo.statuses if s.sha == sha]
        page, headers = paginate(items, call, "limit", 30)
        return Reply(200, page, headers)

    def event(self, event: Event, web: str, api: str, call: Call) -> tuple[dict[str, str], dict[str, Any]]:
        action = {"synchronize": "synchronized"}.get(event.action, event.action)
        payload = {"action": action, "number": event.pull.number, "pull_request": self.pull(call, event.pull),
                   "repository": self.repository(call), "sender": self.user(web)}
        return {"X-Gitea-Event": "pull_request"}, payload


# ---------------------------------------------------------------------- GitLab

_GITLAB_STATE = {"failure": "failed", "error": "canceled"}


class GitLabDialect:
    name = "gitlab"

    def user(self, web: str) -> dict[str, Any]:
        return {"id": 1, "username": BOT, "name": "qonnect", "state": "active", "avatar_url": None,
                "web_url": f"{web}/{BOT}"}

    def merge_request(self, call: Call, pull: Pull) -> dict[str, Any]:
        state = "merged" if pull.merged else "opened" if pull.state == "open" else "closed"
        return {
            "id": 1000 + pull.number, "iid": pull.number, "project_id": call.repo.id, "title": pull.title,
            "description": pull.body, "state": state, "source_branch": pull.head, "target_branch": pull.base,
            "sha": pull.head_sha, "web_url": f"{call.web}/{call.repo.name}/-/merge_requests/{pull.number}",
            "labels": ",".join(pull.labels), "merge_commit_sha": pull.merge_sha,
            "merged_at": iso(pull.merged_at), "closed_at": iso(pull.closed_at), "created_at": iso(pull.created),
            "updated_at": iso(pull.updated), "author": self.user(call.web), "draft": False,
            "work_in_progress": False, "source_project_id": call.repo.id, "target_project_id": call.repo.id,
            "merge_status": "can_be_merged", "detailed_merge_status": "mergeable", "has_conflicts": False,
        }

    def note(self, call: Call, note: Note) -> dict[str, Any]:
        return {"id": note.id, "type": None, "body": note.body, "author": self.user(call.web),
                "created_at": iso(note.created), "updated_at": iso(note.updated), "system": False,
                "noteable_id": 1000 + note.pull, "noteable_type": "MergeRequest", "noteable_iid": note.pull,
                "resolvable": False, "confidential": False, "internal": False}

    def status(self, call: Call, status: Status) -> dict[str, Any]:
        return {"id": status.id, "sha": status.sha, "ref": None, "status": _GITLAB_STATE.get(status.state, status.state),
                "name": status.context, "description": status.description, "target_url": status.target_url,
                "created_at": iso(status.created), "started_at": None, "finished_at": None,
                "allow_failure": False, "author": self.user(call.web), "coverage": None, "pipeline_id": None}

    def error(self, status: int, message: str) -> Reply:
        return _error(status, message, self.name)

    def handlers(self) -> dict[tuple[str, str], Handler]:
        p = "/api/v4/projects/{id}"
        mr = f"{p}/merge_requests/{{merge_request_iid}}"
        return {
            ("GET", f"{p}/merge_requests"): self.list_mrs, ("POST", f"{p}/merge_requests"): self.create_mr,
            ("GET", mr): self.get_mr, ("PUT", mr): self.edit_mr, ("PUT", f"{mr}/merge"): self.merge_mr,
            ("GET", f"{mr}/notes"): self.list_notes, ("POST", f"{mr}/notes"): self.create_note,
            ("PUT", f"{mr}/notes/{{note_id}}"): self.edit_note,
            ("POST", f"{p}/statuses/{{sha}}"): self.create_status,
            ("GET", f"{p}/repository/commits/{{sha}}/statuses"): self.list_statuses,
        }

    def _mr(self, call: Call) -> Pull | None:
        try:
            return call.repo.pulls.get(int(call.params["merge_request_iid"]))
        except ValueError:
            return None

    def list_mrs(self, call: Call) -> Reply:
        state = call.q("state", "all")
        wanted = {"opened": "open", "closed": "closed", "merged": "merged", "all": None}.get(state or "all")
        items = []
        for pull in sorted(call.repo.pulls.values(), key=lambda p: -p.number):
            mine = "merged" if pull.merged else pull.state
            if wanted is not None and mine != wanted:
                continue
            if call.q("source_branch") not in (None, pull.head) or call.q("target_branch") not in (None, pull.base):
                continue
            items.append(self.merge_request(call, pull))
        page, headers = paginate(items, call, "per_page", 20)
        return Reply(200, page, headers)

    def create_mr(self, call: Call) -> Reply:
        body = call.body
        labels = body.get("labels") or []
        labels = labels.split(",") if isinstance(labels, str) else list(labels)
        made = call.state.open_pull(call.repo, str(body["title"]), str(body.get("description") or ""),
                                    str(body["source_branch"]), str(body["target_branch"]),
                                    [label for label in labels if label])
        if isinstance(made, str):
            return self.error(409 if "already exists" in made else 422, made)
        call.events.append(Event(call.repo, made, "opened"))
        return Reply(201, self.merge_request(call, made))

    def get_mr(self, call: Call) -> Reply:
        pull = self._mr(call)
        return self.error(404, "404 Not found") if pull is None else Reply(200, self.merge_request(call, pull))

    def edit_mr(self, call: Call) -> Reply:
        pull = self._mr(call)
        if pull is None:
            return self.error(404, "404 Not found")
        event = call.body.get("state_event")
        state = {"close": "closed", "reopen": "open"}.get(event) if event else None
        edit_pull(call, pull, call.body.get("title"), call.body.get("description"), state)
        return Reply(200, self.merge_request(call, pull))

    def merge_mr(self, call: Call) -> Reply:
        pull = self._mr(call)
        if pull is None:
            return self.error(404, "404 Not found")
        problem = merge_pull(call, pull)
        if problem is not None:
            return self.error(405, problem)
        return Reply(200, self.merge_request(call, pull))

    def list_notes(self, call: Call) -> Reply:
        number = int(call.params["merge_request_iid"])
        notes = sorted((n for n in call.repo.notes.values() if n.pull == number), key=lambda n: n.id,
                       reverse=call.q("sort", "desc") == "desc")
        page, headers = paginate([self.note(call, n) for n in notes], call, "per_page", 20)
        return Reply(200, page, headers)

    def create_note(self, call: Call) -> Reply:
        pull = self._mr(call)
        if pull is None:
            return self.error(404, "404 Not found")
        return Reply(201, self.note(call, call.state.add_note(call.repo, pull, str(call.body["body"]))))

    def edit_note(self, call: Call) -> Reply:
        note = call.repo.notes.get(int(call.params["note_id"]))
        if note is None or note.pull != int(call.params["merge_request_iid"]):
            return self.error(404, "404 Note Not Found")
        note.body, note.updated = str(call.body.get("body") or note.body), time.time()
        return Reply(200, self.note(call, note))

    def create_status(self, call: Call) -> Reply:
        body = call.body
        name = str(body.get("name") or body.get("context") or "default")
        status = call.state.add_status(call.repo, call.params["sha"], name, str(body["state"]),
                                       str(body.get("description") or ""), body.get("target_url"))
        return Reply(200, self.status(call, status))

    def list_statuses(self, call: Call) -> Reply:
        sha = resolve_ref(call.repo, call.params["sha"])
        items = [self.status(call, s) for s in call.repo.statuses if s.sha == sha]
        page, headers = paginate(items, call, "per_page", 20)
        return Reply(200, page, headers)

    def event(self, event: Event, web: str, api: str, call: Call) -> tuple[dict[str, str], dict[str, Any]]:
        """``Merge Request Hook``."""
        pull = event.pull
        action = {"opened": "open", "synchronize": "update", "edited": "update", "reopened": "reopen",
                  "closed": "merge" if pull.merged else "close"}[event.action]
        attributes = {**self.merge_request(call, pull), "action": action,
                      "last_commit": {"id": pull.head_sha}, "url": self.merge_request(call, pull)["web_url"]}
        if event.before:
            attributes["oldrev"] = event.before
        payload = {"object_kind": "merge_request", "event_type": "merge_request", "user": self.user(web),
                   "project": {"id": call.repo.id, "path_with_namespace": call.repo.name},
                   "object_attributes": attributes}
        return {"X-Gitlab-Event": "Merge Request Hook"}, payload


# ---------------------------------------------------------------------- shared


def resolve_ref(repo: Repository, ref: str) -> str:
    """A branch name or a commit id, as a commit id (the name itself when unknown)."""
    return repo.git.branch_sha(ref) or ref


def edit_pull(call: Call, pull: Pull, title: Any, body: Any, state: Any) -> None:
    """Apply an edit; closing and reopening emit their events."""
    if title is not None:
        pull.title = str(title)
    if body is not None:
        pull.body = str(body)
    if state in ("closed", "open") and not pull.merged and state != pull.state:
        pull.state = str(state)
        pull.closed_at = time.time() if state == "closed" else None
        call.events.append(Event(call.repo, pull, "closed" if state == "closed" else "reopened"))
    elif title is not None or body is not None:
        call.events.append(Event(call.repo, pull, "edited"))
    pull.updated = time.time()


def merge_pull(call: Call, pull: Pull) -> str | None:
    """Merge in Git and close; the reason when it cannot be merged."""
    if pull.state != "open":
        return "Pull Request is not mergeable: it is closed"
    current = call.repo.git.branch_sha(pull.head)
    if current is None:
        return f"head branch {pull.head} is gone"
    pull.head_sha = current
    try:
        pull.merge_sha = call.repo.git.merge(pull.base, pull.head_sha,
                                             f"Merge pull request #{pull.number} from {pull.head}\n\n{pull.title}")
    except NotMergeable as exc:
        return f"Pull Request is not mergeable: {exc}"
    now = time.time()
    pull.state, pull.merged, pull.merged_at, pull.closed_at, pull.updated = "closed", True, now, now, now
    call.events.append(Event(call.repo, pull, "closed"))
    return None


DIALECTS: dict[str, Any] = {"github": GitHubDialect(), "gitea": GiteaDialect(), "gitlab": GitLabDialect()}
