"""The lead's HTTP API (routes; the server is ``lead.httpd``).

Reads are answered by any lead from its local replica. Writes go through the
Raft log: pysyncobj forwards a follower's proposal to the leader, and a
request is answered 2xx only once this lead has applied the committed entry.

    GET  /healthz                      liveness (200 while the Raft thread runs)
    GET  /readyz                       readiness: quorum, a reachable leader, log applied,
                                       and on the leader a healthy reconcile loop
    GET  /metrics                      Prometheus text format
    GET  /v1/status                    leader, term, members, clusters, placements...
    GET  /v1/plan                      the placement in force and its generation
    GET  /v1/observed                  the planner's snapshot (``Observed``) as of now
    POST /v1/clusters/{name}/report    an agent's report (that cluster's token)
    POST /v1/plan                      put a placement in force (admin token)
    POST /v1/members                   add or remove a lead (admin token)
    POST /v1/clusters/{name}/token     issue the agent token of a cluster a pool created
                                       (admin token; cloud bursting)
    POST /v1/hooks/git                 a forge's push webhook (HMAC or token verified):
                                       the leader runs a cycle now; a follower forwards

With a tokens file, the three ``/v1`` reads need a bearer token of any kind
(read-only, cluster or admin); ``/healthz``, ``/readyz`` and ``/metrics`` stay open.
Without one (a local trial) reads are open. Every body is JSON whose numbers are
finite (``NaN``/``Infinity`` and overflowing literals are refused naming the field).
"""

from __future__ import annotations

import json
import math
import re
import secrets
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from qonnect_gitops.kb import ReportEntry, ReportRecord, ReportVerdict
from qonnect_gitops.kb.reader import ClusterAdmission
from qonnect_gitops.lead import report_fast
from qonnect_gitops.lead.httpd import (
    AsyncHTTPServer,
    Deferred,
    HTTPError,
    Request,
    Response,
    tls_context,
)
from qonnect_gitops.lead.raft.errors import ProposalError
from qonnect_gitops.lead.ratelimit import RateLimiter
from qonnect_gitops.lead.service import LeadService
from qonnect_gitops.lead.tokens import TOKEN_PREFIX, Principal, TokenKind, hash_token
from qonnect_gitops.lead.webhook import WebhookRejected, read_secret, verify
from qonnect_gitops.logs import get_logger, redact
from qonnect_gitops.model.plan import DecisionReason
from qonnect_gitops.model.report import AgentReport, ComponentHealth
from qonnect_gitops.model.status import Refusal

log = get_logger(__name__)

_FORWARDED = "X-Qonnect-Forwarded-By"
_HOOK_HEADERS = {"content-type", "x-hub-signature-256", "x-gitea-signature", "x-gitlab-token",
                 "x-github-event", "x-gitea-event", "x-forgejo-event", "x-gitlab-event"}
_REPORT_PATH = re.compile(r"^/v1/clusters/([^/]+)/report$")
_TOKEN_PATH = re.compile(r"^/v1/clusters/([a-z0-9-]{1,63})/token$")
_MAX_ERRORS_SHOWN = 10
_MAX_INT_DIGITS = 20  # JSON integers beyond this are refused before Python converts them
MAX_PLAN_REPLICAS = 10_000
_COMPONENT_KEY = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
_CLUSTER_NAME = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"


class PlanWrite(BaseModel):
    """Body of ``POST /v1/plan``: a placement to put in force."""

    model_config = ConfigDict(extra="forbid")

    placements: dict[str, dict[str, int]] = Field(max_length=10_000)
    reasons: dict[str, str] = Field(default_factory=dict, max_length=10_000)
    reason: DecisionReason = "rescheduling"
    goals_commit: str | None = Field(None, alias="goalsCommit", pattern=r"^[0-9a-f]{7,64}$")


class MembershipChange(BaseModel):
    """Body of ``POST /v1/members``."""

    model_config = ConfigDict(extra="forbid")

    action: str = Field(pattern="^(add|remove)$")
    raft: str = Field(pattern=r"^[A-Za-z0-9.\-\[\]:]+:\d{1,5}$", max_length=300)


