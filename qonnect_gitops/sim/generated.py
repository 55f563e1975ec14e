"""Read-only kinds the simulated cluster computes when asked: resource metrics and component statuses.

``metrics.k8s.io/v1beta1`` (what metrics-server serves, and ``kubectl top`` reads):
a running container uses what it requests (1m of CPU and 4Mi of memory when it
requests nothing); a node uses what its running Pods use plus 100m and 512Mi for
the system. ``ComponentStatus``: the scheduler, the controller manager and etcd,
all healthy.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from qonnect_gitops.model.quantity import to_bytes, to_millicores
from qonnect_gitops.sim.ssa import now_rfc3339
from qonnect_gitops.sim.store import NODES, Store

PODS = ("", "pods")
SYSTEM_CPU_M, SYSTEM_MEMORY = 100, 512 * 2**20
IDLE_CPU_M, IDLE_MEMORY = 1, 4 * 2**20
COMPONENTS = ("controller-manager", "etcd-0", "scheduler")


def _container_usage(c: dict[str, Any]) -> tuple[int, int]:
    req = ((c.get("resources") or {}).get("requests") or {})
    try:
        cpu = to_millicores(req["cpu"]) if "cpu" in req else IDLE_CPU_M
        memory = to_bytes(req["memory"]) if "memory" in req else IDLE_MEMORY
    except ValueError:
        cpu, memory = IDLE_CPU_M, IDLE_MEMORY
    return cpu, memory


def _usage(cpu_m: int, memory: int) -> dict[str, str]:
    return {"cpu": f"{cpu_m * 1_000_000}n", "memory": f"{memory // 1024}Ki"}


def _running(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running" and not (pod.get("metadata") or {}).get(
        "deletionTimestamp")


def pod_metrics(pod: dict[str, Any]) -> dict[str, Any] | None:
    """PodMetrics of a running Pod (None for a Pod that is not running)."""
    if not _running(pod):
        return None
    meta = pod.get("metadata") or {}
    containers = [{"name": c.get("name"), "usage": _usage(*_container_usage(c))}
                  for c in (pod.get("spec") or {}).get("containers") or []]
    return {"kind": "PodMetrics", "apiVersion": "metrics.k8s.io/v1beta1",
            "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace"),
                         "creationTimestamp": now_rfc3339(), "labels": dict(meta.get("labels") or {})},
            "timestamp": now_rfc3339(), "window": "10s", "containers": containers}


def node_metrics(store: Store, node: dict[str, Any]) -> dict[str, Any]:
    """NodeMetrics of a node: its running Pods' usage plus the system's."""
    name = (node.get("metadata") or {}).get("name")
    cpu, memory = SYSTEM_CPU_M, SYSTEM_MEMORY
    for _, pod in store.scan(PODS):
        if (pod.get("spec") or {}).get("nodeName") == name and _running(pod):
            for c in (pod.get("spec") or {}).get("containers") or []:
                c_cpu, c_mem = _container_usage(c)
                cpu, memory = cpu + c_cpu, memory + c_mem
    return {"kind": "NodeMetrics", "apiVersion": "metrics.k8s.io/v1beta1",
            "metadata": {"name": name, "creationTimestamp": now_rfc3339(),
                         "labels": dict((node.get("metadata") or {}).get("labels") or {})},
            "timestamp": now_rfc3339(), "window": "10s", "usage": _usage(cpu, memory)}


def metrics(store: Store, plural: str, ns: str | None) -> Iterator[dict[str, Any]]:
    """NodeMetrics (``nodes``) or PodMetrics (``pods``, in ``ns`` or everywhere), in list order."""
    with store.lock:
        if plural == "nodes":
            nodes = [n for _, n in store.scan(NODES)]
            used: dict[str, list[dict[str, Any]]] = {}
            for _, pod in store.scan(PODS):
                node = (pod.get("spec") or {}).get("nodeName")
                if node and _running(pod):
                    used.setdefault(node, []).append(pod)
            for n in nodes:
                name = str((n.get("metadata") or {}).get("name"))
                cpu, memory = SYSTEM_CPU_M, SYSTEM_MEMORY
                for pod in used.get(name, []):
                    for c in (pod.get("spec") or {}).get("containers") or []:
                        c_cpu, c_mem = _container_usage(c)
                        cpu, memory = cpu + c_cpu, memory + c_mem
                out = node_metrics(Store(), n)
                out["usage"] = _usage(cpu, memory)
                yield out
            return
        pods = [p for _, p in store.scan(PODS, ns)]
    for p in pods:
        m = pod_metrics(p)
        if m is not None:
            yield m


def component_statuses() -> list[dict[str, Any]]:
    """The ComponentStatus list (``kubectl get cs``)."""
    return [{"kind": "ComponentStatus", "apiVersion": "v1", "metadata": {"name": name},
             "conditions": [{"type": "Healthy", "status": "True", "message": "ok"}]} for name in COMPONENTS]
