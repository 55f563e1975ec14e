"""Signals of a simulated cluster: a scrape endpoint for a real Prometheus, and a subset of
the Prometheus HTTP query API for tests and demos that run none.

What is set is latency to a target (a cluster or a user region) and requests per second a
component serves to a user region. ``GET /metrics`` exposes them in the Prometheus text
format as a real cluster would:

* ``qonnect_network_latency_ms{source="<this cluster>",target="<cluster or region>"}``:
  the latency probes (a gauge, as a probe exporter publishes it);
* ``qonnect_component_requests_per_second{app,component,region}``: a gauge of the same;
* Istio's standard metrics, computed from the same numbers as a mesh would count them:
  ``istio_requests_total`` (counter) with ``reporter="destination"``,
  ``destination_cluster``, ``destination_workload``, ``destination_workload_namespace`` and
  ``user_region`` (a custom dimension: Istio knows no user region, see docs/agent.md) for
  the traffic of each component whose workload runs in the cluster; and, towards each
  peer cluster (``peers``), ``istio_requests_total`` and the
  ``istio_request_duration_milliseconds`` histogram (Istio's default buckets) with
  ``reporter="source"``, ``source_cluster`` and ``destination_cluster``: ``MESH_CALL_RPS``
  calls a second, each taking the latency set for that peer. Counters grow with time at
  the set rate, so ``rate()`` over a window of constant settings gives the rate set and
  ``histogram_quantile`` a value in the bucket holding the latency set.

A target or traffic entry that is removed leaves the exposition, so Prometheus marks its
series stale.

The query API:

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
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from qonnect_gitops.logs import get_logger

log = get_logger(__name__)

LATENCY_METRIC = "qonnect_network_latency_ms"
TRAFFIC_METRIC = "qonnect_component_requests_per_second"
ISTIO_REQUESTS = "istio_requests_total"
ISTIO_DURATION = "istio_request_duration_milliseconds"
# Istio's default buckets of istio_request_duration_milliseconds (its proxy's bootstrap).
DURATION_BUCKETS = (0.5, 1.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0,
                    30000.0, 60000.0, 300000.0, 600000.0, 1800000.0, 3600000.0)
MESH_CALL_RPS = 10.0  # calls a second this cluster's proxies make to each peer cluster
EXPOSITION_TYPE = "text/plain; version=0.0.4; charset=utf-8"

WorkloadOf = Callable[[str, str], "tuple[str, str] | None"]
"""(app, component) -> (namespace, workload name) of the workload running it, or None."""

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


class _Counter:
    """A counter growing at a rate set from time to time: its value is a function of time."""

    __slots__ = ("base", "rate", "since")

    def __init__(self, now: float) -> None:
        self.base, self.rate, self.since = 0.0, 0.0, now

    def value(self, now: float) -> float:
        return self.base + self.rate * max(0.0, now - self.since)

    def set_rate(self, rate: float, now: float) -> None:
        self.base, self.rate, self.since = self.value(now), rate, now


Labels = tuple[tuple[str, str], ...]


class Signals:
    """Latency and traffic of one cluster; change them at any time.

    ``peers``: the latency targets that are clusters of the mesh (the others are user
    regions, measured by probes only). ``workload_of`` finds the workload running a
    component, for the mesh's labels; without it the namespace is the app's name and the
    workload the component's. ``clock``: seconds, for the counters."""

    def __init__(self, cluster: str, peers: frozenset[str] = frozenset(), workload_of: WorkloadOf | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.cluster = cluster
        self.peers = peers
        self.workload_of = workload_of
        self.clock = clock
        self._lock = threading.Lock()
        self._latency: dict[str, float] = {}
        self._traffic: dict[tuple[str, str, str], float] = {}
        # Counters by (metric, labels): they keep their value while the setting changes.
        self._counters: dict[tuple[str, Labels], _Counter] = {}

    def set_latency(self, target: str, ms: float) -> None:
        """Latency in milliseconds from this cluster to a cluster or region."""
        with self._lock:
            self._latency[target] = float(ms)
            self._mesh_calls(target, float(ms))

    def remove_latency(self, target: str) -> None:
        """Stop reporting the latency to ``target``."""
        with self._lock:
            self._latency.pop(target, None)
            self._drop(lambda labels: ("destination_cluster", target) in labels and ("reporter", "source") in labels)

    def set_traffic(self, app: str, component: str, region: str, rps: float) -> None:
        """Requests per second a component receives from a user region."""
        with self._lock:
            self._traffic[(app, component, region)] = float(rps)
            self._counter(ISTIO_REQUESTS, self._served_labels(app, component, region)).set_rate(float(rps), self.clock())

    def remove_traffic(self, app: str, component: str, region: str) -> None:
        """Stop reporting the traffic of a component from a region."""
        with self._lock:
            self._traffic.pop((app, component, region), None)
            self._drop(lambda labels: labels == self._served_labels(app, component, region))

    def _counter(self, name: str, labels: Labels) -> _Counter:
        key = (name, labels)
        if key not in self._counters:
            self._counters[key] = _Counter(self.clock())
        return self._counters[key]

    def _drop(self, which: Callable[[Labels], bool]) -> None:
        for key in [k for k in self._counters if which(k[1])]:
            del self._counters[key]

    def _mesh_calls(self, target: str, ms: float) -> None:
        """The source proxies' view of calls to a peer cluster: a count and a duration histogram."""
        if target not in self.peers:
            return
        now = self.clock()
        labels: Labels = (("reporter", "source"), ("source_cluster", self.cluster), ("destination_cluster", target))
        self._counter(ISTIO_REQUESTS, labels).set_rate(MESH_CALL_RPS, now)
        self._counter(ISTIO_DURATION + "_count", labels).set_rate(MESH_CALL_RPS, now)
        self._counter(ISTIO_DURATION + "_sum", labels).set_rate(MESH_CALL_RPS * ms, now)
        for le in (*DURATION_BUCKETS, math.inf):
            self._counter(ISTIO_DURATION + "_bucket", (*labels, ("le", format_value(le)))).set_rate(
                MESH_CALL_RPS if ms <= le else 0.0, now)

    def _served_labels(self, app: str, component: str, region: str) -> Labels:
        """Istio's labels on a request a component serves; the workload is looked up when
        scraped (it may start or move after the traffic was set)."""
        return (("reporter", "destination"), ("destination_cluster", self.cluster), ("qonnect_app", app),
                ("qonnect_component", component), ("user_region", region))

    def series(self) -> list[tuple[dict[str, str], float]]:
        """Every gauge: its labels (with ``__name__``) and value, in a stable order."""
        with self._lock:
            out = [({"__name__": LATENCY_METRIC, "source": self.cluster, "target": t}, v)
                   for t, v in sorted(self._latency.items())]
            out += [({"__name__": TRAFFIC_METRIC, "app": a, "component": c, "region": r}, v)
                    for (a, c, r), v in sorted(self._traffic.items())]
        return out

    def exposition(self) -> str:
        """Every series in the Prometheus text format (``GET /metrics``)."""
        now = self.clock()
        with self._lock:
            # In the order they were set: a histogram's buckets in increasing order.
            counters = list(self._counters.items())
            values = [(name, labels, counter.value(now)) for (name, labels), counter in counters]
        lines: list[str] = []
        gauges = self.series()
        for family, text in ((LATENCY_METRIC, "Probed round-trip latency to a cluster or user region, in milliseconds."),
                             (TRAFFIC_METRIC, "Requests per second a component serves to a user region.")):
            lines += [f"# HELP {family} {text}", f"# TYPE {family} gauge"]
            for gauge, value in gauges:
                if gauge["__name__"] == family:
                    shown = tuple((k, v) for k, v in gauge.items() if k != "__name__")
                    lines.append(f"{family}{_render(shown)} {format_value(value)}")
        for family, kind, text in ((ISTIO_REQUESTS, "counter", "Requests handled by an Istio proxy."),
                                   (ISTIO_DURATION, "histogram", "Duration of requests, in milliseconds.")):
            lines += [f"# HELP {family} {text}", f"# TYPE {family} {kind}"]
            for name, series, value in values:
                mesh = self._mesh_labels(series) if (name == ISTIO_REQUESTS) == (family == ISTIO_REQUESTS) else None
                if mesh is not None:
                    lines.append(f"{name}{_render(mesh)} {format_value(value)}")
        return "\n".join(lines) + "\n"

    def _mesh_labels(self, labels: Labels) -> Labels | None:
        """The labels as the mesh shows them: a served request names the workload that ran
        it (None while no workload of the component runs here: the mesh saw no request)."""
        found = dict(labels)
        if "qonnect_app" not in found:
            return labels
        app, component = found.pop("qonnect_app"), found.pop("qonnect_component")
        where = self.workload_of(app, component) if self.workload_of else (app, component)
        if where is None:
            return None
        found["destination_workload_namespace"], found["destination_workload"] = where
        return tuple(sorted(found.items()))

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


def _render(labels: Labels) -> str:
    """``{a="x",b="y"}`` with the text format's escapes."""
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels) + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@dataclass(frozen=True)
class Text:
    """A plain-text answer of a side server (the scrape endpoint)."""

    body: str
    content_type: str = EXPOSITION_TYPE


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
        if isinstance(payload, Text):
            data, content_type = payload.body.encode(), payload.content_type
        else:
            data, content_type = json.dumps(payload, separators=(",", ":")).encode(), "application/json"
        self.send_response(code)
        self.send_header("Content-Type", content_type)
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
    """The scrape endpoint ``/metrics``, the Prometheus API subset ``/api/v1/query``, and
    the health endpoints."""

    def route(method: str, path: str, query: dict[str, list[str]], body: bytes) -> tuple[int, Any]:
        if path == "/metrics" and method == "GET":
            return 200, Text(signals.exposition())
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