class LeadAPI:
    """The routes of one lead, as a ``Request -> Response`` handler."""

    def __init__(self, service: LeadService) -> None:
        self.service = service
        self._forward_context = _client_context(service)
        self._leader_seen: tuple[str | None, float, dict[str, Any] | None] | None = None

    def leader_for_answers(self) -> dict[str, Any] | None:
        """``service.leader_info()`` for report answers, recomputed when the leader changes
        and at least once a second (a member's new address shows within a second): every
        report's answer names the leader, and looking up the members each time cost a
        lock and a copy per report."""
        addr = self.service.node.leader_addr()
        now = time.monotonic()
        seen = self._leader_seen
        if seen is not None and seen[0] == addr and now - seen[1] < 1.0:
            return seen[2]
        info = self.service.leader_info()
        self._leader_seen = (addr, now, info)
        return info

    def __call__(self, request: Request) -> Response:
        if request.method in ("GET", "HEAD"):
            return self._get(request)
        return self._post(request)

    def inline(self, request: Request) -> Response | Deferred | None:
        """Reports, on the server's loop thread (``AsyncHTTPServer.inline``): checked and
        queued at once, answered once their batch commits; every other route: None (the
        worker pool runs it)."""
        if request.method != "POST":
            return None
        match = _REPORT_PATH.match(request.path)
        if match is None:
            return None
        metrics = self.service.metrics
        try:
            pending = self._report(request, match.group(1))
        except HTTPError as exc:
            metrics.inc("qonnect_reports_total", code=str(exc.status))
            raise

        def finish(outcome: tuple[ReportVerdict | None, str | None] | None) -> Response:
            try:
                response = pending.answer(outcome)
            except HTTPError as exc:
                metrics.inc("qonnect_reports_total", code=str(exc.status))
                raise
            metrics.inc("qonnect_reports_total", code=str(response.status))
            return response

        return Deferred(pending.start, finish, self.service.config.commit_timeout)

    # ---------------------------------------------------------------- reads

    def _get(self, request: Request) -> Response:
        service, path = self.service, request.path
        if path == "/healthz":
            alive = service.node.sync.tick_thread_alive()
            return Response.json(200 if alive else 503, {"ok": alive, "id": service.config.node_id,
                                                         "raft": service.node.raft_state()})
        if path == "/readyz":
            ready, body = service.readiness()
            return Response.json(200 if ready else 503, body)
        if path == "/metrics":
            return Response(200, service.metrics.render().encode(),
                            "text/plain; version=0.0.4; charset=utf-8")
        views: dict[str, Callable[[], dict[str, Any]]] = {
            "/v1/status": service.status, "/v1/plan": service.plan_view,
            "/v1/observed": service.observed,
        }
        view = views.get(path)
        if view is None:
            raise HTTPError(404, f"no route {path}")
        if service.tokens.enabled:
            self._principal(request)  # any valid token may read
        return Response.json(200, view())

    # --------------------------------------------------------------- writes

    def _post(self, request: Request) -> Response:
        path = request.path
        if _REPORT_PATH.match(path):
            # Served by ``inline``; a server without it waits here for the commit.
            deferred = self.inline(request)
            assert isinstance(deferred, Deferred)
            return deferred.wait()
        if path == "/v1/plan":
            self._admin(request)
            return self._plan(parse_json(request.body))
        if path == "/v1/members":
            self._admin(request)
            return self._members(parse_json(request.body))
        if path == "/v1/hooks/git":
            return self._hook(request)
        match = _TOKEN_PATH.match(path)
        if match:
            self._admin(request)
            return self._pool_token(match.group(1))
        raise HTTPError(404, f"no route {path}")

    def _pool_token(self, cluster: str) -> Response:
        """Issue the agent token of a pool cluster (cloud bursting): the bootstrap of the new
        cluster asks with an admin token; only the hash is kept, in the KB (every lead
        accepts it, a new leader too); asking again replaces it."""
        service = self.service
        if cluster not in service.kb.dynamic_clusters():
            raise HTTPError(404, f"'{cluster}' is no cluster a pool created")
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        try:
            issued = service.node.commands.issue_pool_token(cluster, hash_token(token), time.time(),
                                                            timeout=service.config.commit_timeout)
        except ProposalError as exc:
            raise HTTPError(503, f"token not committed ({exc.reason}); retry", {"Retry-After": "1"}) from None
        if not issued:
            raise HTTPError(404, f"'{cluster}' is no cluster a pool created")
        log.info("pool_token_issued", cluster=cluster)
        return Response.json(200, {"cluster": cluster, "token": token})

    def _principal(self, request: Request) -> Principal:
        """Who the bearer token belongs to; 401 without a valid one."""
        token = _bearer(request)
        if token is None:
            raise HTTPError(401, "a bearer token is required",
                            {"WWW-Authenticate": 'Bearer realm="qonnect"'})
        principal = self._principal_of(token)
        if principal is None:
            raise HTTPError(401, "unknown token",
                            {"WWW-Authenticate": 'Bearer realm="qonnect", error="invalid_token"'})
        return principal

    def _principal_of(self, token: str) -> Principal | None:
        principal = self.service.tokens.principal(token)
        if principal is None:
            # An agent token the leader issued to a pool cluster (cloud bursting).
            owner = self.service.kb.pool_token_owner(hash_token(token))
            principal = Principal(TokenKind.CLUSTER, owner) if owner else None
        return principal

    def authenticated(self, request: Request) -> bool:
        """Whether ``request`` carries a valid token of any kind (``AsyncHTTPServer``'s
        ``authenticate``: its connection then stops counting as anonymous)."""
        token = _bearer(request)
        return token is not None and self._principal_of(token) is not None

    def _admin(self, request: Request) -> None:
        if self._principal(request).kind is not TokenKind.ADMIN:
            raise HTTPError(403, "this endpoint needs an admin token")

    def _report(self, request: Request, cluster: str) -> _PendingReport:
        """Check a report and queue it for the next batch; raises HTTPError for what is
        refused before the commit."""
        service = self.service
        received_at = time.time()  # the lead's clock: liveness and ordering use only this
        principal = self._principal(request)
        if principal.kind is not TokenKind.CLUSTER or principal.name != cluster:
            raise HTTPError(403, f"this token may not report for cluster '{cluster[:63]}'")
        wait = service.limiter.acquire(cluster)
        if wait > 0:
            raise HTTPError(429, f"cluster '{cluster}' reports too often; retry later",
                            {"Retry-After": RateLimiter.retry_after_header(wait)})
        record = report_record(request.body)
        if record.cluster != cluster:
            raise HTTPError(400, f"report names cluster '{record.cluster}' but was sent for "
                                 f"'{cluster}'")
        admission = service.kb.admission(cluster)
        if admission.declared is False:
            raise HTTPError(404, f"cluster '{cluster}' is not declared in the goals in force")
        if service.node.leader_addr() is None:
            # No leader we can reach: fail fast so the agent tries another lead, rather
            # than hold the request for the whole commit timeout.
            raise HTTPError(503, "no leader reachable from this lead; retry or try another lead",
                            {"Retry-After": "1"})
        skew = record.agent_time - received_at
        warnings = []
        if abs(skew) > service.config.max_clock_skew:
            service.metrics.inc("qonnect_report_clock_skew_total", cluster=cluster)
            warnings.append(f"the agent's clock is {skew:+.0f} s from the lead's (more than "
                            f"{service.config.max_clock_skew:g} s); the report counts at the "
                            "lead's receipt time; fix the agent's clock (NTP)")
        return _PendingReport(self, ReportEntry(cluster, received_at, record, skew), admission,
                              warnings)

    def _hook(self, request: Request) -> Response:
        """A push webhook: verify it, then trigger a cycle on the leader."""
        service = self.service
        try:
            secret = read_secret(service.config.webhook_secret_file)
        except OSError as exc:
            raise HTTPError(503, f"webhook secret unreadable: {exc.strerror}") from None
        try:
            forge = verify(dict(request.headers.items()), request.body, secret)
        except WebhookRejected as exc:
            log.warning("webhook_rejected", reason=str(exc), peer=request.peer)
            raise HTTPError(401, str(exc)) from None
        if service.loop is None:
            raise HTTPError(409, "this lead has no goals repository configured")
        if service.node.is_leader():
            service.loop.on_webhook(dict(request.headers.items()), request.body)
            log.info("webhook_accepted", forge=forge)
            return Response.json(202, {"accepted": True, "forge": forge, "by": service.config.node_id})
        leader = service.leader_info()
        if not leader or not leader.get("url") or request.headers.get(_FORWARDED):
            raise HTTPError(503, "no leader reachable to run the cycle; retry", {"Retry-After": "1"})
        # Forges deliver to one URL; any lead may be behind it, so pass the hook on
        # unchanged (the leader verifies it again) rather than ask the forge to redirect.
        headers = {k: v for k, v in request.headers.items() if k.lower() in _HOOK_HEADERS}
        headers[_FORWARDED] = service.config.node_id
        forward = urllib.request.Request(f"{leader['url']}/v1/hooks/git", data=request.body,
                                         headers=headers, method="POST")
        try:
            with urllib.request.urlopen(forward, timeout=5, context=self._forward_context) as resp:
                status, payload = resp.status, _json_object(resp.read())
        except urllib.error.HTTPError as exc:
            status, payload = exc.code, {"error": "leader refused", "message": str(exc.reason)}
        except (OSError, ValueError) as exc:
            raise HTTPError(503, f"forwarding to the leader failed: {redact(str(exc))}",
                            {"Retry-After": "1"}) from None
        return Response.json(status, {**payload, "forwardedBy": service.config.node_id})

    def _plan(self, data: Any) -> Response:
        service = self.service
        try:
            write = PlanWrite.model_validate(data)
        except ValidationError as exc:
            raise HTTPError(400, "invalid plan: " + _summarise(exc)) from None
        problems = plan_problems(write, *service.kb.read(
            lambda kb: (None if kb.last_good is None else set(kb.workloads), set(kb.inventory))))
        if problems:
            shown = problems[:_MAX_ERRORS_SHOWN]
            more = f"; and {len(problems) - len(shown)} more" if len(problems) > len(shown) else ""
            raise HTTPError(400, "invalid plan: " + "; ".join(shown) + more)
        node = service.node
        term = service.kb.leader_term()
        try:
            generation = node.commands.record_plan(write.placements, write.reasons, write.reason,
                                                   write.goals_commit, term, time.time(),
                                                   timeout=service.config.commit_timeout)
        except ProposalError as exc:
            raise HTTPError(503, f"plan not committed ({exc.reason}); retry",
                            {"Retry-After": "1"}) from None
        if generation < 0:
            raise HTTPError(409, "refused: a newer leader term is in force")
        log.info("plan_recorded", generation=generation)
        return Response.json(200, {"generation": generation})

    def _members(self, data: Any) -> Response:
        service = self.service
        try:
            change = MembershipChange.model_validate(data)
        except ValidationError as exc:
            raise HTTPError(400, "invalid membership change: " + _summarise(exc)) from None
        if change.action == "remove" and change.raft == service.config.raft:
            raise HTTPError(409, "a lead cannot remove itself; ask another lead")
        try:
            service.node.change_membership(change.action, change.raft)
        except ProposalError as exc:
            raise HTTPError(409 if exc.reason == "request-denied" else 503,
                            f"membership change not committed ({exc.reason})") from None
        if change.action == "remove":
            try:
                service.node.commands.forget_member(change.raft, time.time())
            except ProposalError as exc:
                log.warning("member_forget_failed", raft=change.raft, reason=exc.reason)
        log.info("membership_changed", action=change.action, raft=change.raft)
        return Response.json(200, {"action": change.action, "raft": change.raft,
                                   "members": service.node.members()})


