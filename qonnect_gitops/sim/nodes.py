"""Node objects of a simulated cluster, built from a Cluster file's node shapes."""

from __future__ import annotations

import bisect
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
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
    """``<cluster>-node-1`` ... in shape order (small clusters only: a pool may hold millions)."""
    return [f"{cluster}-node-{i + 1}" for i in range(sum(s.count for s in shapes))]


def _internal_ip(index: int) -> str:
    if index < 250 * 256:
        return f"192.168.{index // 250}.{index % 250 + 2}"
    # Beyond 64,000 nodes: the shared address space 100.64.0.0/10 holds four million more.
    return f"100.{64 + (index >> 16)}.{(index >> 8) & 255}.{index & 255}"


def build_node(cluster: str, region: str, shape: NodeShape, index: int, taints: Sequence[Taint] = (),
               distribution: str = "k8s") -> tuple[dict[str, Any], dict[str, Any]]:
    """``(object, status)`` of node number ``index`` (0-based across the cluster's shapes).

    Zones spread nodes over ``<region>-a``, ``-b``, ``-c`` in turn; capacity equals
    allocatable (the Cluster file declares what workloads can use).
    """
    version = KUBELET_VERSION + ("+k3s1" if distribution == "k3s" else "")
    name = f"{cluster}-node-{index + 1}"
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
        "addresses": [{"type": "InternalIP", "address": _internal_ip(index)}, {"type": "Hostname", "address": name}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {
            "machineID": f"{index:032x}", "systemUUID": f"sim-{cluster}-{index}", "bootID": f"boot-{index}",
            "kernelVersion": "6.8.0-sim", "osImage": "qonnect simulated node",
            "containerRuntimeVersion": "containerd://2.0.0-sim", "kubeletVersion": version,
            "kubeProxyVersion": version, "operatingSystem": "linux", "architecture": shape.arch,
        },
    }
    return obj, status


def build_nodes(cluster: str, region: str, shapes: Sequence[NodeShape], taints: Sequence[Taint] = (),
                distribution: str = "k8s") -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """``(object, status)`` per node of every shape (``build_node`` for each)."""
    out = []
    index = 0
    for shape in shapes:
        for _ in range(shape.count):
            out.append(build_node(cluster, region, shape, index, taints, distribution))
            index += 1
    return out


@dataclass
class PoolShape:
    """One node shape of a pool: ``count`` identical nodes from ``first`` (0-based index) on."""

    shape: NodeShape
    first: int
    count: int
    template: dict[str, Any]  # the stored form of the shape's first node


class NodePool:
    """The nodes of a cluster's shapes as one virtual collection: a million nodes cost a few objects.

    Nodes are numbered ``<cluster>-node-1`` ... across the shapes. A node is generated
    from its shape's template when read; a write stores it for real (the store then
    serves the stored one), a delete leaves a tombstone. Lists page over the pool in
    natural order without generating more than the page.
    """

    def __init__(self, cluster: str, region: str, taints: Sequence[Taint], distribution: str) -> None:
        self.cluster, self.region, self.taints, self.distribution = cluster, region, tuple(taints), distribution
        self.prefix = f"{cluster}-node-"
        self.shapes: list[PoolShape] = []
        self._state: dict[int, str] = {}  # index -> "stored" | "deleted"
        self._excluded: list[int] = []  # sorted indices that are stored or deleted

    @property
    def total(self) -> int:
        """How many nodes the shapes declare (stored and deleted ones included)."""
        return sum(p.count for p in self.shapes)

    def add_shape(self, shape: NodeShape, template: dict[str, Any]) -> None:
        """Append ``shape.count`` nodes whose stored form follows ``template`` (the first one's)."""
        self.shapes.append(PoolShape(shape, self.total, shape.count, template))

    def shape_of(self, index: int) -> PoolShape | None:
        """The shape node ``index`` belongs to."""
        for p in self.shapes:
            if p.first <= index < p.first + p.count:
                return p
        return None

    def index_of(self, name: str) -> int | None:
        """The 0-based index of a pool node's name, or None."""
        if not name.startswith(self.prefix):
            return None
        digits = name[len(self.prefix):]
        if not digits.isdigit() or digits.startswith("0"):
            return None
        index = int(digits) - 1
        return index if 0 <= index < self.total else None

    def generate(self, index: int) -> dict[str, Any]:
        """Node ``index`` as the store would hold it."""
        pool = self.shape_of(index)
        assert pool is not None
        obj, status = build_node(self.cluster, self.region, pool.shape, index, self.taints, self.distribution)
        t = pool.template
        name = obj["metadata"]["name"]
        meta = dict(t["metadata"], name=name, labels=obj["metadata"]["labels"],
                    uid=str(uuid.uuid5(uuid.NAMESPACE_URL, f"qonnect-sim/{self.cluster}/nodes/{name}")))
        node_status = dict(t["status"], addresses=status["addresses"], nodeInfo=status["nodeInfo"])
        return dict(t, metadata=meta, status=node_status)

    # ------------------------------------------------------------------ VirtualCollection

    def get(self, name: str) -> dict[str, Any] | None:
        """The generated node, if ``name`` is a virtual member."""
        index = self.index_of(name)
        if index is None or index in self._state:
            return None
        return self.generate(index)

    def owns(self, name: str) -> bool:
        """Whether ``name`` is one of the pool's nodes."""
        return self.index_of(name) is not None

    def set_state(self, name: str, state: str | None) -> None:
        """Mark a node stored, deleted, or virtual again."""
        index = self.index_of(name)
        if index is None:
            return
        was = index in self._state
        if state is None:
            self._state.pop(index, None)
            if was:
                self._excluded.remove(index)
            return
        self._state[index] = state
        if not was:
            bisect.insort(self._excluded, index)

    def _key(self, index: int) -> tuple[Any, ...]:
        return ("", self.prefix, index + 1, f"{self.prefix}{index + 1}")

    def _first_after(self, after: tuple[Any, ...] | None) -> int:
        lo, hi = 0, self.total
        if after is None:
            return 0
        while lo < hi:  # the first index whose sort key is greater than ``after``
            mid = (lo + hi) // 2
            if self._key(mid) > after:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def scan(self, after: tuple[Any, ...] | None) -> Iterator[tuple[tuple[Any, ...], dict[str, Any]]]:
        """Virtual nodes in natural order after ``after``."""
        for index in range(self._first_after(after), self.total):
            if index not in self._state:
                yield self._key(index), self.generate(index)

    def count_after(self, after: tuple[Any, ...] | None) -> int:
        """How many virtual nodes sort after ``after``."""
        start = self._first_after(after)
        excluded = len(self._excluded) - bisect.bisect_left(self._excluded, start)
        return self.total - start - excluded

    def count(self) -> int:
        """How many nodes are virtual (neither stored nor deleted)."""
        return self.total - len(self._excluded)

    def is_virtual(self, index: int) -> bool:
        """Whether node ``index`` is generated on read (neither stored nor deleted)."""
        return index not in self._state

    def excluded(self) -> list[int]:
        """Indices of stored or deleted nodes, ascending."""
        return list(self._excluded)

    def shape_number(self, index: int) -> int:
        """Which shape (0-based, in Cluster file order) node ``index`` belongs to."""
        for n, p in enumerate(self.shapes):
            if p.first <= index < p.first + p.count:
                return n
        raise IndexError(index)


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
