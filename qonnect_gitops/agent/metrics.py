"""Prometheus text metrics (``/metrics``), liveness (``/healthz``), readiness (``/readyz``)
and the push webhook (``POST /webhook``).

``/readyz`` answers 200 once the agent finished its first pass (whatever its result) or
sent its first report, 503 before: a probe that waits for the agent to be at work, not for
its cluster to be healthy (a cluster that refuses its branch is reported, not hidden by an
agent taken out of service).

The webhook accepts a push event only with a valid ``X-Hub-Signature-256``
(GitHub/Gitea style ``sha256=<hex HMAC of the body>``), ``X-Gitea-Signature``
(the same HMAC without the prefix) or ``X-Gitlab-Token`` equal to the secret; a
valid event asks the agent to sync at once.

The server is reachable by anyone who can reach the port, so it treats every
request as hostile: a request must arrive whole within ``READ_TIMEOUT`` seconds,
at most ``MAX_CONNECTIONS`` are served at once (the next get ``503``), bodies are
bounded and need a numeric ``Content-Length``, and every refusal is a 4xx with a
JSON error: never a dropped connection or a traceback.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

from qonnect_gitops.logs import get_logger

log = get_logger(__name__)

READ_TIMEOUT = 10.0
MAX_CONNECTIONS = 64
MAX_BODY = 1 << 20


class Metrics:
    """Counters and gauges with labels, rendered in the Prometheus text format."""

    HELP: ClassVar[dict[str, tuple[str, str]]] = {
        "qonnect_agent_last_sync_timestamp_seconds": ("gauge", "Unix time of the last completed sync."),
        "qonnect_agent_last_applied_info": ("gauge", "The commit and generation applied (value 1)."),
        "qonnect_agent_objects_applied_total": ("counter", "Objects created or changed by apply."),
        "qonnect_agent_objects_pruned_total": ("counter", "Objects deleted by prune."),
        "qonnect_agent_drift_corrections_total": ("counter", "Drifted objects re-applied."),
        "qonnect_agent_drift_detected": ("gauge", "Objects differing from the branch at the last check."),
        "qonnect_agent_errors_total": ("counter", "Errors by kind (fetch, apply, prune, report, refusal)."),
        "qonnect_agent_syncs_total": ("counter", "Syncs by result."),
        "qonnect_agent_sync_duration_seconds": ("gauge", "Duration of the last sync."),
        "qonnect_agent_git_polls_total": ("counter", "Polls of the branch that asked the Git server."),
        "qonnect_agent_git_polls_skipped_total": ("counter", "Polls skipped because the lead's answer "
                                                  "named the commit the agent has."),
        "qonnect_agent_heartbeats_total": ("counter", "Reports sent by the heartbeat thread, between and "
                                           "during passes."),
        "qonnect_agent_api_answering": ("gauge", "1 while the cluster's API server answers; 0 once a call "
                                        "got no answer within --api-timeout, until one does."),
    }

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}

    def inc(self, name: str, value: float = 1.0, **labels: str) -> None:
        key = (name, tuple(sorted(labels.items())))
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + value

    def set(self, name: str, value: float, *, replace: bool = False, **labels: str) -> None:
        key = (name, tuple(sorted(labels.items())))
        with self._lock:
            if replace:
                for k in [k for k in self._values if k[0] == name]:
                    del self._values[k]
            self._values[key] = value

    def get(self, name: str, **labels: str) -> float:
        with self._lock:
            return self._values.get((name, tuple(sorted(labels.items()))), 0.0)

    def total(self, name: str) -> float:
        """The sum of ``name`` over all its labels."""
        with self._lock:
            return sum(v for (n, _), v in self._values.items() if n == name)

    def ready(self) -> bool:
        """Whether a pass finished or a report went out (``/readyz``)."""
        return self.total("qonnect_agent_syncs_total") > 0 or self.total("qonnect_agent_heartbeats_total") > 0

    def render(self) -> str:
        with self._lock:
            items = sorted(self._values.items())
        lines: list[str] = []
        seen: set[str] = set()
        for (name, labels), value in items:
            if name not in seen:
                seen.add(name)
                kind, text = self.HELP.get(name, ("untyped", name))
                lines += [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]
            lab = ",".join(f'{k}="{_escape(v)}"' for k, v in labels)
            lines.append(f"{name}{{{lab}}} {value:g}" if lab else f"{name} {value:g}")
        return "\n".join(lines) + "\n"


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def verify_signature(secret: bytes, body: bytes, headers: Any) -> bool:
    """Whether a push carries a valid signature or token for ``secret``. Header values
    are compared as bytes in constant time: any value (non-ASCII too) is just wrong."""
    if not secret:
        return False
    digest = hmac.new(secret, body, hashlib.sha256).hexdigest().encode()
    github = headers.get("X-Hub-Signature-256")
    if github is not None:
        scheme, _, given = github.strip().partition("=")
        return scheme == "sha256" and hmac.compare_digest(_bytes(given).lower(), digest)
    gitea = headers.get("X-Gitea-Signature")
    if gitea is not None:
        return hmac.compare_digest(_bytes(gitea.strip()).lower(), digest)
    token = headers.get("X-Gitlab-Token")
    if token:
        return hmac.compare_digest(_bytes(token), secret)
    return False


def _bytes(text: str) -> bytes:
    # http.server decodes headers as ISO-8859-1: every byte maps back exactly.
    return text.encode("iso-8859-1", "replace")


class AgentHTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, addr: tuple[str, int], metrics: Metrics | None, webhook_secret: bytes | None,
                 on_push: Callable[[], None], max_connections: int = MAX_CONNECTIONS,
                 read_timeout: float = READ_TIMEOUT) -> None:
        self.metrics = metrics
        self.read_timeout = read_timeout
        self.webhook_secret = webhook_secret
        self.on_push = on_push
        self._slots = threading.BoundedSemaphore(max_connections)
        self.refused = 0
        super().__init__(addr, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        """At most ``max_connections`` handler threads; the next connection is answered
        503 at once and closed (no thread)."""
        if not self._slots.acquire(blocking=False):
            self.refused += 1
            try:
                request.settimeout(1.0)
                request.sendall(_raw_response(503, {"error": "service unavailable",
                                                    "message": "too many connections; retry"}))
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except Exception:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


def _raw_response(status: int, doc: dict[str, Any]) -> bytes:
    body = (json.dumps(doc) + "\n").encode()
    head = (f"HTTP/1.0 {status} {HTTPStatus(status).phrase}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n")
    return head.encode() + body


class _Handler(BaseHTTPRequestHandler):
    server: AgentHTTPServer
    # A socket timeout for every read: a request that trickles in, or a body shorter
    # than its Content-Length, frees the thread after this long.
    timeout = READ_TIMEOUT

    def setup(self) -> None:
        # typeshed declares timeout a ClassVar; socketserver reads it per instance in setup()
        self.timeout = self.server.read_timeout  # type: ignore[misc]
        super().setup()

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, code: int, text: str, ctype: str = "text/plain; charset=utf-8") -> None:
        data = text.encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        self.close_connection = True

    def _json(self, code: int, doc: dict[str, Any]) -> None:
        self._send(code, json.dumps(doc) + "\n", "application/json")

    def _error(self, code: int, message: str) -> None:
        self._json(code, {"error": HTTPStatus(code).phrase.lower(), "message": message})

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The stdlib's errors (bad request line, too long, unsupported method) as JSON 4xx."""
        if code == HTTPStatus.NOT_IMPLEMENTED:  # an unknown method: it is the client's error
            code = HTTPStatus.METHOD_NOT_ALLOWED
        elif code >= 500:
            code = HTTPStatus.BAD_REQUEST
        try:
            self._error(code, message or HTTPStatus(code).phrase)
        except OSError:
            self.close_connection = True

    def handle_one_request(self) -> None:
        try:
            super().handle_one_request()
        except TimeoutError:
            self._timed_out()
        except (ConnectionError, OSError):
            self.close_connection = True
        except Exception as exc:  # noqa: BLE001 - a bug: answer, log one line, keep serving
            log.error("agent_http_failed", error=f"{type(exc).__name__}: {exc}")
            self.close_connection = True
            try:
                self._error(500, "internal error; see the agent's log")
            except OSError:
                pass

    def _timed_out(self) -> None:
        self.close_connection = True
        try:
            self._error(408, f"request not received within {self.server.read_timeout:g} s")
        except OSError:
            pass

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics" and self.server.metrics is not None:
            self._send(200, self.server.metrics.render(), "text/plain; version=0.0.4; charset=utf-8")
        elif path == "/healthz":
            self._send(200, "ok\n")
        elif path == "/readyz" and self.server.metrics is not None:
            ready = self.server.metrics.ready()
            self._json(200 if ready else 503, {"ready": ready} if ready else {
                "ready": False, "message": "no pass has finished and no report was sent yet"})
        else:
            self._error(404, f"no route {path[:100]}")

    do_HEAD = do_GET

    def do_POST(self) -> None:
        raw = (self.headers.get("Content-Length") or "").strip()
        if self.headers.get("Transfer-Encoding"):
            self._error(400, "chunked bodies are not accepted; send Content-Length")
            return
        if not raw.isascii() or not raw.isdigit() or len(raw) > 15:
            self._error(400, "Content-Length is required and must be a non-negative number")
            return
        length = int(raw)
        if length > MAX_BODY:
            self._error(413, f"body of {length} bytes exceeds the limit of {MAX_BODY} bytes")
            return
        try:
            body = self.rfile.read(length)  # bounded by the socket timeout
        except TimeoutError:
            self._timed_out()
            return
        if len(body) != length:
            self._error(400, f"body ended after {len(body)} of {length} bytes")
            return
        if self.path.split("?", 1)[0] != "/webhook" or self.server.webhook_secret is None:
            self._error(404, "no route; POST /webhook needs a webhook secret")
            return
        if not verify_signature(self.server.webhook_secret, body, self.headers):
            self._error(401, "no valid X-Hub-Signature-256, X-Gitea-Signature or X-Gitlab-Token")
            return
        self.server.on_push()
        self._json(202, {"accepted": True, "message": "sync requested"})


def serve(addr: str, metrics: Metrics | None, webhook_secret: bytes | None,
          on_push: Callable[[], None]) -> AgentHTTPServer:
    host, _, port = addr.rpartition(":")
    server = AgentHTTPServer((host or "127.0.0.1", int(port)), metrics, webhook_secret, on_push)
    threading.Thread(target=server.serve_forever, name="agent-http", daemon=True).start()
    return server
