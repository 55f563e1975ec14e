"""Apply and prune against the simulated cluster, through the official client only."""

from __future__ import annotations

import json

from kubernetes import client

from tests.agent.conftest import (
    Branch,
    configmap,
    configmap_names,
    deployment,
    namespace,
)


def _names(core: client.CoreV1Api, ns: str = "shop") -> set[str]:
    return configmap_names(core, ns)


def _inventory(core: client.CoreV1Api) -> dict:
    cm = core.read_namespaced_config_map("qonnect-inventory", "qonnect-system")
    return json.loads(cm.data["inventory"])


def test_commit_is_applied_and_next_commit_prunes_exactly_the_removed_object(make_agent, branch: Branch, core, apps):
    first = branch.publish([namespace("shop"), configmap("a"), configmap("b"), configmap("c"), deployment("web")])
    agent = make_agent()
    result = agent.sync()
    assert result.commit == first
    assert sorted(r.action for r in result.objects) == ["created"] * 5, [(r.name, r.action, r.message) for r in result.objects]
    assert _names(core) == {"a", "b", "c"}
    dep = apps.read_namespaced_deployment("web", "shop")
    assert any(m.manager == "qonnect-agent" and m.operation == "Apply" for m in dep.metadata.managed_fields)
    inv = _inventory(core)
    assert inv["commit"] == first and inv["generation"] == 1 and len(inv["objects"]) == 5

    # Objects the agent must never delete: one without our label, one with our label the inventory does not list.
    core.create_namespaced_config_map("shop", client.V1ConfigMap(metadata=client.V1ObjectMeta(
        name="theirs", labels={"team": "other"})))
    core.create_namespaced_config_map("shop", client.V1ConfigMap(metadata=client.V1ObjectMeta(
        name="lookalike", labels={"app.kubernetes.io/managed-by": "qonnect"})))

    second = branch.publish([namespace("shop"), configmap("a"), configmap("c"), deployment("web")])
    result = agent.sync()
    assert result.commit == second
    assert [k[4] for k in result.pruned.deleted] == ["b"]
    assert _names(core) == {"a", "c", "theirs", "lookalike"}
    assert {r.action for r in result.objects} == {"unchanged"}  # dry-run found nothing to write
    inv = _inventory(core)
    assert inv["commit"] == second and inv["generation"] == 2 and len(inv["objects"]) == 4


def test_listed_object_that_lost_our_label_is_left_alone(make_agent, branch: Branch, core):
    branch.publish([namespace("shop"), configmap("a"), configmap("b"), configmap("c")])
    agent = make_agent()
    assert agent.sync().state == "Ready"
    # Someone takes "b" over: it no longer carries the ownership label.
    core.patch_namespaced_config_map("b", "shop", {"metadata": {"labels": {"app.kubernetes.io/managed-by": "helm"}}})
    branch.publish([namespace("shop"), configmap("a"), configmap("c")])
    result = agent.sync()
    assert result.pruned.deleted == []
    assert [(k[4], why) for k, why in result.pruned.kept] == [("b", "no longer carries the ownership label")]
    assert "b" in _names(core)
    assert ["", "v1", "ConfigMap", "shop", "b"] not in _inventory(core)["objects"]


def test_unchanged_head_skips_apply_and_once_style_sync_compares(make_agent, branch: Branch, core):
    branch.publish([namespace("shop"), configmap("a")])
    agent = make_agent()
    agent.sync()
    quick = agent.sync(full=False)
    assert quick.skipped_apply and quick.objects == [] and quick.state == "Ready"
    full = agent.sync(full=True)
    assert not full.skipped_apply and {r.action for r in full.objects} == {"unchanged"}


