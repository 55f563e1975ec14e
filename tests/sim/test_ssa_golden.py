"""Server-side apply through real clients, checked against hand-written expectations.

Every expected ``managedFields`` / object below is written from the rules in the
Kubernetes server-side apply documentation (field management, conflicts,
merge strategy) and the ``FieldsV1`` format described in the API reference,
not captured from the simulator.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from kubernetes import client, dynamic
from kubernetes.dynamic.exceptions import ConflictError

TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


def managed(obj: Any) -> list[dict[str, Any]]:
    """managedFields without the time (checked separately for its format)."""
    entries = obj["metadata"]["managedFields"] if isinstance(obj, dict) else obj.to_dict()["metadata"]["managedFields"]
    out = []
    for e in entries:
        assert TIME.match(e["time"]), e
        out.append({k: v for k, v in e.items() if k != "time"})
    return out


def by_manager(obj: Any) -> dict[str, dict[str, Any]]:
    return {e["manager"] + "/" + e["operation"]: e["fieldsV1"] for e in managed(obj)}


def deployment(replicas: int | None = None, containers: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "selector": {"matchLabels": {"app": "web"}},
        "template": {"metadata": {"labels": {"app": "web"}},
                     "spec": {"containers": containers or [{"name": "app", "image": "nginx:1.25"}]}},
    }
    if replicas is not None:
        spec["replicas"] = replicas
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "default"},
            "spec": spec}


def apply(dyn: dynamic.DynamicClient, body: dict[str, Any], manager: str, force: bool = False) -> dict[str, Any]:
    res = dyn.resources.get(api_version=body["apiVersion"], kind=body["kind"])
    return dyn.server_side_apply(res, body=body, field_manager=manager, force_conflicts=force or None).to_dict()


def test_fieldsv1_encoding_of_the_documented_configmap(dyn: dynamic.DynamicClient) -> None:
    # The documentation's example: a ConfigMap applied by "kubectl" owns its label and data key.
    cm = {"apiVersion": "v1", "kind": "ConfigMap",
          "metadata": {"name": "test-cm", "namespace": "default", "labels": {"test-label": "test"}},
          "data": {"key": "some value"}}
    out = apply(dyn, cm, "kubectl")
    assert managed(out) == [{
        "manager": "kubectl", "operation": "Apply", "apiVersion": "v1", "fieldsType": "FieldsV1",
        "fieldsV1": {"f:data": {"f:key": {}}, "f:metadata": {"f:labels": {"f:test-label": {}}}},
    }]
    assert out["data"] == {"key": "some value"}
    assert out["metadata"]["labels"] == {"test-label": "test"}


def test_list_map_items_have_key_encoding_and_dot_for_owned_items(dyn: dynamic.DynamicClient) -> None:
    body = deployment(2, [{"name": "app", "image": "nginx:1.25", "ports": [{"containerPort": 80}]}])
    out = apply(dyn, body, "agent")
    # Items of associative lists are k:{keys}; an owned item with owned children carries ".".
    # ports are keyed by containerPort and protocol; protocol is defaulted to TCP in the key.
    assert by_manager(out) == {"agent/Apply": {
        "f:spec": {
            "f:replicas": {},
            "f:selector": {},  # LabelSelector is an atomic map: owned as one leaf
            "f:template": {
                "f:metadata": {"f:labels": {"f:app": {}}},
                "f:spec": {"f:containers": {'k:{"name":"app"}': {
                    ".": {}, "f:image": {}, "f:name": {},
                    "f:ports": {'k:{"containerPort":80,"protocol":"TCP"}': {".": {}, "f:containerPort": {}}},
                }}},
            },
        }}}
    assert out["spec"]["template"]["spec"]["containers"][0]["ports"] == [{"containerPort": 80, "protocol": "TCP"}]
    assert out["metadata"]["generation"] == 1


def test_two_managers_applying_the_same_value_share_it_and_then_conflict(dyn: dynamic.DynamicClient) -> None:
    apply(dyn, deployment(3), "alice")
    out = apply(dyn, {"apiVersion": "apps/v1", "kind": "Deployment",
                      "metadata": {"name": "web", "namespace": "default"}, "spec": {"replicas": 3}}, "bob")
    owners = by_manager(out)
    assert owners["bob/Apply"] == {"f:spec": {"f:replicas": {}}}
    assert "f:replicas" in owners["alice/Apply"]["f:spec"]  # shared, not taken
    with pytest.raises(ConflictError) as err:
        apply(dyn, {"apiVersion": "apps/v1", "kind": "Deployment",
                    "metadata": {"name": "web", "namespace": "default"}, "spec": {"replicas": 5}}, "bob")
    status = json.loads(err.value.body)
    assert status == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": 'Apply failed with 1 conflict: conflict with "alice": .spec.replicas',
        "reason": "Conflict",
        "details": {"causes": [{"reason": "FieldManagerConflict", "message": 'conflict with "alice"',
                                "field": ".spec.replicas"}]},
        "code": 409,
    }


def test_forced_apply_takes_ownership(dyn: dynamic.DynamicClient) -> None:
    apply(dyn, deployment(3), "alice")
    out = apply(dyn, {"apiVersion": "apps/v1", "kind": "Deployment",
                      "metadata": {"name": "web", "namespace": "default"}, "spec": {"replicas": 7}}, "bob", force=True)
    assert out["spec"]["replicas"] == 7
    owners = by_manager(out)
    assert owners["bob/Apply"] == {"f:spec": {"f:replicas": {}}}
    assert "f:replicas" not in owners["alice/Apply"]["f:spec"]
    # alice applying her old value again now conflicts with bob.
    with pytest.raises(ConflictError) as err:
        apply(dyn, deployment(3), "alice")
    assert json.loads(err.value.body)["message"] == \
        'Apply failed with 1 conflict: conflict with "bob": .spec.replicas'


def test_list_map_entries_merge_by_key_across_managers(dyn: dynamic.DynamicClient) -> None:
    apply(dyn, deployment(1, [{"name": "app", "image": "nginx:1.25", "ports": [{"containerPort": 80}]}]), "alice")
    out = apply(dyn, deployment(None, [{"name": "sidecar", "image": "envoy:1"},
                                       {"name": "app", "ports": [{"containerPort": 9090, "protocol": "UDP"}]}]),
                "bob")
    containers = out["spec"]["template"]["spec"]["containers"]
    assert sorted(c["name"] for c in containers) == ["app", "sidecar"]
    app = next(c for c in containers if c["name"] == "app")
    assert app["image"] == "nginx:1.25"
    assert sorted((p["containerPort"], p["protocol"]) for p in app["ports"]) == [(80, "TCP"), (9090, "UDP")]
    bob = by_manager(out)["bob/Apply"]["f:spec"]["f:template"]["f:spec"]["f:containers"]
    assert bob == {
        'k:{"name":"app"}': {".": {}, "f:name": {},
                             "f:ports": {'k:{"containerPort":9090,"protocol":"UDP"}': {
                                 ".": {}, "f:containerPort": {}, "f:protocol": {}}}},
        'k:{"name":"sidecar"}': {".": {}, "f:image": {}, "f:name": {}},
    }
    alice = by_manager(out)["alice/Apply"]["f:spec"]["f:template"]["f:spec"]["f:containers"]
    assert set(alice) == {'k:{"name":"app"}'}
    assert 'k:{"containerPort":80,"protocol":"TCP"}' in alice['k:{"name":"app"}']["f:ports"]


def test_field_no_longer_applied_is_removed_unless_someone_else_owns_it(dyn: dynamic.DynamicClient) -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "default"},
          "data": {"a": "1", "b": "2", "c": "3"}}
    apply(dyn, cm, "alice")
    apply(dyn, {**cm, "data": {"c": "3"}}, "bob")  # bob co-owns c
    out = apply(dyn, {**cm, "data": {"a": "1"}}, "alice")
    # b: applied before by alice only -> removed; c: still owned by bob -> kept.
    assert out["data"] == {"a": "1", "c": "3"}
    assert by_manager(out) == {"alice/Apply": {"f:data": {"f:a": {}}}, "bob/Apply": {"f:data": {"f:c": {}}}}


def test_container_dropped_from_apply_is_removed(dyn: dynamic.DynamicClient) -> None:
    apply(dyn, deployment(1, [{"name": "app", "image": "a:1"}, {"name": "log", "image": "b:1"}]), "agent")
    out = apply(dyn, deployment(1, [{"name": "app", "image": "a:1"}]), "agent")
    assert [c["name"] for c in out["spec"]["template"]["spec"]["containers"]] == ["app"]


def test_update_managers_are_recorded_and_conflict_with_appliers(api: client.ApiClient,
                                                                 dyn: dynamic.DynamicClient) -> None:
    apps = client.AppsV1Api(api)
    apps.create_namespaced_deployment("default", deployment(2), field_manager="ci")
    created = apps.read_namespaced_deployment("web", "default").to_dict()
    entries = created["metadata"]["managed_fields"]
    assert [(e["manager"], e["operation"], e["api_version"]) for e in entries] == [("ci", "Update", "apps/v1")]
    assert "f:replicas" in entries[0]["fields_v1"]["f:spec"]
    with pytest.raises(ConflictError) as err:
        apply(dyn, deployment(4), "agent")
    status = json.loads(err.value.body)
    assert status["message"] == 'Apply failed with 1 conflict: conflict with "ci" using apps/v1: .spec.replicas'
    assert status["details"]["causes"] == [{"reason": "FieldManagerConflict",
                                            "message": 'conflict with "ci" using apps/v1', "field": ".spec.replicas"}]


def test_apply_without_field_manager_is_rejected(dyn: dynamic.DynamicClient) -> None:
    from kubernetes.dynamic.exceptions import BadRequestError
    with pytest.raises(BadRequestError) as err:
        dyn.request("patch", "/api/v1/namespaces/default/configmaps/x", content_type="application/apply-patch+yaml",
                    body={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}})
    status = json.loads(err.value.body)
    assert (status["code"], status["reason"]) == (400, "BadRequest")


def test_kubectl_conflict_then_force(kubectl: Any) -> None:
    manifest = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: app, image: "nginx:1.25"}]
"""
    kubectl("apply", "-f", "-", stdin=manifest)  # client-side apply: an Update manager
    failed = kubectl("apply", "--server-side", "-f", "-", stdin=manifest.replace("replicas: 2", "replicas: 3"),
                     check=False)
    assert failed.returncode != 0
    assert ('Apply failed with 1 conflict: conflict with "kubectl-client-side-apply" using apps/v1: .spec.replicas'
            in failed.stderr)
    assert kubectl.json("get", "deploy", "web")["spec"]["replicas"] == 2
    kubectl("apply", "--server-side", "--force-conflicts", "-f", "-",
            stdin=manifest.replace("replicas: 2", "replicas: 3"))
    obj = kubectl.json("get", "deploy", "web", "--show-managed-fields")
    assert obj["spec"]["replicas"] == 3
    owners = {e["manager"]: e for e in obj["metadata"]["managedFields"]}
    assert owners["kubectl"]["operation"] == "Apply"
    assert "f:replicas" in owners["kubectl"]["fieldsV1"]["f:spec"]
    csa = owners.get("kubectl-client-side-apply")
    assert csa is None or "f:replicas" not in csa["fieldsV1"].get("f:spec", {})


