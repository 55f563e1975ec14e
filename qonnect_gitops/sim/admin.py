"""The admin endpoint of a simulated cluster: faults and signals over HTTP, on its own port.

It is outside the Kubernetes API (so it stays reachable while the cluster is
"down") and every route lives under ``/_sim/``; bodies are JSON.

=======  ==============================  ==============================================================
method   path                            effect
=======  ==============================  ==============================================================
GET      /_sim/status                    the cluster: URLs, up or down, faults, nodes, signals
POST     /_sim/down                      the API server stops: connections refused
POST     /_sim/up                        the API server listens again on the same port
PUT      /_sim/faults/errors             ``{"rate": 0.5, "code": 500, "retryAfter": 1, "seed": 7}``
PUT      /_sim/faults/latency            ``{"seconds": 0.3, "jitter": 0.1}``
DELETE   /_sim/faults                    no more injected errors or latency
POST     /_sim/nodes/NAME/fail           the node goes NotReady; its Pods are evicted
POST     /_sim/nodes/NAME/recover        the node is Ready again
PUT      /_sim/signals/latency           ``{"target": "eu-central", "ms": 12}``
PUT      /_sim/signals/traffic           ``{"app": "bookinfo", "component": "productpage",
                                         "region": "eu-central", "rps": 120}``
DELETE   /_sim/signals/latency           ``{"target": ...}``: stop reporting it
DELETE   /_sim/signals/traffic           ``{"app", "component", "region"}``: stop reporting it
=======  ==============================  ==============================================================

Answers: ``200`` with the new ``/_sim/status`` body, ``400`` with ``{"error": ...}``
for a bad body, ``404`` for an unknown route or node.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from qonnect_gitops.sim.cluster import SimCluster

Route = Callable[[str, str, dict[str, list[str]], bytes], tuple[int, Any]]


def admin_route(cluster: SimCluster) -> Route:
    """The request handler of ``cluster``'s admin port."""

    def route(method: str, path: str, query: dict[str, list[str]], raw: bytes) -> tuple[int, Any]:
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            return 400, {"error": "the body must be JSON"}
        if not isinstance(body, dict):
            return 400, {"error": "the body must be a JSON object"}
        parts = [p for p in path.split("/") if p]
        if parts[:1] != ["_sim"]:
            return 404, {"error": f"{path}: admin routes live under /_sim/"}
        rest = parts[1:]
        try:
            if method == "GET" and rest == ["status"]:
                pass
            elif method == "POST" and rest == ["down"]:
                cluster.down()
            elif method == "POST" and rest == ["up"]:
                cluster.up()
            elif method == "PUT" and rest == ["faults", "errors"]:
                cluster.faults.set_errors(float(body.get("rate", 1.0)), int(body.get("code", 500)),
                                          int(body.get("retryAfter", 1)), int(body.get("seed", 0)))
            elif method == "PUT" and rest == ["faults", "latency"]:
                cluster.faults.set_latency(float(body.get("seconds", 0.0)), float(body.get("jitter", 0.0)))
            elif method == "DELETE" and rest == ["faults"]:
                cluster.faults.clear()
            elif method == "POST" and len(rest) == 3 and rest[0] == "nodes" and rest[2] in ("fail", "recover"):
                try:
                    (cluster.fail_node if rest[2] == "fail" else cluster.recover_node)(rest[1])
                except KeyError:
                    return 404, {"error": f"node {rest[1]} not found"}
            elif rest == ["signals", "latency"] and method in ("PUT", "DELETE"):
                if method == "PUT":
                    cluster.signals.set_latency(str(body["target"]), float(body["ms"]))
                else:
                    cluster.signals.remove_latency(str(body["target"]))
            elif rest == ["signals", "traffic"] and method in ("PUT", "DELETE"):
                key = (str(body["app"]), str(body["component"]), str(body["region"]))
                if method == "PUT":
                    cluster.signals.set_traffic(*key, float(body["rps"]))
                else:
                    cluster.signals.remove_traffic(*key)
            else:
                return 404, {"error": f"no admin route {method} {path}"}
        except KeyError as exc:
            return 400, {"error": f"missing field {exc.args[0]!r}"}
        except (TypeError, ValueError) as exc:
            return 400, {"error": str(exc)}
        return 200, cluster.status()

    return route
