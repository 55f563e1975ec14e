"""The labels and annotations qonnect writes on Kubernetes objects and reads back.

One home for the vocabulary: the renderer writes these keys into every object of a
cluster branch, the agent reads them on live objects (ownership, prune and reconcile
switches), and users may set the annotations in their manifests. Keys are the label
or annotation names; ``*_VALUE`` constants are the values qonnect compares against.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

# -- labels (the renderer writes them on every object) -------------------------------------

MANAGED_BY_LABEL: Final = "app.kubernetes.io/managed-by"
"""Ownership: objects qonnect rendered carry ``MANAGED_BY_LABEL: MANAGED_BY_VALUE``."""
MANAGED_BY_VALUE: Final = "qonnect"
PART_OF_LABEL: Final = "app.kubernetes.io/part-of"
NAME_LABEL: Final = "app.kubernetes.io/name"
APP_LABEL: Final = "qonnect.io/app"
COMPONENT_LABEL: Final = "qonnect.io/component"

# -- annotations -----------------------------------------------------------------------------

DIGEST_ANNOTATION: Final = "qonnect.io/digest"
"""Written by the renderer: the digest of the object's own rendered content."""
RECONCILE_ANNOTATION: Final = "qonnect.io/reconcile"
"""``disabled`` on a manifest or a live object: the agent neither applies nor heals it."""
PRUNE_ANNOTATION: Final = "qonnect.io/prune"
"""On a live object: ``disabled`` keeps it forever; ``enabled``, set by a person (never taken
from a branch), lets the agent delete a protected kind when it leaves the branch."""
RECREATE_ANNOTATION: Final = "qonnect.io/recreate"
"""``enabled`` on a manifest: an immutable-field change deletes and re-creates the object."""
ADOPT_ANNOTATION: Final = "qonnect.io/adopt"
"""``enabled`` on a manifest in the goals: the agent may take over a live object of that
name that it did not create. Without it such an object is refused (``OwnershipConflict``)."""

ENABLED: Final = "enabled"
DISABLED: Final = "disabled"

# -- clusters: the labels every cluster carries implicitly (selectors may match them) --------

CLUSTER_LABEL: Final = "qonnect.io/cluster"
TIER_LABEL: Final = "qonnect.io/tier"
REGION_LABEL: Final = "qonnect.io/region"
DISTRIBUTION_LABEL: Final = "qonnect.io/distribution"
POOL_LABEL: Final = "qonnect.io/pool"
"""On a cluster created from a cluster pool (cloud bursting): the pool's name."""
DRAINING_TAINT: Final = "qonnect.io/draining"
"""The taint a pool cluster gets once it is no longer needed: no component tolerates it."""

# -- Cluster API objects (the renderer writes them for pools; the simulated provider reads them)

CAPI_CLUSTER_NAME_LABEL: Final = "cluster.x-k8s.io/cluster-name"
CAPI_DEPLOYMENT_NAME_LABEL: Final = "cluster.x-k8s.io/deployment-name"
POOL_ANNOTATION: Final = "qonnect.io/pool"
"""On a pool cluster's Cluster API objects: the pool's name."""
NODE_SHAPE_ANNOTATION: Final = "qonnect.io/node-shape"
"""On a machine template: the node shape it stands for, as the pool declares it. Real
providers ignore it (their template's instance type decides); the simulated one builds its
nodes from it."""
REGION_ANNOTATION: Final = "qonnect.io/region"
"""On a pool cluster's Cluster object: the region it is created in."""

# -- mesh annotations (the renderer writes them on Services with mesh: cilium) -------------

CILIUM_GLOBAL: Final = "service.cilium.io/global"
"""``"true"``: a Cilium ClusterMesh global service (its name resolves fleet-wide)."""
CILIUM_SHARED: Final = "service.cilium.io/shared"
"""``"true"`` where the backends run, ``"false"`` where the Service is there for callers only."""


def match_label_selector_object(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """Whether labels match a structured ``LabelSelector`` (matchLabels/matchExpressions)."""
    if selector is None:
        return False
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for req in selector.get("matchExpressions") or []:
        k, op, values = req.get("key"), req.get("operator"), set(req.get("values") or [])
        if op == "In" and labels.get(k) not in values:
            return False
        if op == "NotIn" and k in labels and labels[k] in values:
            return False
        if op == "Exists" and k not in labels:
            return False
        if op == "DoesNotExist" and k in labels:
            return False
    return True
