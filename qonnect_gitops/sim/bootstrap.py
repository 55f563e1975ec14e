"""What a new cluster holds before anyone writes to it, as after ``kubeadm init`` (or a k3s start).

The ``kubernetes`` Service in ``default``, the system PriorityClasses, a default
StorageClass (``standard``; ``local-path`` on k3s, with k3s' ``traefik`` IngressClass),
and the default ClusterRoles and bindings RBAC needs (``cluster-admin`` for
``system:masters``, discovery and self-review for every authenticated user,
``admin``/``edit``/``view`` for binding to users).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from qonnect_gitops.sim.errors import ApiError

if TYPE_CHECKING:
    from qonnect_gitops.sim.api import ApiCore

_READ = ["get", "list", "watch"]
_WRITE = ["create", "delete", "deletecollection", "patch", "update"]
_WORKLOADS = [
    ("", ["pods", "pods/attach", "pods/exec", "pods/portforward", "pods/proxy", "pods/eviction", "configmaps",
          "endpoints", "persistentvolumeclaims", "replicationcontrollers", "replicationcontrollers/scale",
          "secrets", "serviceaccounts", "services", "services/proxy"]),
    ("apps", ["daemonsets", "deployments", "deployments/rollback", "deployments/scale", "replicasets",
              "replicasets/scale", "statefulsets", "statefulsets/scale"]),
    ("autoscaling", ["horizontalpodautoscalers"]),
    ("batch", ["cronjobs", "jobs"]),
    ("networking.k8s.io", ["ingresses", "networkpolicies"]),
    ("policy", ["poddisruptionbudgets"]),
    ("coordination.k8s.io", ["leases"]),
    ("discovery.k8s.io", ["endpointslices"]),
]


def _view_rules() -> list[dict[str, Any]]:
    rules = [{"apiGroups": [g], "resources": [r for r in rs if "/" not in r or (r.endswith("/scale")
                                               and g != "")], "verbs": list(_READ)} for g, rs in _WORKLOADS]
    rules.append({"apiGroups": [""], "resources": ["events", "limitranges", "namespaces", "namespaces/status",
                                                   "pods/log", "pods/status", "resourcequotas",
                                                   "resourcequotas/status", "bindings"], "verbs": list(_READ)})
    return [r for r in rules if r["resources"]]


def cluster_roles() -> list[dict[str, Any]]:
    """The default ClusterRoles (rules simplified from the upstream bootstrap policy)."""
    def role(name: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
        return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": name, "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
                             "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}},
                "rules": rules}

    edit = [{"apiGroups": [g], "resources": rs, "verbs": [*_READ, *_WRITE]} for g, rs in _WORKLOADS]
    return [
        role("cluster-admin", [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                               {"nonResourceURLs": ["*"], "verbs": ["*"]}]),
        role("admin", [*edit, {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles", "rolebindings"],
                               "verbs": [*_READ, *_WRITE]},
                       {"apiGroups": ["authorization.k8s.io"], "resources": ["localsubjectaccessreviews"],
                        "verbs": ["create"]}, *_view_rules()]),
        role("edit", [*edit, *_view_rules()]),
        role("view", _view_rules()),
        role("system:discovery", [{"nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez",
                                                       "/openapi", "/openapi/*", "/readyz", "/version",
                                                       "/version/"], "verbs": ["get"]}]),
        role("system:basic-user", [
            {"apiGroups": ["authorization.k8s.io"], "resources": ["selfsubjectaccessreviews",
                                                                  "selfsubjectrulesreviews"], "verbs": ["create"]},
            {"apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"], "verbs": ["create"]}]),
        role("system:public-info-viewer", [{"nonResourceURLs": ["/healthz", "/livez", "/readyz", "/version",
                                                                "/version/"], "verbs": ["get"]}]),
    ]


def cluster_role_bindings() -> list[dict[str, Any]]:
    """Bindings of the default ClusterRoles."""
    def binding(name: str, groups: list[str]) -> dict[str, Any]:
        return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": name, "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
                             "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": g} for g in groups]}

    return [binding("cluster-admin", ["system:masters"]),
            binding("system:discovery", ["system:authenticated"]),
            binding("system:basic-user", ["system:authenticated"]),
            binding("system:public-info-viewer", ["system:authenticated", "system:unauthenticated"])]


def bootstrap(core: ApiCore, distribution: str = "k8s") -> None:
    """Create the objects a new cluster starts with (idempotent)."""
    from qonnect_gitops.sim.api import WriteOptions

    opts = WriteOptions(field_manager="kube-apiserver")
    objects: list[tuple[str, str, str, str, dict[str, Any]]] = [
        ("", "v1", "services", "default", {
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "kubernetes", "labels": {"component": "apiserver", "provider": "kubernetes"}},
            "spec": {"ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}],
                     "type": "ClusterIP", "sessionAffinity": "None"}}),
        ("", "v1", "endpoints", "default", {
            "apiVersion": "v1", "kind": "Endpoints",
            "metadata": {"name": "kubernetes", "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
            "subsets": [{"addresses": [{"ip": "127.0.0.1"}], "ports": [{"name": "https", "port": 6443,
                                                                        "protocol": "TCP"}]}]}),
    ]
    for name, value in (("system-cluster-critical", 2000000000), ("system-node-critical", 2000001000)):
        objects.append(("scheduling.k8s.io", "v1", "priorityclasses", "", {
            "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
            "value": value, "description": "Used for system critical pods that must not be moved from their "
                                           "current node." if name.endswith("node-critical") else
            "Used for system critical pods that must run in the cluster, but can be moved to another node "
            "if necessary.", "preemptionPolicy": "PreemptLowerPriority"}))
    storage_class = "local-path" if distribution == "k3s" else "standard"
    objects.append(("storage.k8s.io", "v1", "storageclasses", "", {
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": storage_class, "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
        "provisioner": "rancher.io/local-path", "reclaimPolicy": "Delete",
        "volumeBindingMode": "WaitForFirstConsumer"}))
    if distribution == "k3s":
        objects.append(("networking.k8s.io", "v1", "ingressclasses", "", {
            "apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
            "metadata": {"name": "traefik", "annotations": {"ingressclass.kubernetes.io/is-default-class": "true"}},
            "spec": {"controller": "traefik.io/ingress-controller"}}))
    objects += [("rbac.authorization.k8s.io", "v1", "clusterroles", "", r) for r in cluster_roles()]
    objects += [("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "", b) for b in cluster_role_bindings()]
    for group, version, plural, ns, body in objects:
        rt = core.registry.find(group, version, plural)
        if rt is None:
            continue
        try:
            core.create(rt, ns, body, opts)
        except ApiError as exc:
            if exc.code != 409:
                raise