class _PendingReport:
    """A checked report: ``start`` queues it for the next batch and calls ``notify``
    with ``(verdict, error)`` once the batch committed or failed (on the Raft thread);
    ``answer`` turns that into the HTTP answer."""

    __slots__ = ("admission", "api", "cluster", "entry", "notify", "received_at", "skew", "warnings")

    def __init__(self, api: LeadAPI, entry: ReportEntry, admission: ClusterAdmission,
                 warnings: list[str]) -> None:
        self.api = api
        self.entry = entry
        self.cluster = entry.cluster
        self.received_at = entry.received_at
        self.skew = entry.skew_seconds
        self.admission = admission
        self.warnings = warnings
        self.notify: Callable[[tuple[ReportVerdict | None, str | None]], None] | None = None

    def start(self, notify: Callable[[tuple[ReportVerdict | None, str | None]], None]) -> None:
        """Queue the report; ``notify`` receives the outcome (``Deferred.start``)."""
        self.notify = notify
        self.api.service.batcher.submit(self.entry, on_done=self.done)

    def done(self, verdict: ReportVerdict | None, error: str | None) -> None:
        """The batch carrying the report committed (``verdict``) or failed (``error``)."""
        if self.notify is not None:
            self.notify((verdict, error))

    def answer(self, outcome: tuple[ReportVerdict | None, str | None] | None) -> Response:
        """200 only for a report the KB stored; ``None``: the commit timeout passed."""
        verdict, error = outcome if outcome is not None else (None, "timeout")
        if verdict is None or error is not None:
            raise HTTPError(503, f"report not committed ({error or 'timeout'}); retry",
                            {"Retry-After": "1"})
        cluster, service = self.cluster, self.api.service
        if not verdict.stored:
            if verdict.refused == "undeclared":
                raise HTTPError(404, f"cluster '{cluster}' left the goals in force; report dropped")
            # Never 200 for a report the KB dropped: the agent sends a fresh one.
            raise HTTPError(409, "a report of this cluster received later is already stored; "
                                 "this one was dropped; send a fresh report")
        generation, plan_generation, recorded_head = service.kb.cluster_generation(cluster)
        body: dict[str, Any] = {
            "accepted": True,
            "cluster": cluster,
            "generation": generation,
            "planGeneration": plan_generation,
            "heartbeatGraceSeconds": self.admission.grace_seconds,
            # Agents report at the fleet's interval, so one setting in qonnect.yaml governs.
            "heartbeatIntervalSeconds": self.admission.interval_seconds,
            "leader": self.api.leader_for_answers(),
            "receivedAt": self.received_at,
            "clockSkewSeconds": round(self.skew, 3),
        }
        # The head of the cluster's branch on the Git server: an idle agent that fetched that
        # commit may skip its Git polls (a hint: the agent applies only what it fetched). The
        # leader's mirror moves at the push itself; every lead has the head the leader
        # recorded in the KB after its push or fetch (``ReconcileLoop._record_heads``).
        loop = service.loop
        commit = (loop.published_head(cluster) if loop is not None else None) or recorded_head
        if commit is not None:
            body["commit"] = commit
        warnings = list(self.warnings)
        if verdict.ignored:
            warnings.append(f"ignored claims about {len(verdict.ignored)} component(s) not placed "
                            f"on {cluster} (or completion of a component that is no Job)")
            body["ignoredComponents"] = sorted(set(verdict.ignored))[:_MAX_ERRORS_SHOWN]
        if warnings:
            body["warnings"] = warnings
        return Response.json(200, body)


