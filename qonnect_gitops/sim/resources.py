"""The resource types a simulated cluster serves: built-in kinds and kinds from applied CRDs."""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Any

from qonnect_gitops.sim import schema

# Built-in kinds whose strategies maintain metadata.generation (Services, Namespaces,
# Nodes, ConfigMaps... have none).
GENERATION_KINDS = frozenset({
    "Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job", "CronJob", "Pod", "HorizontalPodAutoscaler",
    "PodDisruptionBudget", "NetworkPolicy", "CustomResourceDefinition", "ReplicationController", "Ingress",
    "PriorityLevelConfiguration", "FlowSchema", "ValidatingAdmissionPolicy", "MutatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding", "ResourceClaim", "ResourceClaimTemplate", "DeviceClass", "ResourceSlice"})
ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
CREATE_ONLY = ("create",)
READ_ONLY = ("get", "list")
# Subresources and the verbs discovery lists for them.
SUBRESOURCE_VERBS: dict[str, tuple[str, ...]] = {
    "status": ("get", "patch", "update"), "scale": ("get", "patch", "update"), "approval": ("get", "patch", "update"),
    "eviction": ("create",), "binding": ("create",), "token": ("create",), "log": ("get",),
}
# Kinds that are reviews: a create answers with a status and stores nothing.
REVIEW_KINDS = frozenset({"SelfSubjectAccessReview", "SelfSubjectRulesReview", "SubjectAccessReview",
                          "LocalSubjectAccessReview", "TokenReview", "SelfSubjectReview"})


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
    verbs: tuple[str, ...] = ALL_VERBS
    # Another version of a resource stored elsewhere (events.k8s.io Events live as core Events):
    # (group, plural) of the storage and the conversions to and from it.
    storage: tuple[str, str] | None = None
    to_storage: Any = None  # Callable[[dict], dict]
    from_storage: Any = None  # Callable[[dict], dict]
    field_aliases: tuple[tuple[str, str], ...] = ()  # field selector path here -> path in storage
    # Printer columns of a CRD version (additionalPrinterColumns), for Table responses.
    printer_columns: tuple[dict[str, Any], ...] = ()

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
    def storage_gr(self) -> tuple[str, str]:
        """Where objects of this type are stored: ``(group, plural)``, or another resource's."""
        return self.storage or (self.group, self.plural)

    def sub_verbs(self, sub: str) -> tuple[str, ...]:
        """The verbs a subresource serves."""
        return SUBRESOURCE_VERBS.get(sub, ("get", "patch", "update"))

    @property
    def tracks_generation(self) -> bool:
        """Whether the API keeps metadata.generation for this kind (its registry strategy sets it)."""
        return not self.builtin or self.kind in GENERATION_KINDS


def _b(group: str, version: str, kind: str, plural: str, namespaced: bool = True,
       short: tuple[str, ...] = (), sub: tuple[str, ...] = (), fields: tuple[str, ...] = (),
       categories: tuple[str, ...] = (), verbs: tuple[str, ...] = ALL_VERBS) -> ResourceType:
    return ResourceType(group, version, kind, plural, namespaced, short, sub, categories,
                        extra_field_selectors=fields, verbs=verbs)


_EVENT_FIELDS = ("involvedObject.kind", "involvedObject.namespace", "involvedObject.name", "involvedObject.uid",
                 "involvedObject.apiVersion", "involvedObject.resourceVersion", "involvedObject.fieldPath",
                 "reason", "reportingComponent", "source", "type")
_EVENTS_V1_RENAMES = (("regarding", "involvedObject"), ("note", "message"), ("reportingController",
                                                                           "reportingComponent"),
                      ("deprecatedSource", "source"), ("deprecatedFirstTimestamp", "firstTimestamp"),
                      ("deprecatedLastTimestamp", "lastTimestamp"), ("deprecatedCount", "count"))


def _event_to_core(obj: dict[str, Any]) -> dict[str, Any]:
    """An ``events.k8s.io/v1`` Event as the core Event it is stored as."""
    out = {k: v for k, v in obj.items() if k not in dict(_EVENTS_V1_RENAMES)}
    for new, old in _EVENTS_V1_RENAMES:
        if new in obj:
            out[old] = obj[new]
    out["apiVersion"], out["kind"] = "v1", "Event"
    return out


