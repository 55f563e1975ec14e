"""Workload controllers: Deployments, ReplicaSets and ReplicationControllers, StatefulSets, DaemonSets, Jobs.

Each follows its upstream controller's rules closely enough for clients and the
agent (rollouts within maxSurge/maxUnavailable, revision annotations that
``kubectl rollout undo`` reads, ordinal Pods and their volume claims, one Pod per
eligible node, Jobs that retry failed Pods up to ``backoffLimit``) and records the
Events the upstream controllers record.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

from qonnect_gitops.logs import get_logger
from qonnect_gitops.sim import nodes as simnodes
from qonnect_gitops.sim import scheduling
from qonnect_gitops.sim.control.base import (
    PODS,
    Context,
    condition,
    key_of,
    labels_match,
    meta,
    owner_keys,
    owner_ref,
    pod_active,
    pod_ready,
    scaled,
    template_hash,
    terminating,
)
from qonnect_gitops.sim.ssa import now_rfc3339
from qonnect_gitops.sim.store import NODES, Event, ObjKey

log = get_logger(__name__)

REVISION = "deployment.kubernetes.io/revision"
REVISION_HISTORY = "deployment.kubernetes.io/revision-history"
DESIRED = "deployment.kubernetes.io/desired-replicas"
MAX_REPLICAS = "deployment.kubernetes.io/max-replicas"
RS = ("apps", "replicasets")


def _revision(obj: dict[str, Any]) -> int:
    try:
        return int((meta(obj).get("annotations") or {}).get(REVISION, "0"))
    except ValueError:
        return 0


def _surge_unavailable(spec: dict[str, Any], desired: int) -> tuple[int, int]:
    """maxSurge (rounded up) and maxUnavailable (rounded down) of a RollingUpdate Deployment."""
    rolling = (spec.get("strategy") or {}).get("rollingUpdate") or {}
    surge = scaled(rolling.get("maxSurge", "25%"), desired, round_up=True)
    unavailable = scaled(rolling.get("maxUnavailable", "25%"), desired, round_up=False)
    if surge == 0 and unavailable == 0:
        unavailable = 1  # the API refuses both zero; an object may still carry it
    return surge, unavailable


class Deployments:
    """Deployments own ReplicaSets named ``<deployment>-<pod-template-hash>`` and roll between them."""

    name = "deployment"
    gr = ("apps", "deployments")

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.rt = ctx.rt("apps", "v1", "deployments")
        self.rt_rs = ctx.rt("apps", "v1", "replicasets")

    def keys(self, ev: Event) -> Iterable[ObjKey]:
        """The Deployment itself, or the owner of a ReplicaSet that changed."""
        if ev.gr == self.gr:
            return (key_of(ev.obj),)
        if ev.gr == RS:
            return owner_keys(ev, "Deployment")
        return ()

    def all_keys(self) -> Iterable[ObjKey]:
        """Every Deployment."""
        return [key_of(d) for d in self.ctx.store.list(self.gr)]

    def sync(self, key: ObjKey) -> None:
        """Create, scale and roll the Deployment's ReplicaSets; update its status."""
        d = self.ctx.get(self.gr, key)
        if d is None or terminating(d):
            return
        spec = d.get("spec") or {}
        ns, name = key
        desired = int(spec.get("replicas", 1))
        template = spec.get("template") or {}
        h = template_hash(template)
        owned = self.ctx.owned(d, RS)
        new = next((rs for rs in owned if (meta(rs).get("labels") or {}).get("pod-template-hash") == h), None)
        old = [rs for rs in owned if rs is not new]
        strategy = (spec.get("strategy") or {}).get("type", "RollingUpdate")
        paused = bool(spec.get("paused"))
        top = max([_revision(rs) for rs in owned], default=0)
        old_pods = sum(int((rs.get("spec") or {}).get("replicas", 0)) for rs in old)
        if new is None and not paused:
            if old_pods == 0:
                start = desired
            elif strategy == "RollingUpdate":
                start = min(desired, max(0, desired + _surge_unavailable(spec, desired)[0] - old_pods))
            else:
                start = 0
            selector = copy.deepcopy(spec.get("selector") or {})
            selector.setdefault("matchLabels", {})["pod-template-hash"] = h
            rs_template = copy.deepcopy(template)
            rs_template.setdefault("metadata", {}).setdefault("labels", {})["pod-template-hash"] = h
            surge = _surge_unavailable(spec, desired)[0] if strategy == "RollingUpdate" else 0
            annotations = {DESIRED: str(desired), MAX_REPLICAS: str(desired + surge), REVISION: str(top + 1)}
            change_cause = (meta(d).get("annotations") or {}).get("kubernetes.io/change-cause")
            if change_cause:
                annotations["kubernetes.io/change-cause"] = change_cause
            body = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {
                "name": f"{name}-{h}", "labels": dict(rs_template["metadata"]["labels"]),
                "annotations": annotations, "ownerReferences": [owner_ref(d)]},
                "spec": {"replicas": start, "minReadySeconds": int(spec.get("minReadySeconds", 0)),
                         "selector": selector, "template": rs_template}}
            new = self.ctx.create(self.rt_rs, ns, body, "kube-controller-manager")
            if new is not None:
                log.info("sim_replicaset_created", cluster=self.ctx.core.cluster_name, deployment=f"{ns}/{name}",
                         replicaset=f"{name}-{h}", revision=top + 1)
                if start:
                    self.ctx.event(d, "ScalingReplicaSet", f"Scaled up replica set {name}-{h} from 0 to {start}",
                                   "deployment-controller")
        elif new is not None and _revision(new) < top and not paused:
            # A rollback (or a return to an older template): that ReplicaSet becomes the newest revision.
            annotations = dict(meta(new).get("annotations") or {})
            history = [h for h in annotations.get(REVISION_HISTORY, "").split(",") if h]
            annotations[REVISION_HISTORY] = ",".join([*history, str(_revision(new))])
            annotations[REVISION] = str(top + 1)
            new = self.ctx.set_annotations(self.rt_rs, new, annotations, "kube-controller-manager") or new
        if new is not None:
            self._mark_revision(d, new)
        if new is not None and not paused:
            if strategy == "Recreate":
                for rs in old:  # every old Pod goes before the new ReplicaSet is scaled up
                    self._scale_rs(d, rs, 0, desired)
                gone = old_pods == 0 and not any(self.ctx.owned(rs, PODS) for rs in old)
                self._scale_rs(d, new, desired if gone else 0, desired)
            elif old_pods == 0:
                self._scale_rs(d, new, desired, desired)
            else:
                self._roll(d, new, old, desired, spec)
        self._status(d, new, owned if new is None or any(meta(rs)["uid"] == meta(new)["uid"] for rs in owned)
                     else [*owned, new], desired)

    def _mark_revision(self, d: dict[str, Any], new: dict[str, Any]) -> None:
        fresh = self.ctx.get(self.gr, key_of(d))
        if fresh is None:
            return
        annotations = dict(meta(fresh).get("annotations") or {})
        if annotations.get(REVISION) != str(_revision(new)):
            annotations[REVISION] = str(_revision(new))
            self.ctx.set_annotations(self.rt, fresh, annotations, "kube-controller-manager")

    def _roll(self, d: dict[str, Any], new: dict[str, Any], old: list[dict[str, Any]], desired: int,
              spec: dict[str, Any]) -> None:
        """One step of a rolling update, within maxSurge and maxUnavailable as the deployment controller does."""
        def count(rs: dict[str, Any], where: str, key: str) -> int:
            return int((rs.get(where) or {}).get(key, 0))

        max_surge, max_unavailable = _surge_unavailable(spec, desired)
        total = count(new, "spec", "replicas") + sum(count(rs, "spec", "replicas") for rs in old)
        target = count(new, "spec", "replicas")
        if target < desired:
            target = min(desired, target + max(0, desired + max_surge - total))
        self._scale_rs(d, new, min(target, desired), desired)
        # Old Pods may go while at least desired - maxUnavailable stay available; unavailable ones go first.
        available = count(new, "status", "availableReplicas") + sum(count(rs, "status", "availableReplicas")
                                                                    for rs in old)
        budget = max(0, available - (desired - max_unavailable))
        for rs in sorted(old, key=_revision):  # oldest first
            current = count(rs, "spec", "replicas")
            unhealthy = max(0, current - count(rs, "status", "availableReplicas"))
            cut = min(current, unhealthy + budget)
            budget -= max(0, cut - unhealthy)
            self._scale_rs(d, rs, current - cut, desired)

    def _scale_rs(self, d: dict[str, Any], rs: dict[str, Any], replicas: int, desired: int) -> None:
        current = self.ctx.get(RS, key_of(rs))
        if current is None:
            return
        annotations = dict(meta(current).get("annotations") or {})
        wanted_ann = {**annotations, DESIRED: str(desired)}
        was = int((current.get("spec") or {}).get("replicas", 0))
        if was == replicas and annotations == wanted_ann:
            return
        new = copy.deepcopy(current)
        new["spec"]["replicas"] = replicas
        new["metadata"]["annotations"] = wanted_ann
        if self.ctx.replace(self.rt_rs, new, "kube-controller-manager") is not None and was != replicas:
            direction = "up" if replicas > was else "down"
            self.ctx.event(d, "ScalingReplicaSet",
                           f"Scaled {direction} replica set {meta(rs)['name']} from {was} to {replicas}",
                           "deployment-controller")

    def _status(self, d: dict[str, Any], new: dict[str, Any] | None, owned: list[dict[str, Any]],
                desired: int) -> None:
        d = self.ctx.get(self.gr, key_of(d)) or d
        spec = d.get("spec") or {}
        rss = [rs for rs in (self.ctx.get(RS, key_of(rs)) for rs in owned) if rs is not None]
        new_fresh = None if new is None else self.ctx.get(RS, key_of(new))

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
            condition(old_conds, "Available", "True" if is_available else "False",
                      "MinimumReplicasAvailable" if is_available else "MinimumReplicasUnavailable",
                      "Deployment has minimum availability." if is_available
                      else "Deployment does not have minimum availability.", update_time=True)]
        if new_fresh is not None:
            rs_name = meta(new_fresh)["name"]
            done = updated == desired and replicas == desired and new_available >= desired
            conditions.append(condition(
                old_conds, "Progressing", "True", "NewReplicaSetAvailable" if done else "ReplicaSetUpdated",
                f'ReplicaSet "{rs_name}" has successfully progressed.' if done
                else f'ReplicaSet "{rs_name}" is progressing.', update_time=True))
        status: dict[str, Any] = {"observedGeneration": meta(d).get("generation", 1)}
        # As the deployment controller counts: Pods the ReplicaSets should have, minus those available.
        wanted = sum(int((rs.get("spec") or {}).get("replicas", 0)) for rs in rss)
        for key, value in (("replicas", replicas), ("updatedReplicas", updated), ("readyReplicas", ready),
                           ("availableReplicas", available), ("unavailableReplicas", max(0, wanted - available))):
            if value:
                status[key] = value
        status["conditions"] = conditions
        self.ctx.set_status(self.rt, d, status, "kube-controller-manager")