def plan_problems(write: PlanWrite, components: set[str] | None, clusters: set[str]) -> list[str]:
    """What makes a plan written by an operator unacceptable, like goals are checked:
    unknown components and clusters, replica counts out of range, reasons for
    components not in the plan. ``components`` is None before any goals were loaded."""
    if components is None:
        return ["no goals are loaded yet: a plan cannot be checked against them; retry later"]
    problems: list[str] = []
    for comp, where in sorted(write.placements.items()):
        if not re.match(_COMPONENT_KEY, comp):
            problems.append(f"placements.{comp[:80]}: expected 'app/component'")
            continue
        if comp not in components:
            problems.append(f"placements.{comp}: unknown component (not in the goals in force)")
        for cluster, replicas in sorted(where.items()):
            if not re.match(_CLUSTER_NAME, cluster):
                problems.append(f"placements.{comp}.{cluster[:80]}: not a cluster name")
            elif cluster not in clusters:
                problems.append(f"placements.{comp}.{cluster}: unknown cluster (not in the goals in force)")
            if replicas < 0:
                problems.append(f"placements.{comp}.{cluster[:63]}: {replicas} replicas; expected 0 or more")
            elif replicas > MAX_PLAN_REPLICAS:
                problems.append(f"placements.{comp}.{cluster[:63]}: {replicas} replicas; at most "
                                f"{MAX_PLAN_REPLICAS}")
    for comp, text in sorted(write.reasons.items()):
        if comp not in write.placements:
            problems.append(f"reasons.{comp[:80]}: not a component of this plan")
        if len(text) > 1024:
            problems.append(f"reasons.{comp[:80]}: {len(text)} characters; at most 1024")
    return problems


