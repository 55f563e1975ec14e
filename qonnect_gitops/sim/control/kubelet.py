"""The fake kubelet: bound Pods start, run, and (when told to) exit, honouring ``restartPolicy``.

A bound Pod shows ``ContainerCreating`` and becomes Running and Ready ``startup_delay``
seconds later. Containers never stop on their own, whatever the restart policy: a
Pod with ``restartPolicy: Never`` runs until deleted, as a real server does with a
process that does not exit. Pods of Jobs exit with code 0 ``startup_delay`` seconds
after they start. Any Pod can be told to exit with the annotations

* ``sim.qonnect.io/exit-after``: seconds after its containers start,
* ``sim.qonnect.io/exit-code``: the exit code (default 0),

and then the restart policy decides: ``Never`` ends the Pod (Succeeded, or Failed for
a non-zero code), ``OnFailure`` ends it on code 0 and restarts it otherwise,
``Always`` restarts it. A restart waits in ``CrashLoopBackOff`` for a back-off that
doubles each time (``startup_delay`` first, five minutes at most), as the kubelet's.
The kubelet reports what it does as Events (Pulled, Created, Started, BackOff).
"""

from __future__ import annotations

import copy
import hashlib
import time
from collections.abc import Iterable
from typing import Any

from qonnect_gitops.sim import nodes as simnodes
from qonnect_gitops.sim.admission import qos_class
from qonnect_gitops.sim.control.base import (
    PODS,
    Context,
    condition,
    controller_ref,
    key_of,
    meta,
    terminating,
)
from qonnect_gitops.sim.control.scheduler import NodeUsage
from qonnect_gitops.sim.ssa import now_rfc3339
from qonnect_gitops.sim.store import NODES, Event, ObjKey

EXIT_AFTER = "sim.qonnect.io/exit-after"
EXIT_CODE = "sim.qonnect.io/exit-code"
MAX_BACKOFF = 300.0
PVCS = ("", "persistentvolumeclaims")


def exit_plan(pod: dict[str, Any], startup_delay: float) -> tuple[float, int] | None:
    """``(seconds after start, exit code)`` when the Pod's containers exit, or None (they run forever)."""
    annotations = meta(pod).get("annotations") or {}
    after, code = annotations.get(EXIT_AFTER), annotations.get(EXIT_CODE, "0")
    try:
        exit_code = int(code)
    except ValueError:
        exit_code = 1
    if after is not None:
        try:
            return max(0.0, float(after)), exit_code
        except ValueError:
            return None
    if (controller_ref(pod) or {}).get("kind") == "Job":
        return startup_delay, exit_code
    return None