def _event_from_core(obj: dict[str, Any]) -> dict[str, Any]:
    """A stored core Event as ``events.k8s.io/v1`` shows it."""
    back = {old: new for new, old in _EVENTS_V1_RENAMES}
    out: dict[str, Any] = {}
    for k, v in obj.items():
        if k == "source" and not v:
            continue
        if k == "count" and not v:
            continue
        out[back.get(k, k)] = v
    if not out.get("eventTime"):
        # Events written through the core API may have no eventTime; this version requires one.
        first = str(obj.get("firstTimestamp") or (obj.get("metadata") or {}).get("creationTimestamp") or "")
        out["eventTime"] = first[:-1] + ".000000Z" if first.endswith("Z") else first or None
    out["apiVersion"], out["kind"] = "events.k8s.io/v1", "Event"
    return out


def _events_v1() -> ResourceType:
    rt = _b("events.k8s.io", "v1", "Event", "events", short=("ev",),
            fields=("regarding.kind", "regarding.namespace", "regarding.name", "regarding.uid",
                    "regarding.apiVersion", "regarding.resourceVersion", "regarding.fieldPath", "reason",
                    "reportingController", "type"))
    rt.storage, rt.to_storage, rt.from_storage = ("", "events"), _event_to_core, _event_from_core
    rt.field_aliases = (("regarding.", "involvedObject."), ("reportingController", "reportingComponent"))
    return rt