def report_record(body: bytes) -> ReportRecord:
    """The record of a report body, its messages redacted; a 400 naming the field for a
    body that is no valid report. Most reports take ``report_fast`` (msgspec, about a
    quarter of the CPU); whatever it does not take whole goes through ``parse_report``,
    which accepts it or words the refusal."""
    record = report_fast.record_of(body)
    if record is not None:
        return record
    return ReportRecord.from_report(_redacted(parse_report(body)))


def parse_report(body: bytes) -> AgentReport:
    """A report body as a validated ``AgentReport``; a 400 naming the field otherwise.

    Most reports take pydantic's JSON parser straight to the model (half the CPU of
    ``json.loads`` then ``model_validate``). A body that could hold what only
    ``parse_json`` words precisely (a ``\\u`` escape, ``NaN``, ``Infinity``) or that
    the fast parse refuses goes the careful way, so every refusal reads as before.
    The fast way accepts nothing the careful one refuses: every report field is
    typed and bounded, and a number out of range fails both ways."""
    if b"\\u" not in body and b"NaN" not in body and b"Infinity" not in body:
        try:
            return AgentReport.model_validate_json(body)
        except ValidationError:
            pass  # worded below, from the careful parse
    data = parse_json(body)
    try:
        return AgentReport.model_validate(data)
    except ValidationError as exc:
        raise HTTPError(400, "invalid report: " + _summarise(exc)) from None


