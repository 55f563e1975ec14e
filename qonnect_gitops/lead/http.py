"""The lead's HTTP API (stdlib ``ThreadingHTTPServer``, HTTP/1.1 keep-alive).

Reads are answered by any lead from its local replica. Writes go through the
Raft log: pysyncobj forwards a follower's proposal to the leader, and a
request is answered 2xx only once this lead has applied the committed entry.

    GET  /healthz                      liveness (200 while the Raft thread runs)
    GET  /metrics                      Prometheus text format
    GET  /v1/status                    leader, term, members, clusters, placements...
    GET  /v1/plan                      the placement in force and its generation
    GET  /v1/observed                  the planner's snapshot (``Observed``) as of now
    POST /v1/clusters/{name}/report    an agent's report (that cluster's token)
    POST /v1/plan                      put a placement in force (admin token)
    POST /v1/members                   add or remove a lead (admin token)
    POST /v1/hooks/git                 a forge's push webhook (HMAC or token verified):
                                       the leader runs a cycle now; a follower forwards
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from qonnect_gitops.lead.raft import ProposalError
from qonnect_gitops.lead.ratelimit import RateLimiter
from qonnect_gitops.lead.service import LeadService
from qonnect_gitops.lead.tokens import ADMIN
from qonnect_gitops.lead.webhook import WebhookRejected, read_secret, verify
from qonnect_gitops.logs import get_logger
from qonnect_gitops.model.plan import DecisionReason
from qonnect_gitops.model.report import AgentReport

log = get_logger(__name__)

_FORWARDED = "X-Qonnect-Forwarded-By"
_HOOK_HEADERS = {"content-type", "x-hub-signature-256", "x-gitea-signature", "x-gitlab-token",
                 "x-github-event", "x-gitea-event", "x-gitlab-event"}
_REPORT_PATH = re.compile(r"^/v1/clusters/([^/]+)/report$")
_MAX_ERRORS_SHOWN = 10


class PlanWrite(BaseModel):
    """Body of ``POST /v1/plan``: a placement to put in force."""

    model_config = ConfigDict(extra="forbid")

    placements: dict[str, dict[str, int]] = Field(max_length=10_000)
    reasons: dict[str, str] = Field(default_factory=dict)
    reason: DecisionReason = "rescheduling"
    goals_commit: str | None = Field(None, alias="goalsCommit")


class MembershipChange(BaseModel):
    """Body of ``POST /v1/members``."""

    model_config = ConfigDict(extra="forbid")

    action: str = Field(pattern="^(add|remove)$")
    raft: str = Field(pattern=r"^[A-Za-z0-9.\-\[\]:]+:\d{1,5}$")


class _Reject(Exception):
    """Stop handling with this status and message (and optional headers)."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


class LeadHTTPServer(ThreadingHTTPServer):
    """A threading server bound to one ``LeadService``."""

    daemon_threads = True
    request_queue_size = 256  # many agents connect at once after a lead restarts

    def __init__(self, address: tuple[str, int], service: LeadService) -> None:
        self.service = service
        super().__init__(address, LeadHandler)


