"""The scheduler of a simulated cluster, and what every node carries (its Pods and their requests).

``NodeUsage`` is kept up to date from Pod events (never by listing Pods), so placing a
Pod costs the same in an empty cluster as in a full one. Nodes of a pool (a shape of
identical nodes, see ``nodes.NodePool``) are not looked at one by one: within a
shape and zone every node without Pods is the same node, so one stands for all of
them (with its count, for the scheduler's message), and the nodes that carry Pods
are looked at only when no empty node fits. Pods pinned to named nodes (hostname
selectors, ``matchFields`` on ``metadata.name``) look at those nodes only.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from qonnect_gitops.logs import get_logger
from qonnect_gitops.sim import scheduling
from qonnect_gitops.sim.admission import qos_class
from qonnect_gitops.sim.control.base import (
    PODS,
    Context,
    condition,
    key_of,
    meta,
    pod_active,
)
from qonnect_gitops.sim.nodes import NodePool
from qonnect_gitops.sim.store import NODES, Event, ObjKey, natural_key

log = get_logger(__name__)

PVCS = ("", "persistentvolumeclaims")
HOSTNAME = "kubernetes.io/hostname"
SELECTED_NODE = "volume.kubernetes.io/selected-node"


@dataclass
class Use:
    """What the Pods bound to one node request."""

    cpu: int = 0
    memory: int = 0
    pods: set[ObjKey] = field(default_factory=set)


class NodeUsage:
    """Pods per node and their requests, maintained from Pod events."""

    def __init__(self) -> None:
        self.nodes: dict[str, Use] = {}
        self._placed: dict[ObjKey, tuple[str, scheduling.Requests]] = {}

    def account(self, key: ObjKey, pod: dict[str, Any] | None) -> bool:
        """Record what ``pod`` (None: gone) takes now; True when a node has more room than before."""
        node = (pod.get("spec") or {}).get("nodeName") if pod is not None and pod_active(pod) else None
        new = (node, scheduling.pod_requests(pod)) if node and pod is not None else None
        old = self._placed.get(key)
        if old == new:
            return False
        if old is not None:
            use = self.nodes[old[0]]
            use.cpu -= old[1].cpu
            use.memory -= old[1].memory
            use.pods.discard(key)
            if not use.pods:
                del self.nodes[old[0]]
            del self._placed[key]
        if new is not None:
            use = self.nodes.setdefault(new[0], Use())
            use.cpu += new[1].cpu
            use.memory += new[1].memory
            use.pods.add(key)
            self._placed[key] = new
        return old is not None

    def room(self, node: dict[str, Any]) -> scheduling.NodeRoom:
        """The node's allocatable and what its Pods take."""
        room = scheduling.NodeRoom.of(node)
        use = self.nodes.get(meta(node)["name"])
        if use is not None:
            room.used = scheduling.Requests(use.cpu, use.memory)
            room.count = len(use.pods)
        return room

    def node_of(self, key: ObjKey) -> str | None:
        """The node the Pod ``key`` is accounted on."""
        hit = self._placed.get(key)
        return hit[0] if hit else None

    def pods_on(self, node: str) -> list[ObjKey]:
        """Keys of the active Pods bound to ``node``."""
        use = self.nodes.get(node)
        return sorted(use.pods) if use else []

    def reset(self) -> None:
        """Forget everything (before a full resync)."""
        self.nodes.clear()
        self._placed.clear()


class _Class:
    """The nodes of one pool shape in one zone: indices ``start, start + 3, ...`` below ``end``."""

    def __init__(self, start: int, end: int) -> None:
        self.start, self.end = start, end
        self.next_new = start  # every index below is busy, stored, or waits in ``freed``
        self.freed: list[int] = []  # a heap of indices below ``next_new`` that lost their last Pod
        self.busy: set[int] = set()  # indices with Pods

    def size(self) -> int:
        return len(range(self.start, self.end, 3))