class _NonFinite:
    """Stands in for a number JSON should not carry, so its place can be named."""

    def __init__(self, text: str) -> None:
        self.text = text


def parse_json(body: bytes) -> Any:
    """The body as JSON; a 400 naming the field for ``NaN``/``Infinity``, a number that
    overflows a float or an integer of more than 20 digits, and for anything unreadable."""

    bad: list[str] = []  # the walk below runs only when a hook saw something

    def constant(text: str) -> _NonFinite:
        bad.append(text)
        return _NonFinite(text)

    def number(text: str) -> float | _NonFinite:
        value = float(text)
        if math.isfinite(value):
            return value
        bad.append(text)
        return _NonFinite(text)

    def integer(text: str) -> int | _NonFinite:
        if len(text) <= _MAX_INT_DIGITS:
            return int(text)
        bad.append(text)
        return _NonFinite(text)

    try:
        data = json.loads(body, parse_constant=constant, parse_float=number, parse_int=integer)
    except RecursionError:
        raise HTTPError(400, "body is not valid JSON: nested too deeply") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise HTTPError(400, f"body is not valid JSON: {str(exc)[:200]}") from None
    if b"\\ud" in body.lower():
        # A \ud800-\udfff escape may leave a lone surrogate, which no text can hold.
        try:
            json.dumps(data, ensure_ascii=False, default=str).encode("utf-8")
        except UnicodeEncodeError:
            raise HTTPError(400, "body is not valid JSON: a \\u escape names a lone surrogate") from None
    if bad:
        found = _find_non_finite(data, ())
        where, text = found if found is not None else ("", bad[0])
        raise HTTPError(400, f"{where or 'body'}: {text[:40]} is not a finite number in range; "
                             "expected a finite number")
    return data


def _find_non_finite(value: Any, path: tuple[str, ...]) -> tuple[str, str] | None:
    stack: list[tuple[Any, tuple[str, ...]]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, _NonFinite):
            return ".".join(where), item.text
        if isinstance(item, dict):
            stack.extend((v, (*where, str(k))) for k, v in reversed(list(item.items())))
        elif isinstance(item, list):
            stack.extend((v, (*where, str(i))) for i, v in reversed(list(enumerate(item))))
    return None


