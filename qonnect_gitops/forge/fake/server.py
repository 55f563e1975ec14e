"""The fake forge's HTTP server: authentication, validation, faults, webhooks, admin API.

Dialects by path prefix: ``/api/v3`` GitHub (as GitHub Enterprise Server serves it),
``/api/v4`` GitLab, ``/api/v1`` Gitea/Forgejo. ``/_fake/...`` is the admin API of the
fake itself (state, violations, fault injection, push notices); it is not a forge API.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import queue
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from qonnect_gitops.forge.fake.dialects import DIALECTS, Call, Event, Reply
from qonnect_gitops.forge.fake.openapi import Spec
from qonnect_gitops.forge.fake.state import ForgeState
from qonnect_gitops.logs import get_logger

log = get_logger(__name__)

PREFIXES = {"/api/v3": "github", "/api/v4": "gitlab", "/api/v1": "gitea"}
MAX_BODY = 1024 * 1024
RATE_LIMIT = 5000


@dataclass(frozen=True)
class HookTarget:
    """Where pull request events go (``url``: one URL or several, comma-separated, tried in
    order), in which dialect, signed with ``secret``."""

    url: str
    secret: str
    dialect: str = "github"


@dataclass(frozen=True)
class FakeForgeConfig:
    """``repositories`` maps ``owner/name`` to a bare Git directory."""

    repositories: dict[str, Path]
    tokens: tuple[str, ...] = ("fake-token",)
    hooks: tuple[HookTarget, ...] = ()
    host: str = "127.0.0.1"
    port: int = 0


@dataclass
class Fault:
    """The next ``count`` API requests (of ``dialect``, or any) get this answer instead."""

    status: int
    count: int = 1
    retry_after: float | None = None
    rate_limit_reset: float | None = None  # seconds from now: a primary rate limit exhausted
    dialect: str | None = None


@dataclass
class _Shared:
    config: FakeForgeConfig
    state: ForgeState
    specs: dict[str, Spec]
    web: str = ""
    violations: list[dict[str, Any]] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    deliveries: list[dict[str, Any]] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    outbox: queue.Queue[tuple[Event, str] | None] = field(default_factory=queue.Queue)


class FakeForge:
    """A running fake forge (``start()``/``stop()``; ``url`` once started)."""

    def __init__(self, config: FakeForgeConfig) -> None:
        specs = {name: Spec.load(name) for name in DIALECTS}
        self.shared = _Shared(config, ForgeState(config.repositories), specs)
        self.server = _Server((config.host, config.port), self.shared)
        host, port = self.server.server_address[:2]
        self.url = f"http://{host!s}:{port}"
        self.shared.web = self.url
        self._threads = [threading.Thread(target=self.server.serve_forever, name="fake-forge", daemon=True),
                         threading.Thread(target=self._deliver, name="fake-forge-hooks", daemon=True)]

    def start(self) -> FakeForge:
        for thread in self._threads:
            thread.start()
        log.info("fake_forge_started", url=self.url, repositories=",".join(self.shared.state.repos))
        return self

    def stop(self) -> None:
        self.shared.outbox.put(None)
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> FakeForge:  # noqa: PYI034 - start() returns the forge
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------- test side

    @property
    def violations(self) -> list[dict[str, Any]]:
        """Requests or answers that did not conform to the descriptions."""
        return list(self.shared.violations)

    def set_hooks(self, hooks: tuple[HookTarget, ...]) -> None:
        """Point the webhooks elsewhere (the leads' addresses are known after the forge's)."""
        self.shared.config = replace(self.shared.config, hooks=hooks)

    def inject(self, fault: Fault) -> None:
        with self.shared.state.lock:
            self.shared.faults.append(fault)

    def pushed(self, repository: str) -> int:
        """Notice pushes: open pull requests whose head branch moved get a synchronize event."""
        return _sync_heads(self.shared, repository)

    def state(self) -> dict[str, Any]:
        return _dump(self.shared)

    def wait_deliveries(self, count: int, timeout: float = 10.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if len(self.shared.deliveries) >= count:
                break
            time.sleep(0.02)
        return list(self.shared.deliveries)

    # ------------------------------------------------------------- webhooks

    def _deliver(self) -> None:
        while True:
            item = self.shared.outbox.get()
            if item is None:
                return
            event, dialect_name = item
            for hook in self.shared.config.hooks:
                if hook.dialect != dialect_name:
                    continue
                _send_hook(self.shared, hook, event)


def _send_hook(shared: _Shared, hook: HookTarget, event: Event) -> None:
    dialect = DIALECTS[hook.dialect]
    call = _call_for(shared, hook.dialect, event.repo, {}, {}, None)
    with shared.state.lock:
        headers, payload = dialect.event(event, shared.web, call.api, call)
    body = json.dumps(payload).encode()
    headers = {**headers, "Content-Type": "application/json"}
    secret = hook.secret.encode()
    digest = hmac.new(secret, body, hashlib.sha256).hexdigest()
    if hook.dialect == "github":
        headers["X-Hub-Signature-256"] = "sha256=" + digest
        headers["X-GitHub-Delivery"] = str(uuid.uuid4())
    elif hook.dialect == "gitea":
        headers["X-Gitea-Signature"] = digest
        headers["X-Gitea-Delivery"] = str(uuid.uuid4())
    else:
        headers["X-Gitlab-Token"] = hook.secret
    # Several URLs (comma-separated) are tried in order until one accepts, as behind a
    # load balancer in front of the lead group.
    for url in [u.strip() for u in hook.url.split(",") if u.strip()]:
        request = urllib.request.Request(url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=10) as resp:
                status = resp.status
        except urllib.error.HTTPError as exc:
            status = exc.code
        except OSError:
            status = 0
        shared.deliveries.append({"url": url, "dialect": hook.dialect, "action": event.action,
                                  "pull": event.pull.number, "status": status, "at": time.time()})
        if 200 <= status < 300:
            return


def _sync_heads(shared: _Shared, repository: str) -> int:
    moved = 0
    with shared.state.lock:
        repo = shared.state.repo(repository)
        if repo is None:
            return 0
        for pull in repo.pulls.values():
            if pull.state != "open":
                continue
            sha = repo.git.branch_sha(pull.head)
            if sha is None or sha == pull.head_sha:
                continue
            before, pull.head_sha, pull.updated = pull.head_sha, sha, time.time()
            base = repo.git.branch_sha(pull.base)
            pull.base_sha = base or pull.base_sha
            _pull_refs(repo, pull)
            moved += 1
            for dialect in {h.dialect for h in shared.config.hooks}:
                shared.outbox.put((Event(repo, pull, "synchronize", before), dialect))
    return moved


def _pull_refs(repo: Any, pull: Any) -> None:
    """GitHub and Gitea keep ``refs/pull/N/head``, GitLab ``refs/merge-requests/N/head``."""
    repo.git.set_ref(f"refs/pull/{pull.number}/head", pull.head_sha)
    repo.git.set_ref(f"refs/merge-requests/{pull.number}/head", pull.head_sha)


def _call_for(shared: _Shared, dialect: str, repo: Any, params: dict[str, str],
              query: dict[str, list[str]], body: Any) -> Call:
    api = shared.web if dialect == "gitlab" else shared.web + {"github": "/api/v3", "gitea": "/api/v1"}[dialect]
    return Call(shared.state, repo, params, query, body, shared.web, api)


def _dump(shared: _Shared) -> dict[str, Any]:
    with shared.state.lock:
        out: dict[str, Any] = {}
        for name, repo in shared.state.repos.items():
            out[name] = {
                "pulls": [{"number": p.number, "title": p.title, "body": p.body, "head": p.head, "base": p.base,
                           "headSha": p.head_sha, "state": p.state, "merged": p.merged, "labels": p.labels,
                           "mergeSha": p.merge_sha} for p in sorted(repo.pulls.values(), key=lambda p: p.number)],
                "comments": [{"id": n.id, "pull": n.pull, "body": n.body, "created": n.created,
                              "updated": n.updated} for n in sorted(repo.notes.values(), key=lambda n: n.id)],
                "statuses": [{"id": s.id, "sha": s.sha, "context": s.context, "state": s.state,
                              "description": s.description, "targetUrl": s.target_url} for s in repo.statuses],
            }
        return {"repositories": out, "violations": shared.violations, "deliveries": shared.deliveries,
                "requests": len(shared.requests)}


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], shared: _Shared) -> None:
        self.shared = shared
        super().__init__(address, _Handler)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 30
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the fake records requests in its state."""

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    # ------------------------------------------------------------- plumbing

    def _send(self, reply: Reply) -> None:
        data = b"" if reply.body is None else json.dumps(reply.body).encode()
        self.send_response(reply.status)
        if data:
            self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        for key, value in reply.headers.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _read_body(self) -> tuple[bytes, bool]:
        raw = self.headers.get("Content-Length")
        if raw is None:
            return b"", False
        length = int(raw) if raw.isdigit() else -1
        if length < 0 or length > MAX_BODY:
            self.close_connection = True
            raise _Refuse(Reply(413, {"message": "body too large or Content-Length unreadable"}))
        data = self.rfile.read(length)
        return data, bool(data.strip())

    def _dispatch(self, method: str) -> None:
        split = urllib.parse.urlsplit(self.path)
        path = split.path
        try:
            raw, has_body = self._read_body()
            if path.startswith("/_fake/"):
                self._send(self._admin(method, path, raw))
                return
            prefix = next((p for p in PREFIXES if path.startswith(p + "/")), None)
            if prefix is None:
                raise _Refuse(Reply(404, {"message": f"no API at {path}"}))
            dialect_name = PREFIXES[prefix]
            reply = self._api(dialect_name, method, path if dialect_name == "gitlab" else path[len(prefix):],
                              urllib.parse.parse_qs(split.query, keep_blank_values=True), raw, has_body)
        except _Refuse as refuse:
            reply = refuse.reply
        self._send(reply)

    def _api(self, dialect_name: str, method: str, path: str, query: dict[str, list[str]],
             raw: bytes, has_body: bool) -> Reply:
        shared = self.server.shared
        dialect = DIALECTS[dialect_name]
        spec = shared.specs[dialect_name]
        shared.requests.append({"dialect": dialect_name, "method": method, "path": path, "at": time.time()})
        if not self._authorised(dialect_name):
            return dialect.error(401, "Bad credentials" if dialect_name == "github" else "401 Unauthorized")
        fault = self._fault(dialect_name)
        if fault is not None:
            return fault
        matched = spec.match(method, path)
        if matched is None:
            self._violation(dialect_name, method, path, [f"{method} {path} is not an operation of the description"])
            return dialect.error(404, "Not Found")
        op, params = matched
        try:
            body = json.loads(raw) if has_body else None
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            self._violation(dialect_name, method, path, [f"body is not JSON: {exc}"])
            return dialect.error(400, "Problems parsing JSON")
        problems = spec.request_errors(op, params, query, body, has_body)
        if problems:
            self._violation(dialect_name, method, path, problems)
            return dialect.error(422 if dialect_name == "github" else 400, "; ".join(problems)[:1000])
        with shared.state.lock:
            repo_name = params.get("id") if dialect_name == "gitlab" else f"{params['owner']}/{params['repo']}"
            repo = shared.state.repo(repo_name or "")
            if repo is None:
                return dialect.error(404, "Not Found")
            call = _call_for(shared, dialect_name, repo, {**params, "_path": path}, query, body)
            handler = dialect.handlers().get((method, op.template))
            if handler is None:
                return dialect.error(404, "Not Found")
            reply = handler(call)
            if reply.body is not None and str(reply.status) in op.answers and op.answers[str(reply.status)]:
                pointer = op.answers[str(reply.status)] or ""
                reply.body = _complete(spec, pointer, reply.body)
            for event in call.events:
                if event.action in ("opened", "synchronize"):
                    _pull_refs(repo, event.pull)
                for hook_dialect in {h.dialect for h in shared.config.hooks}:
                    shared.outbox.put((event, hook_dialect))
        answer_problems = spec.answer_errors(op, reply.status, reply.body)
        if answer_problems:
            self._violation(dialect_name, method, path, [f"answer {reply.status}: {p}" for p in answer_problems])
            return Reply(500, {"message": "the fake forge produced an answer its description does not allow",
                               "problems": answer_problems[:5]})
        reply.headers.update(self._rate_headers(dialect_name))
        return reply

    def _authorised(self, dialect_name: str) -> bool:
        tokens = self.server.shared.config.tokens
        given = []
        auth = self.headers.get("Authorization", "")
        scheme, _, value = auth.partition(" ")
        if scheme.lower() in ("bearer", "token") and value:
            given.append(value.strip())
        if dialect_name == "gitlab" and self.headers.get("PRIVATE-TOKEN"):
            given.append(self.headers["PRIVATE-TOKEN"].strip())
        return any(hmac.compare_digest(g, t) for g in given for t in tokens)

    def _fault(self, dialect_name: str) -> Reply | None:
        shared = self.server.shared
        with shared.state.lock:
            fault = next((f for f in shared.faults if f.count > 0 and f.dialect in (None, dialect_name)), None)
            if fault is None:
                return None
            fault.count -= 1
        headers: dict[str, str] = {}
        if fault.retry_after is not None:
            headers["Retry-After"] = str(int(fault.retry_after))
        if fault.rate_limit_reset is not None:
            reset = str(int(time.time() + fault.rate_limit_reset))
            if dialect_name == "gitlab":
                headers.update({"RateLimit-Limit": str(RATE_LIMIT), "RateLimit-Remaining": "0",
                                "RateLimit-Reset": reset})
            else:
                headers.update({"X-RateLimit-Limit": str(RATE_LIMIT), "X-RateLimit-Remaining": "0",
                                "X-RateLimit-Reset": reset})
        message = {403: "API rate limit exceeded", 429: "Too Many Requests"}.get(fault.status, "Service Unavailable")
        reply = DIALECTS[dialect_name].error(fault.status, message)
        reply.headers.update(headers)
        return reply

    def _rate_headers(self, dialect_name: str) -> dict[str, str]:
        used = len(self.server.shared.requests)
        remaining = str(max(0, RATE_LIMIT - used))
        reset = str(int(time.time()) + 3600)
        if dialect_name == "github":
            return {"X-RateLimit-Limit": str(RATE_LIMIT), "X-RateLimit-Remaining": remaining,
                    "X-RateLimit-Reset": reset, "X-RateLimit-Resource": "core"}
        if dialect_name == "gitlab":
            return {"RateLimit-Limit": str(RATE_LIMIT), "RateLimit-Remaining": remaining, "RateLimit-Reset": reset}
        return {}

    def _violation(self, dialect_name: str, method: str, path: str, problems: list[str]) -> None:
        entry = {"dialect": dialect_name, "method": method, "path": path, "problems": problems, "at": time.time()}
        self.server.shared.violations.append(entry)
        log.warning("fake_forge_violation", dialect=dialect_name, method=method, path=path,
                    problems="; ".join(problems)[:500])

    def _admin(self, method: str, path: str, raw: bytes) -> Reply:
        shared = self.server.shared
        try:
            data = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError:
            return Reply(400, {"message": "body is not JSON"})
        if method == "GET" and path == "/_fake/state":
            return Reply(200, _dump(shared))
        if method == "GET" and path == "/_fake/violations":
            return Reply(200, shared.violations)
        if method == "POST" and path == "/_fake/faults":
            fault = Fault(int(data["status"]), int(data.get("count", 1)), data.get("retryAfter"),
                          data.get("rateLimitReset"), data.get("dialect"))
            with shared.state.lock:
                shared.faults.append(fault)
            return Reply(201, {"queued": True})
        if method == "POST" and path == "/_fake/pushed":
            return Reply(200, {"moved": _sync_heads(shared, str(data.get("repository", "")))})
        return Reply(404, {"message": f"no admin route {method} {path}"})


class _Refuse(Exception):
    def __init__(self, reply: Reply) -> None:
        super().__init__(reply.status)
        self.reply = reply


def _complete(spec: Spec, pointer: str, body: Any) -> Any:
    schema = spec.node(spec.deref(pointer))
    if isinstance(body, list):
        item = f"{pointer}/items" if schema.get("type") == "array" else pointer
        return [spec.complete(item, value) for value in body]
    return spec.complete(pointer, body)
