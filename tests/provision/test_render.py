"""The Cluster API objects rendered for a dynamic cluster: valid against the published
CRD schemas (v1beta2), on the management cluster's branch, gone once the cluster is."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

import qonnect_gitops
from qonnect_gitops.model import load_goals
from qonnect_gitops.model.plan import Plan
from qonnect_gitops.render import render
from qonnect_gitops.render.capi import cluster_objects
from qonnect_gitops.render.placement_file import placement_of
from qonnect_gitops.sim.crdvalidation import apply_defaults, validate
from tests.provision.cycles import Fleet
from tests.provision.fleet import POOL, goals_files

CRDS = Path(qonnect_gitops.__file__).parent / "data" / "cluster-api"
K3S_POOL = POOL.replace(b"controlPlane: kubeadm", b"controlPlane: k3s")


def schemas() -> dict[tuple[str, str], dict[str, Any]]:
    out = {}
    for path in CRDS.glob("*.yaml"):
        crd = yaml.safe_load(path.read_text())
        (version,) = crd["spec"]["versions"]
        out[(f"{crd['spec']['group']}/{version['name']}", crd["spec"]["names"]["kind"])] = \
            version["schema"]["openAPIV3Schema"]
    return out


def provisioning(pool: bytes = POOL, replicas: int = 30) -> tuple[Fleet, Plan]:
    f = Fleet(load_goals(goals_files(replicas, pool)))
    f.cycle(0)
    return f, f.cycle(5)


@pytest.mark.parametrize("pool", [POOL, K3S_POOL], ids=["kubeadm", "k3s"])
def test_objects_validate_against_the_cluster_api_schemas(pool: bytes) -> None:
    f, plan = provisioning(pool)
    assert plan.provisioning is not None
    (dyn,) = plan.provisioning.clusters
    objects = cluster_objects(f.goals.pools["burst"], dyn)
    known = schemas()
    kinds = [(o["apiVersion"], o["kind"]) for o in objects]
    assert all(k in known for k in kinds), set(kinds) - set(known)
    for obj in objects:
        schema = known[(obj["apiVersion"], obj["kind"])]
        assert validate(apply_defaults(obj, schema), schema) == [], obj["kind"]
    by_kind = {o["kind"]: o for o in objects}
    assert by_kind["MachineDeployment"]["spec"]["replicas"] == 3
    cp = "KubeadmControlPlane" if pool == POOL else "KThreesControlPlane"
    assert by_kind["Cluster"]["spec"]["controlPlaneRef"] == {
        "apiGroup": "controlplane.cluster.x-k8s.io", "kind": cp, "name": "burst-1-control-plane"}


def test_a_schema_violation_is_caught() -> None:
    """The check is real: an object the API server would refuse fails it."""
    f, plan = provisioning()
    assert plan.provisioning is not None
    md = next(o for o in cluster_objects(f.goals.pools["burst"], plan.provisioning.clusters[0])
              if o["kind"] == "MachineDeployment")
    del md["spec"]["template"]["spec"]["bootstrap"]["configRef"]["apiGroup"]
    md["spec"]["replicas"] = "three"
    schema = schemas()[("cluster.x-k8s.io/v1beta2", "MachineDeployment")]
    causes = validate(md, schema)
    assert {c["field"] for c in causes} >= {"spec.replicas", "spec.template.spec.bootstrap.configRef.apiGroup"}


def test_rendered_on_the_management_branch_in_the_pool_namespace_and_removed_with_the_cluster() -> None:
    f, plan = provisioning()
    files = render(f.goals, plan).files
    prefix = "clusters/cloud-1/qonnect-pools/pool-burst-1/"
    mine = sorted(p[len(prefix):] for p in files if p.startswith(prefix))
    assert mine == [
        "cluster-burst-1.yaml", "devcluster-burst-1.yaml", "devmachinetemplate-burst-1-control-plane.yaml",
        "devmachinetemplate-burst-1-md-0.yaml", "kubeadmconfigtemplate-burst-1-md-0.yaml",
        "kubeadmcontrolplane-burst-1-control-plane.yaml", "machinedeployment-burst-1-md-0.yaml",
    ]
    assert "clusters/cloud-1/_cluster/namespace-qonnect-pools.yaml" in files
    cluster = yaml.safe_load(files[prefix + "cluster-burst-1.yaml"])
    assert cluster["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "qonnect"
    assert cluster["metadata"]["namespace"] == "qonnect-pools"
    placement = placement_of(files)
    assert placement is not None
    assert placement["provisioning"]["clusters"][0]["name"] == "burst-1"
    # Same inputs, same bytes.
    assert render(f.goals, plan).files == files
    # The cluster fails: its objects leave the branch (the agent's prune deletes them).
    f.set_capi("burst-1", "Failed", message="no capacity in the region")
    later = render(f.goals, f.cycle(8)).files
    assert not any(p.startswith(prefix) for p in later)


def test_a_plan_without_pools_renders_as_before() -> None:
    goals = load_goals(goals_files(12, pool=None))
    plan = Fleet(goals).cycle(0)
    assert "provisioning" not in (placement_of(render(goals, plan).files) or {})