def pinned_names(pod: dict[str, Any]) -> set[str] | None:
    """Node names a Pod is restricted to by a hostname selector or ``metadata.name`` field, or None."""
    spec = pod.get("spec") or {}
    hostname = (spec.get("nodeSelector") or {}).get(HOSTNAME)
    names: set[str] | None = {hostname} if hostname else None
    terms = ((((spec.get("affinity") or {}).get("nodeAffinity") or {})
              .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or [])
    if terms:
        union: set[str] = set()
        for term in terms:
            pins = [set(e.get("values") or []) for e in (term.get("matchExpressions") or [])
                    if e.get("key") == HOSTNAME and e.get("operator") == "In"]
            pins += [set(e.get("values") or []) for e in (term.get("matchFields") or [])
                     if e.get("key") == "metadata.name" and e.get("operator") == "In"]
            if not pins:
                return names  # a term that does not pin: any node may match it
            union |= set.intersection(*pins)
        names = union if names is None else names & union
    return names


class Scheduler:
    """Binds pending Pods (default scheduler) to the least allocated node that passes the filters."""

    name = "scheduler"

    def __init__(self, ctx: Context, usage: NodeUsage) -> None:
        self.ctx = ctx
        self.usage = usage
        self.rt_pod = ctx.rt("", "v1", "pods")
        self.rt_pvc = ctx.rt("", "v1", "persistentvolumeclaims")
        self.unschedulable: set[ObjKey] = set()
        self._classes: dict[tuple[int, int], _Class] = {}

    # ------------------------------------------------------------------ events

    def keys(self, ev: Event) -> Iterable[ObjKey]:
        """Pending Pods; every unschedulable Pod again when room or nodes appear."""
        if ev.gr == PODS:
            key = key_of(ev.obj)
            pod = None if ev.type == "DELETED" else ev.obj
            freed = self._account(key, pod)
            out: list[ObjKey] = []
            if pod is None:
                self.unschedulable.discard(key)
            elif self._pending(pod):
                out.append(key)
            if freed:
                out.extend(self.unschedulable)
            return out
        if ev.gr in (NODES, PVCS, ("storage.k8s.io", "storageclasses")):
            if ev.gr == NODES and ev.type == "ADDED" and self._pool() is not None:
                self._classes.clear()  # cheap to rebuild; a stored pool node changes what is fresh
            return list(self.unschedulable)
        return ()

    def all_keys(self) -> Iterable[ObjKey]:
        """Every pending Pod (and the node usage rebuilt from every Pod)."""
        self.usage.reset()
        self._classes.clear()
        out = []
        for p in self.ctx.store.list(PODS):
            self.usage.account(key_of(p), p)
            if self._pending(p):
                out.append(key_of(p))
        return out

    def _account(self, key: ObjKey, pod: dict[str, Any] | None) -> bool:
        before = self.usage.node_of(key)
        freed = self.usage.account(key, pod)
        for node in {before, self.usage.node_of(key)}:
            self._track(node)
        return freed

    @staticmethod
    def _pending(pod: dict[str, Any]) -> bool:
        spec = pod.get("spec") or {}
        return pod_active(pod) and not spec.get("nodeName") and \
            spec.get("schedulerName", "default-scheduler") == "default-scheduler"

    # ------------------------------------------------------------------ pools

    def _pool(self) -> NodePool | None:
        pool = self.ctx.store.virtual.get(NODES)
        return pool if isinstance(pool, NodePool) else None

    def _classes_of(self, pool: NodePool) -> dict[tuple[int, int], _Class]:
        if not self._classes:
            for shape_no, shape in enumerate(pool.shapes):
                for zone in range(3):
                    start = shape.first + ((zone - shape.first) % 3)
                    self._classes[(shape_no, zone)] = _Class(start, shape.first + shape.count)
            for node in self.usage.nodes:
                self._track(node)
        return self._classes

    def _track(self, node: str | None) -> None:
        """Keep a pool node's class up to date with whether the node carries Pods."""
        pool = self._pool()
        index = pool.index_of(node) if pool is not None and node else None
        if index is None or pool is None or not self._classes:
            return
        cls = self._classes[(pool.shape_number(index), index % 3)]
        if node in self.usage.nodes:
            cls.busy.add(index)
        elif index in cls.busy:
            cls.busy.discard(index)
            if index < cls.next_new:
                heapq.heappush(cls.freed, index)

    @staticmethod
    def _fresh(pool: NodePool, cls: _Class) -> int | None:
        """The lowest index of the class with no Pods that is not stored (the class's stand-in)."""
        def taken(i: int) -> bool:
            return i in cls.busy or not pool.is_virtual(i)

        while cls.freed and taken(cls.freed[0]):
            heapq.heappop(cls.freed)
        while cls.next_new < cls.end and taken(cls.next_new):
            cls.next_new += 3
        candidates = [i for i in (cls.freed[0] if cls.freed else None,
                                  cls.next_new if cls.next_new < cls.end else None) if i is not None]
        return min(candidates) if candidates else None

    # ------------------------------------------------------------------ scheduling

    def _claims_problem(self, pod: dict[str, Any]) -> str | None:
        ns = meta(pod).get("namespace", "")
        for vol in (pod.get("spec") or {}).get("volumes") or []:
            claim = (vol.get("persistentVolumeClaim") or {}).get("claimName")
            if not claim:
                continue
            pvc = self.ctx.get(PVCS, (ns, claim))
            if pvc is None:
                return f'persistentvolumeclaim "{claim}" not found'
            if (pvc.get("status") or {}).get("phase") == "Bound":
                continue
            cls_name = (pvc.get("spec") or {}).get("storageClassName")
            cls = self.ctx.get(("storage.k8s.io", "storageclasses"), ("", cls_name)) if cls_name else None
            if cls is None or cls.get("volumeBindingMode") != "WaitForFirstConsumer":
                return "pod has unbound immediate PersistentVolumeClaims"
        return None

    def sync(self, key: ObjKey) -> None:
        """Bind one pending Pod, or mark it Unschedulable with the scheduler's message."""
        pod = self.ctx.get(PODS, key)
        if pod is None or not self._pending(pod):
            self.unschedulable.discard(key)
            return
        store = self.ctx.store
        total = store.size(NODES)
        problem = self._claims_problem(pod)
        if problem is not None:
            self._unschedulable(pod, f"0/{total} nodes are available: {problem}." if total else
                                "no nodes available to schedule pods")
            return
        req = scheduling.pod_requests(pod)
        reasons: Counter[str] = Counter()
        best: list[Any] = []  # [free share, natural key, node]

        def evaluate(node: dict[str, Any], count: int) -> bool:
            room = self.usage.room(node)
            why = scheduling.node_reasons(pod, req, room)
            if why:
                for r in why:
                    reasons[r] += count
                return False
            # Least allocated: the node left with the largest free share of CPU and memory.
            free = ((room.cpu - room.used.cpu - req.cpu) / room.cpu if room.cpu else 0) + \
                ((room.memory - room.used.memory - req.memory) / room.memory if room.memory else 0)
            rank = natural_key(meta(node)["name"])
            if not best or free > best[0] or (free == best[0] and rank < best[1]):
                best[:] = [free, rank, node]
            return True

        pinned = pinned_names(pod)
        if pinned is not None:
            found = 0
            for name in sorted(pinned, key=natural_key):
                node = store.get(NODES, "", name)
                if node is not None:
                    found += 1
                    evaluate(node, 1)
            if total - found:
                reasons["node(s) didn't match Pod's node affinity/selector"] += total - found
        else:
            for node in store.list(NODES):  # stored nodes: outside pools, or pool nodes something changed
                evaluate(node, 1)
            pool = self._pool()
            if pool is not None:
                excluded = Counter((pool.shape_number(i), i % 3) for i in pool.excluded())
                for cls_id, cls in self._classes_of(pool).items():
                    busy_stored = sum(1 for i in cls.busy if not pool.is_virtual(i))
                    fresh_count = cls.size() - excluded[cls_id] - (len(cls.busy) - busy_stored)
                    fresh = self._fresh(pool, cls) if fresh_count > 0 else None
                    if fresh is not None and evaluate(pool.generate(fresh), fresh_count):
                        continue  # an empty node scores at least as well as the busy ones of its class
                    for i in sorted(cls.busy):
                        if pool.is_virtual(i):
                            evaluate(pool.generate(i), 1)
        if not best:
            self._unschedulable(pod, scheduling.unschedulable_message(total, reasons))
            return
        self._bind(pod, best[2])

    def _unschedulable(self, pod: dict[str, Any], message: str) -> None:
        self.unschedulable.add(key_of(pod))
        status = dict(pod.get("status") or {})
        old = status.get("conditions") or []
        cond = condition(old, "PodScheduled", "False", "Unschedulable", message, probe=True)
        status["phase"] = "Pending"
        status["conditions"] = [cond, *[c for c in old if c.get("type") != "PodScheduled"]]
        status.setdefault("qosClass", qos_class(pod))
        if status != (pod.get("status") or {}):
            log.info("sim_pod_unschedulable", cluster=self.ctx.core.cluster_name,
                     pod=f"{meta(pod)['namespace']}/{meta(pod)['name']}", message=message)
            self.ctx.set_status(self.rt_pod, pod, status, "kube-scheduler")
        self.ctx.event(pod, "FailedScheduling", message, "default-scheduler", warning=True)

    def _bind(self, pod: dict[str, Any], node: dict[str, Any]) -> None:
        name = meta(node)["name"]
        new = dict(pod, spec=dict(pod.get("spec") or {}, nodeName=name))
        bound = self.ctx.replace(self.rt_pod, new, "kube-scheduler")
        if bound is None:
            return
        self.unschedulable.discard(key_of(pod))
        self._account(key_of(bound), bound)
        old = (bound.get("status") or {}).get("conditions") or []
        status = dict(bound.get("status") or {}, phase="Pending", qosClass=(bound.get("status") or {}).get(
            "qosClass") or qos_class(bound), conditions=[
            condition(old, "PodScheduled", "True", "", "", probe=True),
            *[c for c in old if c.get("type") != "PodScheduled"]])
        self.ctx.set_status(self.rt_pod, bound, status, "kube-scheduler")
        self._select_node_for_claims(bound, name)
        ns = meta(pod)["namespace"]
        self.ctx.event(pod, "Scheduled", f"Successfully assigned {ns}/{meta(pod)['name']} to {name}",
                       "default-scheduler")
        log.debug("sim_pod_bound", cluster=self.ctx.core.cluster_name, pod=f"{ns}/{meta(pod)['name']}", node=name)

    def _select_node_for_claims(self, pod: dict[str, Any], node: str) -> None:
        """Claims of a WaitForFirstConsumer class learn the chosen node (their provisioner waits for it)."""
        ns = meta(pod)["namespace"]
        for vol in (pod.get("spec") or {}).get("volumes") or []:
            claim = (vol.get("persistentVolumeClaim") or {}).get("claimName")
            pvc = self.ctx.get(PVCS, (ns, claim)) if claim else None
            if pvc is None or (pvc.get("status") or {}).get("phase") == "Bound":
                continue
            annotations = dict(meta(pvc).get("annotations") or {})
            if SELECTED_NODE not in annotations:
                annotations[SELECTED_NODE] = node
                self.ctx.set_annotations(self.rt_pvc, pvc, annotations, "kube-scheduler")