def test_reconcile_disabled_and_prune_disabled_annotations(make_agent, branch: Branch, core):
    branch.publish([namespace("shop"), configmap("a"), configmap("b", annotations={"qonnect.io/prune": "disabled"}),
                    configmap("c"), configmap("d")])
    agent = make_agent()
    agent.sync()
    core.patch_namespaced_config_map("a", "shop", {"metadata": {"annotations": {"qonnect.io/reconcile": "disabled"}},
                                                   "data": {"k": "hand-edited"}})
    branch.publish([namespace("shop"), configmap("a", data={"k": "new"}), configmap("c"), configmap("d")])
    result = agent.sync()
    actions = {r.key[4]: r.action for r in result.objects}
    assert actions["a"] == "skipped"
    assert core.read_namespaced_config_map("a", "shop").data == {"k": "hand-edited"}
    assert "b" in _names(core)  # prune: disabled
    assert result.pruned.deleted == []


ADOPT = {"qonnect.io/adopt": "enabled"}


def test_conflicting_field_manager_is_taken_over_and_recorded(make_agent, branch: Branch, core):
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="shop")))
    # kubectl-style server-side apply by another manager owns data.k
    body = configmap("a", data={"k": "theirs"})
    from kubernetes import dynamic
    dyn = dynamic.DynamicClient(core.api_client)
    dyn.resources.get(api_version="v1", kind="ConfigMap").server_side_apply(
        body=body, namespace="shop", field_manager="kubectl", force_conflicts=True)
    # The goals opt both objects in: the agent may take over what it did not create.
    branch.publish([namespace("shop", annotations=ADOPT), configmap("a", data={"k": "ours"}, annotations=ADOPT)])
    result = make_agent().sync()
    a = next(r for r in result.objects if r.key[4] == "a")
    assert a.action == "configured" and a.took_over == ["kubectl"]
    assert core.read_namespaced_config_map("a", "shop").data == {"k": "ours"}


def test_crd_then_custom_resource_in_one_commit(make_agent, branch: Branch, core, api):
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.org", "labels": {"app.kubernetes.io/managed-by": "qonnect"}},
        "spec": {"group": "example.org", "scope": "Namespaced",
                 "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                 "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                     "type": "object", "properties": {"spec": {"type": "object", "properties": {
                         "size": {"type": "integer"}}}}}}}]},
    }
    widget = {"apiVersion": "example.org/v1", "kind": "Widget",
              "metadata": {"name": "w1", "namespace": "shop", "labels": {"app.kubernetes.io/managed-by": "qonnect"}},
              "spec": {"size": 3}}
    branch.publish([widget, crd, namespace("shop")])
    result = make_agent().sync()
    assert {r.key[2]: r.action for r in result.objects} == {
        "CustomResourceDefinition": "created", "Namespace": "created", "Widget": "created"}
    got = client.CustomObjectsApi(api).get_namespaced_custom_object("example.org", "v1", "shop", "widgets", "w1")
    assert got["spec"] == {"size": 3}


def test_immutable_field_is_reported_per_object_and_recreate_is_opt_in(make_agent, branch: Branch, apps):
    branch.publish([namespace("shop"), deployment("web"), deployment("api")])
    agent = make_agent()
    agent.sync()
    uid = apps.read_namespaced_deployment("web", "shop").metadata.uid
    web2, api2 = deployment("web"), deployment("api")
    for d in (web2, api2):  # a new selector: immutable on apps/v1 Deployments
        d["spec"]["selector"]["matchLabels"]["tier"] = "x"
        d["spec"]["template"]["metadata"]["labels"]["tier"] = "x"
    api2["metadata"]["annotations"] = {"qonnect.io/recreate": "enabled"}
    branch.publish([namespace("shop"), web2, api2])
    result = agent.sync()
    actions = {r.key[4]: (r.action, r.reason) for r in result.objects}
    assert actions["web"] == ("failed", "ImmutableField")
    assert actions["api"] == ("recreated", "")
    assert result.state == "Stalled" and result.reason == "ApplyFailed"
    assert any(r.reason == "InvalidManifest" and "web" in r.message for r in result.refusals)
    assert apps.read_namespaced_deployment("web", "shop").metadata.uid == uid
    assert apps.read_namespaced_deployment("api", "shop").spec.selector.match_labels["tier"] == "x"