class ReplicaSets:
    """ReplicaSets (and, with ``legacy``, ReplicationControllers) keep ``replicas`` Pods of their template."""

    def __init__(self, ctx: Context, legacy: bool = False) -> None:
        self.ctx = ctx
        self.legacy = legacy
        if legacy:
            self.name, self.kind, self.gr = "replicationcontroller", "ReplicationController", ("",
                                                                                              "replicationcontrollers")
            self.rt = ctx.rt("", "v1", "replicationcontrollers")
            self.component = "replication-controller"
        else:
            self.name, self.kind, self.gr = "replicaset", "ReplicaSet", RS
            self.rt = ctx.rt("apps", "v1", "replicasets")
            self.component = "replicaset-controller"
        self.rt_pod = ctx.rt("", "v1", "pods")

    def keys(self, ev: Event) -> Iterable[ObjKey]:
        """The object itself, or the owner of a Pod that changed."""
        if ev.gr == self.gr:
            return (key_of(ev.obj),)
        if ev.gr == PODS:
            return owner_keys(ev, self.kind)
        return ()

    def all_keys(self) -> Iterable[ObjKey]:
        """Every object of the kind."""
        return [key_of(o) for o in self.ctx.store.list(self.gr)]

    def _selector(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        sel = (obj.get("spec") or {}).get("selector")
        if self.legacy:
            return {"matchLabels": sel} if isinstance(sel, dict) and sel else None
        return sel if isinstance(sel, dict) else None

    def sync(self, key: ObjKey) -> None:
        """Create or delete Pods to match ``replicas``; update the status."""
        rs = self.ctx.get(self.gr, key)
        if rs is None or terminating(rs):
            return
        m, spec = meta(rs), rs.get("spec") or {}
        desired = int(spec.get("replicas", 1))
        pods = [p for p in self.ctx.owned(rs, PODS) if pod_active(p)]
        template = spec.get("template") or {}
        if len(pods) >= desired:
            self.ctx.succeeded(self.name, key)
        for _ in range(desired - len(pods)):
            created = self.ctx.create(self.rt_pod, m["namespace"], self.ctx.pod_from_template(rs, template, {}),
                                      "kube-controller-manager")
            if created is None:
                self.ctx.event(rs, "FailedCreate", f"Error creating: {self.ctx.last_refusal}", self.component,
                               warning=True)
                self.ctx.retry(self.name, key)
                break
            pods.append(created)
            self.ctx.event(rs, "SuccessfulCreate", f"Created pod: {meta(created)['name']}", self.component)
        if len(pods) > desired:
            # Delete the least useful first: unbound, then not ready, then the newest.
            def rank(p: dict[str, Any]) -> tuple[int, int, str]:
                bound = 1 if (p.get("spec") or {}).get("nodeName") else 0
                return (bound, 1 if pod_ready(p) else 0, "~" + meta(p).get("creationTimestamp", ""))

            pods.sort(key=rank)
            for p in pods[:len(pods) - desired]:
                if self.ctx.delete(self.rt_pod, p):
                    self.ctx.event(rs, "SuccessfulDelete", f"Deleted pod: {meta(p)['name']}", self.component)
            pods = pods[len(pods) - desired:]
        selector = self._selector(rs)
        labels_ok = sum(1 for p in pods if labels_match(selector, meta(p).get("labels") or {}))
        ready = sum(1 for p in pods if pod_ready(p))
        status: dict[str, Any] = {"replicas": len(pods)}
        for k, value in (("fullyLabeledReplicas", labels_ok), ("readyReplicas", ready), ("availableReplicas", ready)):
            if value:
                status[k] = value
        status["observedGeneration"] = m.get("generation", 1)
        self.ctx.set_status(self.rt, rs, status, "kube-controller-manager")


class StatefulSets:
    """Ordinal Pods ``<name>-0..n-1`` with their volume claims, one at a time (OrderedReady) or in parallel."""

    name = "statefulset"
    gr = ("apps", "statefulsets")

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.rt = ctx.rt("apps", "v1", "statefulsets")
        self.rt_pod = ctx.rt("", "v1", "pods")
        self.rt_pvc = ctx.rt("", "v1", "persistentvolumeclaims")

    def keys(self, ev: Event) -> Iterable[ObjKey]:
        """The StatefulSet itself, or the owner of a Pod that changed."""
        if ev.gr == self.gr:
            return (key_of(ev.obj),)
        if ev.gr == PODS:
            return owner_keys(ev, "StatefulSet")
        return ()

    def all_keys(self) -> Iterable[ObjKey]:
        """Every StatefulSet."""
        return [key_of(o) for o in self.ctx.store.list(self.gr)]

    def _claims(self, sts: dict[str, Any], pod_name: str, ordinal: int) -> list[tuple[str, str]] | None:
        """Make sure the Pod's claims exist; ``(volume, claim)`` pairs, or None when one could not be created."""
        spec = sts.get("spec") or {}
        ns, name = key_of(sts)
        selector_labels = (spec.get("selector") or {}).get("matchLabels") or {}
        retention = spec.get("persistentVolumeClaimRetentionPolicy") or {}
        out = []
        for t in spec.get("volumeClaimTemplates") or []:
            vol = (t.get("metadata") or {}).get("name", "")
            claim = f"{vol}-{name}-{ordinal}"
            out.append((vol, claim))
            if self.ctx.get(("", "persistentvolumeclaims"), (ns, claim)) is not None:
                continue
            m: dict[str, Any] = {"name": claim, "labels": {**((t.get("metadata") or {}).get("labels") or {}),
                                                           **selector_labels}}
            if (t.get("metadata") or {}).get("annotations"):
                m["annotations"] = dict(t["metadata"]["annotations"])
            if retention.get("whenDeleted") == "Delete":
                m["ownerReferences"] = [owner_ref(sts)]
            body = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": m,
                    "spec": copy.deepcopy(t.get("spec") or {})}
            if self.ctx.create(self.rt_pvc, ns, body, "kube-controller-manager") is None:
                self.ctx.event(sts, "FailedCreate", f"create Claim {claim} for Pod {pod_name} in StatefulSet "
                               f"{name} failed", "statefulset-controller", warning=True)
                return None
            self.ctx.event(sts, "SuccessfulCreate", f"create Claim {claim} Pod {pod_name} in StatefulSet "
                           f"{name} success", "statefulset-controller")
        return out

    def sync(self, key: ObjKey) -> None:
        """Create, delete and replace ordinal Pods; update the status."""
        sts = self.ctx.get(self.gr, key)
        if sts is None or terminating(sts):
            return
        m, spec = meta(sts), sts.get("spec") or {}
        ns, name = key
        desired = int(spec.get("replicas", 1))
        template = spec.get("template") or {}
        revision = f"{name}-{template_hash(template)}"
        ordered = spec.get("podManagementPolicy", "OrderedReady") == "OrderedReady"
        by_index: dict[int, dict[str, Any]] = {}
        for p in self.ctx.owned(sts, PODS):
            suffix = meta(p)["name"][len(name) + 1:]
            if suffix.isdigit() and not terminating(p):
                by_index[int(suffix)] = p
        for i in range(desired):
            if i in by_index:
                continue
            if ordered and any(not pod_ready(by_index[j]) for j in range(i) if j in by_index):
                break
            pod_name = f"{name}-{i}"
            claims = self._claims(sts, pod_name, i)
            if claims is None:
                self.ctx.retry(self.name, key)
                break
            body = self.ctx.pod_from_template(sts, template, {
                "statefulset.kubernetes.io/pod-name": pod_name, "apps.kubernetes.io/pod-index": str(i),
                "controller-revision-hash": revision}, name=pod_name)
            body["spec"].setdefault("hostname", pod_name)
            if spec.get("serviceName"):
                body["spec"].setdefault("subdomain", spec["serviceName"])
            volumes = body["spec"].setdefault("volumes", [])
            for vol, claim in claims:
                if not any(v.get("name") == vol for v in volumes):
                    volumes.append({"name": vol, "persistentVolumeClaim": {"claimName": claim}})
            if not volumes:
                del body["spec"]["volumes"]
            created = self.ctx.create(self.rt_pod, ns, body, "kube-controller-manager")
            if created is None:
                self.ctx.event(sts, "FailedCreate", f"create Pod {pod_name} in StatefulSet {name} failed",
                               "statefulset-controller", warning=True)
                self.ctx.retry(self.name, key)
                break
            self.ctx.event(sts, "SuccessfulCreate", f"create Pod {pod_name} in StatefulSet {name} successful",
                           "statefulset-controller")
            by_index[i] = created
            if ordered:
                break  # the next ordinal waits for this one to be Ready
        for i in sorted((i for i in by_index if i >= desired), reverse=True):
            p = by_index.pop(i)
            if self.ctx.delete(self.rt_pod, p):
                self.ctx.event(sts, "SuccessfulDelete", f"delete Pod {meta(p)['name']} in StatefulSet {name} "
                               "successful", "statefulset-controller")
        live = [by_index[i] for i in sorted(by_index)]
        rolling = (spec.get("updateStrategy") or {}).get("type", "RollingUpdate") == "RollingUpdate"
        outdated = [p for p in live if (meta(p).get("labels") or {}).get("controller-revision-hash") != revision]
        if rolling and outdated and len(live) == desired and all(pod_ready(p) for p in live):
            # Replace one outdated Pod at a time, highest ordinal first; its ordinal is recreated next pass.
            self.ctx.delete(self.rt_pod, outdated[-1])
        ready = sum(1 for p in live if pod_ready(p))
        updated = len(live) - len(outdated)
        status: dict[str, Any] = {"observedGeneration": m.get("generation", 1), "replicas": len(live),
                                  "availableReplicas": ready, "currentReplicas": len(live) if not outdated
                                  else len(outdated), "updatedReplicas": updated,
                                  "currentRevision": revision if not outdated else (sts.get("status") or {})
                                  .get("currentRevision", revision), "updateRevision": revision,
                                  "collisionCount": 0}
        if ready:
            status["readyReplicas"] = ready
        self.ctx.set_status(self.rt, sts, status, "kube-controller-manager")


