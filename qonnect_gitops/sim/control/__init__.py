"""The control plane of a simulated cluster (in the spirit of KWOK): controllers, a scheduler, a fake kubelet.

One thread per cluster. Like real controllers it is driven by changes, not by
listing: it reads the store's event log since the last change it saw, hands each
event to every controller, which names the keys the event concerns (a ReplicaSet's
Deployment, the Services selecting a Pod...), and syncs only those keys. So the
work a write causes does not grow with the number of objects the cluster holds. A
full resync (every key) happens at start and when the event log moved on further
than the thread could follow. Timers (a Pod's start-up delay, a back-off) wake the
thread at the right moment; an idle cluster does no work at all.

Controllers, in the order a pass runs them: Deployments, ReplicaSets,
ReplicationControllers, StatefulSets, DaemonSets, Jobs, volumes (claims and
provisioning), namespaces (default ServiceAccount and root CA), the scheduler,
the kubelet, Services (Endpoints, EndpointSlices, load balancers). Another
controller is one more class with ``keys``, ``all_keys`` and ``sync``
(``Controller``), registered with ``Controllers.add``.
"""

from __future__ import annotations

import copy
import heapq
import itertools
import threading
import time

from qonnect_gitops.logs import get_logger
from qonnect_gitops.sim import scheduling
from qonnect_gitops.sim.api import ApiCore
from qonnect_gitops.sim.control.base import (
    PODS,
    Context,
    Controller,
    meta,
    template_hash,
)
from qonnect_gitops.sim.control.kubelet import Kubelet
from qonnect_gitops.sim.control.namespaces import Namespaces
from qonnect_gitops.sim.control.scheduler import NodeUsage, Scheduler
from qonnect_gitops.sim.control.services import Services
from qonnect_gitops.sim.control.storage import Volumes
from qonnect_gitops.sim.control.workloads import (
    DaemonSets,
    Deployments,
    Jobs,
    ReplicaSets,
    StatefulSets,
)
from qonnect_gitops.sim.nodes import ready_conditions
from qonnect_gitops.sim.ssa import now_rfc3339
from qonnect_gitops.sim.store import NODES, Expired, ObjKey

__all__ = ["Controller", "Controllers", "template_hash"]

log = get_logger(__name__)

MAX_PASSES = 25  # passes per round before the loop looks at timers and stopping again


