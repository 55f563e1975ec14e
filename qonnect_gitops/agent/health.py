"""Health of applied objects: one small function per kind, kstatus rules.

Each function takes a live object and returns ``(status, message)`` where status is
``Healthy``, ``Progressing``, ``Degraded`` or ``Unknown``. A controller that has not
observed the latest generation is ``Progressing``; ``Unknown`` counts as not ready;
failed conditions (``ProgressDeadlineExceeded``, Job ``Failed``) are ``Degraded`` at
once instead of waiting for a timeout. Kinds without a function are ``Healthy`` once
they exist. ``rollup`` groups objects per component (``qonnect.io/app`` +
``qonnect.io/component`` labels) for the report.

Two checks need the pods beside the object and give a machine reason
(``model.status.HealthReason``) with their verdict: ``unschedulable`` (a workload whose
pods the scheduler keeps refusing past a grace: ``Degraded``/``Unschedulable``) and
``service_endpoints`` (a Service whose backends run on this cluster but select no ready
pod: ``Progressing``/``NoReadyEndpoints``; one rendered for callers only:
``Healthy``/``CallerOnly``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from qonnect_gitops.agent.inventory import ObjKey, key_of
from qonnect_gitops.model.labels import APP_LABEL, CILIUM_GLOBAL, COMPONENT_LABEL, match_label_selector_object
from qonnect_gitops.model.status import HealthReason

HealthStatus = Literal["Healthy", "Progressing", "Degraded", "Unknown"]
Health = tuple[HealthStatus, str]

HEALTHY: HealthStatus = "Healthy"
PROGRESSING: HealthStatus = "Progressing"
DEGRADED: HealthStatus = "Degraded"
UNKNOWN: HealthStatus = "Unknown"


def _condition(obj: dict[str, Any], ctype: str) -> dict[str, Any] | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == ctype:
            return cond  # type: ignore[no-any-return]
    return None


def _observed(obj: dict[str, Any]) -> Health | None:
    """Progressing when the controller has not seen the latest spec yet."""
    status = obj.get("status")
    if not status:
        return (PROGRESSING, "waiting for the controller to report status")
    generation = (obj.get("metadata") or {}).get("generation")
    observed = status.get("observedGeneration")
    if generation is not None and (observed is None or observed < generation):
        return (PROGRESSING, f"waiting for the controller to observe generation {generation}")
    return None


def deployment(obj: dict[str, Any]) -> Health:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    if spec.get("paused"):
        return (PROGRESSING, "deployment is paused")
    # A deadline condition is only trusted once the controller saw the current spec: an old
    # rollout's timeout must not fail the new one (kubectl rollout status does the same).
    if (pending := _observed(obj)) is not None:
        return pending
    progressing = _condition(obj, "Progressing")
    if progressing and progressing.get("reason") == "ProgressDeadlineExceeded":
        return (DEGRADED, f"deployment exceeded its progress deadline: {progressing.get('message', '')}".strip())
    want = spec.get("replicas", 1)
    updated, total = status.get("updatedReplicas", 0), status.get("replicas", 0)
    available = status.get("availableReplicas", 0)
    if updated < want:
        return (PROGRESSING, f"{updated} of {want} replicas updated")
    if total > updated:
        return (PROGRESSING, f"{total - updated} old replicas pending termination")
    if available < updated:
        return (PROGRESSING, f"{available} of {updated} updated replicas available")
    return (HEALTHY, f"{available} of {want} replicas available")


def statefulset(obj: dict[str, Any]) -> Health:
    if (pending := _observed(obj)) is not None:
        return pending
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    want = spec.get("replicas", 1)
    ready = status.get("readyReplicas", 0)
    if ready < want:
        return (PROGRESSING, f"{ready} of {want} replicas ready")
    strategy = (spec.get("updateStrategy") or {}).get("type", "RollingUpdate")
    if strategy == "RollingUpdate":
        partition = ((spec.get("updateStrategy") or {}).get("rollingUpdate") or {}).get("partition", 0)
        updated = status.get("updatedReplicas", 0)
        if updated < want - partition:
            return (PROGRESSING, f"{updated} of {want - partition} replicas updated")
        if status.get("updateRevision") and status.get("currentRevision") != status.get("updateRevision") \
                and partition == 0:
            return (PROGRESSING, "rolling update in progress")
    return (HEALTHY, f"{ready} of {want} replicas ready")


def daemonset(obj: dict[str, Any]) -> Health:
    if (pending := _observed(obj)) is not None:
        return pending
    status = obj.get("status") or {}
    want = status.get("desiredNumberScheduled", 0)
    updated = status.get("updatedNumberScheduled", 0)
    available = status.get("numberAvailable", 0)
    if updated < want:
        return (PROGRESSING, f"{updated} of {want} pods updated")
    if available < want:
        return (PROGRESSING, f"{available} of {want} pods available")
    return (HEALTHY, f"{available} of {want} pods available")


def job(obj: dict[str, Any]) -> Health:
    failed = _condition(obj, "Failed")
    if failed and failed.get("status") == "True":
        return (DEGRADED, f"job failed: {failed.get('reason', '')} {failed.get('message', '')}".strip())
    complete = _condition(obj, "Complete")
    if complete and complete.get("status") == "True":
        return (HEALTHY, "job completed")
    suspended = _condition(obj, "Suspended")
    if suspended and suspended.get("status") == "True":
        return (PROGRESSING, "job is suspended")
    status = obj.get("status") or {}
    return (PROGRESSING, f"job running ({status.get('active', 0)} active, {status.get('succeeded', 0)} succeeded)")


def service(obj: dict[str, Any]) -> Health:
    if (obj.get("spec") or {}).get("type") != "LoadBalancer":
        return (HEALTHY, "")
    ingress = ((obj.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
    if ingress:
        first = ingress[0]
        return (HEALTHY, f"load balancer at {first.get('ip') or first.get('hostname', '')}")
    return (PROGRESSING, "waiting for a load balancer address")


def persistentvolumeclaim(obj: dict[str, Any]) -> Health:
    phase = (obj.get("status") or {}).get("phase")
    if phase == "Bound":
        return (HEALTHY, "bound")
    if phase == "Lost":
        return (DEGRADED, "the bound volume was lost")
    if phase == "Pending":
        return (PROGRESSING, "waiting to be bound")
    return (UNKNOWN, "no phase reported")


def customresourcedefinition(obj: dict[str, Any]) -> Health:
    established = _condition(obj, "Established")
    if established and established.get("status") == "True":
        return (HEALTHY, "established")
    names = _condition(obj, "NamesAccepted")
    if names and names.get("status") == "False":
        return (DEGRADED, f"names not accepted: {names.get('message', '')}")
    return (PROGRESSING, "waiting to be established")


def namespace(obj: dict[str, Any]) -> Health:
    phase = (obj.get("status") or {}).get("phase")
    if phase == "Active":
        return (HEALTHY, "")
    if phase == "Terminating":
        return (DEGRADED, "namespace is terminating")
    return (PROGRESSING, "waiting for the namespace to become active")


CHECKS: dict[tuple[str, str], Callable[[dict[str, Any]], Health]] = {
    ("apps", "Deployment"): deployment,
    ("apps", "StatefulSet"): statefulset,
    ("apps", "DaemonSet"): daemonset,
    ("batch", "Job"): job,
    ("", "Service"): service,
    ("", "PersistentVolumeClaim"): persistentvolumeclaim,
    ("apiextensions.k8s.io", "CustomResourceDefinition"): customresourcedefinition,
    ("", "Namespace"): namespace,
}


def health_of(obj: dict[str, Any] | None) -> Health:
    """Health of one live object (None: it does not exist)."""
    if obj is None:
        return (DEGRADED, "object is missing")
    group = obj.get("apiVersion", "").split("/")[0] if "/" in obj.get("apiVersion", "") else ""
    check = CHECKS.get((group, obj.get("kind", "")))
    return check(obj) if check else (HEALTHY, "")


# Kinds whose pods the scheduler places from a pod template (a Job's pods too, but a Job
# has its own deadline); a DaemonSet's pods are pinned to their node and not checked here.
POD_TEMPLATE_KINDS = frozenset({("apps", "Deployment"), ("apps", "StatefulSet"), ("apps", "ReplicaSet"),
                                ("apps", "DaemonSet"), ("batch", "Job"), ("", "ReplicationController")})
SCHEDULED_KINDS = frozenset({("apps", "Deployment"), ("apps", "StatefulSet")})


def group_kind(obj: Mapping[str, Any]) -> tuple[str, str]:
    """``(group, kind)`` of an object (the core group is ``""``)."""
    api_version = obj.get("apiVersion", "")
    return (api_version.split("/")[0] if "/" in api_version else "", obj.get("kind", ""))


def selects(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """Whether a LabelSelector matches ``labels``. An empty or missing selector matches
    nothing here (the API server would match everything): no pod is "its" pod."""
    if not selector or not (selector.get("matchLabels") or selector.get("matchExpressions")):
        return False
    return match_label_selector_object(selector, labels)


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def _since(timestamp: str | None) -> float | None:
    """Seconds since the epoch of an RFC 3339 time, or None when absent or unreadable."""
    if not timestamp:
        return None
    try:
        return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def unschedulable(workload: Mapping[str, Any], pods: Iterable[Mapping[str, Any]], now: float,
                  grace: float) -> tuple[Health, HealthReason] | None:
    """``Degraded``/``Unschedulable`` when a pod of ``workload`` (same namespace, matched by its
    selector) is Pending with ``PodScheduled=False`` reason ``Unschedulable`` for longer than
    ``grace`` seconds (since the condition's ``lastTransitionTime``); else None.

    The grace leaves room for a cluster autoscaler or a node coming back; past it the pod
    waits for something the plan did not provide (a node shape, an architecture, a label)."""
    ns = (workload.get("metadata") or {}).get("namespace") or ""
    selector = (workload.get("spec") or {}).get("selector")
    stuck, oldest, message = 0, now, ""
    for pod in pods:
        if ((pod.get("metadata") or {}).get("namespace") or "") != ns or not selects(selector, _labels(pod)):
            continue
        status = pod.get("status") or {}
        if status.get("phase", "Pending") != "Pending":
            continue
        for cond in status.get("conditions") or []:
            if cond.get("type") == "PodScheduled" and cond.get("status") == "False" \
                    and cond.get("reason") == "Unschedulable":
                since = _since(cond.get("lastTransitionTime"))
                if since is not None and now - since >= grace:
                    stuck += 1
                    if since <= oldest:
                        oldest, message = since, cond.get("message", "")
    if not stuck:
        return None
    return ((DEGRADED, f"{stuck} pod(s) unschedulable for {now - oldest:.0f}s: {message}".strip()),
            HealthReason.UNSCHEDULABLE)


def _pod_ready(pod: Mapping[str, Any]) -> bool:
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def service_endpoints(svc: Mapping[str, Any], health: Health, workloads: Iterable[Mapping[str, Any]],
                      pods: Iterable[Mapping[str, Any]]) -> tuple[Health, HealthReason] | None:
    """The verdict on a selector Service from where its backends run.

    ``workloads`` are the objects this cluster's branch runs: where none of their pod
    templates in the Service's namespace carries the Service's selector, the Service was
    rendered here for callers only (their names resolve; the mesh or the Multi-Cluster
    Services API carries the traffic to clusters that host the backends), and it is
    ``Healthy``/``CallerOnly`` whatever its endpoints. Where they do, it needs a ready pod
    (or ``publishNotReadyAddresses``): without one it is ``Progressing``/``NoReadyEndpoints``.
    A Service without a selector (its endpoints are written by hand, or ExternalName) and a
    Service already unhealthy for its own reasons are left as they are (None)."""
    spec = svc.get("spec") or {}
    selector = spec.get("selector") or {}
    if not selector or spec.get("type") == "ExternalName" or health[0] != HEALTHY:
        return None
    as_label_selector = {"matchLabels": selector}
    ns = (svc.get("metadata") or {}).get("namespace") or ""
    hosted = any(
        group_kind(w) in POD_TEMPLATE_KINDS
        and ((w.get("metadata") or {}).get("namespace") or "") == ns
        and selects(as_label_selector, _labels((w.get("spec") or {}).get("template") or {}))
        for w in workloads)
    if not hosted:
        annotations = (svc.get("metadata") or {}).get("annotations") or {}
        note = " (Cilium global service)" if annotations.get(CILIUM_GLOBAL) == "true" else ""
        return ((HEALTHY, f"caller-only: no backend runs on this cluster{note}"), HealthReason.CALLER_ONLY)
    if spec.get("publishNotReadyAddresses"):
        return None
    ready = sum(1 for p in pods if ((p.get("metadata") or {}).get("namespace") or "") == ns
                and selects(as_label_selector, _labels(p)) and _pod_ready(p))
    if ready:
        return None
    return ((PROGRESSING, "no ready pod matches the selector: the Service has no endpoints"),
            HealthReason.NO_READY_ENDPOINTS)


class PodIndex:
    """The pods of one namespace by label, so each object's check reads only the pods that
    carry one of its selector's ``matchLabels`` pairs instead of every pod (100 Services
    over 2,000 pods: a scan each is quadratic)."""

    def __init__(self, pods: Iterable[Mapping[str, Any]]) -> None:
        self.pods = list(pods)
        self.by_label: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
        for pod in self.pods:
            for pair in _labels(pod).items():
                self.by_label.setdefault(pair, []).append(pod)

    def candidates(self, obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        """A superset of the pods ``obj``'s selector can match (the checks match exactly)."""
        spec = obj.get("spec") or {}
        pairs = (spec.get("selector") or {}) if group_kind(obj) == ("", "Service") else \
            ((spec.get("selector") or {}).get("matchLabels") or {})
        if not pairs:
            return self.pods
        return min((self.by_label.get(pair, []) for pair in pairs.items()), key=len)