class DaemonSets:
    """One Pod per Ready node whose labels and taints admit the template, bound directly."""

    name = "daemonset"
    gr = ("apps", "daemonsets")

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.rt = ctx.rt("apps", "v1", "daemonsets")
        self.rt_pod = ctx.rt("", "v1", "pods")

    def keys(self, ev: Event) -> Iterable[ObjKey]:
        """The DaemonSet, the owner of a Pod that changed, or every DaemonSet when a node changed."""
        if ev.gr == self.gr:
            return (key_of(ev.obj),)
        if ev.gr == PODS:
            return owner_keys(ev, "DaemonSet")
        if ev.gr == NODES:
            return self.all_keys()
        return ()

    def all_keys(self) -> Iterable[ObjKey]:
        """Every DaemonSet."""
        return [key_of(o) for o in self.ctx.store.list(self.gr)]

    def sync(self, key: ObjKey) -> None:
        """Create and delete Pods per node; roll one node at a time; update the status."""
        ds = self.ctx.get(self.gr, key)
        if ds is None or terminating(ds):
            return
        m, spec = meta(ds), ds.get("spec") or {}
        template = spec.get("template") or {}
        h = template_hash(template)
        probe = {"spec": template.get("spec") or {}}
        # Every node is looked at: a DaemonSet over a pool of a million nodes makes a million Pods.
        eligible = {meta(n)["name"] for _, n in self.ctx.store.scan(NODES) if simnodes.node_ready(n)
                    and scheduling.matches_affinity(probe, n) and scheduling.untolerated_taint(probe, n) is None}
        by_node: dict[str, list[dict[str, Any]]] = {}
        for p in self.ctx.owned(ds, PODS):
            if pod_active(p):
                by_node.setdefault((p.get("spec") or {}).get("nodeName") or "", []).append(p)
        for node, pods in list(by_node.items()):
            if node not in eligible:
                for p in pods:
                    self.ctx.delete(self.rt_pod, p)
                del by_node[node]
            elif len(pods) > 1:
                for p in pods[1:]:
                    self.ctx.delete(self.rt_pod, p)
                by_node[node] = pods[:1]
        for node in sorted(eligible - set(by_node)):
            created = self.ctx.create(self.rt_pod, m["namespace"], self.ctx.pod_from_template(
                ds, template, {"controller-revision-hash": h, "pod-template-generation":
                               str(m.get("generation", 1))}, node=node), "kube-controller-manager")
            if created is not None:
                by_node[node] = [created]
                self.ctx.event(ds, "SuccessfulCreate", f"Created pod: {meta(created)['name']}",
                               "daemonset-controller")
            else:
                self.ctx.retry(self.name, key)
        pods = [ps[0] for ps in by_node.values()]
        outdated = [p for p in pods if (meta(p).get("labels") or {}).get("controller-revision-hash") != h]
        rolling = (spec.get("updateStrategy") or {}).get("type", "RollingUpdate") == "RollingUpdate"
        if rolling and outdated and all(pod_ready(p) for p in pods):
            self.ctx.delete(self.rt_pod, outdated[0])  # maxUnavailable 1: one node at a time
        ready = sum(1 for p in pods if pod_ready(p))
        status: dict[str, Any] = {"currentNumberScheduled": len(pods), "desiredNumberScheduled": len(eligible),
                                  "numberMisscheduled": 0, "numberReady": ready,
                                  "observedGeneration": m.get("generation", 1),
                                  "updatedNumberScheduled": len(pods) - len(outdated)}
        if ready:
            status["numberAvailable"] = ready
        if len(eligible) - ready > 0:
            status["numberUnavailable"] = len(eligible) - ready
        self.ctx.set_status(self.rt, ds, status, "kube-controller-manager")