class LeadHandler(BaseHTTPRequestHandler):
    """Routes requests to the service. One instance per request."""

    protocol_version = "HTTP/1.1"
    # Socket timeout: an idle keep-alive connection or a body that trickles in
    # slower than this frees its thread instead of holding it forever.
    timeout = 30
    server: LeadHTTPServer

    # ------------------------------------------------------------- plumbing

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the stdlib's per-request stderr line; we log structured events."""

    def _send(self, status: int, body: Any, headers: dict[str, str] | None = None,
              content_type: str = "application/json") -> None:
        data = body if isinstance(body, bytes) else (json.dumps(body) + "\n").encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _error(self, reject: _Reject) -> None:
        self._send(reject.status, {"error": HTTPStatus(reject.status).phrase.lower(),
                                   "message": reject.message}, reject.headers)

    def _read_body(self) -> bytes:
        """The request body, bounded; anything unreadable or too large is a 400.

        An oversized body is not read: the connection is closed instead, so a
        client cannot make us buffer it.
        """
        limit = self.server.service.config.max_body_bytes
        if self.headers.get("Transfer-Encoding"):
            self.close_connection = True
            raise _Reject(400, "chunked bodies are not accepted; send Content-Length")
        raw = self.headers.get("Content-Length")
        if raw is None:
            raise _Reject(400, "Content-Length is required")
        try:
            length = int(raw)
        except ValueError:
            self.close_connection = True
            raise _Reject(400, f"Content-Length '{raw}' is not a number") from None
        if length < 0:
            self.close_connection = True
            raise _Reject(400, "Content-Length is negative")
        if length > limit:
            self.close_connection = True
            raise _Reject(400, f"body of {length} bytes exceeds the limit of {limit} bytes")
        return self.rfile.read(length)

    def _discard_body(self) -> None:
        """Drain a small body we refuse before reading, so keep-alive stays in step."""
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if 0 <= length <= self.server.service.config.max_body_bytes:
            self.rfile.read(length)
        else:
            self.close_connection = True

    def _subject(self) -> str:
        """Who the bearer token belongs to; 401 without a valid one."""
        header = self.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise _Reject(401, "a bearer token is required",
                          {"WWW-Authenticate": 'Bearer realm="qonnect"'})
        subject = self.server.service.tokens.subject(token.strip())
        if subject is None:
            raise _Reject(401, "unknown token",
                          {"WWW-Authenticate": 'Bearer realm="qonnect", error="invalid_token"'})
        return subject

    def _json(self, body: bytes) -> Any:
        try:
            return json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise _Reject(400, f"body is not valid JSON: {exc}") from None

    # --------------------------------------------------------------- routes

    def do_GET(self) -> None:
        """Read endpoints; served from this lead's replica."""
        service = self.server.service
        path = self.path.split("?", 1)[0]
        if path == "/healthz":
            alive = service.node.sync.tick_thread_alive()
            self._send(200 if alive else 503, {"ok": alive, "id": service.config.node_id,
                                               "raft": service.node.raft_state()})
        elif path == "/metrics":
            self._send(200, service.metrics.render().encode(),
                       content_type="text/plain; version=0.0.4; charset=utf-8")
        elif path == "/v1/status":
            self._send(200, service.status())
        elif path == "/v1/plan":
            self._send(200, service.plan_view())
        elif path == "/v1/observed":
            self._send(200, service.observed())
        else:
            self._send(404, {"error": "not found", "message": f"no route {path}"})

    def do_POST(self) -> None:
        """Write endpoints; every one goes through the Raft log."""
        path = self.path.split("?", 1)[0]
        match = _REPORT_PATH.match(path)
        try:
            if match:
                self._report(match.group(1))
            elif path == "/v1/plan":
                self._admin_write(self._plan)
            elif path == "/v1/members":
                self._admin_write(self._members)
            elif path == "/v1/hooks/git":
                self._hook()
            else:
                self._discard_body()
                raise _Reject(404, f"no route {path}")
        except _Reject as reject:
            if match:
                self.server.service.metrics.inc("qonnect_reports_total", code=str(reject.status))
            self._error(reject)

    def _report(self, cluster: str) -> None:
        service = self.server.service
        try:
            subject = self._subject()
        except _Reject:
            self._discard_body()
            raise
        if subject != cluster:
            self._discard_body()
            raise _Reject(403, f"this token may not report for cluster '{cluster}'")
        wait = service.limiter.acquire(cluster)
        if wait > 0:
            self._discard_body()
            raise _Reject(429, f"cluster '{cluster}' reports too often; retry later",
                          {"Retry-After": RateLimiter.retry_after_header(wait)})
        data = self._json(self._read_body())
        try:
            report = AgentReport.model_validate(data)
        except ValidationError as exc:
            raise _Reject(400, "invalid report: " + _summarise(exc)) from None
        if report.cluster != cluster:
            raise _Reject(400, f"report names cluster '{report.cluster}' but was sent for "
                               f"'{cluster}'")
        declared, grace = service.read(
            lambda kb: (None if kb.last_good is None else cluster in kb.inventory,
                        kb.grace_seconds)
        )
        if declared is False:
            raise _Reject(404, f"cluster '{cluster}' is not declared in the goals in force")
        if service.node.leader_addr() is None:
            # No leader we can reach: fail fast so the agent tries another lead, rather
            # than hold the request for the whole commit timeout.
            raise _Reject(503, "no leader reachable from this lead; retry or try another lead",
                          {"Retry-After": "1"})
        entry = (cluster, report.agent_time.timestamp(),
                 report.model_dump(mode="json", by_alias=True))
        waiter = service.batcher.submit(entry)
        if not waiter.wait(service.config.commit_timeout) or waiter.error is not None:
            reason = waiter.error or "timeout"
            raise _Reject(503, f"report not committed ({reason}); retry",
                          {"Retry-After": "1"})
        service.metrics.inc("qonnect_reports_total", code="200")
        generation, plan_generation, interval = service.read(
            lambda kb: (kb.cluster_generation(cluster), kb.generation, kb.interval_seconds))
        self._send(200, {
            "accepted": True,
            "cluster": cluster,
            "generation": generation,
            "planGeneration": plan_generation,
            "heartbeatGraceSeconds": grace,
            # Agents report at the fleet's interval, so one setting in qonnect.yaml governs.
            "heartbeatIntervalSeconds": interval,
            "leader": service.leader_info(),
        })

    def _hook(self) -> None:
        """A push webhook: verify it, then trigger a cycle on the leader."""
        service = self.server.service
        body = self._read_body()
        try:
            secret = read_secret(service.config.webhook_secret_file)
        except OSError as exc:
            raise _Reject(503, f"webhook secret unreadable: {exc}") from None
        try:
            forge = verify(dict(self.headers.items()), body, secret)
        except WebhookRejected as exc:
            log.warning("webhook_rejected", reason=str(exc))
            raise _Reject(401, str(exc)) from None
        if service.loop is None:
            raise _Reject(409, "this lead has no goals repository configured")
        if service.node.is_leader():
            service.loop.on_webhook(dict(self.headers.items()), body)
            log.info("webhook_accepted", forge=forge)
            self._send(202, {"accepted": True, "forge": forge, "by": service.config.node_id})
            return
        leader = service.leader_info()
        if not leader or not leader.get("http") or self.headers.get(_FORWARDED):
            raise _Reject(503, "no leader reachable to run the cycle; retry",
                          {"Retry-After": "1"})
        # Forges deliver to one URL; any lead may be behind it, so pass the hook on
        # unchanged (the leader verifies it again) rather than ask the forge to redirect.
        headers = {k: v for k, v in self.headers.items()
                   if k.lower() in _HOOK_HEADERS}
        headers[_FORWARDED] = service.config.node_id
        request = urllib.request.Request(f"http://{leader['http']}/v1/hooks/git", data=body,
                                         headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=5) as resp:
                status, payload = resp.status, json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as exc:
            status, payload = exc.code, {"error": "leader refused", "message": exc.reason}
        except OSError as exc:
            raise _Reject(503, f"forwarding to the leader failed: {exc}",
                          {"Retry-After": "1"}) from None
        self._send(status, {**payload, "forwardedBy": service.config.node_id})

    def _admin_write(self, handler: Any) -> None:
        try:
            subject = self._subject()
        except _Reject:
            self._discard_body()
            raise
        if subject != ADMIN:
            self._discard_body()
            raise _Reject(403, "this endpoint needs an admin token")
        handler(self._json(self._read_body()))

    def _plan(self, data: Any) -> None:
        service = self.server.service
        try:
            write = PlanWrite.model_validate(data)
        except ValidationError as exc:
            raise _Reject(400, "invalid plan: " + _summarise(exc)) from None
        node = service.node
        term = service.read(lambda kb: kb.leader_term)
        try:
            generation = node.propose(
                node.state.plan, write.placements, write.reasons, write.reason,
                write.goals_commit, term, time.time(), timeout=service.config.commit_timeout,
            )
        except ProposalError as exc:
            raise _Reject(503, f"plan not committed ({exc.reason}); retry",
                          {"Retry-After": "1"}) from None
        if generation < 0:
            raise _Reject(409, "refused: a newer leader term is in force")
        log.info("plan_recorded", generation=generation)
        self._send(200, {"generation": generation})

    def _members(self, data: Any) -> None:
        service = self.server.service
        try:
            change = MembershipChange.model_validate(data)
        except ValidationError as exc:
            raise _Reject(400, "invalid membership change: " + _summarise(exc)) from None
        if change.action == "remove" and change.raft == service.config.raft:
            raise _Reject(409, "a lead cannot remove itself; ask another lead")
        try:
            service.node.change_membership(change.action, change.raft)
        except ProposalError as exc:
            raise _Reject(409 if exc.reason == "request-denied" else 503,
                          f"membership change not committed ({exc.reason})") from None
        if change.action == "remove":
            try:
                service.node.propose(service.node.state.member_removed, change.raft, time.time())
            except ProposalError as exc:
                log.warning("member_forget_failed", raft=change.raft, reason=exc.reason)
        log.info("membership_changed", action=change.action, raft=change.raft)
        self._send(200, {"action": change.action, "raft": change.raft,
                         "members": service.node.members()})


def _summarise(exc: ValidationError) -> str:
    """Pydantic errors as one line: ``field.path: message; ...``."""
    parts = []
    for error in exc.errors()[:_MAX_ERRORS_SHOWN]:
        loc = ".".join(str(p) for p in error["loc"]) or "body"
        parts.append(f"{loc}: {error['msg']}")
    more = len(exc.errors()) - _MAX_ERRORS_SHOWN
    if more > 0:
        parts.append(f"and {more} more")
    return "; ".join(parts)


def serve(service: LeadService) -> LeadHTTPServer:
    """Bind the API on ``service.config.http`` (``host:port``); the caller runs it."""
    host, _, port = service.config.http.rpartition(":")
    return LeadHTTPServer((host.strip("[]") or "0.0.0.0", int(port)), service)