class Controllers:
    """The in-process control plane of one simulated cluster (see the module docstring)."""

    def __init__(self, core: ApiCore, startup_delay: float = 1.0) -> None:
        self.core = core
        self.store = core.store
        self.startup_delay = startup_delay
        self._timers: list[tuple[float, int, str, ObjKey]] = []
        self._tick = itertools.count()
        self.ctx = Context(core, startup_delay, self._schedule_timer)
        self.usage = NodeUsage()
        self.controllers: list[Controller] = []
        self._queues: dict[str, dict[ObjKey, None]] = {}
        self._seen = -1  # the last resourceVersion whose events were handed out; -1: resync first
        for c in (Deployments(self.ctx), ReplicaSets(self.ctx), ReplicaSets(self.ctx, legacy=True),
                  StatefulSets(self.ctx), DaemonSets(self.ctx), Jobs(self.ctx), Volumes(self.ctx),
                  Namespaces(self.ctx), Scheduler(self.ctx, self.usage), Kubelet(self.ctx, self.usage),
                  Services(self.ctx)):
            self.add(c)
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.rounds = 0  # how many times the loop woke up and reconciled (tests check idleness)
        self.syncs = 0  # keys synced so far, all controllers (tests check the work a write causes)

    def add(self, controller: Controller) -> None:
        """Register another controller (it runs after the ones before it in each pass)."""
        with self.store.lock:
            self.controllers.append(controller)
            self._queues[controller.name] = dict.fromkeys(controller.all_keys()) if self._seen >= 0 else {}

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Start the control loop thread."""
        if self._thread is not None:
            return
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=f"sim-ctrl-{self.core.cluster_name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the loop (objects stay as they are)."""
        if self._thread is None:
            return
        with self.store.lock:
            self._stopping = True
            self.store.changed.notify_all()
        self._thread.join(timeout=5)
        self._thread = None

    def _schedule_timer(self, due: float, controller: str, key: ObjKey) -> None:
        heapq.heappush(self._timers, (due, next(self._tick), controller, key))

    def _due_timers(self) -> bool:
        """Queue the keys whose timers ran out; True if any did."""
        now = time.monotonic()
        fired = False
        while self._timers and self._timers[0][0] <= now:
            _, _, name, key = heapq.heappop(self._timers)
            self._queues[name][key] = None
            fired = True
        return fired

    def _idle(self) -> bool:
        return self.store.resource_version == self._seen and not any(self._queues.values())

    def _run(self) -> None:
        while True:
            with self.store.lock:
                if self._stopping:
                    return
                self._due_timers()
                if self._idle():
                    # Sleep until something changes or the next timer is due.
                    wait = self._timers[0][0] - time.monotonic() if self._timers else None
                    self.store.changed.wait(max(0.0, wait) if wait is not None else None)
                    continue
            try:
                self.reconcile()
            except Exception:  # a controller bug must not kill the cluster's control plane
                log.error("sim_controllers_failed", exc_info=True, cluster=self.core.cluster_name)  # noqa: G201
                with self.store.lock:
                    self._seen = self.store.resource_version
                    for q in self._queues.values():
                        q.clear()

    # ------------------------------------------------------------------ the work

    def _absorb(self) -> None:
        """Hand the events since the last look to every controller (caller holds the lock)."""
        if self._seen < 0:
            self._resync()
            return
        try:
            events = self.store.events_after(self._seen)
        except Expired:
            log.info("sim_controllers_resync", cluster=self.core.cluster_name)
            self._resync()
            return
        for ev in events:
            for c in self.controllers:
                queue = self._queues[c.name]
                for key in c.keys(ev):
                    queue[key] = None
            self._seen = ev.rv

    def _resync(self) -> None:
        self._seen = self.store.resource_version
        for c in self.controllers:
            self._queues[c.name].update(dict.fromkeys(c.all_keys()))

    def reconcile(self) -> int:
        """Run passes until nothing is queued; returns the resourceVersion it settled at."""
        self.rounds += 1
        for _ in range(MAX_PASSES):
            with self.store.lock:
                self._absorb()
                self._due_timers()
                if self._idle():
                    return self._seen
            for c in self.controllers:
                with self.store.lock:
                    self._absorb()
                    queue = self._queues[c.name]
                    keys = list(queue)
                    queue.clear()
                for key in keys:
                    with self.store.lock:
                        self.syncs += 1
                        try:
                            c.sync(key)
                        except Exception:
                            log.error("sim_controller_sync_failed", exc_info=True,  # noqa: G201
                                      cluster=self.core.cluster_name, controller=c.name, key="/".join(key))
        # Clients kept writing for the whole round; the loop goes on with the next one at once.
        log.debug("sim_controllers_busy", cluster=self.core.cluster_name, passes=MAX_PASSES)
        return self._seen

    # ------------------------------------------------------------------ node faults

    def fail_node(self, name: str) -> None:
        """The node stops posting status: Ready Unknown, unreachable taints, its Pods deleted (evicted at once)."""
        with self.store.lock:
            node = self.store.get(NODES, "", name)
            if node is None:
                raise KeyError(name)
            rt_node, rt_pod = self.ctx.rt("", "v1", "nodes"), self.ctx.rt("", "v1", "pods")
            now = now_rfc3339()
            spec = copy.deepcopy(node.get("spec") or {})
            taints = [t for t in spec.get("taints") or [] if t.get("key") != scheduling.UNREACHABLE_TAINT]
            taints += [{"key": scheduling.UNREACHABLE_TAINT, "effect": "NoSchedule", "timeAdded": now},
                       {"key": scheduling.UNREACHABLE_TAINT, "effect": "NoExecute", "timeAdded": now}]
            spec["taints"] = taints
            updated = self.ctx.replace(rt_node, dict(node, spec=spec), "node-lifecycle-controller")
            if updated is not None:
                status = dict(updated.get("status") or {}, conditions=ready_conditions(False))
                self.ctx.set_status(rt_node, updated, status, "node-lifecycle-controller")
                self.ctx.event(updated, "NodeNotReady", f"Node {name} status is now: NodeNotReady",
                               "node-controller")
            evicted = 0
            for ns, pod_name in self._pods_on(name):
                pod = self.store.get(PODS, ns, pod_name)
                if pod is not None:
                    self.ctx.event(pod, "NodeNotReady", "Node is not ready", "node-controller", warning=True)
                    self.ctx.delete(rt_pod, pod)
                    evicted += 1
            log.info("sim_node_failed", cluster=self.core.cluster_name, node=name, pods_evicted=evicted)

    def _pods_on(self, node: str) -> list[ObjKey]:
        if self._seen < 0:
            return [(meta(p)["namespace"], meta(p)["name"]) for p in self.store.list(PODS)
                    if (p.get("spec") or {}).get("nodeName") == node]
        self._absorb()
        return self.usage.pods_on(node)

    def recover_node(self, name: str) -> None:
        """The node's kubelet is back: Ready True, unreachable taints removed."""
        with self.store.lock:
            node = self.store.get(NODES, "", name)
            if node is None:
                raise KeyError(name)
            rt_node = self.ctx.rt("", "v1", "nodes")
            spec = copy.deepcopy(node.get("spec") or {})
            spec["taints"] = [t for t in spec.get("taints") or [] if t.get("key") != scheduling.UNREACHABLE_TAINT]
            if not spec["taints"]:
                del spec["taints"]
            updated = self.ctx.replace(rt_node, dict(node, spec=spec), "node-lifecycle-controller")
            if updated is not None:
                status = dict(updated.get("status") or {}, conditions=ready_conditions(True))
                self.ctx.set_status(rt_node, updated, status, "kubelet")
                self.ctx.event(updated, "NodeReady", f"Node {name} status is now: NodeReady", "kubelet", host=name)
            log.info("sim_node_recovered", cluster=self.core.cluster_name, node=name)

