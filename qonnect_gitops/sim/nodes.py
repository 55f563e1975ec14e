"""Node objects of a simulated cluster, built from a Cluster file's node shapes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from qonnect_gitops.model.cluster import NodeShape, Taint
from qonnect_gitops.sim.ssa import now_rfc3339

KUBELET_VERSION = "v1.37.0"


def _cpu(millicores: int) -> str:
    return str(millicores // 1000) if millicores % 1000 == 0 else f"{millicores}m"


def _memory(num_bytes: int) -> str:
    # The kubelet reports memory in Ki.
    return f"{num_bytes // 1024}Ki" if num_bytes % 1024 == 0 else str(num_bytes)


def _instance_type(shape: NodeShape) -> str:
    cpu = shape.cpu / 1000
    mem = shape.memory / 2**30
    cpu_text = f"{cpu:g}"
    return f"sim-{shape.arch}-{cpu_text}c-{mem:g}gi"


def node_names(cluster: str, shapes: Sequence[NodeShape]) -> list[str]:
    """``<cluster>-node-1`` ... in shape order."""
    return [f"{cluster}-node-{i + 1}" for i in range(sum(s.count for s in shapes))]


def build_nodes(cluster: str, region: str, shapes: Sequence[NodeShape], taints: Sequence[Taint] = (),
                distribution: str = "k8s") -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """``(object, status)`` per node: the Node to create and the status its kubelet posts.

    Zones spread nodes over ``<region>-a``, ``-b``, ``-c`` in turn; capacity equals
    allocatable (the Cluster file declares what workloads can use).
    """
    names = iter(node_names(cluster, shapes))
    out = []
    index = 0
    version = KUBELET_VERSION + ("+k3s1" if distribution == "k3s" else "")
    for shape in shapes:
        for _ in range(shape.count):
            name = next(names)
            zone = f"{region}-{'abc'[index % 3]}"
            labels = {
                "kubernetes.io/arch": shape.arch, "kubernetes.io/os": "linux", "kubernetes.io/hostname": name,
                "beta.kubernetes.io/arch": shape.arch, "beta.kubernetes.io/os": "linux",
                "topology.kubernetes.io/region": region, "topology.kubernetes.io/zone": zone,
                "node.kubernetes.io/instance-type": _instance_type(shape),
            }
            obj: dict[str, Any] = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}
            if taints:
                obj["spec"] = {"taints": [{"key": t.key, "value": t.value, "effect": t.effect} if t.value
                                          else {"key": t.key, "effect": t.effect} for t in taints]}
            resources = {"cpu": _cpu(shape.cpu), "memory": _memory(shape.memory), "pods": str(shape.pods),
                         "ephemeral-storage": "100Gi"}
            status = {
                "capacity": dict(resources), "allocatable": dict(resources),
                "conditions": ready_conditions(True),
                "addresses": [{"type": "InternalIP", "address": f"192.168.{index // 250}.{index % 250 + 10}"},
                              {"type": "Hostname", "address": name}],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                "nodeInfo": {
                    "machineID": f"{index:032x}", "systemUUID": f"sim-{cluster}-{index}", "bootID": f"boot-{index}",
                    "kernelVersion": "6.8.0-sim", "osImage": "qonnect simulated node",
                    "containerRuntimeVersion": "containerd://2.0.0-sim", "kubeletVersion": version,
                    "kubeProxyVersion": version, "operatingSystem": "linux", "architecture": shape.arch,
                },
            }
            out.append((obj, status))
            index += 1
    return out


def ready_conditions(ready: bool) -> list[dict[str, Any]]:
    """A kubelet's node conditions: healthy, or stopped posting (Ready Unknown) when ``ready`` is False."""
    now = now_rfc3339()

    def cond(kind: str, healthy_status: str, reason: str, message: str) -> dict[str, Any]:
        if ready:
            status, why, text = healthy_status, reason, message
        else:
            status, why, text = "Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status."
        return {"type": kind, "status": status, "lastHeartbeatTime": now, "lastTransitionTime": now,
                "reason": why, "message": text}

    return [
        cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        cond("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
    ]


def node_ready(node: dict[str, Any]) -> bool:
    """Whether the node's Ready condition is True."""
    for c in (node.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return bool(c.get("status") == "True")
    return False