class Jobs:
    """Keep ``parallelism`` Pods running until ``completions`` succeed; fail after ``backoffLimit`` failures."""

    name = "job"
    gr = ("batch", "jobs")

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.rt = ctx.rt("batch", "v1", "jobs")
        self.rt_pod = ctx.rt("", "v1", "pods")

    def keys(self, ev: Event) -> Iterable[ObjKey]:
        """The Job itself, or the owner of a Pod that changed."""
        if ev.gr == self.gr:
            return (key_of(ev.obj),)
        if ev.gr == PODS:
            return owner_keys(ev, "Job")
        return ()

    def all_keys(self) -> Iterable[ObjKey]:
        """Every Job."""
        return [key_of(o) for o in self.ctx.store.list(self.gr)]

    def sync(self, key: ObjKey) -> None:
        """Create Pods, count successes and failures, finish the Job."""
        job = self.ctx.get(self.gr, key)
        if job is None or terminating(job):
            return
        m, spec = meta(job), job.get("spec") or {}
        old = job.get("status") or {}
        conds = old.get("conditions") or []
        if any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True" for c in conds):
            return
        completions = spec.get("completions")
        target = int(completions) if completions is not None else 1
        parallelism = int(spec.get("parallelism", 1))
        backoff_limit = int(spec.get("backoffLimit", 6))
        pods = [p for p in self.ctx.owned(job, PODS) if not terminating(p)]
        succeeded = sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Succeeded")
        failed = sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Failed")
        active = [p for p in pods if pod_active(p)]
        status: dict[str, Any] = {"startTime": old.get("startTime") or now_rfc3339(), "uncountedTerminatedPods": {}}
        now = now_rfc3339()

        def finished(kind: str, reason: str, message: str) -> list[dict[str, Any]]:
            return [dict(condition(conds, kind + "Target" if kind == "Failure" else kind, "True", reason, message,
                                   probe=True), lastProbeTime=now)]

        if succeeded >= target:
            status["completionTime"] = now
            status["conditions"] = [*finished("SuccessCriteriaMet", "CompletionsReached",
                                              "Reached expected number of succeeded pods"),
                                    *finished("Complete", "CompletionsReached",
                                              "Reached expected number of succeeded pods")]
            self.ctx.event(job, "Completed", "Job completed", "job-controller")
        elif failed > backoff_limit:
            for p in active:
                self.ctx.delete(self.rt_pod, p)
            active = []
            message = "Job has reached the specified backoff limit"
            status["conditions"] = [*finished("Failure", "BackoffLimitExceeded", message),
                                    *finished("Failed", "BackoffLimitExceeded", message)]
            self.ctx.event(job, "BackoffLimitExceeded", message, "job-controller", warning=True)
        elif not spec.get("suspend"):
            want = min(parallelism, target - succeeded) - len(active)
            labels = {"batch.kubernetes.io/controller-uid": m["uid"], "batch.kubernetes.io/job-name": m["name"],
                      "controller-uid": m["uid"], "job-name": m["name"]}
            for _ in range(max(0, want)):
                created = self.ctx.create(self.rt_pod, m["namespace"], self.ctx.pod_from_template(
                    job, spec.get("template") or {}, labels), "job-controller")
                if created is not None:
                    active.append(created)
                    self.ctx.event(job, "SuccessfulCreate", f"Created pod: {meta(created)['name']}",
                                   "job-controller")
                else:
                    self.ctx.retry(self.name, key)
                    break
        if active and succeeded < target:
            status["active"] = len(active)
        status["ready"] = sum(1 for p in active if pod_ready(p)) if succeeded < target else 0
        if succeeded:
            status["succeeded"] = succeeded
        if failed:
            status["failed"] = failed
        status["terminating"] = 0
        self.ctx.set_status(self.rt, job, status, "job-controller")
