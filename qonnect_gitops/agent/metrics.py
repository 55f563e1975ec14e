"""Prometheus text metrics (``/metrics``) and the push webhook (``POST /webhook``).

The webhook accepts a push event only with a valid ``X-Hub-Signature-256``
(GitHub/Gitea style ``sha256=<hex HMAC of the body>``) or ``X-Gitlab-Token``
equal to the secret; a valid event asks the agent to sync at once.
"""

from __future__ import annotations

import hashlib
import hmac
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar


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
    sig = headers.get("X-Hub-Signature-256") or ""
    if sig.startswith("sha256="):
        want = hmac.new(secret, body, hashlib.sha256).hexdigest()
        return hmac.compare_digest(want, sig[len("sha256="):])
    token = headers.get("X-Gitlab-Token")
    if token:
        return hmac.compare_digest(token.encode(), secret)
    return False


class AgentHTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, addr: tuple[str, int], metrics: Metrics | None, webhook_secret: bytes | None,
                 on_push: Callable[[], None]) -> None:
        self.metrics = metrics
        self.webhook_secret = webhook_secret
        self.on_push = on_push
        super().__init__(addr, _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: AgentHTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, code: int, text: str, ctype: str = "text/plain; charset=utf-8") -> None:
        data = text.encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/metrics" and self.server.metrics is not None:
            self._send(200, self.server.metrics.render(), "text/plain; version=0.0.4; charset=utf-8")
        elif self.path == "/healthz":
            self._send(200, "ok\n")
        else:
            self._send(404, "not found\n")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length > 1 << 20:
            self._send(413, "body too large\n")
            return
        body = self.rfile.read(length)
        if self.path != "/webhook" or self.server.webhook_secret is None:
            self._send(404, "not found\n")
            return
        if not verify_signature(self.server.webhook_secret, body, self.headers):
            self._send(401, "bad signature\n")
            return
        self.server.on_push()
        self._send(202, "sync requested\n")


def serve(addr: str, metrics: Metrics | None, webhook_secret: bytes | None,
          on_push: Callable[[], None]) -> AgentHTTPServer:
    host, _, port = addr.rpartition(":")
    server = AgentHTTPServer((host or "127.0.0.1", int(port)), metrics, webhook_secret, on_push)
    threading.Thread(target=server.serve_forever, name="agent-http", daemon=True).start()
    return server
