"""What a management cluster's agent tells the leads about the Cluster API clusters it
applied (cloud bursting): phase, control plane, kubeconfig Secret, failure message.

The health of a ``Cluster`` follows its phase: ``Provisioned`` with the ``Available``
condition True is Healthy, ``Failed`` is Degraded at once (no waiting for a timeout),
anything else is Progressing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from qonnect_gitops.agent.health import DEGRADED, HEALTHY, PROGRESSING, Health
from qonnect_gitops.agent.kube import Kube, KubeError
from qonnect_gitops.logs import get_logger
from qonnect_gitops.model.pool import ClusterApiPhase, ClusterApiStatus

log = get_logger(__name__)

GROUP = "cluster.x-k8s.io"
MAX_REPORTED = 100
_PHASES = {"Pending", "Provisioning", "Provisioned", "Deleting", "Failed"}


def _conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c.get("type", ""): c for c in (obj.get("status") or {}).get("conditions") or []
            if isinstance(c, dict)}


def _failure(obj: dict[str, Any]) -> str:
    """The message of the first False condition (Cluster API puts the reason there)."""
    for cond in _conditions(obj).values():
        if cond.get("status") == "False" and cond.get("message"):
            return str(cond["message"])
    return ""


def cluster_health(obj: dict[str, Any]) -> Health:
    """Health of a Cluster API ``Cluster``."""
    phase = (obj.get("status") or {}).get("phase", "")
    available = _conditions(obj).get("Available", {}).get("status") == "True"
    if phase == "Failed":
        return (DEGRADED, f"cluster provisioning failed: {_failure(obj) or 'no message'}")
    if phase == "Provisioned" and available:
        return (HEALTHY, "")
    return (PROGRESSING, f"cluster is {phase or 'not yet provisioning'}")


def statuses(kube: Kube, health: Sequence[tuple[dict[str, Any], Health]]) -> tuple[ClusterApiStatus, ...]:
    """The Cluster API clusters among the objects whose health was read, read again now
    (heartbeats reuse the last sync's objects: a cluster turning ready must not wait for
    the next sync), with whether their ``<name>-kubeconfig`` Secret exists."""
    out: list[ClusterApiStatus] = []
    secrets = None
    for known, _ in health:
        if known.get("kind") != "Cluster" or not str(known.get("apiVersion", "")).startswith(GROUP + "/"):
            continue
        meta = known.get("metadata") or {}
        name, namespace = meta.get("name", ""), meta.get("namespace", "")
        try:
            obj = kube.get(kube.resource(known["apiVersion"], "Cluster"), namespace, name) or known
        except KubeError as exc:
            log.warning("capi_cluster_unread", cluster=name, error=str(exc))
            obj = known
        status = obj.get("status") or {}
        phase: ClusterApiPhase = status["phase"] if status.get("phase") in _PHASES else "Unknown"
        conds = _conditions(obj)
        control_plane = any(conds.get(t, {}).get("status") == "True"
                            for t in ("ControlPlaneAvailable", "ControlPlaneInitialized"))
        kubeconfig = False
        try:
            secrets = secrets or kube.resource("v1", "Secret")
            kubeconfig = kube.get(secrets, namespace, f"{name}-kubeconfig") is not None
        except KubeError as exc:
            log.warning("capi_kubeconfig_unknown", cluster=name, error=str(exc))
        try:
            out.append(ClusterApiStatus(name=name, namespace=namespace, phase=phase,
                                        control_plane_ready=control_plane, kubeconfig=kubeconfig,
                                        message=_failure(obj)[:512]))
        except ValueError as exc:  # a name the lead's model refuses must not sink the report
            log.warning("capi_cluster_not_reported", cluster=name, error=str(exc))
        if len(out) >= MAX_REPORTED:
            break
    return tuple(out)
