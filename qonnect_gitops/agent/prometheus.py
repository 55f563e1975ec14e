"""Latency and traffic from a Prometheus HTTP query API (``/api/v1/query``), by PromQL.

Two instant queries per report, each a template in which ``$cluster`` is this cluster's
name and ``$window`` the range of ``rate()`` (``--prometheus-window``, default ``1m``):

* **latency** answers one sample per ``target`` label (another cluster or a user region),
  in milliseconds;
* **traffic** answers requests per second by ``region`` (a user region) and either
  ``app`` and ``component`` (qonnect's names), or ``namespace`` and ``workload`` (what a
  mesh labels requests with), which are mapped to the component whose workload that is on
  the branch the cluster runs (its ``qonnect.io/app`` and ``qonnect.io/component`` labels).

``PRESETS`` holds the queries for the simulated cluster's own metrics (the default, plain
selectors that its query subset serves), Istio, Linkerd and Cilium/Hubble; docs/agent.md
explains each. What the answer does not say is left out, never guessed: a sample that is
``NaN`` (``histogram_quantile`` over a range without requests), infinite, negative, over
the report's bounds, or without usable labels gives no entry, and the leads keep the
declared latency (network.yaml) for a target the report does not name. A Prometheus that
cannot be reached, or answers an error, gives no reading (``read`` returns the problem):
the agent keeps what it read last and logs ``prometheus_failed``.
"""

from __future__ import annotations

import json
import math
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from qonnect_gitops.model.labels import APP_LABEL, COMPONENT_LABEL
from qonnect_gitops.model.report import MAX_LATENCIES, MAX_LATENCY_MS, MAX_RPS, MAX_TRAFFIC, Latency, Traffic

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_PLACEHOLDER = re.compile(r"\$(cluster|window)\b")
_WINDOW = re.compile(r"^[0-9]+(ms|s|m|h)$")
MAX_ANSWER = 8 << 20  # bytes read of one answer: a report carries at most 1,256 samples
WORKLOAD_KINDS = frozenset({"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob"})


@dataclass(frozen=True)
class Queries:
    """The latency and traffic query templates of a fleet (``$cluster``, ``$window``)."""

    latency: str
    traffic: str


def _istio() -> Queries:
    latency = (
        'label_replace(histogram_quantile(0.5, sum by (le, destination_cluster) ('
        'rate(istio_request_duration_milliseconds_bucket{reporter="source", source_cluster="$cluster", '
        'destination_cluster!="$cluster"}[$window]))), "target", "$1", "destination_cluster", "(.+)")'
        ' or on (target) qonnect_network_latency_ms{source="$cluster"}')
    traffic = (
        'sum by (namespace, workload, region) (label_replace(label_replace(label_replace('
        'rate(istio_requests_total{reporter="destination", destination_cluster="$cluster", user_region!=""}[$window]), '
        '"namespace", "$1", "destination_workload_namespace", "(.+)"), '
        '"workload", "$1", "destination_workload", "(.+)"), '
        '"region", "$1", "user_region", "(.+)"))')
    return Queries(latency, traffic)


def _linkerd() -> Queries:
    # Linkerd's proxies label calls to a cluster linked through its gateway with
    # dst_target_cluster; requests carry no user region, so the example counts inbound
    # requests for one region named in the query (edit "eu-central").
    latency = (
        'label_replace(histogram_quantile(0.5, sum by (le, dst_target_cluster) ('
        'rate(response_latency_ms_bucket{direction="outbound", dst_target_cluster!=""}[$window]))), '
        '"target", "$1", "dst_target_cluster", "(.+)")'
        ' or on (target) qonnect_network_latency_ms{source="$cluster"}')
    traffic = (
        'label_replace(sum by (namespace, workload) (label_replace('
        'rate(request_total{direction="inbound"}[$window]), "workload", "$1", "deployment", "(.+)")), '
        '"region", "eu-central", "", "")')
    return Queries(latency, traffic)


def _cilium() -> Queries:
    # Hubble's HTTP metrics (httpV2 with labelsContext=destination_namespace,destination_workload)
    # carry no cluster-to-cluster latency: the probes give it. Durations are in seconds.
    latency = 'qonnect_network_latency_ms{source="$cluster"}'
    traffic = (
        'label_replace(sum by (namespace, workload) (label_replace(label_replace('
        'rate(hubble_http_requests_total{reporter="server"}[$window]), '
        '"namespace", "$1", "destination_namespace", "(.+)"), "workload", "$1", "destination_workload", "(.+)")), '
        '"region", "eu-central", "", "")')
    return Queries(latency, traffic)


def plain(latency_metric: str, traffic_metric: str) -> Queries:
    """Plain selectors of two gauges (the default; what the simulated cluster's query subset serves)."""
    return Queries(f'{latency_metric}{{source="$cluster"}}', traffic_metric)


