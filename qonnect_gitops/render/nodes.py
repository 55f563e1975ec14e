"""Node-level decisions of the plan, written into the pod templates of a cluster branch.

The planner puts a replica on a cluster only after checking that one of its nodes has
an architecture the component's images are built for and that the component tolerates
the cluster's taints. On a cluster whose nodes are mixed that check is worth nothing
unless the pods say so too: without a node affinity the scheduler puts an amd64-only
pod on an arm64 node, where it crashes. So, per cluster:

* ``kubernetes.io/arch In [<the component's architectures the cluster has>]`` is added
  as required node affinity, but only where some node of the cluster has an
  architecture the component does not support (elsewhere it changes nothing and would
  only make the branch differ from the user's manifest);
* the component's tolerations that tolerate one of the cluster's taints are added to
  the pod's tolerations (the planner relied on them to choose the cluster).

The user's own affinity and tolerations are kept: the architecture requirement is
ANDed into every one of their node selector terms, and a toleration already present is
not added twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from qonnect_gitops.model.app import Toleration
from qonnect_gitops.model.cluster import Cluster
from qonnect_gitops.model.goals import Component

ARCH_LABEL = "kubernetes.io/arch"


def pod_spec(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    """The pod template's spec inside a workload object (created where missing), or None
    for a kind that has no pod template."""
    if kind not in ("Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob"):
        return None
    spec: dict[str, Any] = obj.setdefault("spec", {})
    if kind == "CronJob":
        spec = spec.setdefault("jobTemplate", {}).setdefault("spec", {})
    template: dict[str, Any] = spec.setdefault("template", {}).setdefault("spec", {})
    return template


def required_architectures(component: Component, cluster: Cluster) -> tuple[str, ...] | None:
    """The architectures a pod of ``component`` must be pinned to on ``cluster``, or None
    when every node of the cluster runs it."""
    have = cluster.architectures
    if have <= component.architectures:
        return None
    return tuple(sorted(have & component.architectures))


def relied_tolerations(component: Component, cluster: Cluster) -> tuple[Toleration, ...]:
    """The component's tolerations that tolerate a taint of the cluster, in the order
    the user wrote them."""
    return tuple(
        t for t in component.qos.tolerations
        if any(t.tolerates(taint.key, taint.value, taint.effect) for taint in cluster.spec.taints)
    )


def constrain_pods(obj: dict[str, Any], component: Component, cluster: Cluster) -> None:
    """Add the architecture affinity and the tolerations the plan relied on to the pod
    template of ``obj`` (the component's workload, already copied) for ``cluster``."""
    spec = pod_spec(obj, component.kind)
    if spec is None:
        return
    archs = required_architectures(component, cluster)
    if archs is not None:
        _require_architectures(spec, archs)
    tolerations = relied_tolerations(component, cluster)
    if tolerations:
        _add_tolerations(spec, tolerations)


def _require_architectures(spec: dict[str, Any], archs: tuple[str, ...]) -> None:
    expression = {"key": ARCH_LABEL, "operator": "In", "values": list(archs)}
    affinity = spec.setdefault("affinity", {})
    node = affinity.setdefault("nodeAffinity", {})
    required = node.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.get("nodeSelectorTerms") or [{}]
    # Terms are ORed and the expressions of one term ANDed: the requirement goes into
    # every term so that whichever term matches, the node's architecture is right.
    required["nodeSelectorTerms"] = [
        {**term, "matchExpressions": [*(term.get("matchExpressions") or []), expression]}
        for term in terms
    ]


def _add_tolerations(spec: dict[str, Any], tolerations: tuple[Toleration, ...]) -> None:
    present: list[Mapping[str, Any]] = list(spec.get("tolerations") or [])
    for toleration in tolerations:
        rendered = _kubernetes_toleration(toleration)
        if rendered not in present:
            present.append(rendered)
    spec["tolerations"] = present


def _kubernetes_toleration(t: Toleration) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if t.key is not None:
        out["key"] = t.key
    out["operator"] = t.operator
    if t.value:
        out["value"] = t.value
    if t.effect is not None:
        out["effect"] = t.effect
    return out
