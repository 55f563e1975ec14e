"""What Kubernetes NetworkPolicies allow, evaluated as the API documents it (networking.k8s.io/v1).

A connection from ``src`` to ``dst`` on a port is allowed when the source's egress and the
destination's ingress both allow it. A pod selected by no policy of a direction is open in
that direction; a selected one admits only what one of its policies' rules admits. A rule's
peers are pods (podSelector, in the policy's namespace unless a namespaceSelector picks
namespaces) or IP blocks; a rule without peers or ports matches every peer or port. Named
ports resolve against the destination pod's container ports. Traffic between a pod and its
own node is always allowed (the kubelet's probes), as the API documents.

Assumption, stated: ``ipBlock`` matches addresses outside the cluster only (the API leaves
pod IPs to the implementation), so pods are reached through pod and namespace selectors.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Pod:
    namespace: str
    labels: dict[str, str]
    ports: dict[str, int] = field(default_factory=dict)  # named container ports


@dataclass(frozen=True)
class External:
    ip: str


@dataclass(frozen=True)
class Node:
    """The node a pod runs on (the kubelet)."""


Endpoint = Pod | External | Node


def matches(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """A LabelSelector against labels ({} selects everything)."""
    if selector is None:
        return True
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        ok = {"In": key in labels and labels[key] in values, "NotIn": labels.get(key) not in values,
              "Exists": key in labels, "DoesNotExist": key not in labels}[op]
        if not ok:
            return False
    return True


class Cluster:
    """Namespaces with their labels, and the policies applied in them."""

    def __init__(self, namespaces: dict[str, dict[str, str]], policies: list[dict[str, Any]]) -> None:
        # Every namespace carries kubernetes.io/metadata.name (set by the API server).
        self.namespaces = {n: {**labels, "kubernetes.io/metadata.name": n} for n, labels in namespaces.items()}
        self.policies = policies

    def _selecting(self, pod: Pod, direction: str) -> list[dict[str, Any]]:
        return [p for p in self.policies
                if p["metadata"]["namespace"] == pod.namespace and matches(p["spec"]["podSelector"], pod.labels)
                and direction in p["spec"].get("policyTypes", ["Ingress"])]

    def _peer(self, policy: dict[str, Any], peer: dict[str, Any], other: Endpoint) -> bool:
        if "ipBlock" in peer:
            if not isinstance(other, External):
                return False
            ip = ipaddress.ip_address(other.ip)
            block = peer["ipBlock"]
            net = ipaddress.ip_network(block["cidr"])
            return ip.version == net.version and ip in net and not any(
                ip.version == ipaddress.ip_network(e).version and ip in ipaddress.ip_network(e)
                for e in block.get("except", []))
        if not isinstance(other, Pod):
            return False
        if "namespaceSelector" in peer:
            ns_ok = matches(peer["namespaceSelector"], self.namespaces[other.namespace])
        else:
            ns_ok = other.namespace == policy["metadata"]["namespace"]
        return ns_ok and matches(peer.get("podSelector"), other.labels)

    @staticmethod
    def _port(rule: dict[str, Any], dst: Endpoint, port: int, protocol: str) -> bool:
        ports = rule.get("ports")
        if not ports:
            return True
        for p in ports:
            if p.get("protocol", "TCP") != protocol:
                continue
            wanted = p.get("port")
            if wanted is None:
                return True
            if isinstance(wanted, str):
                wanted = dst.ports.get(wanted) if isinstance(dst, Pod) else None
            if wanted is not None and wanted <= port <= p.get("endPort", wanted):
                return True
        return False

    def _admits(self, pod: Pod, direction: str, other: Endpoint, dst: Endpoint, port: int, protocol: str) -> bool:
        policies = self._selecting(pod, direction)
        if not policies:
            return True
        key, peers_key = ("ingress", "from") if direction == "Ingress" else ("egress", "to")
        for policy in policies:
            for rule in policy["spec"].get(key) or []:
                peers = rule.get(peers_key)
                if (not peers or any(self._peer(policy, peer, other) for peer in peers)) \
                        and self._port(rule, dst, port, protocol):
                    return True
        return False

    def allowed(self, src: Endpoint, dst: Endpoint, port: int, protocol: str = "TCP") -> bool:
        """Whether a connection from ``src`` to ``dst`` on ``port`` is allowed."""
        if isinstance(src, Node) or isinstance(dst, Node):
            return True
        if isinstance(src, Pod) and not self._admits(src, "Egress", dst, dst, port, protocol):
            return False
        return not isinstance(dst, Pod) or self._admits(dst, "Ingress", src, dst, port, protocol)