def test_partial_failure_records_what_was_created_so_it_can_be_pruned_later(make_agent, branch: Branch, core):
    branch.publish([namespace("shop"), configmap("a")])
    agent = make_agent()
    agent.sync()
    unknown = {"apiVersion": "example.org/v1", "kind": "Widget",
               "metadata": {"name": "w", "namespace": "shop", "labels": {"app.kubernetes.io/managed-by": "qonnect"}}}
    typo = configmap("typo")
    typo["dataa"] = {"x": "y"}  # strict field validation refuses unknown fields
    branch.publish([namespace("shop"), configmap("a"), configmap("new1"), unknown, typo])
    result = agent.sync()
    actions = {r.key[4]: (r.action, r.reason) for r in result.objects}
    assert actions["new1"] == ("created", "")
    assert actions["w"] == ("failed", "InvalidManifest")
    assert actions["typo"] == ("failed", "InvalidManifest")
    assert result.reason == "ApplyFailed" and result.applied.generation == 1
    assert sorted(r.message.split(":")[0] for r in result.refusals) == ["ConfigMap/shop/typo", "Widget.example.org/shop/w"]
    inv = _inventory(core)
    assert inv["generation"] == 1 and ["", "v1", "ConfigMap", "shop", "new1"] in inv["objects"]
    branch.publish([namespace("shop"), configmap("a")])
    fixed = agent.sync()
    assert fixed.state == "Ready" and [k[4] for k in fixed.pruned.deleted] == ["new1"]
    assert _names(core) == {"a"}


def test_schema_errors_are_not_retried(make_agent, branch: Branch, sim):
    """SSA reports an undeclared field as 500 'failed to create typed patch object'; that is a
    manifest error, so it fails at once instead of being retried like an outage."""
    typo = configmap("typo")
    typo["dataa"] = {"x": "y"}
    branch.publish([namespace("shop"), typo])
    agent = make_agent(api_backoff=0.5, api_backoff_max=0.5, api_retries=6)
    result = agent.sync()
    assert {r.key[4]: r.reason for r in result.objects if r.action == "failed"} == {"typo": "InvalidManifest"}
    assert agent.kube.retried == 0
    assert "field not declared in schema" in result.message


def test_manifest_without_namespace_lands_in_default_which_is_refused(make_agent, branch: Branch, core):
    """A namespaced object without a namespace would land in ``default``: a reserved namespace
    the agent never touches, so the whole commit is refused and nothing changes."""
    branch.publish([namespace("shop"), configmap("a")])
    agent = make_agent()
    assert agent.sync().state == "Ready"
    bare = configmap("plain")
    del bare["metadata"]["namespace"]
    branch.publish([namespace("shop"), configmap("a"), configmap("b"), bare])
    result = agent.sync()
    assert result.state == "Stalled" and result.reason == "ProtectedNamespace"
    assert [(r.reason, r.message.split(":")[0]) for r in result.refusals] == [
        ("ProtectedNamespace", "ConfigMap/default/plain")]
    assert "plain" not in {c.metadata.name for c in core.list_namespaced_config_map("default").items}
    assert _names(core) == {"a"} and result.applied.generation == 1


def test_a_branch_cannot_overwrite_the_inventory(make_agent, branch: Branch, core):
    branch.publish([namespace("shop"), configmap("a")])
    agent = make_agent()
    agent.sync()
    fake = configmap("qonnect-inventory", ns="qonnect-system", data={"inventory": '{"generation": 0, "objects": []}'})
    branch.publish([namespace("shop"), configmap("a"), fake])
    result = agent.sync()
    assert result.reason == "ProtectedNamespace" and result.objects == []
    assert [r.reason for r in result.refusals] == ["ProtectedNamespace"]
    assert _inventory(core)["generation"] == 1 and len(_inventory(core)["objects"]) == 2
