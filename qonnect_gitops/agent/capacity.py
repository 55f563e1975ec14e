"""Capacity per node: allocatable minus what bound, non-terminated Pods request."""

from __future__ import annotations

from typing import Any

from qonnect_gitops.agent.kube import Kube
from qonnect_gitops.model.quantity import to_bytes, to_millicores
from qonnect_gitops.model.report import MAX_NODES, NodeCapacity


def _requests(pod: dict[str, Any]) -> tuple[int, int]:
    """Effective requests of a pod: max(sum of containers, largest init container) + overhead."""
    spec = pod.get("spec") or {}

    def req(c: dict[str, Any]) -> tuple[int, int]:
        r = (c.get("resources") or {}).get("requests") or {}
        return to_millicores(r.get("cpu", 0)), to_bytes(r.get("memory", 0))

    cpu = mem = 0
    for c in spec.get("containers") or []:
        a, b = req(c)
        cpu, mem = cpu + a, mem + b
    for c in spec.get("initContainers") or []:
        a, b = req(c)
        cpu, mem = max(cpu, a), max(mem, b)
    overhead = spec.get("overhead") or {}
    return cpu + to_millicores(overhead.get("cpu", 0)), mem + to_bytes(overhead.get("memory", 0))


def node_capacity(nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> list[NodeCapacity]:
    used: dict[str, tuple[int, int]] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        phase = (pod.get("status") or {}).get("phase")
        if not node or phase in ("Succeeded", "Failed"):
            continue
        cpu, mem = _requests(pod)
        u = used.get(node, (0, 0))
        used[node] = (u[0] + cpu, u[1] + mem)
    out = []
    for node in nodes[:MAX_NODES]:
        meta, status = node.get("metadata") or {}, node.get("status") or {}
        alloc = status.get("allocatable") or status.get("capacity") or {}
        cpu, mem = to_millicores(alloc.get("cpu", 0)), to_bytes(alloc.get("memory", 0))
        ucpu, umem = used.get(meta["name"], (0, 0))
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
        arch = (meta.get("labels") or {}).get("kubernetes.io/arch", "amd64")
        # MilliCPU reads a bare number as cores: millicores go in as a quantity string.
        out.append(NodeCapacity.model_validate({
            "name": meta["name"], "arch": arch if arch in ("amd64", "arm64") else "amd64", "ready": ready,
            "allocatable_cpu": f"{cpu}m", "allocatable_memory": mem,
            "free_cpu": f"{max(0, cpu - ucpu)}m", "free_memory": max(0, mem - umem)}))
    return out


def read_capacity(kube: Kube) -> list[NodeCapacity]:
    nodes = kube.list(kube.resource("v1", "Node"))
    pods = kube.list(kube.resource("v1", "Pod")) if nodes else []
    return node_capacity(nodes, pods)