def needs_pods(obj: Mapping[str, Any], health: Health) -> bool:
    """Whether ``pod_verdict`` may change this object's health: a Deployment or StatefulSet
    not healthy (also once Degraded by its progress deadline: the reason must outlive it),
    a Service healthy by its own rules."""
    kind = group_kind(obj)
    if kind in SCHEDULED_KINDS:
        return health[0] in (PROGRESSING, DEGRADED) and bool(obj.get("status"))
    return kind == ("", "Service") and health[0] == HEALTHY


def pod_verdict(obj: Mapping[str, Any], health: Health, workloads: Iterable[Mapping[str, Any]],
                pods: Iterable[Mapping[str, Any]], now: float, grace: float) -> tuple[Health, HealthReason] | None:
    """The health ``obj`` gets from the pods of its namespace (``unschedulable`` or
    ``service_endpoints``), or None when they change nothing."""
    if not needs_pods(obj, health):
        return None
    if group_kind(obj) == ("", "Service"):
        return service_endpoints(obj, health, workloads, pods)
    return unschedulable(obj, pods, now, grace)


# Workloads that never complete: every pod-template kind but Job, and CronJob.
_NEVER_COMPLETE = (POD_TEMPLATE_KINDS - {("batch", "Job")}) | {("batch", "CronJob")}
WORKLOAD_REPLICAS = {("apps", "Deployment"): "availableReplicas", ("apps", "StatefulSet"): "readyReplicas"}


