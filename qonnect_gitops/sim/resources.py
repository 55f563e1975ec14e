"""The resource types a simulated cluster serves: built-in kinds and kinds from applied CRDs."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from qonnect_gitops.sim import schema

# Built-in kinds whose strategies maintain metadata.generation (Services, Namespaces,
# Nodes, ConfigMaps... have none).
GENERATION_KINDS = frozenset({
    "Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job", "CronJob", "Pod", "HorizontalPodAutoscaler",
    "PodDisruptionBudget", "NetworkPolicy", "CustomResourceDefinition"})
ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass(eq=False)
class ResourceType:
    """One served resource (``deployments`` in ``apps/v1``) and how it behaves."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool = True
    short_names: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()  # "status", "scale"
    categories: tuple[str, ...] = ()
    builtin: bool = True
    root: dict[str, Any] | None = None  # schema node of the object
    # Field selectors beyond metadata.name / metadata.namespace, by path.
    extra_field_selectors: tuple[str, ...] = ()
    # Scale subresource paths (dotted, without the leading "."), as a CRD declares them.
    spec_replicas_path: str = "spec.replicas"
    status_replicas_path: str = "status.replicas"
    label_selector_path: str | None = "status.selector"
    crd_name: str | None = None

    @property
    def singular(self) -> str:
        """Lower-case kind, the singular name discovery reports."""
        return self.kind.lower()

    @property
    def group_version(self) -> str:
        """``apps/v1`` or ``v1`` for the core group."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """``deployments.apps`` or ``configmaps``: how error messages name the resource."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def list_kind(self) -> str:
        """The kind of a list of these objects."""
        return self.kind + "List"

    def schema_root(self) -> dict[str, Any] | None:
        """The schema node for the object, looked up lazily for built-ins."""
        if self.root is None and self.builtin:
            self.root = schema.kind_root(self.group, self.version, self.kind)
        return self.root

    @property
    def tracks_generation(self) -> bool:
        """Whether the API keeps metadata.generation for this kind (its registry strategy sets it)."""
        return not self.builtin or self.kind in GENERATION_KINDS


def _b(group: str, version: str, kind: str, plural: str, namespaced: bool = True,
       short: tuple[str, ...] = (), sub: tuple[str, ...] = (), fields: tuple[str, ...] = (),
       categories: tuple[str, ...] = ()) -> ResourceType:
    return ResourceType(group, version, kind, plural, namespaced, short, sub, categories,
                        extra_field_selectors=fields)


def builtin_types() -> list[ResourceType]:
    """Fresh descriptions of the built-in kinds (one list per cluster: CRDs add to it)."""
    return [
        _b("", "v1", "Namespace", "namespaces", False, ("ns",), ("status",), ("status.phase",)),
        _b("", "v1", "ConfigMap", "configmaps", short=("cm",)),
        _b("", "v1", "Secret", "secrets", fields=("type",)),
        _b("", "v1", "Service", "services", short=("svc",), sub=("status",), categories=("all",)),
        _b("", "v1", "ServiceAccount", "serviceaccounts", short=("sa",)),
        _b("", "v1", "Endpoints", "endpoints", short=("ep",)),
        _b("", "v1", "Pod", "pods", short=("po",), sub=("status",), categories=("all",),
           fields=("spec.nodeName", "spec.schedulerName", "spec.restartPolicy", "spec.serviceAccountName",
                   "status.phase", "status.podIP", "status.nominatedNodeName")),
        _b("", "v1", "Node", "nodes", False, ("no",), ("status",), ("spec.unschedulable",)),
        _b("discovery.k8s.io", "v1", "EndpointSlice", "endpointslices", fields=("addressType",)),
        _b("apps", "v1", "Deployment", "deployments", short=("deploy",), sub=("status", "scale"), categories=("all",)),
        _b("apps", "v1", "ReplicaSet", "replicasets", short=("rs",), sub=("status", "scale"), categories=("all",)),
        _b("apps", "v1", "StatefulSet", "statefulsets", short=("sts",), sub=("status", "scale"), categories=("all",)),
        _b("apps", "v1", "DaemonSet", "daemonsets", short=("ds",), sub=("status",), categories=("all",)),
        _b("batch", "v1", "Job", "jobs", sub=("status",), categories=("all",), fields=("status.successful",)),
        _b("batch", "v1", "CronJob", "cronjobs", short=("cj",), sub=("status",), categories=("all",)),
        _b("rbac.authorization.k8s.io", "v1", "Role", "roles"),
        _b("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings"),
        _b("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", False),
        _b("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings", False),
        _b("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets", short=("pdb",), sub=("status",)),
        _b("autoscaling", "v2", "HorizontalPodAutoscaler", "horizontalpodautoscalers", short=("hpa",),
           sub=("status",), categories=("all",)),
        _b("networking.k8s.io", "v1", "NetworkPolicy", "networkpolicies", short=("netpol",)),
        _b("apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions", False,
           ("crd", "crds"), ("status",)),
        service_export_type(),
    ]


