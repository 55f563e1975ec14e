"""The cluster's own RBAC is never adopted, changed or pruned unless the agent's configuration
allows it (issue 30, 7 and "by design today"): goals could adopt the system ``cluster-admin``
ClusterRoleBinding, and the agent deleted it when it left the branch."""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client, dynamic

from qonnect_gitops.agent.config import FIELD_MANAGER
from tests.agent.conftest import LABELS, Branch, configmap, namespace

RBAC = "rbac.authorization.k8s.io"


def _binding(name: str, role: str, adopt: bool = True) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {**LABELS, "qonnect.io/component": "web"}}
    if adopt:
        meta["annotations"] = {"qonnect.io/adopt": "enabled"}
    return {"apiVersion": f"{RBAC}/v1", "kind": "ClusterRoleBinding", "metadata": meta,
            "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": role},
            "subjects": [{"apiGroup": RBAC, "kind": "Group", "name": "shop-admins"}]}


def _role(name: str) -> dict[str, Any]:
    return {"apiVersion": f"{RBAC}/v1", "kind": "ClusterRole",
            "metadata": {"name": name, "labels": {**LABELS, "qonnect.io/component": "web"},
                         "annotations": {"qonnect.io/adopt": "enabled"}},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]}


def _subjects(rbac: client.RbacAuthorizationV1Api, name: str) -> list[str]:
    return [s.name for s in rbac.read_cluster_role_binding(name).subjects or []]


def _inventory(core: client.CoreV1Api) -> dict[str, Any]:
    return json.loads(core.read_namespaced_config_map("qonnect-inventory", "qonnect-system").data["inventory"])


def test_goals_cannot_adopt_the_system_cluster_admin_binding(make_agent, branch: Branch, api, core):
    rbac = client.RbacAuthorizationV1Api(api)
    assert _subjects(rbac, "cluster-admin") == ["system:masters"]
    branch.publish([namespace("shop"), configmap("a")])
    agent = make_agent()
    agent.sync()
    head = branch.publish([namespace("shop"), configmap("a"), _binding("cluster-admin", "cluster-admin"),
                           _binding("system:basic-user", "system:basic-user")])
    result = agent.sync()
    assert result.commit == head and result.reason == "SystemObject" and result.objects == [], result.message
    assert sorted(r.message.split(" ")[0] for r in result.refusals) == [
        "ClusterRoleBinding.rbac.authorization.k8s.io/cluster-admin",
        "ClusterRoleBinding.rbac.authorization.k8s.io/system:basic-user"]
    assert all(r.reason == "SystemObject" for r in result.refusals)
    assert _subjects(rbac, "cluster-admin") == ["system:masters"]
    managers = rbac.read_cluster_role_binding("cluster-admin").metadata.managed_fields
    assert FIELD_MANAGER not in {m.manager for m in managers}


def test_a_bootstrap_role_is_not_adopted_whatever_its_name(make_agent, branch: Branch, api):
    """``admin``, ``edit``, ``view``... carry ``kubernetes.io/bootstrapping: rbac-defaults``:
    the live label says they are the API server's, even with ``qonnect.io/adopt``."""
    rbac = client.RbacAuthorizationV1Api(api)
    before = rbac.read_cluster_role("admin").rules
    branch.publish([namespace("shop"), configmap("a"), _role("admin")])
    result = make_agent().sync()
    failed = {r.key[4]: (r.action, r.reason) for r in result.objects if r.action == "failed"}
    assert failed == {"admin": ("failed", "SystemObject")}
    assert result.reason == "ApplyFailed" and [r.reason for r in result.refusals] == ["SystemObject"]
    assert rbac.read_cluster_role("admin").rules == before


def test_an_adopted_system_binding_in_an_older_inventory_is_never_pruned(make_agent, branch: Branch, api, core):
    """An older agent adopted ``cluster-admin`` for the goals (it carries the agent's field
    manager and ownership label, and the inventory lists it); when it leaves the branch it
    is refused, kept, and dropped from the inventory."""
    rbac = client.RbacAuthorizationV1Api(api)
    branch.publish([namespace("shop"), configmap("a")])
    agent = make_agent()
    agent.sync()
    adopted = _binding("cluster-admin", "cluster-admin", adopt=False)
    adopted["subjects"] = [{"apiGroup": RBAC, "kind": "Group", "name": "system:masters"}]
    bindings = dynamic.DynamicClient(api).resources.get(api_version=f"{RBAC}/v1", kind="ClusterRoleBinding")
    bindings.server_side_apply(body=adopted, field_manager=FIELD_MANAGER, force_conflicts=True)
    inv = _inventory(core)
    inv["objects"].append([RBAC, "v1", "ClusterRoleBinding", "", "cluster-admin"])
    core.patch_namespaced_config_map("qonnect-inventory", "qonnect-system", {"data": {"inventory": json.dumps(inv)}})
    branch.publish([namespace("shop"), configmap("a"), configmap("b")], prune_limit=1)
    result = agent.sync()
    assert result.pruned.deleted == []
    assert result.pruned.refused == [((RBAC, "v1", "ClusterRoleBinding", "", "cluster-admin"), "SystemObject")]
    assert [r.reason for r in result.refusals] == ["SystemObject"]
    assert _subjects(rbac, "cluster-admin") == ["system:masters"]
    assert [RBAC, "v1", "ClusterRoleBinding", "", "cluster-admin"] not in _inventory(core)["objects"]


def test_the_agents_own_configuration_can_allow_a_system_object(make_agent, branch: Branch, api):
    rbac = client.RbacAuthorizationV1Api(api)
    branch.publish([namespace("shop"), configmap("a")])
    agent = make_agent(system_objects=frozenset({("ClusterRoleBinding", "", "system:basic-user")}))
    agent.sync()
    branch.publish([namespace("shop"), configmap("a"), _binding("system:basic-user", "system:basic-user")])
    result = agent.sync()
    assert result.state == "Ready", result.message
    assert _subjects(rbac, "system:basic-user") == ["shop-admins"]
    branch.publish([namespace("shop"), configmap("a"), configmap("b")], prune_limit=1)
    result = agent.sync()
    assert [k[4] for k in result.pruned.deleted] == ["system:basic-user"]