@dataclass
class ComponentRollup:
    component: str  # "app/component"
    status: HealthStatus
    ready: int
    desired: int
    completed: bool
    message: str
    reason: HealthReason | None = None  # the reason of the object that set the status


_ORDER = {HEALTHY: 0, PROGRESSING: 1, UNKNOWN: 2, DEGRADED: 3}


def rollup(objects: list[tuple[dict[str, Any], Health]],
           reasons: Mapping[ObjKey, HealthReason] | None = None) -> list[ComponentRollup]:
    """Per component: the worst status of its objects, ready/desired replicas of its workloads.
    ``reasons`` (by object key): the component carries the reason of its worst object, or,
    all healthy, one every object shares (a component present only as caller-only Services)."""
    reasons = reasons or {}
    groups: dict[str, list[tuple[dict[str, Any], Health]]] = {}
    for obj, health in objects:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        app, comp = labels.get(APP_LABEL), labels.get(COMPONENT_LABEL)
        if not app or not comp:
            continue
        groups.setdefault(f"{app}/{comp}", []).append((obj, health))
    out = []
    for name in sorted(groups):
        worst: HealthStatus = HEALTHY
        message = ""
        reason: HealthReason | None = None
        ready = desired = 0
        jobs = completed_jobs = runners = 0
        for obj, (status, msg) in groups[name]:
            if _ORDER[status] > _ORDER[worst]:
                worst = status
                message = f"{obj['kind']} {obj['metadata']['name']}: {msg}"
                reason = reasons.get(key_of(obj))
            api_group = obj["apiVersion"].split("/")[0] if "/" in obj["apiVersion"] else ""
            kind = (api_group, obj["kind"])
            st, spec = obj.get("status") or {}, obj.get("spec") or {}
            if kind in WORKLOAD_REPLICAS:
                desired += spec.get("replicas", 1)
                ready += min(st.get(WORKLOAD_REPLICAS[kind], 0), spec.get("replicas", 1))
            elif kind == ("apps", "DaemonSet"):
                desired += st.get("desiredNumberScheduled", 0)
                ready += st.get("numberReady", 0)
            elif kind == ("batch", "Job"):
                jobs += 1
                completed_jobs += status == HEALTHY
            runners += kind in _NEVER_COMPLETE
        if worst == HEALTHY:
            shared = {reasons.get(key_of(obj)) for obj, _ in groups[name]}
            reason = shared.pop() if len(shared) == 1 else None
            if reason is not None:
                first, (_, first_msg) = groups[name][0]
                message = f"{first['kind']} {first['metadata']['name']}: {first_msg}"
        # Completion is claimed only for a component made of Jobs: the lead takes it as "done,
        # remove it everywhere", which a CronJob or a Deployment beside a Job never is.
        completed = jobs > 0 and completed_jobs == jobs and not runners
        out.append(ComponentRollup(name, worst, ready, desired, completed, message[:512], reason))
    return out


def _cluster_api(obj: dict[str, Any]) -> Health:
    from qonnect_gitops.agent.capi import cluster_health  # its module imports this one

    return cluster_health(obj)


CHECKS[("cluster.x-k8s.io", "Cluster")] = _cluster_api

