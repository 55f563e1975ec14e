"""Controllers, a scheduler and a fake kubelet for a simulated cluster (in the spirit of KWOK).

One thread per cluster. It sleeps on the store's change condition and wakes
when any object changes (or when a Pod's start-up delay runs out), then brings
everything to its desired state in passes; each step of a pass holds the store
lock, so it reads and writes a consistent view while client requests go ahead
between steps. A pass during which nothing was written ends the round and the
thread sleeps again: an idle cluster costs no CPU.

What runs, in pass order:

* Deployments own ReplicaSets (named ``<deployment>-<pod-template-hash>``);
  a template change creates a new ReplicaSet scaled to the desired count while
  the old ones shrink by as many Pods as the new one has available.
* ReplicaSets, StatefulSets (ordinal Pods, OrderedReady or Parallel, rolling
  replacement of outdated Pods one at a time), DaemonSets (one Pod per Ready
  node whose labels and taints admit it, bound directly) and Jobs create Pods.
  CronJobs are not run: they keep the empty status the API gives them.
* The scheduler binds pending Pods to nodes by requests (CPU, memory, pod
  count), nodeSelector, required node affinity and taints/tolerations, choosing
  the least allocated node; a Pod that fits nowhere gets ``PodScheduled=False``
  with the scheduler's ``Unschedulable`` message.
* The kubelet reports bound Pods Running and Ready ``startup_delay`` seconds
  after binding; Pods of Jobs (restartPolicy other than Always) succeed
  ``startup_delay`` seconds after that.
* Workload statuses (observedGeneration, replica counts, conditions) follow.
* Services with a selector get Endpoints and one EndpointSlice; LoadBalancer
  Services get an ingress IP (172.18.255.x), as a cloud's service controller gives.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from qonnect_gitops.logs import get_logger
from qonnect_gitops.sim import nodes as simnodes
from qonnect_gitops.sim import scheduling
from qonnect_gitops.sim.api import ApiCore, WriteOptions
from qonnect_gitops.sim.errors import ApiError
from qonnect_gitops.sim.resources import ResourceType
from qonnect_gitops.sim.selectors import match_label_selector_object
from qonnect_gitops.sim.ssa import now_rfc3339

log = get_logger(__name__)

_HASH_CHARS = "bcdfghjklmnpqrstvwxz2456789"
_PODS = ("", "pods")
MAX_PASSES = 25  # a round that still writes after this many passes is a controller bug; stop, log, retry later
MANAGED_BY_SLICE = "endpointslice-controller.k8s.io"
MANAGED_BY_ENDPOINTS = "endpoint-controller"


def template_hash(template: Any) -> str:
    """A stable 10-character hash of a pod template (the ``pod-template-hash`` label's value)."""
    digest = hashlib.sha256(json.dumps(template, sort_keys=True, separators=(",", ":")).encode()).digest()
    return "".join(_HASH_CHARS[b % len(_HASH_CHARS)] for b in digest[:10])


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    return obj.get("metadata") or {}


def _owner_ref(obj: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": _meta(obj)["name"],
            "uid": _meta(obj)["uid"], "controller": True, "blockOwnerDeletion": True}


def _controller_uid(obj: dict[str, Any]) -> str | None:
    for ref in _meta(obj).get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("uid"))
    return None


def _terminating(obj: dict[str, Any]) -> bool:
    return bool(_meta(obj).get("deletionTimestamp"))