def service_export_type() -> ResourceType:
    """``ServiceExport`` of the Multi-Cluster Services API, served as if its CRD were installed."""
    root = schema.crd_root({
        "type": "object",
        "properties": {
            "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            "status": {
                "type": "object",
                "properties": {
                    "conditions": {
                        "type": "array",
                        "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["type"],
                        "items": {
                            "type": "object",
                            "required": ["type", "status"],
                            "properties": {k: {"type": "string"} for k in (
                                "type", "status", "reason", "message", "lastTransitionTime")},
                        },
                    }
                },
            },
        },
    })
    return ResourceType("multicluster.x-k8s.io", "v1alpha1", "ServiceExport", "serviceexports",
                        True, ("svcex",), ("status",), builtin=False, root=root,
                        crd_name="serviceexports.multicluster.x-k8s.io")


class Registry:
    """The resource types of one cluster, looked up by URL parts or by kind (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._types: list[ResourceType] = builtin_types()
        self.revision = 0  # bumped when CRDs change discovery, so OpenAPI hashes change too

    def all(self) -> list[ResourceType]:
        """Every served type, built-in first."""
        with self._lock:
            return list(self._types)

    def find(self, group: str, version: str, plural: str) -> ResourceType | None:
        """The type served at ``/apis/<group>/<version>/<plural>``."""
        with self._lock:
            for rt in self._types:
                if rt.group == group and rt.version == version and rt.plural == plural:
                    return rt
        return None

    def by_kind(self, group: str, version: str, kind: str) -> ResourceType | None:
        """The type with this group, version and kind."""
        with self._lock:
            for rt in self._types:
                if rt.group == group and rt.version == version and rt.kind == kind:
                    return rt
        return None

    def group_versions(self) -> dict[str, list[str]]:
        """Served versions per group, in the order they were registered."""
        out: dict[str, list[str]] = {}
        for rt in self.all():
            versions = out.setdefault(rt.group, [])
            if rt.version not in versions:
                versions.append(rt.version)
        return out

    def sync_crd(self, crd: dict[str, Any], established: bool) -> None:
        """Serve (or stop serving) the versions of a CustomResourceDefinition."""
        name = crd["metadata"]["name"]
        spec = crd.get("spec", {})
        new: list[ResourceType] = []
        if established:
            names = spec.get("names", {})
            for ver in spec.get("versions", []):
                if not ver.get("served", True):
                    continue
                sub = ver.get("subresources") or {}
                scale = sub.get("scale") or {}
                subs = tuple(s for s in ("status", "scale") if s in sub)
                root = schema.crd_root((ver.get("schema") or {}).get("openAPIV3Schema"))
                new.append(ResourceType(
                    spec.get("group", ""), ver["name"], names.get("kind", ""), names.get("plural", ""),
                    spec.get("scope", "Namespaced") == "Namespaced", tuple(names.get("shortNames", ())),
                    subs, tuple(names.get("categories", ())), builtin=False, root=root,
                    spec_replicas_path=scale.get("specReplicasPath", ".spec.replicas").lstrip("."),
                    status_replicas_path=scale.get("statusReplicasPath", ".status.replicas").lstrip("."),
                    label_selector_path=(scale.get("labelSelectorPath") or "").lstrip(".") or None,
                    crd_name=name))
        with self._lock:
            kept = [rt for rt in self._types if rt.crd_name != name or rt.builtin]
            # ServiceExport is pre-installed; a CRD with the same name replaces it.
            self._types = kept + new
            self.revision += 1
