"""The kinds a GitOps agent meets in real repositories, through the official client and kubectl."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kubernetes import client, config
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


def rows(kubectl: Kubectl, *args: str) -> list[list[str]]:
    return [line.split() for line in kubectl("get", *args).stdout.splitlines()]


def test_api_resources_lists_what_a_real_server_serves(kubectl: Kubectl) -> None:
    names = {line.split()[0] for line in kubectl("api-resources", "--no-headers").stdout.splitlines()}
    assert len(names) >= 55
    assert {"replicationcontrollers", "leases", "apiservices", "selfsubjectaccessreviews", "ingresses",
            "ingressclasses", "persistentvolumeclaims", "persistentvolumes", "storageclasses", "limitranges",
            "resourcequotas", "priorityclasses", "events", "customresourcedefinitions"} <= names


def test_replication_controller_and_its_controller(cluster: tuple[SimCluster, Kubectl]) -> None:
    sim, kubectl = cluster
    core, *_ = clients(sim)
    core.create_namespaced_replication_controller("default", {
        "metadata": {"name": "legacy"}, "spec": {"replicas": 2, "selector": {"app": "legacy"}, "template": {
            "metadata": {"labels": {"app": "legacy"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}})
    wait_for(lambda: len([p for p in pods_of(core, "legacy") if ready(p)]) == 2, what="two ready pods")
    rc = core.read_namespaced_replication_controller("legacy", "default")
    assert (rc.status.replicas, rc.status.ready_replicas) == (2, 2)
    assert pods_of(core, "legacy")[0].metadata.owner_references[0].kind == "ReplicationController"
    kubectl("scale", "rc", "legacy", "--replicas=3")
    wait_for(lambda: core.read_namespaced_replication_controller("legacy", "default").status.ready_replicas == 3,
             what="scaled")
    assert rows(kubectl, "rc", "legacy")[0] == ["NAME", "DESIRED", "CURRENT", "READY", "AGE"]
    core.delete_namespaced_replication_controller("legacy", "default", propagation_policy="Background")
    wait_for(lambda: not pods_of(core, "legacy"), what="pods collected")


def test_leases(kubectl: Kubectl, api: client.ApiClient) -> None:
    leases = client.CoordinationV1Api(api)
    leases.create_namespaced_lease("default", {"metadata": {"name": "leader"}, "spec": {
        "holderIdentity": "lead-1", "leaseDurationSeconds": 15, "renewTime": "2026-01-01T00:00:00.000000Z"}})
    lease = leases.read_namespaced_lease("leader", "default")
    lease.spec.holder_identity = "lead-2"
    leases.replace_namespaced_lease("leader", "default", lease)
    table = rows(kubectl, "lease", "leader")
    assert table[0] == ["NAME", "HOLDER", "AGE"] and table[1][:2] == ["leader", "lead-2"]


def test_apiservices_local_and_created(kubectl: Kubectl, api: client.ApiClient) -> None:
    reg = client.ApiregistrationV1Api(api)
    names = {s.metadata.name for s in reg.list_api_service().items}
    assert {"v1.", "v1.apps", "v1.coordination.k8s.io", "v1beta1.metrics.k8s.io"} <= names
    assert reg.read_api_service("v1.apps").status.conditions[0].reason == "Local"
    body = {"metadata": {"name": "v1alpha1.wardle.example.com"}, "spec": {
        "group": "wardle.example.com", "version": "v1alpha1", "groupPriorityMinimum": 1000, "versionPriority": 15,
        "service": {"name": "api", "namespace": "wardle"}, "insecureSkipTLSVerify": True}}
    reg.create_api_service(body)
    created = reg.read_api_service("v1alpha1.wardle.example.com")
    assert (created.status.conditions[0].status, created.status.conditions[0].reason) == ("False", "ServiceNotFound")
    with pytest.raises(ApiException) as err:
        reg.create_api_service(body)
    assert err.value.body == (
        '{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"apiservices.'
        'apiregistration.k8s.io \\"v1alpha1.wardle.example.com\\" already exists","reason":"AlreadyExists",'
        '"details":{"name":"v1alpha1.wardle.example.com","group":"apiregistration.k8s.io","kind":"apiservices"},'
        '"code":409}\n')
    line = next(r for r in rows(kubectl, "apiservices") if r[0] == "v1alpha1.wardle.example.com")
    assert line[1:3] == ["wardle/api", "False"]


def test_access_reviews_and_a_restricted_user(sim: SimCluster, kubectl: Kubectl, tmp_path: Path) -> None:
    assert kubectl("auth", "can-i", "delete", "nodes").stdout.strip() == "yes"
    restricted = tmp_path / "agent.yaml"
    restricted.write_text(sim.kubeconfig_yaml(user="agent"))
    agent = Kubectl(restricted, tmp_path / "agent-cache")
    assert agent("auth", "can-i", "list", "configmaps", check=False).stdout.strip() == "no"
    refused = agent("get", "configmaps", check=False)
    assert refused.returncode != 0
    assert ('configmaps is forbidden: User "agent" cannot list resource "configmaps" in API group "" in the '
            'namespace "default"') in refused.stderr
    api = config.new_client_from_config_dict(sim.kubeconfig(user="agent"))
    with pytest.raises(ApiException) as err:
        client.AppsV1Api(api).create_namespaced_deployment("default", deployment("x", 1))
    assert err.value.status == 403
    # Grant edit in one namespace: allowed there, still refused elsewhere.
    kubectl("create", "rolebinding", "agent-edit", "--clusterrole=edit", "--user=agent", "-n", "default")
    assert agent("auth", "can-i", "create", "deployments.apps").stdout.strip() == "yes"
    assert agent("auth", "can-i", "create", "deployments.apps", "-n", "kube-system", check=False
                 ).stdout.strip() == "no"
    agent("create", "configmap", "mine", "--from-literal=a=b")
    review = client.AuthorizationV1Api(api).create_self_subject_access_review({"spec": {"resourceAttributes": {
        "namespace": "default", "verb": "delete", "resource": "configmaps"}}})
    assert review.status.allowed and "RoleBinding \"agent-edit/default\"" in review.status.reason
    rules = client.AuthorizationV1Api(api).create_self_subject_rules_review({"spec": {"namespace": "default"}})
    assert any("configmaps" in r.resources for r in rules.status.resource_rules)
    whoami = json.loads(agent("auth", "whoami", "-o", "json").stdout)
    assert whoami["status"]["userInfo"]["username"] == "agent"
    # A ServiceAccount token authenticates as the ServiceAccount; its RBAC applies.
    kubectl("create", "serviceaccount", "robot")
    token = kubectl("create", "token", "robot").stdout.strip()
    robot = config.new_client_from_config_dict({**sim.kubeconfig(), "users": [
        {"name": f"{sim.name}-admin", "user": {"token": token}}]})
    with pytest.raises(ApiException) as err:
        client.CoreV1Api(robot).list_namespaced_secret("default")
    assert 'User "system:serviceaccount:default:robot" cannot list resource "secrets"' in json.loads(
        err.value.body)["message"]


def test_ingress_and_ingress_classes(kubectl: Kubectl, api: client.ApiClient) -> None:
    net = client.NetworkingV1Api(api)
    net.create_ingress_class({"metadata": {"name": "nginx", "annotations": {
        "ingressclass.kubernetes.io/is-default-class": "true"}}, "spec": {"controller": "k8s.io/ingress-nginx"}})
    net.create_namespaced_ingress("default", {"metadata": {"name": "web"}, "spec": {
        "ingressClassName": "nginx", "rules": [{"host": "shop.example.com", "http": {"paths": [
            {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]}})
    assert rows(kubectl, "ingress", "web")[1][:4] == ["web", "nginx", "shop.example.com", "80"]
    assert rows(kubectl, "ingressclass")[1][:3] == ["nginx", "(default)", "k8s.io/ingress-nginx"]


def test_statefulset_claims_bind_to_the_default_storage_class(cluster: tuple[SimCluster, Kubectl]) -> None:
    sim, kubectl = cluster
    core, apps, *_ = clients(sim)
    assert rows(kubectl, "storageclass")[1][:3] == ["standard", "(default)", "rancher.io/local-path"]
    apps.create_namespaced_stateful_set("default", {"metadata": {"name": "db"}, "spec": {
        "replicas": 2, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
        "template": {"metadata": {"labels": {"app": "db"}}, "spec": {"containers": [{"name": "db", "image": "pg"}]}},
        "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {
            "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]}})
    wait_for(lambda: len([p for p in core.list_namespaced_pod("default", label_selector="app=db").items
                          if ready(p)]) == 2, timeout=20, what="both ordinals ready")
    claims = {c.metadata.name: c for c in core.list_namespaced_persistent_volume_claim("default").items}
    assert set(claims) == {"data-db-0", "data-db-1"}
    for c in claims.values():
        assert (c.spec.storage_class_name, c.status.phase, c.status.capacity["storage"]) == ("standard", "Bound",
                                                                                           "1Gi")
    db0 = core.read_namespaced_pod("db-0", "default")
    assert [v.persistent_volume_claim.claim_name for v in db0.spec.volumes if v.persistent_volume_claim] == [
        "data-db-0"]
    volume = core.read_persistent_volume(claims["data-db-0"].spec.volume_name)
    assert volume.spec.claim_ref.name == "data-db-0" and volume.status.phase == "Bound"
    node = volume.spec.node_affinity.required.node_selector_terms[0].match_expressions[0].values[0]
    assert node == db0.spec.node_name  # provisioned where the first consumer was scheduled
    assert rows(kubectl, "pvc", "data-db-0")[1][:2] == ["data-db-0", "Bound"]
    # A claim without a class binds a matching pre-provisioned volume; deleting a claim reclaims its volume.
    core.create_persistent_volume({"metadata": {"name": "manual"}, "spec": {
        "capacity": {"storage": "5Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "",
        "hostPath": {"path": "/data"}}})
    core.create_namespaced_persistent_volume_claim("default", {"metadata": {"name": "static"}, "spec": {
        "storageClassName": "", "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "2Gi"}}}})
    wait_for(lambda: core.read_namespaced_persistent_volume_claim("static", "default").spec.volume_name == "manual",
             what="static binding")
    gone = claims["data-db-1"].spec.volume_name
    apps.delete_namespaced_stateful_set("db", "default")
    core.delete_namespaced_persistent_volume_claim("data-db-1", "default")
    wait_for(lambda: gone not in {v.metadata.name for v in core.list_persistent_volume().items},
             what="volume deleted with its claim")


def test_limit_ranges_default_and_bound_containers(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_limit_range("default", {"metadata": {"name": "limits"}, "spec": {"limits": [{
        "type": "Container", "default": {"cpu": "500m", "memory": "256Mi"},
        "defaultRequest": {"cpu": "100m", "memory": "128Mi"}, "max": {"cpu": "1"}}]}})
    p = core.create_namespaced_pod("default", {"metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "app", "image": "nginx"}]}})
    res = p.spec.containers[0].resources
    assert res.requests == {"cpu": "100m", "memory": "128Mi"} and res.limits == {"cpu": "500m", "memory": "256Mi"}
    assert p.metadata.annotations["kubernetes.io/limit-ranger"].startswith("LimitRanger plugin set: cpu, memory "
                                                                            "request for container app")
    assert p.status.qos_class == "Burstable"
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod("default", {"metadata": {"name": "big"}, "spec": {"containers": [
            {"name": "app", "image": "nginx", "resources": {"limits": {"cpu": "2"}}}]}})
    assert err.value.status == 403
    assert json.loads(err.value.body)["message"] == ('pods "big" is forbidden: maximum cpu usage per Container is 1,'
                                                     ' but limit is 2')


def test_resource_quotas_are_enforced_and_counted(kubectl: Kubectl, api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": "team"}})
    core.create_namespaced_resource_quota("team", {"metadata": {"name": "compute"}, "spec": {"hard": {
        "pods": "2", "requests.cpu": "1", "configmaps": "3"}}})
    quota = core.read_namespaced_resource_quota("compute", "team")
    assert quota.status.used == {"pods": "0", "requests.cpu": "0", "configmaps": "1"}  # kube-root-ca.crt
    spec = {"containers": [{"name": "app", "image": "nginx", "resources": {"requests": {"cpu": "400m"}}}]}
    core.create_namespaced_pod("team", {"metadata": {"name": "a"}, "spec": spec})
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod("team", {"metadata": {"name": "b"}, "spec": {"containers": [
            {"name": "app", "image": "nginx", "resources": {"requests": {"cpu": "700m"}}}]}})
    assert json.loads(err.value.body)["message"] == (
        'pods "b" is forbidden: exceeded quota: compute, requested: requests.cpu=700m, used: requests.cpu=400m, '
        'limited: requests.cpu=1')
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod("team", {"metadata": {"name": "c"}, "spec": {"containers": [
            {"name": "app", "image": "nginx"}]}})
    assert json.loads(err.value.body)["message"] == ('pods "c" is forbidden: failed quota: compute: must specify '
                                                     'requests.cpu for: app')
    assert core.read_namespaced_resource_quota("compute", "team").status.used["requests.cpu"] == "400m"
    core.delete_namespaced_pod("a", "team")
    assert core.read_namespaced_resource_quota("compute", "team").status.used == {
        "pods": "0", "requests.cpu": "0", "configmaps": "1"}
    table = rows(kubectl, "quota", "-n", "team")
    assert table[0] == ["NAME", "AGE", "REQUEST", "LIMIT"] and "pods:" in " ".join(table[1])


def test_priority_classes(api: client.ApiClient) -> None:
    core, sched = client.CoreV1Api(api), client.SchedulingV1Api(api)
    assert {"system-cluster-critical", "system-node-critical"} <= {c.metadata.name for c in
                                                                   sched.list_priority_class().items}
    sched.create_priority_class({"metadata": {"name": "high"}, "value": 1000, "preemptionPolicy": "Never"})
    p = core.create_namespaced_pod("default", {"metadata": {"name": "p"}, "spec": {
        "priorityClassName": "high", "containers": [{"name": "app", "image": "nginx"}]}})
    assert (p.spec.priority, p.spec.preemption_policy) == (1000, "Never")
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod("default", {"metadata": {"name": "q"}, "spec": {
            "priorityClassName": "missing", "containers": [{"name": "app", "image": "nginx"}]}})
    assert json.loads(err.value.body)["message"] == 'pods "q" is forbidden: no PriorityClass with name missing was found'


CRD = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: machinepools.cluster.example.com}
spec:
  group: cluster.example.com
  scope: Namespaced
  names: {plural: machinepools, singular: machinepool, kind: MachinePool, shortNames: [mp]}
  versions:
  - name: v1beta1
    served: true
    storage: false
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
  - name: v1beta2
    served: true
    storage: true
    subresources: {status: {}, scale: {specReplicasPath: .spec.replicas, statusReplicasPath: .status.replicas}}
    additionalPrinterColumns:
    - {name: Replicas, type: integer, jsonPath: .spec.replicas}
    - {name: Phase, type: string, jsonPath: .status.phase}
    - {name: Ready, type: string, jsonPath: '.status.conditions[?(@.type=="Ready")].status'}
    - {name: Age, type: date, jsonPath: .metadata.creationTimestamp}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [clusterName]
            properties:
              clusterName: {type: string, minLength: 1}
              replicas: {type: integer, minimum: 0, default: 1}
              mode: {type: string, enum: [fast, cheap], default: cheap}
          status:
            type: object
            properties:
              phase: {type: string}
              replicas: {type: integer}
              conditions:
                type: array
                items: {type: object, properties: {type: {type: string}, status: {type: string}}}
"""