class Kubelet:
    """Pod lifecycle on Ready nodes (one simulated kubelet for every node)."""

    name = "kubelet"

    def __init__(self, ctx: Context, usage: NodeUsage) -> None:
        self.ctx = ctx
        self.usage = usage
        self.rt_pod = ctx.rt("", "v1", "pods")
        self._next_ip = 0
        # pod uid -> monotonic time: start-up ends, the containers exit, a back-off ends
        self._ready_at: dict[str, float] = {}
        self._exit_at: dict[str, float] = {}
        self._restart_at: dict[str, float] = {}

    def keys(self, ev: Event) -> Iterable[ObjKey]:
        """Bound Pods; the Pods of a node whose readiness changed; Pods whose claims got bound."""
        if ev.gr == PODS:
            if ev.type == "DELETED":
                uid = meta(ev.obj).get("uid", "")
                for timers in (self._ready_at, self._exit_at, self._restart_at):
                    timers.pop(uid, None)
                return ()
            return (key_of(ev.obj),) if (ev.obj.get("spec") or {}).get("nodeName") else ()
        if ev.gr == NODES and ev.type == "MODIFIED":
            return self.usage.pods_on(meta(ev.obj)["name"])
        if ev.gr == PVCS and (ev.obj.get("status") or {}).get("phase") == "Bound":
            ns = meta(ev.obj).get("namespace", "")
            claim = meta(ev.obj).get("name")
            return [key_of(p) for p in self.ctx.store.list(PODS, ns) if any(
                (v.get("persistentVolumeClaim") or {}).get("claimName") == claim
                for v in (p.get("spec") or {}).get("volumes") or [])]
        return ()

    def all_keys(self) -> Iterable[ObjKey]:
        """Every bound Pod."""
        return [key_of(p) for p in self.ctx.store.list(PODS) if (p.get("spec") or {}).get("nodeName")]

    def _wait(self, timers: dict[str, float], uid: str, delay: float, key: ObjKey) -> bool:
        """True while the timer for ``uid`` (started now with ``delay`` if new) has not run out."""
        now = time.monotonic()
        due = timers.setdefault(uid, now + delay)
        if now < due:
            self.ctx.after(due - now, self.name, key)
            return True
        del timers[uid]
        return False

    def sync(self, key: ObjKey) -> None:
        """Advance one Pod: creating, running, exited, backing off."""
        pod = self.ctx.get(PODS, key)
        if pod is None or terminating(pod):
            return
        node_name = (pod.get("spec") or {}).get("nodeName")
        if not node_name:
            return
        node = self.ctx.get(NODES, ("", node_name))
        if node is None:
            self.ctx.delete(self.rt_pod, pod)  # the pod garbage collector removes Pods of vanished nodes
            return
        if not simnodes.node_ready(node):
            return  # a failed node's kubelet reports nothing
        status = pod.get("status") or {}
        phase = status.get("phase")
        if phase in ("Succeeded", "Failed"):
            return
        uid = meta(pod).get("uid", "")
        statuses = status.get("containerStatuses") or []
        waiting = [((c.get("state") or {}).get("waiting") or {}).get("reason") for c in statuses]
        if phase != "Running":
            if uid not in self._ready_at and "ContainerCreating" not in waiting:
                if not self._claims_bound(pod):
                    return
                self.ctx.set_status(self.rt_pod, pod, self._creating(pod, node), "kubelet")
                for c in (pod.get("spec") or {}).get("containers") or []:
                    self._pulled(pod, c, node_name)
            if self._wait(self._ready_at, uid, self.ctx.startup_delay, key):
                return
            self._start(pod, node, status.get("startTime"))
            return
        if "CrashLoopBackOff" in waiting:
            restarts = max((int(c.get("restartCount", 0)) for c in statuses), default=1)
            backoff = min(MAX_BACKOFF, max(self.ctx.startup_delay, 0.01) * 2 ** max(0, restarts - 1))
            if self._wait(self._restart_at, uid, backoff, key):
                return
            self._start(pod, node, status.get("startTime"))
            return
        plan = exit_plan(pod, self.ctx.startup_delay)
        if plan is None or self._wait(self._exit_at, uid, plan[0], key):
            return
        self._exit(pod, node_name, plan[1], now_rfc3339())

    def _start(self, pod: dict[str, Any], node: dict[str, Any], started: str | None) -> None:
        node_name = meta(node)["name"]
        running = self._running(pod, node, now_rfc3339(), started)
        self.ctx.set_status(self.rt_pod, pod, running, "kubelet")
        for c in (pod.get("spec") or {}).get("containers") or []:
            path = f"spec.containers{{{c.get('name')}}}"
            self.ctx.event(pod, "Created", f"Created container: {c.get('name')}", "kubelet", host=node_name,
                           field_path=path)
            self.ctx.event(pod, "Started", f"Started container {c.get('name')}", "kubelet", host=node_name,
                           field_path=path)
        plan = exit_plan(pod, self.ctx.startup_delay)
        if plan is not None:
            self._wait(self._exit_at, meta(pod).get("uid", ""), plan[0], key_of(pod))

    # ------------------------------------------------------------------ statuses

    def _claims_bound(self, pod: dict[str, Any]) -> bool:
        ns = meta(pod).get("namespace", "")
        for vol in (pod.get("spec") or {}).get("volumes") or []:
            claim = (vol.get("persistentVolumeClaim") or {}).get("claimName")
            if claim:
                pvc = self.ctx.get(PVCS, (ns, claim))
                if pvc is None or (pvc.get("status") or {}).get("phase") != "Bound":
                    return False
        return True

    def _pulled(self, pod: dict[str, Any], container: dict[str, Any], node: str) -> None:
        image = container.get("image")
        path = f"spec.containers{{{container.get('name')}}}"
        if container.get("imagePullPolicy") == "Always":
            self.ctx.event(pod, "Pulling", f'Pulling image "{image}"', "kubelet", host=node, field_path=path)
            self.ctx.event(pod, "Pulled", f'Successfully pulled image "{image}" in 0s (0s including waiting). '
                           "Image size: 0 bytes.", "kubelet", host=node, field_path=path)
        else:
            self.ctx.event(pod, "Pulled", f'Container image "{image}" already present on machine', "kubelet",
                           host=node, field_path=path)

    @staticmethod
    def _node_ip(node: dict[str, Any]) -> str:
        for a in (node.get("status") or {}).get("addresses") or []:
            if a.get("type") == "InternalIP":
                return str(a.get("address"))
        return "192.168.0.10"

    def _pod_ip(self) -> str:
        self._next_ip += 1
        n = self._next_ip
        return f"10.244.{(n // 250) % 256}.{n % 250 + 2}" if n < 250 * 256 else \
            f"10.{(n >> 16) & 255}.{(n >> 8) & 255}.{n & 255}"

    def _creating(self, pod: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
        old = dict(pod.get("status") or {})
        conds = old.get("conditions") or []
        host = self._node_ip(node)
        names = " ".join(c.get("name", "") for c in (pod.get("spec") or {}).get("containers") or [])
        unready = f"containers with unready status: [{names}]"
        return {
            "phase": "Pending", "qosClass": old.get("qosClass") or qos_class(pod),
            "hostIP": host, "hostIPs": [{"ip": host}], "startTime": old.get("startTime") or now_rfc3339(),
            "conditions": [
                condition(conds, "PodReadyToStartContainers", "False", "", "", probe=True),
                condition(conds, "Initialized", "True", "", "", probe=True),
                condition(conds, "Ready", "False", "ContainersNotReady", unready, probe=True),
                condition(conds, "ContainersReady", "False", "ContainersNotReady", unready, probe=True),
                condition(conds, "PodScheduled", "True", "", "", probe=True)],
            "containerStatuses": [{
                "name": c.get("name"), "image": c.get("image"), "imageID": "", "ready": False, "started": False,
                "restartCount": 0, "state": {"waiting": {"reason": "ContainerCreating"}}}
                for c in (pod.get("spec") or {}).get("containers") or []],
        }

    def _running(self, pod: dict[str, Any], node: dict[str, Any], now: str, started: str | None) -> dict[str, Any]:
        old = dict(pod.get("status") or {})
        conds = old.get("conditions") or []
        host = self._node_ip(node)
        ip = old.get("podIP") or self._pod_ip()
        previous = {c.get("name"): c for c in old.get("containerStatuses") or []}
        containers = (pod.get("spec") or {}).get("containers") or []
        out = []
        for c in containers:
            prev = previous.get(c.get("name")) or {}
            entry = {
                "name": c.get("name"), "image": c.get("image"),
                "imageID": f"{c.get('image')}@sha256:{hashlib.sha256(str(c.get('image')).encode()).hexdigest()}",
                "containerID": "containerd://" + hashlib.sha256(
                    f"{meta(pod).get('uid')}/{c.get('name')}/{prev.get('restartCount', 0)}".encode()).hexdigest(),
                "ready": True, "started": True, "restartCount": int(prev.get("restartCount", 0)),
                "state": {"running": {"startedAt": now}}}
            if prev.get("lastState"):
                entry["lastState"] = prev["lastState"]
            out.append(entry)
        return {
            "phase": "Running", "qosClass": old.get("qosClass") or qos_class(pod),
            "hostIP": host, "hostIPs": [{"ip": host}], "podIP": ip, "podIPs": [{"ip": ip}],
            "startTime": started or now,
            "conditions": [condition(conds, kind, "True", "", "", probe=True) for kind in (
                "PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")],
            "containerStatuses": out,
        }

    def _exit(self, pod: dict[str, Any], node: str, code: int, now: str) -> None:
        """The containers exited with ``code``: end the Pod or restart it, as its restartPolicy says."""
        policy = (pod.get("spec") or {}).get("restartPolicy", "Always")
        status = copy.deepcopy(pod.get("status") or {})
        conds = status.get("conditions") or []
        reason = "Completed" if code == 0 else "Error"
        restart = policy == "Always" or (policy == "OnFailure" and code != 0)
        for cs in status.get("containerStatuses") or []:
            started = ((cs.get("state") or {}).get("running") or {}).get("startedAt", now)
            terminated = {"exitCode": code, "reason": reason, "startedAt": started, "finishedAt": now,
                          "containerID": cs.get("containerID", "")}
            if restart:
                cs["restartCount"] = int(cs.get("restartCount", 0)) + 1
                cs.update(ready=False, started=False, lastState={"terminated": terminated}, state={"waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": f"back-off restarting failed container={cs.get('name')} "
                               f"pod={meta(pod)['name']}_{meta(pod)['namespace']}({meta(pod)['uid']})"}})
            else:
                cs.update(ready=False, started=False, state={"terminated": terminated})
        names = " ".join(str(cs.get("name")) for cs in status.get("containerStatuses") or [])
        if restart:
            unready = f"containers with unready status: [{names}]"
            status["conditions"] = [
                condition(conds, "PodReadyToStartContainers", "True", "", "", probe=True),
                condition(conds, "Initialized", "True", "", "", probe=True),
                condition(conds, "Ready", "False", "ContainersNotReady", unready, probe=True),
                condition(conds, "ContainersReady", "False", "ContainersNotReady", unready, probe=True),
                condition(conds, "PodScheduled", "True", "", "", probe=True)]
            updated = self.ctx.set_status(self.rt_pod, pod, status, "kubelet")
            for cs in status.get("containerStatuses") or []:
                self.ctx.event(pod, "BackOff", "Back-off restarting failed container "
                               f"{cs.get('name')} in pod {meta(pod)['name']}_{meta(pod)['namespace']}"
                               f"({meta(pod)['uid']})", "kubelet", warning=True, host=node,
                               field_path=f"spec.containers{{{cs.get('name')}}}")
            if updated is not None:
                self.ctx.after(0, self.name, key_of(pod))  # the back-off timer starts on the next sync
            return
        status["phase"] = "Succeeded" if code == 0 else "Failed"
        why = "PodCompleted" if code == 0 else "PodFailed"
        status["conditions"] = [
            condition(conds, "PodReadyToStartContainers", "False", "", "", probe=True),
            condition(conds, "Initialized", "True", why if code == 0 else "", "", probe=True),
            condition(conds, "Ready", "False", why, "", probe=True),
            condition(conds, "ContainersReady", "False", why, "", probe=True),
            condition(conds, "PodScheduled", "True", "", "", probe=True)]
        self.ctx.set_status(self.rt_pod, pod, status, "kubelet")
