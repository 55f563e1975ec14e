"""Signals of a simulated cluster, served through the Prometheus HTTP query API.

Two metric families, both gauges:

* ``qonnect_network_latency_ms{source="<this cluster>",target="<cluster or region>"}``
* ``qonnect_component_requests_per_second{app="...",component="...",region="..."}``

``GET`` or ``POST /api/v1/query`` with ``query=`` (and an optional ``time=``)
answers an instant vector in Prometheus' exact response format. The query
language subset is one vector selector: a metric name, optionally followed
by ``{...}`` with ``=``, ``!=``, ``=~`` and ``!~`` matchers (regexes fully
anchored, as in Prometheus), or only ``{__name__="...", ...}``. Anything
else (functions, operators, ranges) is answered with Prometheus' ``bad_data``
error, so a caller can tell "unsupported" from "no data".
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from qonnect_gitops.logs import get_logger

log = get_logger(__name__)

LATENCY_METRIC = "qonnect_network_latency_ms"
TRAFFIC_METRIC = "qonnect_component_requests_per_second"

_NAME = re.compile(r"\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*")
_MATCHER = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*(,)?')


class QueryError(ValueError):
    """A query outside the supported subset, or malformed."""


Matcher = Callable[[dict[str, str]], bool]


def parse_selector(query: str) -> Matcher:
    """Parse ``name{label="v",...}`` into a predicate on a series' labels (``__name__`` included)."""
    text = query.strip()
    if not text:
        raise QueryError("empty query")
    matchers: list[Matcher] = []
    pos = 0
    m = _NAME.match(text)
    if m and m.group(1):
        matchers.append(_matcher("__name__", "=", m.group(1)))
        pos = m.end()
    if pos < len(text):
        if text[pos] != "{":
            raise QueryError(f'unsupported query (only a vector selector is served by the simulated cluster): "{query}"')
        pos += 1
        while True:
            rest = text[pos:].lstrip()
            if rest.startswith("}"):
                pos = len(text) - len(rest) + 1
                break
            mm = _MATCHER.match(text, pos)
            if not mm:
                raise QueryError(f'parse error: unexpected character in label matchers of "{query}"')
            label, op, raw = mm.group(1), mm.group(2), mm.group(3)
            value = bytes(raw, "utf-8").decode("unicode_escape")
            matchers.append(_matcher(label, op, value))
            pos = mm.end()
            if not mm.group(4) and not text[pos:].lstrip().startswith("}"):
                raise QueryError(f'parse error: expected "," or "}}" in "{query}"')
        if text[pos:].strip():
            raise QueryError(f'unsupported query (only a vector selector is served by the simulated cluster): "{query}"')
    if not matchers:
        raise QueryError("vector selector must contain at least one non-empty matcher")
    return lambda labels: all(f(labels) for f in matchers)


def _matcher(label: str, op: str, value: str) -> Matcher:
    if op in ("=~", "!~"):
        try:
            rx = re.compile(f"(?:{value})")
        except re.error as exc:
            raise QueryError(f"invalid regular expression {value!r}: {exc}") from None
        if op == "=~":
            return lambda labels: rx.fullmatch(labels.get(label, "")) is not None
        return lambda labels: rx.fullmatch(labels.get(label, "")) is None
    if op == "=":
        return lambda labels: labels.get(label, "") == value
    return lambda labels: labels.get(label, "") != value