def test_custom_resources_validated_defaulted_with_status_and_columns(kubectl: Kubectl, api: client.ApiClient) -> None:
    kubectl("apply", "--server-side", "-f", "-", stdin=CRD)
    custom = client.CustomObjectsApi(api)
    body = {"apiVersion": "cluster.example.com/v1beta2", "kind": "MachinePool", "metadata": {"name": "workers"},
            "spec": {"clusterName": "prod"}}
    created = custom.create_namespaced_custom_object("cluster.example.com", "v1beta2", "default", "machinepools",
                                                     body)
    assert created["spec"] == {"clusterName": "prod", "replicas": 1, "mode": "cheap"}  # schema defaults
    negative = "spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0"
    wrong_type = 'spec.replicas: Invalid value: "two": spec.replicas in body must be of type integer: "string"'
    for spec, message in (({"replicas": 2}, "spec.clusterName: Required value"),
                          ({"clusterName": "x", "replicas": -1}, negative),
                          ({"clusterName": "x", "mode": "slow"},
                           'spec.mode: Unsupported value: "slow": supported values: "fast", "cheap"'),
                          ({"clusterName": "x", "replicas": "two"}, wrong_type)):
        with pytest.raises(ApiException) as err:
            custom.create_namespaced_custom_object("cluster.example.com", "v1beta2", "default", "machinepools",
                                                   {**body, "metadata": {"name": "bad"}, "spec": spec})
        assert err.value.status == 422
        assert json.loads(err.value.body)["message"] == f'MachinePool.cluster.example.com "bad" is invalid: {message}'
    custom.patch_namespaced_custom_object_status("cluster.example.com", "v1beta2", "default", "machinepools",
                                                 "workers", {"status": {"phase": "Running", "replicas": 1,
                                                                        "conditions": [{"type": "Ready",
                                                                                        "status": "True"}]}})
    table = rows(kubectl, "mp")
    assert table[0] == ["NAME", "REPLICAS", "PHASE", "READY", "AGE"] and table[1][:4] == ["workers", "1", "Running",
                                                                                          "True"]
    kubectl("scale", "mp", "workers", "--replicas=3")
    assert custom.get_namespaced_custom_object("cluster.example.com", "v1beta2", "default", "machinepools",
                                               "workers")["spec"]["replicas"] == 3
    # Both versions are served from one storage; the APIServices follow the CRD.
    old = custom.get_namespaced_custom_object("cluster.example.com", "v1beta1", "default", "machinepools", "workers")
    assert old["apiVersion"] == "cluster.example.com/v1beta1" and old["spec"]["replicas"] == 3
    services = {s.metadata.name for s in client.ApiregistrationV1Api(api).list_api_service().items}
    assert {"v1beta1.cluster.example.com", "v1beta2.cluster.example.com"} <= services
    kubectl("delete", "crd", "machinepools.cluster.example.com")
    services = {s.metadata.name for s in client.ApiregistrationV1Api(api).list_api_service().items}
    assert "v1beta2.cluster.example.com" not in services


