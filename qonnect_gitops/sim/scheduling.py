"""Scheduling rules of the simulated cluster: what a Pod asks for and which nodes can take it.

Pure functions over plain API objects (dicts). The filters run in the order of
the default scheduler's filter plugins (NodeUnschedulable, TaintToleration,
NodeAffinity, NodeResourcesFit) and, like them, a node is rejected by the first
filter that fails; the reasons are gathered into the scheduler's message
("0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector,
2 Insufficient cpu.").
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from qonnect_gitops.model.quantity import parse_quantity

NOT_READY_TAINT = "node.kubernetes.io/not-ready"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"


@dataclass
class Requests:
    """What one Pod asks for: CPU in millicores, memory in bytes."""

    cpu: int = 0
    memory: int = 0


def _quantity(value: Any, milli: bool) -> int:
    try:
        q = parse_quantity(value)
    except ValueError:
        return 0
    q = q * 1000 if milli else q
    # The API rounds requests up to whole millicores / bytes.
    return int(q.to_integral_value(rounding="ROUND_CEILING"))


def _container_requests(c: dict[str, Any]) -> Requests:
    res = c.get("resources") or {}
    # A container with limits but no requests gets requests equal to its limits (API defaulting).
    req = {**(res.get("limits") or {}), **(res.get("requests") or {})}
    return Requests(_quantity(req["cpu"], True) if "cpu" in req else 0,
                    _quantity(req["memory"], False) if "memory" in req else 0)


def pod_requests(pod: dict[str, Any]) -> Requests:
    """Effective requests: the sum over containers, or the largest init container if that is more."""
    spec = pod.get("spec") or {}
    total = Requests()
    for c in spec.get("containers") or []:
        r = _container_requests(c)
        total.cpu += r.cpu
        total.memory += r.memory
    for c in spec.get("initContainers") or []:
        r = _container_requests(c)
        total.cpu = max(total.cpu, r.cpu)
        total.memory = max(total.memory, r.memory)
    return total


def tolerates(tolerations: list[dict[str, Any]], taint: dict[str, Any]) -> bool:
    """Whether one of ``tolerations`` tolerates ``taint`` (the API's matching rules)."""
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint.get("effect"):
            continue
        op = t.get("operator") or "Equal"
        if not t.get("key"):
            if op == "Exists":
                return True
            continue
        if t["key"] != taint.get("key"):
            continue
        if op == "Exists" or (t.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def untolerated_taint(pod: dict[str, Any], node: dict[str, Any]) -> dict[str, Any] | None:
    """The first NoSchedule/NoExecute taint of ``node`` that the Pod does not tolerate."""
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(tolerations, taint):
            return taint
    return None


def _expression_matches(expr: dict[str, Any], labels: dict[str, str]) -> bool:
    key, op, values = expr.get("key", ""), expr.get("operator", ""), expr.get("values") or []
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op in ("Gt", "Lt"):
        try:
            have, want = int(labels[key]), int(values[0])
        except (KeyError, IndexError, ValueError):
            return False
        return have > want if op == "Gt" else have < want
    return False


def _field_matches(expr: dict[str, Any], node: dict[str, Any]) -> bool:
    # matchFields supports only metadata.name (what the DaemonSet controller uses).
    if expr.get("key") != "metadata.name":
        return False
    return _expression_matches({**expr, "key": "name"}, {"name": node["metadata"]["name"]})


def matches_affinity(pod: dict[str, Any], node: dict[str, Any]) -> bool:
    """nodeSelector and required node affinity (terms ORed, expressions ANDed)."""
    spec = pod.get("spec") or {}
    labels = node["metadata"].get("labels") or {}
    for k, v in (spec.get("nodeSelector") or {}).items():
        if labels.get(k) != v:
            return False
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = required.get("nodeSelectorTerms")
    if not terms:
        return True
    for term in terms:
        exprs, fields = term.get("matchExpressions") or [], term.get("matchFields") or []
        if not exprs and not fields:
            continue  # an empty term matches nothing
        if all(_expression_matches(e, labels) for e in exprs) and all(_field_matches(f, node) for f in fields):
            return True
    return False


@dataclass
class NodeRoom:
    """A node's allocatable resources and what its bound Pods use."""

    node: dict[str, Any]
    cpu: int
    memory: int
    pods: int
    used: Requests = field(default_factory=Requests)
    count: int = 0

    @classmethod
    def of(cls, node: dict[str, Any]) -> NodeRoom:
        """Room from ``status.allocatable``."""
        alloc = (node.get("status") or {}).get("allocatable") or {}
        return cls(node, _quantity(alloc.get("cpu", "0"), True), _quantity(alloc.get("memory", "0"), False),
                   int(_quantity(alloc.get("pods", "0"), False)))

    def add(self, req: Requests) -> None:
        """Account for one more bound Pod."""
        self.used.cpu += req.cpu
        self.used.memory += req.memory
        self.count += 1


def node_reasons(pod: dict[str, Any], req: Requests, room: NodeRoom) -> list[str]:
    """Why ``pod`` cannot go to this node (empty: it fits), as the scheduler words it."""
    node = room.node
    if (node.get("spec") or {}).get("unschedulable"):
        tolerations = (pod.get("spec") or {}).get("tolerations") or []
        if not tolerates(tolerations, {"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"}):
            return ["node(s) were unschedulable"]
    taint = untolerated_taint(pod, node)
    if taint is not None:
        return [f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value') or ''}}}"]
    if not matches_affinity(pod, node):
        return ["node(s) didn't match Pod's node affinity/selector"]
    reasons = []
    if room.count + 1 > room.pods:
        reasons.append("Too many pods")
    if req.cpu and room.used.cpu + req.cpu > room.cpu:
        reasons.append("Insufficient cpu")
    if req.memory and room.used.memory + req.memory > room.memory:
        reasons.append("Insufficient memory")
    return reasons


def unschedulable_message(total_nodes: int, reasons: Counter[str]) -> str:
    """The scheduler's FitError message: reasons with counts, sorted as strings."""
    if total_nodes == 0:
        return "no nodes available to schedule pods"
    parts = sorted(f"{n} {reason}" for reason, n in reasons.items())
    return f"0/{total_nodes} nodes are available: {', '.join(parts)}." if parts else \
        f"0/{total_nodes} nodes are available."