def format_value(value: float) -> str:
    """A sample value as Prometheus prints it (Go's shortest float formatting)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == int(value) and abs(value) < 1e21:
        return str(int(value))
    return repr(value)


class Signals:
    """Latency and traffic gauges of one cluster; change them at any time."""

    def __init__(self, cluster: str) -> None:
        self.cluster = cluster
        self._lock = threading.Lock()
        self._latency: dict[str, float] = {}
        self._traffic: dict[tuple[str, str, str], float] = {}

    def set_latency(self, target: str, ms: float) -> None:
        """Latency in milliseconds from this cluster to a cluster or region."""
        with self._lock:
            self._latency[target] = float(ms)

    def remove_latency(self, target: str) -> None:
        """Stop reporting the latency to ``target``."""
        with self._lock:
            self._latency.pop(target, None)

    def set_traffic(self, app: str, component: str, region: str, rps: float) -> None:
        """Requests per second a component receives from a user region."""
        with self._lock:
            self._traffic[(app, component, region)] = float(rps)

    def remove_traffic(self, app: str, component: str, region: str) -> None:
        """Stop reporting the traffic of a component from a region."""
        with self._lock:
            self._traffic.pop((app, component, region), None)

    def series(self) -> list[tuple[dict[str, str], float]]:
        """Every series: its labels (with ``__name__``) and value, in a stable order."""
        with self._lock:
            out = [({"__name__": LATENCY_METRIC, "source": self.cluster, "target": t}, v)
                   for t, v in sorted(self._latency.items())]
            out += [({"__name__": TRAFFIC_METRIC, "app": a, "component": c, "region": r}, v)
                    for (a, c, r), v in sorted(self._traffic.items())]
        return out

    def describe(self) -> dict[str, Any]:
        """The gauges as JSON (for the admin endpoint)."""
        with self._lock:
            return {"latency_ms": dict(sorted(self._latency.items())),
                    "traffic_rps": [{"app": a, "component": c, "region": r, "rps": v}
                                    for (a, c, r), v in sorted(self._traffic.items())]}

    def query(self, query: str, at: float | None = None) -> dict[str, Any]:
        """An instant query's ``data`` object (raises QueryError outside the subset)."""
        match = parse_selector(query)
        ts = at if at is not None else time.time()
        result = [{"metric": labels, "value": [round(ts, 3), format_value(v)]}
                  for labels, v in self.series() if match(labels)]
        return {"resultType": "vector", "result": result}


class JsonHTTPServer(ThreadingHTTPServer):
    """A small threading HTTP server for the Prometheus and admin ports."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], route: Callable[[str, str, dict[str, list[str]], bytes],
                                                                  tuple[int, Any]]) -> None:
        self.route = route
        super().__init__(address, _JsonHandler)


class _JsonHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: JsonHTTPServer
    server_version = "qonnect-sim"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("http_request", line=format % args)

    def _handle(self, method: str) -> None:
        url = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        query = parse_qs(url.query, keep_blank_values=True)
        if method == "POST" and "x-www-form-urlencoded" in (self.headers.get("Content-Type") or ""):
            for k, v in parse_qs(body.decode(), keep_blank_values=True).items():
                query.setdefault(k, []).extend(v)
        try:
            code, payload = self.server.route(method, url.path, query, body)
        except Exception as exc:  # a bug must answer, not hang the caller
            log.error("sim_side_request_failed", exc_info=True, path=self.path)  # noqa: G201
            code, payload = 500, {"error": str(exc)}
        data = json.dumps(payload, separators=(",", ":")).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_DELETE(self) -> None:
        self._handle("DELETE")


def prometheus_route(signals: Signals) -> Callable[[str, str, dict[str, list[str]], bytes], tuple[int, Any]]:
    """The Prometheus API subset: ``/api/v1/query`` plus the health endpoints."""

    def route(method: str, path: str, query: dict[str, list[str]], body: bytes) -> tuple[int, Any]:
        if path in ("/-/healthy", "/-/ready"):
            return 200, "Prometheus Server is Ready."
        if path == "/api/v1/status/buildinfo":
            return 200, {"status": "success", "data": {"version": "2.53.0-qonnect-sim"}}
        if path != "/api/v1/query":
            return 404, {"status": "error", "errorType": "not_found", "error": f"{path} is not served"}
        if method not in ("GET", "POST"):
            return 405, {"status": "error", "errorType": "bad_data", "error": "method not allowed"}
        q = (query.get("query") or [""])[0]
        at: float | None = None
        if query.get("time") and query["time"][0]:
            try:
                at = float(query["time"][0])
            except ValueError:
                return 400, {"status": "error", "errorType": "bad_data",
                             "error": f'invalid parameter "time": cannot parse "{query["time"][0]}" to a valid timestamp'}
        try:
            return 200, {"status": "success", "data": signals.query(q, at)}
        except QueryError as exc:
            return 400, {"status": "error", "errorType": "bad_data", "error": str(exc)}

    return route