def builtin_types() -> list[ResourceType]:
    """Fresh descriptions of the built-in kinds (one list per cluster: CRDs add to it)."""
    pod_fields = ("spec.nodeName", "spec.schedulerName", "spec.restartPolicy", "spec.serviceAccountName",
                  "spec.hostNetwork", "status.phase", "status.podIP", "status.nominatedNodeName")
    return [
        _b("", "v1", "Binding", "bindings", verbs=CREATE_ONLY),
        _b("", "v1", "ComponentStatus", "componentstatuses", False, ("cs",), verbs=READ_ONLY),
        _b("", "v1", "ConfigMap", "configmaps", short=("cm",)),
        _b("", "v1", "Endpoints", "endpoints", short=("ep",)),
        _b("", "v1", "Event", "events", short=("ev",), fields=_EVENT_FIELDS),
        _b("", "v1", "LimitRange", "limitranges", short=("limits",)),
        _b("", "v1", "Namespace", "namespaces", False, ("ns",), ("status",), ("status.phase",)),
        _b("", "v1", "Node", "nodes", False, ("no",), ("status",), ("spec.unschedulable",)),
        _b("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims", short=("pvc",), sub=("status",)),
        _b("", "v1", "PersistentVolume", "persistentvolumes", False, ("pv",), ("status",)),
        _b("", "v1", "Pod", "pods", short=("po",), sub=("status", "binding", "eviction", "log"),
           categories=("all",), fields=pod_fields),
        _b("", "v1", "PodTemplate", "podtemplates"),
        _b("", "v1", "ReplicationController", "replicationcontrollers", short=("rc",), sub=("status", "scale"),
           categories=("all",), fields=("status.replicas",)),
        _b("", "v1", "ResourceQuota", "resourcequotas", short=("quota",), sub=("status",)),
        _b("", "v1", "Secret", "secrets", fields=("type",)),
        _b("", "v1", "ServiceAccount", "serviceaccounts", short=("sa",), sub=("token",)),
        _b("", "v1", "Service", "services", short=("svc",), sub=("status",), categories=("all",)),
        _b("admissionregistration.k8s.io", "v1", "MutatingWebhookConfiguration", "mutatingwebhookconfigurations",
           False, categories=("api-extensions",)),
        _b("admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicy", "validatingadmissionpolicies",
           False, sub=("status",), categories=("api-extensions",)),
        _b("admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicyBinding",
           "validatingadmissionpolicybindings", False, categories=("api-extensions",)),
        _b("admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration",
           "validatingwebhookconfigurations", False, categories=("api-extensions",)),
        _b("apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions", False,
           ("crd", "crds"), ("status",), categories=("api-extensions",)),
        _b("apiregistration.k8s.io", "v1", "APIService", "apiservices", False, sub=("status",),
           categories=("api-extensions",)),
        _b("apps", "v1", "ControllerRevision", "controllerrevisions"),
        _b("apps", "v1", "DaemonSet", "daemonsets", short=("ds",), sub=("status",), categories=("all",)),
        _b("apps", "v1", "Deployment", "deployments", short=("deploy",), sub=("status", "scale"), categories=("all",)),
        _b("apps", "v1", "ReplicaSet", "replicasets", short=("rs",), sub=("status", "scale"), categories=("all",)),
        _b("apps", "v1", "StatefulSet", "statefulsets", short=("sts",), sub=("status", "scale"), categories=("all",)),
        _b("authentication.k8s.io", "v1", "SelfSubjectReview", "selfsubjectreviews", False, verbs=CREATE_ONLY),
        _b("authentication.k8s.io", "v1", "TokenReview", "tokenreviews", False, verbs=CREATE_ONLY),
        _b("authorization.k8s.io", "v1", "LocalSubjectAccessReview", "localsubjectaccessreviews",
           verbs=CREATE_ONLY),
        _b("authorization.k8s.io", "v1", "SelfSubjectAccessReview", "selfsubjectaccessreviews", False,
           verbs=CREATE_ONLY),
        _b("authorization.k8s.io", "v1", "SelfSubjectRulesReview", "selfsubjectrulesreviews", False,
           verbs=CREATE_ONLY),
        _b("authorization.k8s.io", "v1", "SubjectAccessReview", "subjectaccessreviews", False, verbs=CREATE_ONLY),
        _b("autoscaling", "v2", "HorizontalPodAutoscaler", "horizontalpodautoscalers", short=("hpa",),
           sub=("status",), categories=("all",)),
        _b("batch", "v1", "CronJob", "cronjobs", short=("cj",), sub=("status",), categories=("all",)),
        _b("batch", "v1", "Job", "jobs", sub=("status",), categories=("all",), fields=("status.successful",)),
        _b("certificates.k8s.io", "v1", "CertificateSigningRequest", "certificatesigningrequests", False,
           ("csr",), ("status", "approval"), fields=("spec.signerName",)),
        _b("coordination.k8s.io", "v1", "Lease", "leases"),
        _b("discovery.k8s.io", "v1", "EndpointSlice", "endpointslices", fields=("addressType",)),
        _events_v1(),
        _b("flowcontrol.apiserver.k8s.io", "v1", "FlowSchema", "flowschemas", False, sub=("status",)),
        _b("flowcontrol.apiserver.k8s.io", "v1", "PriorityLevelConfiguration", "prioritylevelconfigurations",
           False, sub=("status",)),
        _b("networking.k8s.io", "v1", "IngressClass", "ingressclasses", False),
        _b("networking.k8s.io", "v1", "Ingress", "ingresses", short=("ing",), sub=("status",)),
        _b("networking.k8s.io", "v1", "IPAddress", "ipaddresses", False, ("ip",)),
        _b("networking.k8s.io", "v1", "NetworkPolicy", "networkpolicies", short=("netpol",)),
        _b("networking.k8s.io", "v1", "ServiceCIDR", "servicecidrs", False, sub=("status",)),
        _b("node.k8s.io", "v1", "RuntimeClass", "runtimeclasses", False),
        _b("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets", short=("pdb",), sub=("status",)),
        _b("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings", False),
        _b("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", False),
        _b("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings"),
        _b("rbac.authorization.k8s.io", "v1", "Role", "roles"),
        _b("resource.k8s.io", "v1", "DeviceClass", "deviceclasses", False),
        _b("resource.k8s.io", "v1", "ResourceClaim", "resourceclaims", sub=("status",)),
        _b("resource.k8s.io", "v1", "ResourceClaimTemplate", "resourceclaimtemplates"),
        _b("resource.k8s.io", "v1", "ResourceSlice", "resourceslices", False,
           fields=("spec.nodeName", "spec.driver")),
        _b("scheduling.k8s.io", "v1", "PriorityClass", "priorityclasses", False, ("pc",)),
        _b("storage.k8s.io", "v1", "CSIDriver", "csidrivers", False),
        _b("storage.k8s.io", "v1", "CSINode", "csinodes", False),
        _b("storage.k8s.io", "v1", "CSIStorageCapacity", "csistoragecapacities"),
        _b("storage.k8s.io", "v1", "StorageClass", "storageclasses", False, ("sc",)),
        _b("storage.k8s.io", "v1", "VolumeAttachment", "volumeattachments", False, sub=("status",)),
        _b("storage.k8s.io", "v1", "VolumeAttributesClass", "volumeattributesclasses", False, ("vac",)),
        _b("metrics.k8s.io", "v1beta1", "NodeMetrics", "nodes", False, verbs=READ_ONLY),
        _b("metrics.k8s.io", "v1beta1", "PodMetrics", "pods", verbs=READ_ONLY),
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
        self._reindex()
        self.revision = 0  # bumped when CRDs change discovery, so OpenAPI hashes change too

    def _reindex(self) -> None:
        self._by_plural = {(rt.group, rt.version, rt.plural): rt for rt in reversed(self._types)}
        self._by_kind = {(rt.group, rt.version, rt.kind): rt for rt in reversed(self._types)}

    def all(self) -> list[ResourceType]:
        """Every served type, built-in first."""
        with self._lock:
            return list(self._types)

    def find(self, group: str, version: str, plural: str) -> ResourceType | None:
        """The type served at ``/apis/<group>/<version>/<plural>``."""
        return self._by_plural.get((group, version, plural))

    def by_kind(self, group: str, version: str, kind: str) -> ResourceType | None:
        """The type with this group, version and kind."""
        return self._by_kind.get((group, version, kind))

    def group_versions(self) -> dict[str, list[str]]:
        """Served versions per group, in the order they were registered (a CRD's in its preference order)."""
        out: dict[str, list[str]] = {}
        for rt in self.all():
            versions = out.setdefault(rt.group, [])
            if rt.version not in versions:
                versions.append(rt.version)
        return out

    def sync_crd(self, crd: dict[str, Any], established: bool) -> None:
        """Serve (or stop serving) the versions of a CustomResourceDefinition."""
        name = crd["metadata"]["name"]
        new = crd_types(crd) if established else []
        with self._lock:
            kept = [rt for rt in self._types if rt.crd_name != name or rt.builtin]
            # ServiceExport is pre-installed; a CRD with the same name replaces it.
            self._types = kept + new
            self._reindex()
            self.revision += 1


def _version_order(name: str) -> tuple[int, int, int, str]:
    """Kubernetes version priority: GA before beta before alpha, higher numbers first."""
    m = re.match(r"^v(\d+)(?:(alpha|beta)(\d+))?$", name)
    if not m:
        return (3, 0, 0, name)
    level = {"": 0, "beta": 1, "alpha": 2}[m.group(2) or ""]
    return (level, -int(m.group(1)), -int(m.group(3) or 0), name)


def crd_types(crd: dict[str, Any]) -> list[ResourceType]:
    """The served versions of a CustomResourceDefinition, in the API's preference order, one type each.

    Every version shares one storage (the CRD's group and plural); a version's schema,
    subresources and printer columns are its own.
    """
    name = crd["metadata"]["name"]
    spec = crd.get("spec", {})
    names = spec.get("names", {})
    out = []
    versions = [v for v in spec.get("versions", []) if v.get("served", True)]
    for ver in sorted(versions, key=lambda v: _version_order(str(v.get("name", "")))):
        sub = ver.get("subresources") or {}
        scale = sub.get("scale") or {}
        subs = tuple(s for s in ("status", "scale") if s in sub)
        root = schema.crd_root((ver.get("schema") or {}).get("openAPIV3Schema"))
        fields = tuple(str(f.get("jsonPath", "")).lstrip(".") for f in ver.get("selectableFields") or []
                       if f.get("jsonPath"))
        out.append(ResourceType(
            spec.get("group", ""), ver["name"], names.get("kind", ""), names.get("plural", ""),
            spec.get("scope", "Namespaced") == "Namespaced", tuple(names.get("shortNames", ())),
            subs, tuple(names.get("categories", ())), builtin=False, root=root, extra_field_selectors=fields,
            spec_replicas_path=scale.get("specReplicasPath", ".spec.replicas").lstrip("."),
            status_replicas_path=scale.get("statusReplicasPath", ".status.replicas").lstrip("."),
            label_selector_path=(scale.get("labelSelectorPath") or "").lstrip(".") or None,
            crd_name=name, printer_columns=tuple(ver.get("additionalPrinterColumns") or ())))
    return out
