"""Discovery, OpenAPI documents and concurrency, read through the official client."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from kubernetes import client, config, dynamic

from qonnect_gitops.sim import SimCluster
from qonnect_gitops.sim.defaults import ROOT_CA


def get_json(dyn: dynamic.DynamicClient, path: str, accept: str = "application/json") -> Any:
    resp = dyn.request("get", path, header_params={"Accept": accept}, serialize=False)
    return json.loads(resp.data), resp.headers


def test_version_and_legacy_discovery(api: client.ApiClient) -> None:
    assert client.VersionApi(api).get_code().git_version.startswith("v1.37.")
    groups = {g.name: g.preferred_version.version for g in client.ApisApi(api).get_api_versions().groups}
    for group, version in [("apps", "v1"), ("batch", "v1"), ("rbac.authorization.k8s.io", "v1"), ("policy", "v1"),
                           ("autoscaling", "v2"), ("networking.k8s.io", "v1"), ("discovery.k8s.io", "v1"),
                           ("apiextensions.k8s.io", "v1"), ("multicluster.x-k8s.io", "v1alpha1")]:
        assert groups[group] == version
    apps = {r.name: r for r in client.AppsV1Api(api).get_api_resources().resources}
    assert apps["deployments"].namespaced and apps["deployments"].kind == "Deployment"
    assert "deploy" in apps["deployments"].short_names
    assert (apps["deployments/scale"].group, apps["deployments/scale"].kind) == ("autoscaling", "Scale")
    assert "deployments/status" in apps and "daemonsets/scale" not in apps
    core = {r.name: r for r in client.CoreV1Api(api).get_api_resources().resources}
    for name in ("namespaces", "configmaps", "secrets", "services", "serviceaccounts", "endpoints", "pods", "nodes"):
        assert name in core
    assert not core["nodes"].namespaced and not core["namespaces"].namespaced


def test_aggregated_discovery(dyn: dynamic.DynamicClient) -> None:
    accept = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"
    doc, headers = get_json(dyn, "/apis", accept)
    assert headers["Content-Type"] == "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    apps = next(i for i in doc["items"] if i["metadata"]["name"] == "apps")
    deploy = next(r for r in apps["versions"][0]["resources"] if r["resource"] == "deployments")
    assert deploy["scope"] == "Namespaced"
    assert {s["subresource"] for s in deploy["subresources"]} == {"status", "scale"}


def test_openapi_v3_documents_carry_the_list_metadata(dyn: dynamic.DynamicClient) -> None:
    root, _ = get_json(dyn, "/openapi/v3")
    url = root["paths"]["apis/apps/v1"]["serverRelativeURL"]
    assert "?hash=" in url
    doc, _ = get_json(dyn, url)
    schemas = doc["components"]["schemas"]
    deploy = schemas["io.k8s.api.apps.v1.Deployment"]
    assert deploy["x-kubernetes-group-version-kind"] == [{"group": "apps", "version": "v1", "kind": "Deployment"}]
    containers = schemas["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"]
    assert containers["x-kubernetes-list-map-keys"] == ["name"]
    assert containers["x-kubernetes-patch-merge-key"] == "name"
    ports = schemas["io.k8s.api.core.v1.Container"]["properties"]["ports"]
    assert ports["x-kubernetes-list-map-keys"] == ["containerPort", "protocol"]
    patch = doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"]
    assert patch["x-kubernetes-group-version-kind"]["kind"] == "Deployment"
    assert {p["name"] for p in patch["parameters"]} >= {"fieldValidation", "dryRun", "fieldManager", "force"}


def test_openapi_v2_has_every_served_kind(dyn: dynamic.DynamicClient) -> None:
    doc, _ = get_json(dyn, "/openapi/v2")
    assert doc["swagger"] == "2.0"
    kinds = {gvk["kind"] for d in doc["definitions"].values() for gvk in d.get("x-kubernetes-group-version-kind", [])}
    for kind in ("Namespace", "ConfigMap", "Secret", "Service", "ServiceAccount", "Endpoints", "EndpointSlice",
                 "Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job", "CronJob", "Pod", "Node", "Role",
                 "RoleBinding", "ClusterRole", "ClusterRoleBinding", "PodDisruptionBudget",
                 "HorizontalPodAutoscaler", "NetworkPolicy", "CustomResourceDefinition", "ServiceExport"):
        assert kind in kinds, kind
    assert doc["definitions"]["io.k8s.api.core.v1.ContainerPort"]["properties"]["containerPort"]["type"] == "integer"


def test_concurrent_writers_get_unique_increasing_resource_versions(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    rvs: list[int] = []
    lock = threading.Lock()

    def writer(n: int) -> None:
        for i in range(15):
            out = core.create_namespaced_config_map("default", {"metadata": {"name": f"w{n}-{i}"}})
            with lock:
                rvs.append(int(out.metadata.resource_version))

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(rvs)) == 90
    listing = core.list_namespaced_config_map("default")
    assert len(listing.items) == 91  # and kube-root-ca.crt
    assert int(listing.metadata.resource_version) >= max(rvs)


def test_nine_clusters_in_one_process() -> None:
    started = time.monotonic()
    clusters = [SimCluster(name=f"c{i}") for i in range(9)]
    try:
        urls = [c.start() for c in clusters]
        assert len(set(urls)) == 9
        for c in clusters:
            core = client.CoreV1Api(config.new_client_from_config_dict(c.kubeconfig()))
            core.create_namespaced_config_map("default", {"metadata": {"name": c.name}})
        for c in clusters:
            core = client.CoreV1Api(config.new_client_from_config_dict(c.kubeconfig()))
            assert [i.metadata.name for i in core.list_namespaced_config_map("default").items] == [c.name, ROOT_CA]
    finally:
        for c in clusters:
            c.stop()
    assert time.monotonic() - started < 10


def test_stopped_cluster_refuses_connections_and_comes_back_on_the_same_address() -> None:
    import pytest
    import urllib3

    cluster = SimCluster(name="flaky")
    url = cluster.start()
    try:
        core = client.CoreV1Api(config.new_client_from_config_dict(cluster.kubeconfig()))
        core.create_namespaced_config_map("default", {"metadata": {"name": "kept"}})
        cluster.stop()
        # The client's kept-alive connection is cut too: nothing answers while it is down.
        with pytest.raises(urllib3.exceptions.MaxRetryError):
            core.list_namespaced_config_map("default")
        fresh = client.CoreV1Api(config.new_client_from_config_dict(cluster.kubeconfig()))
        with pytest.raises(urllib3.exceptions.MaxRetryError):
            fresh.list_namespaced_config_map("default", _request_timeout=2)
        assert cluster.start() == url
        again = client.CoreV1Api(config.new_client_from_config_dict(cluster.kubeconfig()))
        assert [i.metadata.name for i in again.list_namespaced_config_map("default").items] == ["kept", ROOT_CA]
    finally:
        cluster.stop()


def test_request_hooks_can_inject_errors(sim: SimCluster, api: client.ApiClient) -> None:
    import pytest
    from kubernetes.client.rest import ApiException

    from qonnect_gitops.sim.errors import ApiError

    def unavailable(handler: Any, method: str, path: str) -> bool:
        if path.endswith("/configmaps"):
            handler.send_api_error(ApiError(503, "ServiceUnavailable", "injected", {}))
            return True
        return False

    core = client.CoreV1Api(api)
    assert sim.server is not None
    sim.server.hooks.append(unavailable)
    with pytest.raises(ApiException) as err:
        core.list_namespaced_config_map("default")
    assert err.value.status == 503 and json.loads(err.value.body)["reason"] == "ServiceUnavailable"
    assert core.read_namespace("default").metadata.name == "default"  # other paths unaffected
    sim.server.hooks.remove(unavailable)
    assert [i.metadata.name for i in core.list_namespaced_config_map("default").items] == [ROOT_CA]
