"""Cluster API objects for the clusters cloud bursting asks for (pure, deterministic).

For each dynamic cluster of a plan still provisioning or in the fleet
(``Plan.provisioning``), the management cluster of its pool gets, in the pool's
namespace, Cluster API v1beta2 objects the Cluster API controllers act on:

* ``Cluster`` (cluster.x-k8s.io) referencing the infrastructure cluster and the control plane;
* the infrastructure cluster (``DevCluster``, ``AWSCluster``...: the pool's kind and spec);
* the control plane: ``KubeadmControlPlane`` or ``KThreesControlPlane``, with a machine
  template of the pool's kind for its machines;
* a ``MachineDeployment`` whose ``replicas`` are the cluster's worker nodes, with its
  machine template and bootstrap config template (``KubeadmConfigTemplate`` or
  ``KThreesConfigTemplate``).

A cluster that leaves the plan's provisioning state loses its objects from the branch,
and the management cluster's agent prunes them: deleting the ``Cluster`` deletes the
cluster (Cluster API owns the rest).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

from qonnect_gitops.model.goals import Goals
from qonnect_gitops.model.labels import (
    CAPI_CLUSTER_NAME_LABEL,
    CAPI_DEPLOYMENT_NAME_LABEL,
    NODE_SHAPE_ANNOTATION,
    POOL_ANNOTATION,
    REGION_ANNOTATION,
)
from qonnect_gitops.model.plan import DynamicCluster, Plan
from qonnect_gitops.model.pool import ClusterPool

CAPI_GROUP = "cluster.x-k8s.io"
CAPI_VERSION = f"{CAPI_GROUP}/v1beta2"
CONTROL_PLANE_GROUP = "controlplane.cluster.x-k8s.io"
BOOTSTRAP_GROUP = "bootstrap.cluster.x-k8s.io"
POD_CIDR = "10.244.0.0/16"
SERVICE_CIDR = "10.96.0.0/12"

_KINDS = {
    "kubeadm": ("KubeadmControlPlane", "KubeadmConfigTemplate"),
    "k3s": ("KThreesControlPlane", "KThreesConfigTemplate"),
}


def rendered_clusters(plan: Plan) -> tuple[DynamicCluster, ...]:
    """The dynamic clusters whose Cluster API objects stay on the management branch."""
    if plan.provisioning is None:
        return ()
    return plan.provisioning.clusters


def capi_objects(goals: Goals, plan: Plan) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """``(management cluster, component folder, object)`` for every dynamic cluster of the
    plan whose pool is in the goals, in name order."""
    for dyn in rendered_clusters(plan):
        pool = goals.pools.get(dyn.pool)
        if pool is None:
            continue
        for obj in cluster_objects(pool, dyn):
            yield pool.spec.management_cluster, f"pool-{dyn.name}", obj


def cluster_objects(pool: ClusterPool, dyn: DynamicCluster) -> list[dict[str, Any]]:
    """The Cluster API objects of one dynamic cluster (see the module docstring)."""
    spec = pool.spec
    infra = spec.infrastructure
    infra_group = infra.api_version.split("/", 1)[0]
    cp_kind, bootstrap_kind = _KINDS[spec.control_plane]
    name = dyn.name
    ns = spec.namespace
    md = f"{name}-md-0"

    def meta(obj_name: str) -> dict[str, Any]:
        return {"name": obj_name, "namespace": ns, "labels": {CAPI_CLUSTER_NAME_LABEL: name},
                "annotations": {POOL_ANNOTATION: pool.name}}

    node = spec.node
    shape = f"cpu={node.cpu}m,memory={node.memory},pods={node.pods},arch={node.arch}"

    def machine_template(obj_name: str) -> dict[str, Any]:
        m = meta(obj_name)
        m["annotations"][NODE_SHAPE_ANNOTATION] = shape
        return {"apiVersion": infra.api_version, "kind": infra.machine_template_kind,
                "metadata": m,
                "spec": {"template": {"spec": copy.deepcopy(infra.machine_spec)}}}

    cluster_meta = meta(name)
    cluster_meta["annotations"][REGION_ANNOTATION] = spec.region
    cluster = {
        "apiVersion": CAPI_VERSION, "kind": "Cluster", "metadata": cluster_meta,
        "spec": {
            "clusterNetwork": {"pods": {"cidrBlocks": [POD_CIDR]},
                               "services": {"cidrBlocks": [SERVICE_CIDR]}},
            "controlPlaneRef": {"apiGroup": CONTROL_PLANE_GROUP, "kind": cp_kind,
                                "name": f"{name}-control-plane"},
            "infrastructureRef": {"apiGroup": infra_group, "kind": infra.cluster_kind, "name": name},
        },
    }
    infra_cluster = {"apiVersion": infra.api_version, "kind": infra.cluster_kind,
                     "metadata": meta(name), "spec": copy.deepcopy(infra.cluster_spec)}
    cp_template = machine_template(f"{name}-control-plane")
    if spec.control_plane == "kubeadm":
        control_plane = {
            "apiVersion": f"{CONTROL_PLANE_GROUP}/v1beta2", "kind": cp_kind,
            "metadata": meta(f"{name}-control-plane"),
            "spec": {
                "replicas": spec.control_plane_replicas, "version": spec.kubernetes_version,
                "machineTemplate": {"spec": {"infrastructureRef": {
                    "apiGroup": infra_group, "kind": infra.machine_template_kind,
                    "name": f"{name}-control-plane"}}},
            },
        }
    else:
        # cluster-api-k3s still takes a full object reference here (apiVersion + kind).
        control_plane = {
            "apiVersion": f"{CONTROL_PLANE_GROUP}/v1beta2", "kind": cp_kind,
            "metadata": meta(f"{name}-control-plane"),
            "spec": {
                "replicas": spec.control_plane_replicas,
                "version": _k3s_version(spec.kubernetes_version),
                "machineTemplate": {"infrastructureRef": {
                    "apiVersion": infra.api_version, "kind": infra.machine_template_kind,
                    "name": f"{name}-control-plane", "namespace": ns}},
            },
        }
    # Worker nodes carry the pool's label (the bootstrap providers' own defaults do the rest).
    node_label = f"{POOL_ANNOTATION}={pool.name}"
    if spec.control_plane == "kubeadm":
        bootstrap_spec: dict[str, Any] = {"template": {"spec": {"joinConfiguration": {
            "nodeRegistration": {"kubeletExtraArgs": [{"name": "node-labels", "value": node_label}]}}}}}
    else:
        bootstrap_spec = {"template": {"spec": {"agentConfig": {"nodeLabels": [node_label]}}}}
    selector = {CAPI_CLUSTER_NAME_LABEL: name, CAPI_DEPLOYMENT_NAME_LABEL: md}
    machine_deployment = {
        "apiVersion": CAPI_VERSION, "kind": "MachineDeployment", "metadata": meta(md),
        "spec": {
            "clusterName": name,
            "replicas": dyn.nodes,
            "selector": {"matchLabels": dict(selector)},
            "template": {
                "metadata": {"labels": dict(selector)},
                "spec": {
                    "clusterName": name,
                    "version": spec.kubernetes_version,
                    "bootstrap": {"configRef": {"apiGroup": BOOTSTRAP_GROUP, "kind": bootstrap_kind,
                                                "name": md}},
                    "infrastructureRef": {"apiGroup": infra_group,
                                          "kind": infra.machine_template_kind, "name": md},
                },
            },
        },
    }
    bootstrap = {"apiVersion": f"{BOOTSTRAP_GROUP}/v1beta2", "kind": bootstrap_kind,
                 "metadata": meta(md), "spec": bootstrap_spec}
    return [cluster, infra_cluster, control_plane, cp_template, machine_deployment,
            machine_template(md), bootstrap]


def _k3s_version(version: str) -> str:
    """k3s versions carry a ``+k3s<n>`` build suffix; add the first one when absent."""
    return version if "+k3s" in version else f"{version}+k3s1"