PRESETS: dict[str, Queries] = {
    "qonnect": plain("qonnect_network_latency_ms", "qonnect_component_requests_per_second"),
    "istio": _istio(),
    "linkerd": _linkerd(),
    "cilium": _cilium(),
}


def check_window(window: str) -> str:
    """``window`` if it is a PromQL duration of one unit (``30s``, ``1m``); ValueError otherwise."""
    if not _WINDOW.fullmatch(window) or int(re.sub(r"\D", "", window)) == 0:
        raise ValueError(f"{window!r} is not a PromQL duration such as 30s, 1m or 5m")
    return window


def expand(template: str, cluster: str, window: str) -> str:
    """The query for this cluster: ``$cluster`` and ``$window`` replaced (names are RFC 1123,
    so they need no escaping inside a PromQL string)."""
    return _PLACEHOLDER.sub(lambda m: cluster if m.group(1) == "cluster" else window, template)


def query(base: str, promql: str, timeout: float = 5.0) -> list[dict[str, Any]]:
    """The instant vector ``promql`` evaluates to; OSError or ValueError when there is none."""
    request = base.rstrip("/") + "/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            doc = json.loads(resp.read(MAX_ANSWER + 1)[:MAX_ANSWER])
    except urllib.error.HTTPError as exc:  # 400/422: Prometheus says why in the body
        try:
            doc = json.loads(exc.read(4096))
        except ValueError:
            raise ValueError(f"prometheus answered {exc.code}") from None
    if not isinstance(doc, dict) or doc.get("status") != "success":
        error = doc.get("error", doc) if isinstance(doc, dict) else doc
        raise ValueError(f"prometheus query failed: {str(error)[:300]}")
    data = doc.get("data") or {}
    if data.get("resultType") != "vector":
        raise ValueError(f"expected a vector result, got {data.get('resultType')}")
    result = data.get("result") or []
    return [s for s in result if isinstance(s, dict)] if isinstance(result, list) else []


def _value(sample: dict[str, Any]) -> float | None:
    try:
        v = float(sample["value"][1])
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    return v if math.isfinite(v) and v >= 0 else None


def latencies(base: str, cluster: str, promql: str) -> list[Latency]:
    """One latency per ``target`` other than this cluster (the lowest where several answer)."""
    out: dict[str, float] = {}
    for s in query(base, promql):
        target, v = str((s.get("metric") or {}).get("target", "")), _value(s)
        if v is not None and _NAME.match(target) and target != cluster and v <= MAX_LATENCY_MS:
            out[target] = min(v, out.get(target, v))
    return [Latency(to=t, ms=v) for t, v in sorted(out.items())][:MAX_LATENCIES]


def workload_components(objects: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], str]:
    """(namespace, workload name) -> ``app/component`` of the workloads among ``objects``."""
    out: dict[tuple[str, str], str] = {}
    for obj in objects:
        meta = obj.get("metadata") or {}
        labels = meta.get("labels") or {}
        app, component = labels.get(APP_LABEL), labels.get(COMPONENT_LABEL)
        if obj.get("kind") in WORKLOAD_KINDS and isinstance(app, str) and isinstance(component, str):
            out[(str(meta.get("namespace") or ""), str(meta.get("name") or ""))] = f"{app}/{component}"
    return out


def traffic(base: str, promql: str, workloads: Mapping[tuple[str, str], str] | None = None) -> list[Traffic]:
    """Requests per second by component and region, summed where several samples name the same."""
    out: dict[tuple[str, str], float] = {}
    for s in query(base, promql):
        m, v = s.get("metric") or {}, _value(s)
        region = str(m.get("region", ""))
        if "app" in m or "component" in m:
            app, comp = str(m.get("app", "")), str(m.get("component", ""))
        else:
            key = (workloads or {}).get((str(m.get("namespace", "")), str(m.get("workload", ""))), "")
            app, _, comp = key.partition("/")
        if v is None or not all(_NAME.match(x) for x in (app, comp, region)):
            continue
        key2 = (f"{app}/{comp}", region)
        out[key2] = min(MAX_RPS, out.get(key2, 0.0) + v)
    return [Traffic(component=c, region=r, rps=v) for (c, r), v in sorted(out.items())][:MAX_TRAFFIC]


@dataclass(frozen=True)
class Reading:
    """What one reading found, and why it found nothing when it could not ask."""

    latencies: tuple[Latency, ...] = ()
    traffic: tuple[Traffic, ...] = ()
    problem: str | None = None


def read(base: str, cluster: str, queries: Queries, window: str,
         objects: Iterable[Mapping[str, Any]] = ()) -> Reading:
    """Both queries; a Prometheus that is down or refuses a query gives no reading, with
    the problem named (a half answer would mix two moments)."""
    try:
        found = latencies(base, cluster, expand(queries.latency, cluster, window))
        served = traffic(base, expand(queries.traffic, cluster, window), workload_components(objects))
    except (OSError, ValueError) as exc:
        return Reading(problem=str(exc)[:500])
    return Reading(tuple(found), tuple(served))