def test_resource_metrics_and_kubectl_top(cluster: tuple[SimCluster, Kubectl]) -> None:
    sim, kubectl = cluster
    core, apps, *_ = clients(sim)
    apps.create_namespaced_deployment("default", deployment("web", 2, cpu="250m", memory="128Mi"))
    wait_for(lambda: len([p for p in pods_of(core, "web") if ready(p)]) == 2, what="ready")
    top = rows(kubectl, "pods", "-l", "app=web") and kubectl("top", "pods", "-l", "app=web").stdout.splitlines()
    assert top[0].split() == ["NAME", "CPU(cores)", "MEMORY(bytes)"]
    assert all(line.split()[1:] == ["250m", "128Mi"] for line in top[1:]) and len(top) == 3
    nodes = kubectl("top", "nodes").stdout.splitlines()
    assert len(nodes) == 4 and nodes[0].split()[:2] == ["NAME", "CPU(cores)"]


def test_drain_evicts_within_disruption_budgets(cluster: tuple[SimCluster, Kubectl]) -> None:
    sim, kubectl = cluster
    core, apps, *_ = clients(sim)
    apps.create_namespaced_deployment("default", deployment("web", 3))
    wait_for(lambda: len([p for p in pods_of(core, "web") if ready(p)]) == 3, what="ready")
    node = pods_of(core, "web")[0].spec.node_name
    out = kubectl("drain", node, "--ignore-daemonsets", "--timeout=30s")
    assert f"node/{node} drained" in out.stdout
    assert core.read_node(node).spec.unschedulable
    wait_for(lambda: len([p for p in pods_of(core, "web") if ready(p) and p.spec.node_name != node]) == 3,
             what="rescheduled elsewhere")
    kubectl("uncordon", node)