def pod_ready(pod: dict[str, Any]) -> bool:
    """Running with a True Ready condition."""
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def _active(pod: dict[str, Any]) -> bool:
    return not _terminating(pod) and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def _labels_match(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """A workload's LabelSelector against labels; an empty selector selects nothing here."""
    return bool(selector) and match_label_selector_object(selector, labels)


def _scaled(value: Any, total: int, round_up: bool) -> int:
    """An int-or-percent (``25%``) of ``total``, as maxSurge/maxUnavailable are resolved."""
    if isinstance(value, int):
        return value
    text = str(value)
    if text.endswith("%"):
        try:
            fraction = float(text[:-1]) / 100 * total
        except ValueError:
            return 0
        return math.ceil(fraction) if round_up else math.floor(fraction)
    try:
        return int(text)
    except ValueError:
        return 0


def _surge_unavailable(spec: dict[str, Any], desired: int) -> tuple[int, int]:
    """maxSurge (rounded up) and maxUnavailable (rounded down) of a RollingUpdate Deployment."""
    rolling = (spec.get("strategy") or {}).get("rollingUpdate") or {}
    surge = _scaled(rolling.get("maxSurge", "25%"), desired, round_up=True)
    unavailable = _scaled(rolling.get("maxUnavailable", "25%"), desired, round_up=False)
    if surge == 0 and unavailable == 0:
        unavailable = 1  # the API refuses both zero; an object may still carry it
    return surge, unavailable


def _condition(old: list[dict[str, Any]], kind: str, status: str, reason: str, message: str,
               update_time: bool = False, probe: bool = False) -> dict[str, Any]:
    """A condition that keeps its timestamps while its status, reason and message stay the same."""
    prev = next((c for c in old if c.get("type") == kind), None)
    now = now_rfc3339()
    same = prev is not None and (prev.get("status"), prev.get("reason"), prev.get("message")) == (status, reason, message)
    cond: dict[str, Any] = {"type": kind, "status": status}
    if update_time:
        cond["lastUpdateTime"] = prev.get("lastUpdateTime", now) if same and prev else now
    if probe:
        cond["lastProbeTime"] = None
    transitioned = prev is None or prev.get("status") != status
    cond["lastTransitionTime"] = now if transitioned or prev is None else prev.get("lastTransitionTime", now)
    if reason:
        cond["reason"] = reason
    if message:
        cond["message"] = message
    return cond


def _qos_class(pod: dict[str, Any]) -> str:
    containers = (pod.get("spec") or {}).get("containers") or []
    any_set, guaranteed = False, True
    for c in containers:
        res = c.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        if req or lim:
            any_set = True
        for r in ("cpu", "memory"):
            if r not in lim or (r in req and req[r] != lim[r]):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


class Controllers:
    """The in-process control plane of one simulated cluster (see the module docstring)."""

    def __init__(self, core: ApiCore, startup_delay: float = 1.0) -> None:
        self.core = core
        self.store = core.store
        self.startup_delay = startup_delay
        reg = core.registry

        def rt(group: str, plural: str) -> ResourceType:
            found = reg.find(group, "v1", plural)
            assert found is not None, plural
            return found

        self.rt_pod, self.rt_node = rt("", "pods"), rt("", "nodes")
        self.rt_service, self.rt_endpoints = rt("", "services"), rt("", "endpoints")
        self.rt_slice = rt("discovery.k8s.io", "endpointslices")
        self.rt_deploy, self.rt_rs = rt("apps", "deployments"), rt("apps", "replicasets")
        self.rt_sts, self.rt_ds = rt("apps", "statefulsets"), rt("apps", "daemonsets")
        self.rt_job = rt("batch", "jobs")
        self._ready_at: dict[str, float] = {}  # pod uid -> when the kubelet reports it Running
        self._done_at: dict[str, float] = {}  # pod uid -> when a run-to-completion Pod succeeds
        self._next_ip = 0
        self._next_lb = 0
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.rounds = 0  # how many times the loop woke up and reconciled (tests check idleness)

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

    def _run(self) -> None:
        seen = -1
        while True:
            with self.store.lock:
                if self._stopping:
                    return
                now = time.monotonic()
                timers = [t for t in (*self._ready_at.values(), *self._done_at.values()) if t > 0]
                due = any(t <= now for t in timers)
                if self.store.resource_version == seen and not due:
                    # Sleep until something changes or the next Pod is due to start.
                    self.store.changed.wait(min(timers) - now if timers else None)
                    continue
            try:
                seen = self.reconcile()
            except Exception:  # a controller bug must not kill the cluster's control plane
                log.error("sim_controllers_failed", exc_info=True, cluster=self.core.cluster_name)  # noqa: G201
                seen = self.store.resource_version

    def reconcile(self) -> int:
        """Run passes until one sees no write at all; returns the resourceVersion it settled at.

        Each step holds the store lock while it reads and writes, so it works on a
        consistent view; between steps client requests go ahead. A pass during which
        nobody wrote (neither a step nor a client) saw everything there is to see.
        """
        self.rounds += 1
        before = self.store.resource_version
        for _ in range(MAX_PASSES):
            before = self.store.resource_version
            for step in (self._deployments, self._replicasets, self._statefulsets, self._daemonsets,
                         self._jobs, self._schedule, self._kubelet, self._endpoints):
                with self.store.lock:
                    step()
            if self.store.resource_version == before:
                return before
        log.warning("sim_controllers_not_settled", cluster=self.core.cluster_name, passes=MAX_PASSES)
        return before

    def _all_nodes(self) -> list[dict[str, Any]]:
        with self.store.lock:
            return [o for _, o in self.store.scan(("", "nodes"))]

    # ------------------------------------------------------------------ writes

    def _opts(self, manager: str) -> WriteOptions:
        return WriteOptions(field_manager=manager)

    def _create(self, rt: ResourceType, ns: str, body: dict[str, Any], manager: str) -> dict[str, Any] | None:
        try:
            return self.core.create(rt, ns, body, self._opts(manager)).body
        except ApiError as exc:
            log.warning("sim_controller_write_refused", cluster=self.core.cluster_name, kind=rt.kind,
                        code=exc.code, message=exc.message)
            return None

    def _replace(self, rt: ResourceType, obj: dict[str, Any], manager: str, subresource: str = "") -> dict[str, Any] | None:
        meta = _meta(obj)
        try:
            return self.core.replace(rt, meta.get("namespace", ""), meta["name"], obj, self._opts(manager),
                                     subresource).body
        except ApiError as exc:
            log.warning("sim_controller_write_refused", cluster=self.core.cluster_name, kind=rt.kind,
                        name=meta.get("name"), code=exc.code, message=exc.message)
            return None

    def _set_status(self, rt: ResourceType, obj: dict[str, Any], status: dict[str, Any], manager: str) -> None:
        if (obj.get("status") or {}) == status:
            return
        self._replace(rt, dict(obj, status=status), manager, "status")

    def _delete(self, rt: ResourceType, obj: dict[str, Any]) -> None:
        meta = _meta(obj)
        try:
            self.core.delete(rt, meta.get("namespace", ""), meta["name"], {"propagationPolicy": "Background"})
        except ApiError as exc:
            if exc.code != 404:
                log.warning("sim_controller_delete_refused", cluster=self.core.cluster_name, kind=rt.kind,
                            name=meta.get("name"), code=exc.code)

    def _owned(self, owner: dict[str, Any], gr: tuple[str, str]) -> list[dict[str, Any]]:
        uid = _meta(owner).get("uid", "")
        return [o for g, o in self.store.dependents(uid) if g == gr and _controller_uid(o) == uid]

    def _pod_from_template(self, owner: dict[str, Any], template: dict[str, Any], extra_labels: dict[str, str],
                           name: str | None = None, node: str | None = None) -> dict[str, Any]:
        tmeta = template.get("metadata") or {}
        meta: dict[str, Any] = {"labels": {**(tmeta.get("labels") or {}), **extra_labels},
                                "ownerReferences": [_owner_ref(owner)]}
        if tmeta.get("annotations"):
            meta["annotations"] = dict(tmeta["annotations"])
        if name:
            meta["name"] = name
        else:
            meta["generateName"] = _meta(owner)["name"] + "-"
        spec = copy.deepcopy(template.get("spec") or {})
        if node:
            spec["nodeName"] = node
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}

    # ------------------------------------------------------------------ Deployments

    def _deployments(self) -> None:
        for d in self.store.list(("apps", "deployments")):
            if _terminating(d):
                continue
            self._deployment(d)

    def _deployment(self, d: dict[str, Any]) -> None:
        meta, spec = _meta(d), d.get("spec") or {}
        ns, name = meta["namespace"], meta["name"]
        desired = int(spec.get("replicas", 1))
        template = spec.get("template") or {}
        h = template_hash(template)
        owned = self._owned(d, ("apps", "replicasets"))
        new = next((rs for rs in owned if (_meta(rs).get("labels") or {}).get("pod-template-hash") == h), None)
        old = [rs for rs in owned if rs is not new]
        strategy = (spec.get("strategy") or {}).get("type", "RollingUpdate")
        paused = bool(spec.get("paused"))

        def revision(rs: dict[str, Any]) -> int:
            try:
                return int((_meta(rs).get("annotations") or {}).get("deployment.kubernetes.io/revision", "0"))
            except ValueError:
                return 0

        old_pods = sum(int((rs.get("spec") or {}).get("replicas", 0)) for rs in old)
        if new is None and not paused:
            if old_pods == 0:
                start = desired
            elif strategy == "RollingUpdate":
                start = min(desired, max(0, desired + _surge_unavailable(spec, desired)[0] - old_pods))
            else:
                start = 0
            rev = max([revision(rs) for rs in owned], default=0) + 1
            selector = copy.deepcopy(spec.get("selector") or {})
            selector.setdefault("matchLabels", {})["pod-template-hash"] = h
            rs_template = copy.deepcopy(template)
            rs_template.setdefault("metadata", {}).setdefault("labels", {})["pod-template-hash"] = h
            body = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {
                "name": f"{name}-{h}", "labels": dict(rs_template["metadata"]["labels"]),
                "annotations": {"deployment.kubernetes.io/desired-replicas": str(desired),
                                "deployment.kubernetes.io/max-replicas": str(desired),
                                "deployment.kubernetes.io/revision": str(rev)},
                "ownerReferences": [_owner_ref(d)]},
                "spec": {"replicas": start, "minReadySeconds": int(spec.get("minReadySeconds", 0)),
                         "selector": selector, "template": rs_template}}
            new = self._create(self.rt_rs, ns, body, "kube-controller-manager")
            log.info("sim_replicaset_created", cluster=self.core.cluster_name, deployment=f"{ns}/{name}",
                     replicaset=f"{name}-{h}", revision=rev)
        if new is not None and not paused:
            if strategy == "Recreate":
                # Every old Pod goes before the new ReplicaSet is scaled up.
                for rs in old:
                    self._scale_rs(rs, 0, desired)
                gone = old_pods == 0 and not any(self._owned(rs, _PODS) for rs in old)
                self._scale_rs(new, desired if gone else 0, desired)
            elif old_pods == 0:
                self._scale_rs(new, desired, desired)
            else:
                self._roll(new, old, desired, spec, revision)
        self._deployment_status(d, new, owned if new is None or new in owned else [*owned, new], desired)

    def _roll(self, new: dict[str, Any], old: list[dict[str, Any]], desired: int, spec: dict[str, Any],
              revision: Callable[[dict[str, Any]], int]) -> None:
        """One step of a rolling update, within maxSurge and maxUnavailable as the deployment controller does."""
        def count(rs: dict[str, Any], where: str, key: str) -> int:
            return int((rs.get(where) or {}).get(key, 0))

        max_surge, max_unavailable = _surge_unavailable(spec, desired)
        total = count(new, "spec", "replicas") + sum(count(rs, "spec", "replicas") for rs in old)
        target = count(new, "spec", "replicas")
        if target < desired:
            target = min(desired, target + max(0, desired + max_surge - total))
        self._scale_rs(new, min(target, desired), desired)
        # Old Pods may go while at least desired - maxUnavailable stay available; unavailable ones go first.
        available = count(new, "status", "availableReplicas") + sum(count(rs, "status", "availableReplicas")
                                                                    for rs in old)
        budget = max(0, available - (desired - max_unavailable))
        for rs in sorted(old, key=revision):  # oldest first
            current = count(rs, "spec", "replicas")
            unhealthy = max(0, current - count(rs, "status", "availableReplicas"))
            cut = min(current, unhealthy + budget)
            budget -= max(0, cut - unhealthy)
            self._scale_rs(rs, current - cut, desired)

    def _scale_rs(self, rs: dict[str, Any], replicas: int, desired: int) -> None:
        current = self.store.get(("apps", "replicasets"), _meta(rs)["namespace"], _meta(rs)["name"])
        if current is None:
            return
        annotations = dict(_meta(current).get("annotations") or {})
        wanted_ann = {**annotations, "deployment.kubernetes.io/desired-replicas": str(desired)}
        if int((current.get("spec") or {}).get("replicas", 0)) == replicas and annotations == wanted_ann:
            return
        new = copy.deepcopy(current)
        new["spec"]["replicas"] = replicas
        new["metadata"]["annotations"] = wanted_ann
        self._replace(self.rt_rs, new, "kube-controller-manager")

    def _deployment_status(self, d: dict[str, Any], new: dict[str, Any] | None, owned: list[dict[str, Any]],
                           desired: int) -> None:
        spec = d.get("spec") or {}
        fresh = [self.store.get(("apps", "replicasets"), _meta(rs)["namespace"], _meta(rs)["name"]) for rs in owned]
        rss = [rs for rs in fresh if rs is not None]
        new_fresh = None if new is None else self.store.get(("apps", "replicasets"), _meta(new)["namespace"],
                                                           _meta(new)["name"])

        def total(key: str) -> int:
            return sum(int((rs.get("status") or {}).get(key, 0)) for rs in rss)

        replicas, ready, available = total("replicas"), total("readyReplicas"), total("availableReplicas")
        updated = int(((new_fresh or {}).get("status") or {}).get("replicas", 0))
        new_available = int(((new_fresh or {}).get("status") or {}).get("availableReplicas", 0))
        max_unavailable = 0
        if (spec.get("strategy") or {}).get("type", "RollingUpdate") == "RollingUpdate":
            max_unavailable = _surge_unavailable(spec, desired)[1]
        old_conds = (d.get("status") or {}).get("conditions") or []
        is_available = available >= desired - max_unavailable
        conditions = [
            _condition(old_conds, "Available", "True" if is_available else "False",
                       "MinimumReplicasAvailable" if is_available else "MinimumReplicasUnavailable",
                       "Deployment has minimum availability." if is_available
                       else "Deployment does not have minimum availability.", update_time=True)]
        if new_fresh is not None:
            rs_name = _meta(new_fresh)["name"]
            done = updated == desired and replicas == desired and new_available >= desired
            conditions.append(_condition(
                old_conds, "Progressing", "True", "NewReplicaSetAvailable" if done else "ReplicaSetUpdated",
                f'ReplicaSet "{rs_name}" has successfully progressed.' if done
                else f'ReplicaSet "{rs_name}" is progressing.', update_time=True))
        status: dict[str, Any] = {"observedGeneration": _meta(d).get("generation", 1)}
        # As the deployment controller counts: Pods the ReplicaSets should have, minus those available.
        wanted = sum(int((rs.get("spec") or {}).get("replicas", 0)) for rs in rss)
        for key, value in (("replicas", replicas), ("updatedReplicas", updated), ("readyReplicas", ready),
                           ("availableReplicas", available), ("unavailableReplicas", max(0, wanted - available))):
            if value:
                status[key] = value
        status["conditions"] = conditions
        self._set_status(self.rt_deploy, d, status, "kube-controller-manager")

    # ------------------------------------------------------------------ ReplicaSets

    def _replicasets(self) -> None:
        for rs in self.store.list(("apps", "replicasets")):
            if _terminating(rs):
                continue
            meta, spec = _meta(rs), rs.get("spec") or {}
            desired = int(spec.get("replicas", 1))
            pods = [p for p in self._owned(rs, _PODS) if _active(p)]
            template = spec.get("template") or {}
            for _ in range(desired - len(pods)):
                created = self._create(self.rt_pod, meta["namespace"], self._pod_from_template(rs, template, {}),
                                       "kube-controller-manager")
                if created is not None:
                    pods.append(created)
            if len(pods) > desired:
                # Delete the least useful first: unbound, then not ready, then the newest.
                def rank(p: dict[str, Any]) -> tuple[int, int, str]:
                    bound = 1 if (p.get("spec") or {}).get("nodeName") else 0
                    return (bound, 1 if pod_ready(p) else 0, "~" + _meta(p).get("creationTimestamp", ""))

                pods.sort(key=rank)
                for p in pods[:len(pods) - desired]:
                    self._delete(self.rt_pod, p)
                pods = pods[len(pods) - desired:]
            labels_ok = sum(1 for p in pods if _labels_match(spec.get("selector"), _meta(p).get("labels") or {}))
            ready = sum(1 for p in pods if pod_ready(p))
            status: dict[str, Any] = {"replicas": len(pods)}
            for key, value in (("fullyLabeledReplicas", labels_ok), ("readyReplicas", ready),
                               ("availableReplicas", ready)):
                if value:
                    status[key] = value
            status["observedGeneration"] = meta.get("generation", 1)
            self._set_status(self.rt_rs, rs, status, "kube-controller-manager")

    # ------------------------------------------------------------------ StatefulSets

    def _statefulsets(self) -> None:
        for sts in self.store.list(("apps", "statefulsets")):
            if _terminating(sts):
                continue
            meta, spec = _meta(sts), sts.get("spec") or {}
            ns, name = meta["namespace"], meta["name"]
            desired = int(spec.get("replicas", 1))
            template = spec.get("template") or {}
            revision = f"{name}-{template_hash(template)}"
            ordered = spec.get("podManagementPolicy", "OrderedReady") == "OrderedReady"
            by_index: dict[int, dict[str, Any]] = {}
            for p in self._owned(sts, _PODS):
                suffix = _meta(p)["name"][len(name) + 1:]
                if suffix.isdigit() and not _terminating(p):
                    by_index[int(suffix)] = p
            for i in range(desired):
                if i in by_index:
                    continue
                if ordered and any(not pod_ready(by_index[j]) for j in range(i) if j in by_index):
                    break
                pod_name = f"{name}-{i}"
                body = self._pod_from_template(sts, template, {
                    "statefulset.kubernetes.io/pod-name": pod_name, "apps.kubernetes.io/pod-index": str(i),
                    "controller-revision-hash": revision}, name=pod_name)
                body["spec"].setdefault("hostname", pod_name)
                if spec.get("serviceName"):
                    body["spec"].setdefault("subdomain", spec["serviceName"])
                created = self._create(self.rt_pod, ns, body, "kube-controller-manager")
                if created is None:
                    break
                by_index[i] = created
                if ordered:
                    break  # the next ordinal waits for this one to be Ready
            for i in sorted((i for i in by_index if i >= desired), reverse=True):
                self._delete(self.rt_pod, by_index.pop(i))
            live = [by_index[i] for i in sorted(by_index)]
            rolling = (spec.get("updateStrategy") or {}).get("type", "RollingUpdate") == "RollingUpdate"
            outdated = [p for p in live if (_meta(p).get("labels") or {}).get("controller-revision-hash") != revision]
            if rolling and outdated and len(live) == desired and all(pod_ready(p) for p in live):
                # Replace one outdated Pod at a time, highest ordinal first; its ordinal is recreated next pass.
                self._delete(self.rt_pod, outdated[-1])
            ready = sum(1 for p in live if pod_ready(p))
            updated = len(live) - len(outdated)
            status: dict[str, Any] = {"observedGeneration": meta.get("generation", 1), "replicas": len(live),
                                      "availableReplicas": ready, "currentReplicas": len(live) if not outdated
                                      else len(outdated), "updatedReplicas": updated,
                                      "currentRevision": revision if not outdated else (sts.get("status") or {})
                                      .get("currentRevision", revision), "updateRevision": revision,
                                      "collisionCount": 0}
            if ready:
                status["readyReplicas"] = ready
            self._set_status(self.rt_sts, sts, status, "kube-controller-manager")

    # ------------------------------------------------------------------ DaemonSets

    def _daemonsets(self) -> None:
        node_list = self._all_nodes()
        for ds in self.store.list(("apps", "daemonsets")):
            if _terminating(ds):
                continue
            meta, spec = _meta(ds), ds.get("spec") or {}
            template = spec.get("template") or {}
            h = template_hash(template)
            probe = {"spec": template.get("spec") or {}}
            eligible = {_meta(n)["name"] for n in node_list if simnodes.node_ready(n)
                        and scheduling.matches_affinity(probe, n) and scheduling.untolerated_taint(probe, n) is None}
            by_node: dict[str, list[dict[str, Any]]] = {}
            for p in self._owned(ds, _PODS):
                if _active(p):
                    by_node.setdefault((p.get("spec") or {}).get("nodeName") or "", []).append(p)
            for node, pods in list(by_node.items()):
                if node not in eligible:
                    for p in pods:
                        self._delete(self.rt_pod, p)
                    del by_node[node]
                elif len(pods) > 1:
                    for p in pods[1:]:
                        self._delete(self.rt_pod, p)
                    by_node[node] = pods[:1]
            for node in sorted(eligible - set(by_node)):
                created = self._create(self.rt_pod, meta["namespace"], self._pod_from_template(
                    ds, template, {"controller-revision-hash": h, "pod-template-generation":
                                   str(meta.get("generation", 1))}, node=node), "kube-controller-manager")
                if created is not None:
                    by_node[node] = [created]
            pods = [ps[0] for ps in by_node.values()]
            outdated = [p for p in pods if (_meta(p).get("labels") or {}).get("controller-revision-hash") != h]
            rolling = (spec.get("updateStrategy") or {}).get("type", "RollingUpdate") == "RollingUpdate"
            if rolling and outdated and all(pod_ready(p) for p in pods):
                self._delete(self.rt_pod, outdated[0])  # maxUnavailable 1: one node at a time
            ready = sum(1 for p in pods if pod_ready(p))
            status: dict[str, Any] = {"currentNumberScheduled": len(pods), "desiredNumberScheduled": len(eligible),
                                      "numberMisscheduled": 0, "numberReady": ready,
                                      "observedGeneration": meta.get("generation", 1),
                                      "updatedNumberScheduled": len(pods) - len(outdated)}
            if ready:
                status["numberAvailable"] = ready
            if len(eligible) - ready > 0:
                status["numberUnavailable"] = len(eligible) - ready
            self._set_status(self.rt_ds, ds, status, "kube-controller-manager")

    # ------------------------------------------------------------------ Jobs

    def _jobs(self) -> None:
        for job in self.store.list(("batch", "jobs")):
            if _terminating(job):
                continue
            meta, spec = _meta(job), job.get("spec") or {}
            old = job.get("status") or {}
            conds = old.get("conditions") or []
            if any(c.get("type") == "Complete" and c.get("status") == "True" for c in conds):
                continue
            completions = spec.get("completions")
            target = int(completions) if completions is not None else 1
            parallelism = int(spec.get("parallelism", 1))
            pods = [p for p in self._owned(job, _PODS) if not _terminating(p)]
            succeeded = sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Succeeded")
            failed = sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Failed")
            active = [p for p in pods if _active(p)]
            status: dict[str, Any] = {"startTime": old.get("startTime") or now_rfc3339(),
                                      "uncountedTerminatedPods": {}}
            if succeeded >= target:
                now = now_rfc3339()
                status["completionTime"] = now
                status["conditions"] = [
                    _condition(conds, "SuccessCriteriaMet", "True", "CompletionsReached",
                               "Reached expected number of succeeded pods", probe=True),
                    _condition(conds, "Complete", "True", "CompletionsReached",
                               "Reached expected number of succeeded pods", probe=True)]
                for c in status["conditions"]:
                    c["lastProbeTime"] = now
            elif not spec.get("suspend"):
                want = min(parallelism, target - succeeded) - len(active)
                labels = {"batch.kubernetes.io/controller-uid": meta["uid"], "batch.kubernetes.io/job-name": meta["name"],
                          "controller-uid": meta["uid"], "job-name": meta["name"]}
                for _ in range(max(0, want)):
                    created = self._create(self.rt_pod, meta["namespace"], self._pod_from_template(
                        job, spec.get("template") or {}, labels), "job-controller")
                    if created is not None:
                        active.append(created)
            if active and succeeded < target:
                status["active"] = len(active)
            status["ready"] = sum(1 for p in active if pod_ready(p)) if succeeded < target else 0
            if succeeded:
                status["succeeded"] = succeeded
            if failed:
                status["failed"] = failed
            status["terminating"] = 0
            self._set_status(self.rt_job, job, status, "job-controller")

    # ------------------------------------------------------------------ scheduler

    def _schedule(self) -> None:
        node_list = self._all_nodes()
        rooms = {_meta(n)["name"]: scheduling.NodeRoom.of(n) for n in node_list}
        pending = []
        for p in self.store.list(_PODS):
            spec = p.get("spec") or {}
            if not _active(p):
                continue
            node = spec.get("nodeName")
            if node:
                if node in rooms:
                    rooms[node].add(scheduling.pod_requests(p))
            elif spec.get("schedulerName", "default-scheduler") == "default-scheduler":
                pending.append(p)
        pending.sort(key=lambda p: (-int((p.get("spec") or {}).get("priority") or 0),
                                    _meta(p).get("creationTimestamp", ""), _meta(p)["name"]))
        for p in pending:
            req = scheduling.pod_requests(p)
            reasons: Counter[str] = Counter()
            best: tuple[float, str] | None = None
            for name in sorted(rooms):
                room = rooms[name]
                why = scheduling.node_reasons(p, req, room)
                if why:
                    reasons.update(why)
                    continue
                # Least allocated: the node left with the largest free share of CPU and memory.
                free = ((room.cpu - room.used.cpu - req.cpu) / room.cpu if room.cpu else 0) + \
                    ((room.memory - room.used.memory - req.memory) / room.memory if room.memory else 0)
                if best is None or free > best[0]:
                    best = (free, name)
            if best is None:
                self._unschedulable(p, scheduling.unschedulable_message(len(rooms), reasons))
                continue
            self._bind(p, rooms[best[1]])
            rooms[best[1]].add(req)

    def _unschedulable(self, pod: dict[str, Any], message: str) -> None:
        status = dict(pod.get("status") or {})
        old = status.get("conditions") or []
        cond = _condition(old, "PodScheduled", "False", "Unschedulable", message, probe=True)
        status["phase"] = "Pending"
        status["conditions"] = [cond, *[c for c in old if c.get("type") != "PodScheduled"]]
        status.setdefault("qosClass", _qos_class(pod))
        if status != (pod.get("status") or {}):
            log.info("sim_pod_unschedulable", cluster=self.core.cluster_name,
                     pod=f"{_meta(pod)['namespace']}/{_meta(pod)['name']}", message=message)
        self._set_status(self.rt_pod, pod, status, "kube-scheduler")

    def _bind(self, pod: dict[str, Any], room: scheduling.NodeRoom) -> None:
        node = _meta(room.node)["name"]
        new = copy.deepcopy(pod)
        new["spec"]["nodeName"] = node
        bound = self._replace(self.rt_pod, new, "kube-scheduler")
        if bound is None:
            return
        old = (bound.get("status") or {}).get("conditions") or []
        self._set_status(self.rt_pod, bound, {
            "phase": "Pending", "qosClass": _qos_class(bound),
            "conditions": [_condition(old, "PodScheduled", "True", "", "", probe=True)]}, "kube-scheduler")
        log.debug("sim_pod_bound", cluster=self.core.cluster_name, pod=f"{_meta(pod)['namespace']}/{_meta(pod)['name']}",
                  node=node)

    # ------------------------------------------------------------------ kubelet

    def _pod_ip(self) -> str:
        self._next_ip += 1
        n = self._next_ip
        return f"10.244.{n // 250}.{n % 250 + 2}"

    def _kubelet(self) -> None:
        nodes = {_meta(n)["name"]: n for n in self._all_nodes()}
        now = time.monotonic()
        alive: set[str] = set()
        for p in self.store.list(_PODS):
            node_name = (p.get("spec") or {}).get("nodeName")
            uid = _meta(p).get("uid", "")
            if not node_name or _terminating(p):
                continue
            alive.add(uid)
            node = nodes.get(node_name)
            if node is None:
                self._delete(self.rt_pod, p)  # the pod garbage collector removes Pods of vanished nodes
                continue
            if not simnodes.node_ready(node):
                continue  # a failed node's kubelet reports nothing
            phase = (p.get("status") or {}).get("phase")
            if phase in ("Succeeded", "Failed"):
                continue
            run_to_completion = (p.get("spec") or {}).get("restartPolicy", "Always") != "Always"
            if phase != "Running":
                ready_at = self._ready_at.setdefault(uid, now + self.startup_delay)
                if now >= ready_at:
                    self._ready_at[uid] = 0  # done; kept so the loop knows this Pod started
                    self._set_status(self.rt_pod, p, self._running_status(p, node), "kubelet")
                    if run_to_completion:
                        self._done_at[uid] = now + self.startup_delay
                else:
                    self._set_status(self.rt_pod, p, self._creating_status(p, node), "kubelet")
            elif run_to_completion:
                done_at = self._done_at.setdefault(uid, now + self.startup_delay)
                if 0 < done_at <= now:
                    self._done_at[uid] = 0
                    self._set_status(self.rt_pod, p, self._succeeded_status(p), "kubelet")
        for timers in (self._ready_at, self._done_at):
            for uid in [u for u in timers if u not in alive]:
                del timers[uid]

    @staticmethod
    def _node_ip(node: dict[str, Any]) -> str:
        for a in (node.get("status") or {}).get("addresses") or []:
            if a.get("type") == "InternalIP":
                return str(a.get("address"))
        return "192.168.0.10"

    def _creating_status(self, pod: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
        old = dict(pod.get("status") or {})
        conds = old.get("conditions") or []
        host = self._node_ip(node)
        names = " ".join(c.get("name", "") for c in (pod.get("spec") or {}).get("containers") or [])
        unready = f"containers with unready status: [{names}]"
        return {
            "phase": "Pending", "qosClass": old.get("qosClass") or _qos_class(pod),
            "hostIP": host, "hostIPs": [{"ip": host}], "startTime": old.get("startTime") or now_rfc3339(),
            "conditions": [
                _condition(conds, "PodReadyToStartContainers", "False", "", "", probe=True),
                _condition(conds, "Initialized", "True", "", "", probe=True),
                _condition(conds, "Ready", "False", "ContainersNotReady", unready, probe=True),
                _condition(conds, "ContainersReady", "False", "ContainersNotReady", unready, probe=True),
                _condition(conds, "PodScheduled", "True", "", "", probe=True)],
            "containerStatuses": [{
                "name": c.get("name"), "image": c.get("image"), "imageID": "", "ready": False, "started": False,
                "restartCount": 0, "state": {"waiting": {"reason": "ContainerCreating"}}}
                for c in (pod.get("spec") or {}).get("containers") or []],
        }

    def _running_status(self, pod: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
        old = dict(pod.get("status") or {})
        conds = old.get("conditions") or []
        now = now_rfc3339()
        host = self._node_ip(node)
        ip = old.get("podIP") or self._pod_ip()
        containers = (pod.get("spec") or {}).get("containers") or []
        return {
            "phase": "Running", "qosClass": old.get("qosClass") or _qos_class(pod),
            "hostIP": host, "hostIPs": [{"ip": host}], "podIP": ip, "podIPs": [{"ip": ip}],
            "startTime": old.get("startTime") or now,
            "conditions": [_condition(conds, kind, "True", "", "", probe=True) for kind in (
                "PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")],
            "containerStatuses": [{
                "name": c.get("name"), "image": c.get("image"),
                "imageID": f"{c.get('image')}@sha256:{hashlib.sha256(str(c.get('image')).encode()).hexdigest()}",
                "containerID": "containerd://" + hashlib.sha256(
                    f"{_meta(pod).get('uid')}/{c.get('name')}".encode()).hexdigest(),
                "ready": True, "started": True, "restartCount": 0, "state": {"running": {"startedAt": now}}}
                for c in containers],
        }

    def _succeeded_status(self, pod: dict[str, Any]) -> dict[str, Any]:
        status = copy.deepcopy(pod.get("status") or {})
        conds = status.get("conditions") or []
        now = now_rfc3339()
        status["phase"] = "Succeeded"
        status["conditions"] = [
            _condition(conds, "PodReadyToStartContainers", "False", "", "", probe=True),
            _condition(conds, "Initialized", "True", "PodCompleted", "", probe=True),
            _condition(conds, "Ready", "False", "PodCompleted", "", probe=True),
            _condition(conds, "ContainersReady", "False", "PodCompleted", "", probe=True),
            _condition(conds, "PodScheduled", "True", "", "", probe=True)]
        for cs in status.get("containerStatuses") or []:
            started = ((cs.get("state") or {}).get("running") or {}).get("startedAt", now)
            cs.update(ready=False, started=False, state={"terminated": {
                "exitCode": 0, "reason": "Completed", "startedAt": started, "finishedAt": now,
                "containerID": cs.get("containerID", "")}})
        return status

    # ------------------------------------------------------------------ Endpoints and EndpointSlices

    def _endpoints(self) -> None:
        services = {(_meta(s)["namespace"], _meta(s)["name"]): s for s in self.store.list(("", "services"))}
        nodes = {_meta(n)["name"]: n for n in self._all_nodes()}
        pods_by_ns: dict[str, list[dict[str, Any]]] = {}
        for p in self.store.list(_PODS):
            if not _terminating(p) and (p.get("status") or {}).get("podIP") and \
                    (p.get("status") or {}).get("phase") == "Running":
                pods_by_ns.setdefault(_meta(p)["namespace"], []).append(p)
        for (ns, name), svc in services.items():
            spec = svc.get("spec") or {}
            if spec.get("type") == "LoadBalancer" and not _terminating(svc):
                self._load_balancer(svc)
            if not spec.get("selector") or spec.get("type") == "ExternalName" or _terminating(svc):
                continue
            selected = [p for p in pods_by_ns.get(ns, [])
                        if _labels_match({"matchLabels": spec["selector"]}, _meta(p).get("labels") or {})]
            self._sync_endpoints(svc, selected, nodes)
        # Endpoints we made for Services that are gone or lost their selector.
        for ep in self.store.list(("", "endpoints")):
            if (_meta(ep).get("labels") or {}).get("endpoints.kubernetes.io/managed-by") != MANAGED_BY_ENDPOINTS:
                continue
            owner = services.get((_meta(ep)["namespace"], _meta(ep)["name"]))
            if owner is None or not (owner.get("spec") or {}).get("selector"):
                self._delete(self.rt_endpoints, ep)

    def _load_balancer(self, svc: dict[str, Any]) -> None:
        """Give a LoadBalancer Service an ingress address, as a cloud controller (or k3s' servicelb) does."""
        status = svc.get("status") or {}
        if (status.get("loadBalancer") or {}).get("ingress"):
            return
        self._next_lb += 1
        ip = f"172.18.255.{self._next_lb % 250 + 1}"
        ports = [{"port": p.get("port"), "protocol": p.get("protocol", "TCP")}
                 for p in (svc.get("spec") or {}).get("ports") or []]
        self._set_status(self.rt_service, svc, dict(status, loadBalancer={"ingress": [
            {"ip": ip, "ipMode": "VIP", **({"ports": ports} if ports else {})}]}), "service-controller")

    @staticmethod
    def _ports(svc: dict[str, Any], pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for sp in (svc.get("spec") or {}).get("ports") or []:
            target = sp.get("targetPort", sp.get("port"))
            port: int | None = target if isinstance(target, int) else None
            if port is None:
                if str(target).isdigit():
                    port = int(str(target))
                else:
                    for p in pods:
                        for c in (p.get("spec") or {}).get("containers") or []:
                            for cp in c.get("ports") or []:
                                if cp.get("name") == target and port is None:
                                    port = int(cp.get("containerPort"))
            if port is None:
                continue
            entry: dict[str, Any] = {"port": port, "protocol": sp.get("protocol", "TCP")}
            if sp.get("name"):
                entry["name"] = sp["name"]
            if sp.get("appProtocol"):
                entry["appProtocol"] = sp["appProtocol"]
            out.append(entry)
        return out

    def _sync_endpoints(self, svc: dict[str, Any], pods: list[dict[str, Any]], nodes: dict[str, Any]) -> None:
        meta = _meta(svc)
        ns, name = meta["namespace"], meta["name"]
        ports = self._ports(svc, pods)

        def ref(p: dict[str, Any]) -> dict[str, Any]:
            return {"kind": "Pod", "namespace": ns, "name": _meta(p)["name"], "uid": _meta(p)["uid"]}

        pods = sorted(pods, key=lambda p: str((p.get("status") or {}).get("podIP")))
        ready = [{"ip": p["status"]["podIP"], "nodeName": p["spec"]["nodeName"], "targetRef": ref(p)}
                 for p in pods if pod_ready(p)]
        not_ready = [{"ip": p["status"]["podIP"], "nodeName": p["spec"]["nodeName"], "targetRef": ref(p)}
                     for p in pods if not pod_ready(p)]
        subset: dict[str, Any] = {}
        if ready:
            subset["addresses"] = ready
        if not_ready:
            subset["notReadyAddresses"] = not_ready
        if subset and ports:
            subset["ports"] = ports
        labels = {**(meta.get("labels") or {}), "endpoints.kubernetes.io/managed-by": MANAGED_BY_ENDPOINTS}
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "Endpoints",
                                "metadata": {"name": name, "namespace": ns, "labels": labels}}
        if subset and ports:
            body["subsets"] = [subset]
        self._upsert(self.rt_endpoints, ns, name, body, lambda live: (
            (_meta(live).get("labels") or {}) == labels and live.get("subsets") == body.get("subsets")),
            "endpoint-controller")
        slice_labels = {**(meta.get("labels") or {}), "kubernetes.io/service-name": name,
                        "endpointslice.kubernetes.io/managed-by": MANAGED_BY_SLICE}
        endpoints = []
        for p in pods:
            r = pod_ready(p)
            ep: dict[str, Any] = {"addresses": [p["status"]["podIP"]],
                                  "conditions": {"ready": r, "serving": r, "terminating": False},
                                  "nodeName": p["spec"]["nodeName"], "targetRef": ref(p)}
            zone = (_meta(nodes.get(p["spec"]["nodeName"]) or {}).get("labels") or {}).get("topology.kubernetes.io/zone")
            if zone:
                ep["zone"] = zone
            endpoints.append(ep)
        existing = [s for s in self.store.list(("discovery.k8s.io", "endpointslices"), ns)
                    if (_meta(s).get("labels") or {}).get("kubernetes.io/service-name") == name
                    and (_meta(s).get("labels") or {}).get("endpointslice.kubernetes.io/managed-by") == MANAGED_BY_SLICE]
        slice_body: dict[str, Any] = {
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
            "metadata": {"labels": slice_labels, "ownerReferences": [_owner_ref(dict(svc, apiVersion="v1",
                                                                                     kind="Service"))]},
            "endpoints": endpoints, "ports": ports}
        if not existing:
            slice_body["metadata"]["generateName"] = name + "-"
            self._create(self.rt_slice, ns, slice_body, "endpointslice-controller")
            return
        for extra in existing[1:]:
            self._delete(self.rt_slice, extra)
        live = existing[0]
        if (_meta(live).get("labels") or {}) == slice_labels and (live.get("endpoints") or []) == endpoints and \
                (live.get("ports") or []) == ports:
            return
        new = dict(live, endpoints=endpoints, ports=ports)
        new["metadata"] = dict(_meta(live), labels=slice_labels)
        self._replace(self.rt_slice, new, "endpointslice-controller")

    def _upsert(self, rt: ResourceType, ns: str, name: str, body: dict[str, Any],
                same: Callable[[dict[str, Any]], bool], manager: str) -> None:
        live = self.store.get((rt.group, rt.plural), ns, name)
        if live is None:
            self._create(rt, ns, body, manager)
        elif not same(live):
            new = dict(body)
            new["metadata"] = dict(_meta(live), labels=body["metadata"]["labels"])
            self._replace(rt, new, manager)

    # ------------------------------------------------------------------ node faults

    def fail_node(self, name: str) -> None:
        """The node stops posting status: Ready Unknown, unreachable taints, its Pods deleted (evicted at once)."""
        with self.store.lock:
            node = self.store.get(("", "nodes"), "", name)
            if node is None:
                raise KeyError(name)
            now = now_rfc3339()
            spec = copy.deepcopy(node.get("spec") or {})
            taints = [t for t in spec.get("taints") or [] if t.get("key") != scheduling.UNREACHABLE_TAINT]
            taints += [{"key": scheduling.UNREACHABLE_TAINT, "effect": "NoSchedule", "timeAdded": now},
                       {"key": scheduling.UNREACHABLE_TAINT, "effect": "NoExecute", "timeAdded": now}]
            spec["taints"] = taints
            updated = self._replace(self.rt_node, dict(node, spec=spec), "node-lifecycle-controller")
            if updated is not None:
                status = dict(updated.get("status") or {}, conditions=simnodes.ready_conditions(False))
                self._set_status(self.rt_node, updated, status, "node-lifecycle-controller")
            evicted = 0
            for p in self.store.list(_PODS):
                if (p.get("spec") or {}).get("nodeName") == name:
                    self._delete(self.rt_pod, p)
                    evicted += 1
            log.info("sim_node_failed", cluster=self.core.cluster_name, node=name, pods_evicted=evicted)

    def recover_node(self, name: str) -> None:
        """The node's kubelet is back: Ready True, unreachable taints removed."""
        with self.store.lock:
            node = self.store.get(("", "nodes"), "", name)
            if node is None:
                raise KeyError(name)
            spec = copy.deepcopy(node.get("spec") or {})
            spec["taints"] = [t for t in spec.get("taints") or [] if t.get("key") != scheduling.UNREACHABLE_TAINT]
            if not spec["taints"]:
                del spec["taints"]
            updated = self._replace(self.rt_node, dict(node, spec=spec), "node-lifecycle-controller")
            if updated is not None:
                status = dict(updated.get("status") or {}, conditions=simnodes.ready_conditions(True))
                self._set_status(self.rt_node, updated, status, "kubelet")
            log.info("sim_node_recovered", cluster=self.core.cluster_name, node=name)
