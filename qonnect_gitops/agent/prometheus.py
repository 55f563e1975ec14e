"""Latency and traffic from a Prometheus HTTP query API (``/api/v1/query``).

``<latency metric>{source="<this cluster>"}`` gives one sample per ``target``
(another cluster or a user region); ``<traffic metric>`` gives one sample per
``app``, ``component`` and ``region``. Metric names are configurable.
"""

from __future__ import annotations

import json
import math
import re
import urllib.parse
import urllib.request
from typing import Any

from qonnect_gitops.model.report import MAX_LATENCIES, MAX_TRAFFIC, Latency, Traffic

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def query(base: str, promql: str, timeout: float = 5.0) -> list[dict[str, Any]]:
    url = base.rstrip("/") + "/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        doc = json.loads(resp.read())
    if doc.get("status") != "success":
        raise ValueError(f"prometheus query failed: {doc.get('error', doc)}")
    data = doc.get("data") or {}
    if data.get("resultType") != "vector":
        raise ValueError(f"expected a vector result, got {data.get('resultType')}")
    return list(data.get("result") or [])


def _value(sample: dict[str, Any]) -> float | None:
    try:
        v = float(sample["value"][1])
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    return v if math.isfinite(v) and v >= 0 else None


def latencies(base: str, cluster: str, metric: str) -> list[Latency]:
    out: dict[str, float] = {}
    for s in query(base, f'{metric}{{source="{cluster}"}}'):
        target, v = (s.get("metric") or {}).get("target", ""), _value(s)
        if v is not None and _NAME.match(target) and target != cluster and v <= 600_000:
            out[target] = min(v, out.get(target, v))
    return [Latency(to=t, ms=v) for t, v in sorted(out.items())][:MAX_LATENCIES]


def traffic(base: str, metric: str) -> list[Traffic]:
    out: dict[tuple[str, str], float] = {}
    for s in query(base, metric):
        m, v = s.get("metric") or {}, _value(s)
        app, comp, region = m.get("app", ""), m.get("component", ""), m.get("region", "")
        if v is None or not all(_NAME.match(x) for x in (app, comp, region)):
            continue
        key = (f"{app}/{comp}", region)
        out[key] = out.get(key, 0.0) + v
    return [Traffic(component=c, region=r, rps=v) for (c, r), v in sorted(out.items())][:MAX_TRAFFIC]
