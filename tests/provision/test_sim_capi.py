"""The simulated Cluster API provider, through the official kubernetes client: the CRDs
are served and validate, a Cluster becomes a running cluster with its kubeconfig Secret
after the delay, nodes follow the MachineDeployment, a failure shows in the Cluster's
phase and conditions, and deleting the Cluster deletes the cluster."""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from qonnect_gitops.model import load_goals
from qonnect_gitops.render.capi import cluster_objects
from qonnect_gitops.sim.cluster import SimCluster
from qonnect_gitops.sim.control import capi
from tests.provision.cycles import Fleet
from tests.provision.fleet import goals_files

NS = "qonnect-pools"
GROUP, VERSION = "cluster.x-k8s.io", "v1beta2"


def objects() -> list[dict[str, Any]]:
    f = Fleet(load_goals(goals_files(30)))  # 3 nodes of 4 CPUs
    f.cycle(0)
    plan = f.cycle(5)
    assert plan.provisioning is not None
    return cluster_objects(f.goals.pools["burst"], plan.provisioning.clusters[0])


class Management:
    def __init__(self, fail: int) -> None:
        goals = load_goals(goals_files(30))
        self.sim = SimCluster.from_cluster(goals.clusters["cloud-1"], startup_delay=0.1)
        self.ready: list[str] = []
        self.deleted: list[str] = []
        self.controller = capi.enable(self.sim, delay=1.0, fail=fail,
                                      on_ready=lambda n, s: self.ready.append(n),
                                      on_deleted=lambda n, s: self.deleted.append(n))
        self.sim.start()
        api = config.new_client_from_config_dict(self.sim.kubeconfig())
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.core.create_namespace({"metadata": {"name": NS}})

    def apply(self, objs: list[dict[str, Any]]) -> None:
        for obj in objs:
            group, version = obj["apiVersion"].split("/")
            self.custom.create_namespaced_custom_object(group, version, NS, obj["kind"].lower() + "s", obj)

    def cluster(self) -> dict[str, Any]:
        return self.custom.get_namespaced_custom_object(GROUP, VERSION, NS, "clusters", "burst-1")  # type: ignore[no-any-return]

    def wait(self, what: Any, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not what():
            assert time.monotonic() < deadline, "timed out"
            time.sleep(0.05)


@pytest.fixture
def mgmt(request: pytest.FixtureRequest) -> Iterator[Management]:
    m = Management(getattr(request, "param", 0))
    try:
        yield m
    finally:
        m.controller.stop_all()
        m.sim.stop()


def test_crds_are_served_and_refuse_invalid_objects(mgmt: Management) -> None:
    bad = next(o for o in objects() if o["kind"] == "MachineDeployment")
    del bad["spec"]["clusterName"]
    with pytest.raises(ApiException) as exc:
        mgmt.apply([bad])
    assert exc.value.status == 422 and "spec.clusterName" in exc.value.body


def test_a_cluster_is_provisioned_after_the_delay_scaled_and_deleted(mgmt: Management) -> None:
    start = time.monotonic()
    mgmt.apply(objects())
    mgmt.wait(lambda: (mgmt.cluster().get("status") or {}).get("phase") == "Provisioning")
    mgmt.wait(lambda: mgmt.ready == ["burst-1"])
    assert time.monotonic() - start >= 1.0
    status = mgmt.cluster()["status"]
    assert status["phase"] == "Provisioned" and status["initialization"]["controlPlaneInitialized"]
    assert {c["type"]: c["status"] for c in status["conditions"]}["Available"] == "True"
    secret = mgmt.core.read_namespaced_secret("burst-1-kubeconfig", NS)
    assert secret.metadata.labels["cluster.x-k8s.io/cluster-name"] == "burst-1"
    workload = client.CoreV1Api(config.new_client_from_config_dict(
        yaml.safe_load(base64.b64decode(secret.data["value"]))))
    nodes = workload.list_node().items
    assert len(nodes) == 3 and nodes[0].status.allocatable["cpu"] in ("4", "4000m")
    md = mgmt.custom.get_namespaced_custom_object(GROUP, VERSION, NS, "machinedeployments", "burst-1-md-0")
    md["spec"]["replicas"] = 5
    mgmt.custom.replace_namespaced_custom_object(GROUP, VERSION, NS, "machinedeployments", "burst-1-md-0", md)
    mgmt.wait(lambda: len(workload.list_node().items) == 5)
    mgmt.custom.delete_namespaced_custom_object(GROUP, VERSION, NS, "clusters", "burst-1")
    mgmt.wait(lambda: mgmt.deleted == ["burst-1"])
    with pytest.raises(ApiException):
        mgmt.core.read_namespaced_secret("burst-1-kubeconfig", NS)


@pytest.mark.parametrize("mgmt", [1], indirect=True)
def test_a_failed_provisioning_shows_in_phase_and_conditions(mgmt: Management) -> None:
    mgmt.apply(objects())
    mgmt.wait(lambda: (mgmt.cluster().get("status") or {}).get("phase") == "Failed")
    conditions = {c["type"]: c for c in mgmt.cluster()["status"]["conditions"]}
    assert conditions["InfrastructureReady"]["status"] == "False"
    assert conditions["InfrastructureReady"]["reason"] == "ProvisioningFailed"
    assert mgmt.ready == [] and mgmt.controller.sims == {}


def test_qonnect_sim_capi_needs_a_management_cluster(tmp_path: Any) -> None:
    import subprocess
    import sys

    from tests.conftest import ROOT, TEMPLATE
    def sim(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "qonnect_gitops", "sim", "--clusters", str(TEMPLATE),
                               "--kubeconfig-dir", str(tmp_path), "--capi", *extra],
                              capture_output=True, text=True, cwd=ROOT, timeout=120, check=False)
    no_pool = sim()
    assert no_pool.returncode == 2 and "--capi needs --capi-on CLUSTER" in no_pool.stderr
    unknown = sim("--capi-on", "cloud-9")
    assert unknown.returncode == 2 and "--capi-on cloud-9: no such cluster" in unknown.stderr