def _redacted(report: AgentReport) -> AgentReport:
    """The report with URL credentials and tokens hidden in its free texts: agents put
    fetch errors (with the repository URL) in their messages, and /v1/status shows them.
    Copies only what redaction changed (most reports carry nothing to hide)."""
    changed: dict[str, Any] = {}
    message = report.sync.message
    if message and (clean := redact(message)) != message:
        changed["sync"] = report.sync.model_copy(update={"message": clean})
    refusals = _redacted_messages(report.refusals)
    if refusals is not None:
        changed["refusals"] = refusals
    components = _redacted_messages(report.components)
    if components is not None:
        changed["components"] = components
    return report.model_copy(update=changed) if changed else report


_Texted = TypeVar("_Texted", Refusal, ComponentHealth)


def _redacted_messages(items: tuple[_Texted, ...]) -> tuple[_Texted, ...] | None:
    """``items`` with their messages redacted, or None when redaction changed none."""
    cleaned = [redact(item.message) if item.message else item.message for item in items]
    if all(clean == item.message for clean, item in zip(cleaned, items)):
        return None
    return tuple(item if clean == item.message else item.model_copy(update={"message": clean})
                 for clean, item in zip(cleaned, items))


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


def _bearer(request: Request) -> str | None:
    """The token of an ``Authorization: Bearer`` header, or None."""
    header = request.headers.get("Authorization", "") or ""
    scheme, _, token = header.partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def _json_object(raw: bytes) -> dict[str, Any]:
    doc = json.loads(raw or b"{}")
    return doc if isinstance(doc, dict) else {}


def _client_context(service: LeadService) -> ssl.SSLContext | None:
    """How this lead verifies another lead's certificate when forwarding a webhook."""
    config = service.config
    if not config.tls:
        return None
    context = ssl.create_default_context()
    for path in (config.tls_ca, config.tls_cert):
        if path is not None:
            try:
                context.load_verify_locations(str(path))
            except (OSError, ssl.SSLError) as exc:
                log.warning("tls_ca_not_loaded", path=path, error=exc)
    return context


def serve(service: LeadService) -> AsyncHTTPServer:
    """Bind the API on ``service.config.http`` (``host:port``); the caller runs it."""
    config = service.config
    host, _, port = config.http.rpartition(":")
    context = tls_context(config.tls_cert, config.tls_key) if config.tls_cert and config.tls_key else None
    limits = config.http_limits
    api = LeadAPI(service)
    server = AsyncHTTPServer(host.strip("[]") or "0.0.0.0", int(port), api, limits,
                             ssl_context=context, name="lead-http", inline=api.inline,
                             event_loop=config.event_loop, authenticate=api.authenticated)
    service.intake = server.intake
    if service.loop is not None:
        # Refused for want of room within a grace: some silence may be this lead's own.
        service.loop.observer_impaired = lambda: server.intake().saturated_since(
            service.kb.read(lambda kb: kb.grace_seconds))
    metrics = service.metrics
    metrics.describe("qonnect_http_connections", "gauge", "Open HTTP connections.")
    metrics.describe("qonnect_http_anonymous_connections", "gauge",
                     "Open HTTP connections that have not presented a valid token.")
    metrics.describe("qonnect_http_connections_refused_total", "counter",
                     "Connections turned away, by reason: full (503: authenticated connections fill "
                     "--max-connections), evicted / evicted-client (an anonymous connection closed "
                     "for a newer one), anonymous-timeout, anonymous-rate (429).")

    def gauges() -> list[tuple[str, dict[str, str], float]]:
        intake = server.intake()
        return [("qonnect_http_connections", {}, float(intake.open)),
                ("qonnect_http_anonymous_connections", {}, float(intake.anonymous)),
                *(("qonnect_http_connections_refused_total", {"reason": reason.value}, float(c.count))
                  for reason, c in intake.refused.items())]

    metrics.gauges(gauges)
    return server
