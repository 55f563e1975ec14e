"""API semantics through the official Python client (typed APIs and the dynamic client)."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
from kubernetes import client, config, dynamic, watch
from kubernetes.client.rest import ApiException

from qonnect_gitops.sim.defaults import ROOT_CA


def cm(name: str, labels: dict[str, str] | None = None, data: dict[str, str] | None = None,
       ns: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": labels or {}}
    if ns:
        meta["namespace"] = ns
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data or {"k": "v"}}


def deployment(name: str = "web", replicas: int = 1) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "app", "image": "nginx:1.25"}]}}}}


def status_of(err: pytest.ExceptionInfo[ApiException]) -> dict[str, Any]:
    return json.loads(err.value.body)


def test_not_found_is_a_real_status(api: client.ApiClient) -> None:
    with pytest.raises(ApiException) as err:
        client.AppsV1Api(api).read_namespaced_deployment("missing", "default")
    assert err.value.status == 404
    assert status_of(err) == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": 'deployments.apps "missing" not found', "reason": "NotFound",
        "details": {"name": "missing", "group": "apps", "kind": "deployments"}, "code": 404}


def test_invalid_name_is_422_with_causes(api: client.ApiClient) -> None:
    with pytest.raises(ApiException) as err:
        client.CoreV1Api(api).create_namespaced_config_map("default", cm("Bad_Name"))
    msg = ("Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
           "characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', "
           "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
    assert err.value.status == 422
    assert status_of(err) == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": f'ConfigMap "Bad_Name" is invalid: metadata.name: {msg}', "reason": "Invalid",
        "details": {"name": "Bad_Name", "kind": "ConfigMap",
                    "causes": [{"reason": "FieldValueInvalid", "message": msg, "field": "metadata.name"}]},
        "code": 422}


def test_already_exists_and_stale_resource_version(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    first = core.create_namespaced_config_map("default", cm("a"))
    with pytest.raises(ApiException) as err:
        core.create_namespaced_config_map("default", cm("a"))
    assert (err.value.status, status_of(err)["reason"], status_of(err)["message"]) == \
        (409, "AlreadyExists", 'configmaps "a" already exists')
    first.data = {"k": "w"}
    updated = core.replace_namespaced_config_map("a", "default", first)
    assert int(updated.metadata.resource_version) > int(first.metadata.resource_version)
    first.data = {"k": "x"}  # still carries the old resourceVersion
    with pytest.raises(ApiException) as err:
        core.replace_namespaced_config_map("a", "default", first)
    assert err.value.status == 409
    assert status_of(err) == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": 'Operation cannot be fulfilled on configmaps "a": the object has been modified; '
                   "please apply your changes to the latest version and try again",
        "reason": "Conflict", "details": {"name": "a", "kind": "configmaps"}, "code": 409}
    assert core.read_namespaced_config_map("a", "default").data == {"k": "w"}


def test_metadata_uid_generation_resource_version(api: client.ApiClient) -> None:
    apps = client.AppsV1Api(api)
    d = apps.create_namespaced_deployment("default", deployment())
    assert d.metadata.generation == 1 and d.metadata.uid and d.metadata.creation_timestamp
    rv1 = int(d.metadata.resource_version)
    d2 = apps.patch_namespaced_deployment("web", "default", {"metadata": {"labels": {"x": "y"}}})
    assert d2.metadata.generation == 1  # metadata only
    assert int(d2.metadata.resource_version) > rv1
    d3 = apps.patch_namespaced_deployment("web", "default", {"spec": {"replicas": 3}})
    assert d3.metadata.generation == 2
    d4 = apps.patch_namespaced_deployment_status("web", "default", {"status": {"replicas": 3}})
    assert d4.metadata.generation == 2 and d4.status.replicas == 3
    # The main resource cannot change status; the status subresource cannot change spec.
    d5 = apps.patch_namespaced_deployment("web", "default", {"status": {"replicas": 9}})
    assert d5.status.replicas == 3
    d6 = apps.patch_namespaced_deployment_status("web", "default", {"spec": {"replicas": 8}})
    assert d6.spec.replicas == 3
    assert d6.metadata.uid == d.metadata.uid
    # A no-op write keeps the resourceVersion.
    d7 = apps.patch_namespaced_deployment("web", "default", {"spec": {"replicas": 3}})
    assert d7.metadata.resource_version == d6.metadata.resource_version


def test_strategic_merge_merges_containers_by_name(api: client.ApiClient) -> None:
    apps = client.AppsV1Api(api)
    apps.create_namespaced_deployment("default", deployment())
    # The typed client sends a strategic merge patch for a dict body.
    out = apps.patch_namespaced_deployment("web", "default", {"spec": {"template": {"spec": {
        "containers": [{"name": "sidecar", "image": "envoy:1"}]}}}})
    assert [(c.name, c.image) for c in out.spec.template.spec.containers] == \
        [("app", "nginx:1.25"), ("sidecar", "envoy:1")]
    out = apps.patch_namespaced_deployment("web", "default", {"spec": {"template": {"spec": {
        "containers": [{"name": "app", "$patch": "delete"}]}}}})
    assert [c.name for c in out.spec.template.spec.containers] == ["sidecar"]


def test_json_patch_and_merge_patch(dyn: dynamic.DynamicClient) -> None:
    res = dyn.resources.get(api_version="v1", kind="ConfigMap")
    res.create(body=cm("p", data={"a": "1", "b": "2"}), namespace="default")
    out = res.patch(name="p", namespace="default", body=[{"op": "replace", "path": "/data/a", "value": "9"},
                                                         {"op": "remove", "path": "/data/b"}],
                    content_type="application/json-patch+json")
    assert out.data.to_dict() == {"a": "9"}
    out = res.patch(name="p", namespace="default", body={"data": {"a": None, "c": "3"}},
                    content_type="application/merge-patch+json")
    assert out.data.to_dict() == {"c": "3"}


def test_label_and_field_selectors_in_one_and_all_namespaces(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": "other"}})
    core.create_namespaced_config_map("default", cm("a", {"tier": "edge", "app": "x"}))
    core.create_namespaced_config_map("default", cm("b", {"tier": "fog"}))
    core.create_namespaced_config_map("default", cm("c", {}))
    core.create_namespaced_config_map("other", cm("d", {"tier": "edge"}))

    def names(sel: str, ns: str | None = "default", fields: str | None = None) -> list[str]:
        if ns is None:
            items = core.list_config_map_for_all_namespaces(label_selector=sel, field_selector=fields).items
        else:
            items = core.list_namespaced_config_map(ns, label_selector=sel, field_selector=fields).items
        return sorted(i.metadata.name for i in items if i.metadata.name != ROOT_CA)

    assert names("tier=edge") == ["a"]
    assert names("tier==edge", None) == ["a", "d"]
    assert names("tier!=edge") == ["b", "c"]
    assert names("tier in (edge,fog)") == ["a", "b"]
    assert names("tier notin (edge)") == ["b", "c"]
    assert names("tier") == ["a", "b"]
    assert names("!tier") == ["c"]
    assert names("tier=edge,app=x") == ["a"]
    assert names("", None, "metadata.namespace=other") == ["d"]
    assert names("", None, "metadata.name!=a,metadata.namespace=default") == ["b", "c"]
    with pytest.raises(ApiException) as err:
        names("", None, "spec.foo=bar")
    assert err.value.status == 400


def test_pagination_with_limit_and_continue(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    for i in range(5):
        core.create_namespaced_config_map("default", cm(f"c{i}"))
    page = core.list_namespaced_config_map("default", limit=2)
    seen = [i.metadata.name for i in page.items]
    remaining = [page.metadata.remaining_item_count]
    while page.metadata._continue:
        page = core.list_namespaced_config_map("default", limit=2, _continue=page.metadata._continue)
        seen += [i.metadata.name for i in page.items]
        remaining.append(page.metadata.remaining_item_count)
    # kube-root-ca.crt is in every namespace, as on a real cluster.
    assert seen == ["c0", "c1", "c2", "c3", "c4", ROOT_CA]
    assert remaining == [4, 2, None]


def test_watch_from_resource_version_with_bookmarks(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    start = core.list_namespaced_config_map("default").metadata.resource_version
    events: list[tuple[str, str]] = []

    def run() -> None:
        w = watch.Watch()
        for ev in w.stream(core.list_namespaced_config_map, "default", resource_version=start,
                           allow_watch_bookmarks=True, timeout_seconds=2, label_selector="w=1"):
            obj = ev["object"]
            name = obj["metadata"]["resourceVersion"] if ev["type"] == "BOOKMARK" else obj.metadata.name
            events.append((ev["type"], name))

    t = threading.Thread(target=run)
    t.start()
    time.sleep(0.2)
    core.create_namespaced_config_map("default", cm("w1", {"w": "1"}))
    core.create_namespaced_config_map("default", cm("ignored", {"w": "2"}))
    core.patch_namespaced_config_map("w1", "default", {"data": {"k": "2"}})
    core.delete_namespaced_config_map("w1", "default")
    time.sleep(0.6)
    t.join(timeout=5)
    changes = [e for e in events if e[0] != "BOOKMARK"]
    assert changes == [("ADDED", "w1"), ("MODIFIED", "w1"), ("DELETED", "w1")]
    assert any(e[0] == "BOOKMARK" for e in events)


def test_watch_without_resource_version_sends_current_state(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_config_map("default", cm("existing"))
    w = watch.Watch()
    seen = [(ev["type"], ev["object"].metadata.name)
            for ev in w.stream(core.list_namespaced_config_map, "default", timeout_seconds=1)]
    assert seen == [("ADDED", "existing"), ("ADDED", ROOT_CA)]


def test_field_validation_strict_warn_ignore(dyn: dynamic.DynamicClient) -> None:
    # The typed client refuses unknown fields itself, so the dynamic client sends them.
    from kubernetes.dynamic.exceptions import BadRequestError
    path = "/api/v1/namespaces/default/configmaps"
    bad = cm("v")
    bad["extra"] = 1
    with pytest.raises(BadRequestError) as err:
        dyn.request("post", path, body=bad, query_params=[("fieldValidation", "Strict")])
    assert json.loads(err.value.body)["message"] == (
        'ConfigMap in version "v1" cannot be handled as a ConfigMap: strict decoding error: unknown field "extra"')
    resp = dyn.request("post", path, body=bad, query_params=[("fieldValidation", "Warn")], serialize=False)
    assert resp.status == 201
    assert resp.headers["Warning"] == '299 - "unknown field \\"extra\\""'
    assert "extra" not in json.loads(resp.data)  # unknown fields are dropped, as decoding does
    bad["metadata"]["name"] = "v2"
    resp = dyn.request("post", path, body=bad, query_params=[("fieldValidation", "Ignore")], serialize=False)
    assert resp.status == 201 and "Warning" not in resp.headers


def test_dry_run_does_not_persist(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    out = core.create_namespaced_config_map("default", cm("dry"), dry_run="All")
    assert out.metadata.name == "dry" and out.metadata.uid
    with pytest.raises(ApiException) as err:
        core.read_namespaced_config_map("dry", "default")
    assert err.value.status == 404


def test_finalizers_keep_object_until_removed(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    body = cm("fin")
    body["metadata"]["finalizers"] = ["example.com/hold"]
    core.create_namespaced_config_map("default", body)
    core.delete_namespaced_config_map("fin", "default")
    held = core.read_namespaced_config_map("fin", "default")
    assert held.metadata.deletion_timestamp is not None
    core.patch_namespaced_config_map("fin", "default", {"metadata": {"finalizers": None}})
    with pytest.raises(ApiException) as err:
        core.read_namespaced_config_map("fin", "default")
    assert err.value.status == 404


@pytest.mark.parametrize("policy,dependent_survives", [("Background", False), ("Foreground", False),
                                                       ("Orphan", True)])
def test_propagation_policy(api: client.ApiClient, policy: str, dependent_survives: bool) -> None:
    core = client.CoreV1Api(api)
    owner = core.create_namespaced_config_map("default", cm("owner"))
    dep = cm("dependent")
    dep["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
                                           "uid": owner.metadata.uid}]
    core.create_namespaced_config_map("default", dep)
    core.delete_namespaced_config_map("owner", "default", propagation_policy=policy)
    names = [i.metadata.name for i in core.list_namespaced_config_map("default").items]
    assert "owner" not in names
    assert ("dependent" in names) == dependent_survives
    if dependent_survives:
        assert core.read_namespaced_config_map("dependent", "default").metadata.owner_references is None


def test_namespace_deletion_deletes_its_contents(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": "team"}})
    core.create_namespaced_config_map("team", cm("a"))
    client.AppsV1Api(api).create_namespaced_deployment("team", deployment())
    core.delete_namespace("team")
    terminating = core.read_namespace("team")
    assert terminating.status.phase == "Terminating" and terminating.metadata.deletion_timestamp
    with pytest.raises(ApiException) as err:
        core.create_namespaced_config_map("team", cm("late"))
    assert (err.value.status, status_of(err)["reason"]) == (403, "Forbidden")
    assert "because it is being terminated" in status_of(err)["message"]
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            core.read_namespace("team")
        except ApiException as exc:
            assert exc.status == 404
            break
        time.sleep(0.05)
    else:
        raise AssertionError("namespace never went away")
    assert core.list_config_map_for_all_namespaces(field_selector="metadata.namespace=team").items == []
    assert client.AppsV1Api(api).list_deployment_for_all_namespaces().items == []
    with pytest.raises(ApiException) as err:
        core.create_namespaced_config_map("team", cm("late"))
    assert status_of(err)["message"] == 'namespaces "team" not found'


def test_generation_only_for_kinds_that_keep_it(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    svc = core.create_namespaced_service("default", {"metadata": {"name": "web"},
                                                     "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}})
    assert svc.metadata.generation is None
    assert svc.spec.ports[0].protocol == "TCP" and svc.spec.type == "ClusterIP" and svc.spec.cluster_ip
    assert core.create_namespaced_config_map("default", cm("g")).metadata.generation is None


def test_scale_subresource(api: client.ApiClient) -> None:
    apps = client.AppsV1Api(api)
    apps.create_namespaced_deployment("default", deployment(replicas=2))
    scale = apps.read_namespaced_deployment_scale("web", "default")
    assert (scale.spec.replicas, scale.status.selector) == (2, "app=web")
    apps.patch_namespaced_deployment_scale("web", "default", {"spec": {"replicas": 6}})
    assert apps.read_namespaced_deployment("web", "default").spec.replicas == 6


def test_custom_resources_are_served_after_their_crd(dyn: dynamic.DynamicClient) -> None:
    crds = dyn.resources.get(api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition")
    dyn.server_side_apply(crds, field_manager="test", body={
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
                 "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                 "versions": [{"name": "v1", "served": True, "storage": True, "subresources": {"status": {}},
                               "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                                   "spec": {"type": "object", "properties": {
                                       "size": {"type": "integer"},
                                       "ports": {"type": "array", "x-kubernetes-list-type": "map",
                                                 "x-kubernetes-list-map-keys": ["name"],
                                                 "items": {"type": "object", "properties": {
                                                     "name": {"type": "string"}, "port": {"type": "integer"}}}}}},
                                   "status": {"type": "object", "properties": {"ok": {"type": "boolean"}}}}}}}]}})
    assert crds.get(name="widgets.example.com").status.conditions[-1].type == "Established"
    # A fresh client discovers the new kind, as a real client does after a CRD is established.
    widgets = dynamic.DynamicClient(dyn.client).resources.get(api_version="example.com/v1", kind="Widget")
    body = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "default"},
            "spec": {"size": 1, "ports": [{"name": "http", "port": 80}]}}
    dyn.server_side_apply(widgets, body=body, field_manager="a")
    body["spec"] = {"ports": [{"name": "metrics", "port": 9090}]}
    out = dyn.server_side_apply(widgets, body=body, field_manager="b")
    assert sorted(p["name"] for p in out.spec.ports) == ["http", "metrics"]  # list-map from the CRD schema
    assert out.spec.size == 1 and out.metadata.generation == 2
    st = widgets.status.patch(name="w", namespace="default", body={"status": {"ok": True}},
                              content_type="application/merge-patch+json")
    assert st.status.ok is True and st.metadata.generation == 2
    assert [w.metadata.name for w in widgets.get(namespace="default").items] == ["w"]


def test_update_without_resource_version(api: client.ApiClient, dyn: dynamic.DynamicClient) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_config_map("default", cm("u"))
    # Built-in kinds take an unconditional update when no resourceVersion is sent.
    out = core.replace_namespaced_config_map("u", "default", cm("u", data={"k": "new"}))
    assert out.data == {"k": "new"}
    crd = dyn.resources.get(api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition")
    crd.create(body={"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                     "metadata": {"name": "gadgets.example.com"},
                     "spec": {"group": "example.com", "scope": "Namespaced",
                              "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
                              "versions": [{"name": "v1", "served": True, "storage": True, "schema": {
                                  "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}})
    gadgets = dynamic.DynamicClient(api).resources.get(api_version="example.com/v1", kind="Gadget")
    body = {"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "g", "namespace": "default"},
            "spec": {"anything": {"goes": [1, 2]}}}
    gadgets.create(body=body, namespace="default")
    from kubernetes.dynamic.exceptions import UnprocessibleEntityError
    with pytest.raises(UnprocessibleEntityError) as err:
        gadgets.replace(body=body, namespace="default")  # custom resources need a resourceVersion
    assert json.loads(err.value.body)["details"]["causes"][0]["field"] == "metadata.resourceVersion"
    assert gadgets.get(name="g", namespace="default").spec.anything.goes == [1, 2]


def test_apply_namespace_must_match_the_url(dyn: dynamic.DynamicClient) -> None:
    from kubernetes.dynamic.exceptions import BadRequestError
    with pytest.raises(BadRequestError):
        dyn.request("patch", "/api/v1/namespaces/default/configmaps/x", content_type="application/apply-patch+yaml",
                    body=cm("x", ns="kube-system"), query_params=[("fieldManager", "m")])


def test_watch_from_a_compacted_resource_version_is_410_expired() -> None:
    from qonnect_gitops.sim import SimCluster

    with SimCluster(name="short", history=5) as cluster:
        core = client.CoreV1Api(config.new_client_from_config_dict(cluster.kubeconfig()))
        first = core.create_namespaced_config_map("default", cm("c0")).metadata.resource_version
        for i in range(1, 10):
            core.create_namespaced_config_map("default", cm(f"c{i}"))
        with pytest.raises(ApiException) as err:
            for _ in watch.Watch().stream(core.list_namespaced_config_map, "default", resource_version=first,
                                          timeout_seconds=1):
                pass
        assert err.value.status == 410


def test_delete_collection_by_label(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    for name, tier in (("a", "edge"), ("b", "edge"), ("c", "cloud")):
        core.create_namespaced_config_map("default", cm(name, {"tier": tier}))
    core.delete_collection_namespaced_config_map("default", label_selector="tier=edge")
    assert [i.metadata.name for i in core.list_namespaced_config_map("default").items] == ["c", ROOT_CA]


def test_method_not_allowed_and_unknown_resource(dyn: dynamic.DynamicClient) -> None:
    from kubernetes.dynamic.exceptions import DynamicApiError
    with pytest.raises(DynamicApiError) as err:
        dyn.request("post", "/api/v1/namespaces/default/configmaps/x", body=cm("x"))
    assert json.loads(err.value.body) == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "the server does not allow this method on the requested resource",
        "reason": "MethodNotAllowed", "details": {}, "code": 405}
    with pytest.raises(DynamicApiError) as err:
        dyn.request("get", "/apis/example.com/v1/namespaces/default/nothings")
    assert json.loads(err.value.body) == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "the server could not find the requested resource", "reason": "NotFound", "details": {},
        "code": 404}


def test_secret_string_data_is_folded_into_data(dyn: dynamic.DynamicClient) -> None:
    secrets = dyn.resources.get(api_version="v1", kind="Secret")
    out = dyn.server_side_apply(secrets, field_manager="agent", body={
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "default"},
        "stringData": {"password": "hunter2"}}).to_dict()
    assert out["data"] == {"password": "aHVudGVyMg=="} and "stringData" not in out
    assert out["type"] == "Opaque"


def test_strategic_merge_directives(dyn: dynamic.DynamicClient) -> None:
    deployments = dyn.resources.get(api_version="apps/v1", kind="Deployment")
    body = deployment()
    body["metadata"]["finalizers"] = ["example.com/a", "example.com/b"]
    body["spec"]["template"]["spec"]["containers"].append({"name": "log", "image": "fluentbit:3"})
    deployments.create(body=body, namespace="default")

    def smp(patch: dict[str, Any]) -> Any:
        return deployments.patch(name="web", namespace="default", body=patch,
                                 content_type="application/strategic-merge-patch+json")

    out = smp({"metadata": {"$deleteFromPrimitiveList/finalizers": ["example.com/a"]}})
    assert out.metadata.finalizers == ["example.com/b"]
    out = smp({"spec": {"template": {"spec": {"$setElementOrder/containers": [{"name": "log"}, {"name": "app"}]}}}})
    assert [c.name for c in out.spec.template.spec.containers] == ["log", "app"]
    out = smp({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}})
    assert out.spec.strategy.to_dict() == {"type": "Recreate"}
    out = smp({"spec": {"template": {"spec": {"containers": [{"$patch": "replace"}, {"name": "only", "image": "x"}]}}}})
    assert [c.name for c in out.spec.template.spec.containers] == ["only"]
    out = smp({"metadata": {"finalizers": None}})
    assert out.metadata.finalizers is None


def test_immutable_fields_are_422(api: client.ApiClient) -> None:
    apps = client.AppsV1Api(api)
    apps.create_namespaced_deployment("default", deployment())
    with pytest.raises(ApiException) as err:
        apps.patch_namespaced_deployment("web", "default", {"spec": {"selector": {"matchLabels": {"app": "web2"}},
                                                                     "template": {"metadata": {"labels": {"app": "web2"}}}}})
    msg = ('Invalid value: v1.LabelSelector{MatchLabels:map[string]string{"app":"web2"}, '
           "MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: field is immutable")
    assert err.value.status == 422
    assert status_of(err) == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": f'Deployment.apps "web" is invalid: spec.selector: {msg}', "reason": "Invalid",
        "details": {"name": "web", "group": "apps", "kind": "Deployment",
                    "causes": [{"reason": "FieldValueInvalid", "message": msg, "field": "spec.selector"}]},
        "code": 422}
    core = client.CoreV1Api(api)
    frozen = cm("frozen")
    frozen["immutable"] = True
    core.create_namespaced_config_map("default", frozen)
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_config_map("frozen", "default", {"data": {"k": "changed"}})
    assert err.value.status == 422 and status_of(err)["details"]["causes"][0]["field"] == "data"


def test_annotations_over_256_kib_in_total_are_refused_as_the_api_server_does(api: client.ApiClient,
                                                                             dyn: dynamic.DynamicClient) -> None:
    """apimachinery's ValidateAnnotations: keys and values of all annotations, in bytes, at
    most 262144 (256 KiB); one byte over is 422 FieldValueTooLong on metadata.annotations,
    on create, update and server-side apply (dry-run too), for every kind."""
    core = client.CoreV1Api(api)
    limit = 256 * 1024
    # Exactly at the limit, spread over two annotations (multi-byte characters count as bytes).
    at_limit = {"a": "é" * ((limit // 2 - 1) // 2), "b": "x" * (limit - 2 - 2 * ((limit // 2 - 1) // 2))}
    assert sum(len(k.encode()) + len(v.encode()) for k, v in at_limit.items()) == limit
    body = cm("big")
    body["metadata"]["annotations"] = at_limit
    core.create_namespaced_config_map("default", body)
    over = dict(at_limit, b=at_limit["b"] + "x")
    msg = f"Too long: may not be more than {limit} bytes"
    expected = {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": f'ConfigMap "big" is invalid: metadata.annotations: {msg}', "reason": "Invalid",
        "details": {"name": "big", "kind": "ConfigMap",
                    "causes": [{"reason": "FieldValueTooLong", "message": msg, "field": "metadata.annotations"}]},
        "code": 422}
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_config_map("big", "default", {"metadata": {"annotations": over}})
    assert status_of(err) == expected
    fresh = cm("big2")
    fresh["metadata"]["annotations"] = over
    with pytest.raises(ApiException) as err:
        core.create_namespaced_config_map("default", fresh)
    assert err.value.status == 422 and status_of(err)["details"]["causes"][0]["field"] == "metadata.annotations"
    deployments = dyn.resources.get(api_version="apps/v1", kind="Deployment")
    applied = deployment("huge")
    applied["metadata"]["annotations"] = {"note": "y" * limit}  # 4 + limit bytes
    for dry_run in ("All", None):
        with pytest.raises(ApiException) as err:
            deployments.server_side_apply(body=applied, namespace="default", field_manager="test",
                                          **({"dry_run": dry_run} if dry_run else {}))
        assert err.value.status == 422
        assert status_of(err)["message"] == f'Deployment.apps "huge" is invalid: metadata.annotations: {msg}'
    assert core.read_namespaced_config_map("big", "default").metadata.annotations == at_limit


def test_names_the_client_escapes_in_the_path_are_read_as_the_api_server_reads_them(api: client.ApiClient) -> None:
    """The client escapes ':' in a path (``system%3Abasic-user``); the API server routes on
    the decoded path, so RBAC names like ``system:basic-user`` work for every verb."""
    rbac = client.RbacAuthorizationV1Api(api)
    assert rbac.read_cluster_role_binding("system:basic-user").role_ref.name == "system:basic-user"
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "system:test"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]}
    rbac.create_cluster_role(role)
    rbac.patch_cluster_role("system:test", {"metadata": {"labels": {"x": "y"}}})
    assert rbac.read_cluster_role("system:test").metadata.labels == {"x": "y"}
    rbac.delete_cluster_role("system:test")
    with pytest.raises(ApiException) as err:
        rbac.read_cluster_role("system:test")
    assert err.value.status == 404
