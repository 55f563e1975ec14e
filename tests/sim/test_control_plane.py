"""What a real control plane does on its own: defaults, namespaces' contents, revisions, Events, restart policies."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from qonnect_gitops.sim import SimCluster
from tests.sim.conftest import Kubectl
from tests.sim.kubelet_helpers import (
    clients,
    deployment,
    pods_of,
    ready,
    wait_for,
)


def pod(name: str, **spec: object) -> dict[str, object]:
    body: dict[str, object] = {"containers": [{"name": "app", "image": "busybox:1.36"}]}
    body.update(spec)
    return {"metadata": {"name": name}, "spec": body}


def test_a_created_pod_is_pending_with_its_qos_class(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    created = core.create_namespaced_pod("default", pod("p"))
    assert (created.status.phase, created.status.qos_class) == ("Pending", "BestEffort")
    guaranteed = core.create_namespaced_pod("default", pod("g", containers=[{
        "name": "app", "image": "busybox", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]))
    assert guaranteed.status.qos_class == "Guaranteed"


def test_namespaces_get_a_default_service_account_and_the_root_ca(cluster: tuple[SimCluster, Kubectl]) -> None:
    sim, kubectl = cluster
    core, *_ = clients(sim)
    core.create_namespace({"metadata": {"name": "team"}})
    assert core.read_namespaced_service_account("default", "team").metadata.name == "default"
    ca = core.read_namespaced_config_map("kube-root-ca.crt", "team").data["ca.crt"]
    assert ca.startswith("-----BEGIN CERTIFICATE-----")
    # The controllers put them back when someone deletes them.
    kubectl("delete", "serviceaccount", "default", "-n", "team")
    kubectl("delete", "configmap", "kube-root-ca.crt", "-n", "team")
    wait_for(lambda: kubectl("get", "sa", "default", "-n", "team", check=False).returncode == 0, what="SA back")
    wait_for(lambda: kubectl("get", "cm", "kube-root-ca.crt", "-n", "team", check=False).returncode == 0,
             what="CA back")


def test_pods_get_their_service_account_and_its_token_volume(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    p = core.create_namespaced_pod("default", pod("p"))
    assert p.spec.service_account_name == "default"
    mounts = p.spec.containers[0].volume_mounts
    assert mounts[0].mount_path == "/var/run/secrets/kubernetes.io/serviceaccount" and mounts[0].read_only
    assert p.spec.volumes[0].name.startswith("kube-api-access-") and p.spec.volumes[0].projected.sources
    off = core.create_namespaced_pod("default", pod("off", automountServiceAccountToken=False))
    assert not off.spec.volumes
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod("default", pod("x", serviceAccountName="robot"))
    assert err.value.status == 403
    assert json.loads(err.value.body)["message"] == ('pods "x" is forbidden: error looking up service account '
                                                     'default/robot: serviceaccount "robot" not found')


def test_pods_refused_for_a_missing_service_account_are_made_once_it_exists(
        cluster: tuple[SimCluster, Kubectl]) -> None:
    sim, _ = cluster
    core, apps, *_ = clients(sim)
    apps.create_namespaced_deployment("default", deployment("web", 2, pod_spec={"serviceAccountName": "web"}))

    def refusal() -> list[str]:
        return [e.message for e in core.list_namespaced_event("default", field_selector="reason=FailedCreate").items]

    messages = wait_for(refusal, what="FailedCreate")
    assert messages[0].startswith('Error creating: pods "web-') and messages[0].endswith(
        'is forbidden: error looking up service account default/web: serviceaccount "web" not found')
    core.create_namespaced_service_account("default", {"metadata": {"name": "web"}})
    wait_for(lambda: len([p for p in pods_of(core, "web") if ready(p)]) == 2, what="pods made after the retry")


def test_system_namespaces_cannot_be_deleted(kubectl: Kubectl, api: client.ApiClient) -> None:
    for ns in ("kube-system", "default", "kube-public"):
        out = kubectl("delete", "namespace", ns, check=False)
        assert out.returncode != 0
        assert f'namespaces "{ns}" is forbidden: this namespace may not be deleted' in out.stderr
    with pytest.raises(ApiException) as err:
        client.CoreV1Api(api).delete_namespace("kube-system")
    assert err.value.status == 403 and json.loads(err.value.body)["reason"] == "Forbidden"
    kubectl("create", "namespace", "temp")
    assert 'namespace "temp" deleted' in kubectl("delete", "namespace", "temp").stdout


def test_deployment_revisions_and_rollout_undo(cluster: tuple[SimCluster, Kubectl]) -> None:
    sim, kubectl = cluster
    _, apps, *_ = clients(sim)
    apps.create_namespaced_deployment("default", deployment("web", 2))
    kubectl("rollout", "status", "deployment/web", "--timeout=30s")
    kubectl("set", "image", "deployment/web", "app=nginx:1.28")
    kubectl("rollout", "status", "deployment/web", "--timeout=30s")
    assert apps.read_namespaced_deployment("web", "default").metadata.annotations[
        "deployment.kubernetes.io/revision"] == "2"
    history = kubectl("rollout", "history", "deployment/web").stdout
    assert [line.split()[0] for line in history.splitlines()[2:] if line.strip()] == ["1", "2"]
    assert "rolled back" in kubectl("rollout", "undo", "deployment/web").stdout
    kubectl("rollout", "status", "deployment/web", "--timeout=30s")
    web = apps.read_namespaced_deployment("web", "default")
    assert web.spec.template.spec.containers[0].image == "nginx:1.27"
    assert web.metadata.annotations["deployment.kubernetes.io/revision"] == "3"
    rs = {r.spec.template.spec.containers[0].image: r for r in apps.list_namespaced_replica_set("default").items}
    assert rs["nginx:1.27"].metadata.annotations["deployment.kubernetes.io/revision"] == "3"
    assert rs["nginx:1.27"].metadata.annotations["deployment.kubernetes.io/revision-history"] == "1"
    assert rs["nginx:1.28"].spec.replicas == 0


def test_events_from_scheduler_controllers_and_kubelet(cluster: tuple[SimCluster, Kubectl]) -> None:
    sim, kubectl = cluster
    core, apps, _, api = clients(sim)
    apps.create_namespaced_deployment("default", deployment("web", 1))
    apps.create_namespaced_deployment("default", deployment("huge", 1, cpu="64"))
    wait_for(lambda: ready(pods_of(core, "web")[0]) if pods_of(core, "web") else False, what="web ready")

    def reasons() -> set[str]:
        return {e.reason for e in core.list_namespaced_event("default").items}

    wait_for(lambda: {"ScalingReplicaSet", "SuccessfulCreate", "Scheduled", "Pulled", "Created", "Started",
                      "FailedScheduling"} <= reasons(), what="events")
    failed = [e for e in core.list_namespaced_event("default", field_selector="reason=FailedScheduling").items]
    assert failed[0].type == "Warning" and failed[0].involved_object.kind == "Pod"
    assert failed[0].message == "0/3 nodes are available: 3 Insufficient cpu."
    assert failed[0].source.component == "default-scheduler"
    table = kubectl("get", "events").stdout.splitlines()
    assert table[0].split() == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    assert any("Scaled up replica set web-" in line and "deployment/web" in line for line in table)
    huge = pods_of(core, "huge")[0].metadata.name
    described = kubectl("describe", "pod", huge).stdout
    assert "FailedScheduling" in described and "0/3 nodes are available: 3 Insufficient cpu." in described
    # The same Events through events.k8s.io/v1.
    new_api = client.EventsV1Api(api).list_namespaced_event(
        "default", field_selector=f"regarding.name={huge},reason=FailedScheduling").items
    assert new_api and new_api[0].note == "0/3 nodes are available: 3 Insufficient cpu."
    assert new_api[0].regarding.name == huge and new_api[0].reporting_controller == "default-scheduler"


def test_restart_policy_is_honoured(cluster: tuple[SimCluster, Kubectl]) -> None:
    sim, _ = cluster
    core, *_ = clients(sim)
    # A Pod whose process does not exit keeps running, whatever its restart policy.
    core.create_namespaced_pod("default", pod("server", restartPolicy="Never"))
    exits = {"sim.qonnect.io/exit-after": "0.2"}
    for name, policy, code in (("done", "Never", "0"), ("broken", "Never", "3"), ("retry", "OnFailure", "1"),
                               ("loop", "Always", "0")):
        body = pod(name, restartPolicy=policy)
        body["metadata"] = {"name": name, "annotations": {**exits, "sim.qonnect.io/exit-code": code}}
        core.create_namespaced_pod("default", body)

    def phase(name: str) -> str:
        return str(core.read_namespaced_pod(name, "default").status.phase)

    wait_for(lambda: phase("done") == "Succeeded" and phase("broken") == "Failed", what="pods finished")
    broken = core.read_namespaced_pod("broken", "default").status.container_statuses[0]
    assert (broken.state.terminated.exit_code, broken.state.terminated.reason) == (3, "Error")
    wait_for(lambda: core.read_namespaced_pod("retry", "default").status.container_statuses[0].restart_count >= 2,
             what="OnFailure restarts")
    wait_for(lambda: core.read_namespaced_pod("loop", "default").status.container_statuses[0].restart_count >= 1,
             what="Always restarts")
    assert phase("server") == "Running" and phase("retry") == "Running" and phase("loop") == "Running"
    backoff = [e.reason for e in core.list_namespaced_event("default", field_selector="involvedObject.name=retry")
               .items]
    assert "BackOff" in backoff