def test_an_update_that_changes_a_field_takes_it_from_the_applier(api: client.ApiClient,
                                                                  dyn: dynamic.DynamicClient) -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "default"},
          "data": {"a": "1", "b": "2"}}
    apply(dyn, cm, "alice")
    client.CoreV1Api(api).patch_namespaced_config_map("c", "default", {"data": {"a": "changed"}},
                                                      field_manager="editor")
    out = client.CoreV1Api(api).read_namespaced_config_map("c", "default").to_dict()
    owners = {(e["manager"], e["operation"]): e["fields_v1"] for e in out["metadata"]["managed_fields"]}
    assert owners == {("alice", "Apply"): {"f:data": {"f:b": {}}},
                      ("editor", "Update"): {"f:data": {"f:a": {}}}}
    with pytest.raises(ConflictError) as err:
        apply(dyn, cm, "alice")
    assert json.loads(err.value.body)["message"] == \
        'Apply failed with 1 conflict: conflict with "editor" using v1: .data.a'


def test_set_lists_are_encoded_by_value(dyn: dynamic.DynamicClient) -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap",
          "metadata": {"name": "c", "namespace": "default", "finalizers": ["example.com/a", "example.com/b"]}}
    out = apply(dyn, cm, "alice")
    assert by_manager(out) == {"alice/Apply": {"f:metadata": {"f:finalizers": {
        'v:"example.com/a"': {}, 'v:"example.com/b"': {}}}}}


