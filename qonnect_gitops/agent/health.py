"""Health of applied objects: one small function per kind, kstatus rules.

Each function takes a live object and returns ``(status, message)`` where status is
``Healthy``, ``Progressing``, ``Degraded`` or ``Unknown``. A controller that has not
observed the latest generation is ``Progressing``; ``Unknown`` counts as not ready;
failed conditions (``ProgressDeadlineExceeded``, Job ``Failed``) are ``Degraded`` at
once instead of waiting for a timeout. Kinds without a function are ``Healthy`` once
they exist. ``rollup`` groups objects per component (``qonnect.io/app`` +
``qonnect.io/component`` labels) for the report.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from qonnect_gitops.model.labels import APP_LABEL, COMPONENT_LABEL

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


WORKLOAD_REPLICAS = {("apps", "Deployment"): "availableReplicas", ("apps", "StatefulSet"): "readyReplicas"}


@dataclass
class ComponentRollup:
    component: str  # "app/component"
    status: HealthStatus
    ready: int
    desired: int
    completed: bool
    message: str


_ORDER = {HEALTHY: 0, PROGRESSING: 1, UNKNOWN: 2, DEGRADED: 3}


def rollup(objects: list[tuple[dict[str, Any], Health]]) -> list[ComponentRollup]:
    """Per component: the worst status of its objects, ready/desired replicas of its workloads."""
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
        ready = desired = 0
        jobs = completed_jobs = 0
        for obj, (status, msg) in groups[name]:
            if _ORDER[status] > _ORDER[worst]:
                worst = status
                message = f"{obj['kind']} {obj['metadata']['name']}: {msg}"
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
        out.append(ComponentRollup(name, worst, ready, desired, jobs > 0 and completed_jobs == jobs,
                                   message[:512]))
    return out


def _cluster_api(obj: dict[str, Any]) -> Health:
    from qonnect_gitops.agent.capi import cluster_health  # its module imports this one

    return cluster_health(obj)


CHECKS[("cluster.x-k8s.io", "Cluster")] = _cluster_api