def test_two_conflicting_managers_are_listed_sorted(dyn: dynamic.DynamicClient) -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "default"}}
    apply(dyn, {**cm, "data": {"x": "1"}}, "zed")
    apply(dyn, {**cm, "data": {"y": "1"}}, "amy")
    with pytest.raises(ConflictError) as err:
        apply(dyn, {**cm, "data": {"x": "2", "y": "2"}}, "bob")
    assert json.loads(err.value.body)["message"] == (
        'Apply failed with 2 conflicts: conflicts with "amy":\n- .data.y\nconflicts with "zed":\n- .data.x')


def test_kubectl_scale_owns_replicas_through_the_scale_subresource(kubectl: Any) -> None:
    manifest = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: app, image: "nginx:1.25"}]
"""
    kubectl("apply", "--server-side", "-f", "-", stdin=manifest)
    kubectl("scale", "deploy", "web", "--replicas=5")
    obj = kubectl.json("get", "deploy", "web", "--show-managed-fields")
    scale = [e for e in obj["metadata"]["managedFields"] if e.get("subresource") == "scale"]
    assert [(e["operation"], e["fieldsV1"]) for e in scale] == [("Update", {"f:spec": {"f:replicas": {}}})]
    manager = scale[0]["manager"]
    failed = kubectl("apply", "--server-side", "-f", "-", stdin=manifest, check=False)
    assert failed.returncode != 0
    assert (f'Apply failed with 1 conflict: conflict with "{manager}" with subresource "scale" using apps/v1: '
            ".spec.replicas") in failed.stderr


def test_create_records_an_update_entry_marking_added_maps_and_items(api: client.ApiClient) -> None:
    # A create is an Update from the empty object: leaves are owned, and maps, lists and items
    # that did not exist before (labels, ports, list items, pointer structs) are owned themselves
    # ("."). Server-side defaults are set before ownership is computed, so the creator owns them.
    body = deployment(2, [{"name": "app", "image": "nginx:1.25", "ports": [{"containerPort": 80}]}])
    body["metadata"]["labels"] = {"app": "web"}
    out = client.AppsV1Api(api).create_namespaced_deployment("default", body, field_manager="ci").to_dict()
    [entry] = out["metadata"]["managed_fields"]
    assert (entry["manager"], entry["operation"], entry["api_version"]) == ("ci", "Update", "apps/v1")
    assert entry["fields_v1"] == {
        "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
        "f:spec": {
            "f:progressDeadlineSeconds": {},
            "f:replicas": {},
            "f:revisionHistoryLimit": {},
            "f:selector": {},
            "f:strategy": {"f:rollingUpdate": {".": {}, "f:maxSurge": {}, "f:maxUnavailable": {}}, "f:type": {}},
            "f:template": {
                "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                "f:spec": {
                    "f:containers": {'k:{"name":"app"}': {
                        ".": {}, "f:image": {}, "f:imagePullPolicy": {}, "f:name": {},
                        "f:ports": {".": {}, 'k:{"containerPort":80,"protocol":"TCP"}': {
                            ".": {}, "f:containerPort": {}, "f:protocol": {}}},
                        "f:resources": {}, "f:terminationMessagePath": {}, "f:terminationMessagePolicy": {},
                    }},
                    "f:dnsPolicy": {}, "f:restartPolicy": {}, "f:schedulerName": {}, "f:securityContext": {},
                    "f:terminationGracePeriodSeconds": {},
                },
            },
        },
    }
    spec = out["spec"]
    assert (spec["strategy"]["rolling_update"]["max_surge"], spec["revision_history_limit"],
            spec["template"]["spec"]["containers"][0]["image_pull_policy"]) == ("25%", 10, "IfNotPresent")


def test_reapplying_the_same_config_writes_nothing(dyn: dynamic.DynamicClient) -> None:
    body = deployment(2, [{"name": "app", "image": "nginx:1.25", "ports": [{"containerPort": 80}]}])
    first = apply(dyn, body, "agent")
    second = apply(dyn, body, "agent")
    assert second["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    assert second["metadata"]["managedFields"] == first["metadata"]["managedFields"]
    body["spec"]["replicas"] = 3
    third = apply(dyn, body, "agent")
    assert int(third["metadata"]["resourceVersion"]) > int(first["metadata"]["resourceVersion"])
    assert third["metadata"]["generation"] == 2
