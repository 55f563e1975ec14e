"""Discovery and OpenAPI documents for the resource types a cluster serves.

The OpenAPI documents are built from the shipped 1.37 definitions (converted to
the OpenAPI dialect) plus the schemas of applied CRDs, with the ``paths`` that
clients inspect: kubectl checks the PATCH operation of a kind for the
``fieldValidation`` and ``dryRun`` query parameters before it relies on server
side validation and dry-run.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from qonnect_gitops.sim import schema
from qonnect_gitops.sim.resources import Registry, ResourceType

SUB_VERBS = ["get", "patch", "update"]
META = "io.k8s.apimachinery.pkg.apis.meta.v1."
COMMON_DEFS = [META + "Status", META + "DeleteOptions", META + "Patch", META + "APIResourceList",
               "io.k8s.api.autoscaling.v1.Scale"]


def version_info() -> dict[str, Any]:
    """The ``/version`` document."""
    return {"major": "1", "minor": "37", "emulationMajor": "1", "emulationMinor": "37",
            "minCompatibilityMajor": "1", "minCompatibilityMinor": "36",
            "gitVersion": schema.KUBERNETES_VERSION + "-qonnect-sim", "gitCommit": "0" * 40,
            "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.25",
            "compiler": "gc", "platform": "linux/amd64"}


# --------------------------------------------------------------------------- discovery


def api_versions() -> dict[str, Any]:
    """``/api``: the legacy core group's versions."""
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]}


def api_group_list(registry: Registry) -> dict[str, Any]:
    """``/apis``: every named group and its versions."""
    groups = []
    for group, versions in registry.group_versions().items():
        if not group:
            continue
        vs = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        groups.append({"name": group, "versions": vs, "preferredVersion": vs[0]})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def resource_list(registry: Registry, group: str, version: str) -> dict[str, Any] | None:
    """``/apis/<group>/<version>``: the resources of one group version, subresources included."""
    types = [rt for rt in registry.all() if rt.group == group and rt.version == version]
    if not types:
        return None
    resources: list[dict[str, Any]] = []
    for rt in types:
        entry: dict[str, Any] = {"name": rt.plural, "singularName": rt.singular, "namespaced": rt.namespaced,
                                 "kind": rt.kind, "verbs": list(rt.verbs)}
        if rt.short_names:
            entry["shortNames"] = list(rt.short_names)
        if rt.categories:
            entry["categories"] = list(rt.categories)
        resources.append(entry)
        for sub in rt.subresources:
            s: dict[str, Any] = {"name": f"{rt.plural}/{sub}", "singularName": "", "namespaced": rt.namespaced,
                                 "kind": _sub_kind(rt, sub), "verbs": list(rt.sub_verbs(sub))}
            if sub == "scale":
                s.update(group="autoscaling", version="v1", kind="Scale")
            resources.append(s)
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{group}/{version}" if group else version,
            "resources": resources}


# Subresources whose objects are another kind (of another group).
_SUB_KINDS = {"eviction": "Eviction", "binding": "Binding", "token": "TokenRequest", "scale": "Scale"}
_SUB_GROUPS = {"eviction": "policy", "token": "authentication.k8s.io"}


def _sub_kind(rt: ResourceType, sub: str) -> str:
    return _SUB_KINDS.get(sub, rt.kind)


AGGREGATED_CONTENT_TYPE = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"


def aggregated(registry: Registry, core: bool) -> dict[str, Any]:
    """Aggregated discovery (``apidiscovery.k8s.io/v2``) for ``/api`` (core) or ``/apis``."""
    items = []
    for group, versions in registry.group_versions().items():
        if bool(group) == core:
            continue
        vlist = []
        for v in versions:
            resources = []
            for rt in registry.all():
                if rt.group != group or rt.version != v:
                    continue
                entry: dict[str, Any] = {
                    "resource": rt.plural, "responseKind": {"group": rt.group, "version": rt.version, "kind": rt.kind},
                    "scope": "Namespaced" if rt.namespaced else "Cluster", "singularResource": rt.singular,
                    "verbs": list(rt.verbs)}
                if rt.short_names:
                    entry["shortNames"] = list(rt.short_names)
                if rt.categories:
                    entry["categories"] = list(rt.categories)
                subs = []
                for sub in rt.subresources:
                    kind = {"group": "autoscaling", "version": "v1", "kind": "Scale"} if sub == "scale" else \
                        {"group": _SUB_GROUPS.get(sub, rt.group), "version": "v1" if sub in _SUB_GROUPS else rt.version,
                         "kind": _sub_kind(rt, sub)}
                    subs.append({"subresource": sub, "responseKind": kind, "verbs": list(rt.sub_verbs(sub))})
                if subs:
                    entry["subresources"] = subs
                resources.append(entry)
            vlist.append({"version": v, "resources": resources, "freshness": "Current"})
        items.append({"metadata": {"name": group}, "versions": vlist})
    return {"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {}, "items": items}


# --------------------------------------------------------------------------- OpenAPI


def _def_name(rt: ResourceType) -> str:
    if rt.builtin:
        name = schema.definition_for(rt.group, rt.version, rt.kind)
        if name:
            return name
    rev = ".".join(reversed(rt.group.split("."))) if rt.group else "io.k8s.api.core"
    return f"{rev}.{rt.version}.{rt.kind}"


def _custom_def(rt: ResourceType, ref_prefix: str, v3: bool) -> dict[str, Any]:
    doc = schema.to_openapi(rt.schema_root() or {}, ref_prefix, v3)
    doc["x-kubernetes-group-version-kind"] = [{"group": rt.group, "version": rt.version, "kind": rt.kind}]
    return doc


def _custom_list_def(rt: ResourceType, ref_prefix: str) -> dict[str, Any]:
    return {"type": "object", "required": ["items"],
            "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                           "items": {"type": "array", "items": {"$ref": ref_prefix + _def_name(rt)}},
                           "metadata": {"$ref": ref_prefix + META + "ListMeta"}},
            "x-kubernetes-group-version-kind": [{"group": rt.group, "version": rt.version, "kind": rt.list_kind}]}


def _param(name: str, desc: str, kind: str = "string", v3: bool = True) -> dict[str, Any]:
    if v3:
        return {"name": name, "in": "query", "description": desc, "schema": {"type": kind, "uniqueItems": True}}
    return {"name": name, "in": "query", "description": desc, "type": kind, "uniqueItems": True}


def _operations(rt: ResourceType, ref_prefix: str, v3: bool) -> dict[str, dict[str, Any]]:
    """Paths and operations for one resource type (collection, item, subresources)."""
    gvk = {"group": rt.group, "version": rt.version, "kind": rt.kind}
    prefix = f"/apis/{rt.group}/{rt.version}" if rt.group else f"/api/{rt.version}"
    base = f"{prefix}/namespaces/{{namespace}}/{rt.plural}" if rt.namespaced else f"{prefix}/{rt.plural}"
    obj_ref = {"$ref": ref_prefix + _def_name(rt)}
    list_ref = {"$ref": ref_prefix + _def_name(rt) + "List"}
    status_ref = {"$ref": ref_prefix + META + "Status"}
    write = [_param("dryRun", "When present, indicates that modifications should not be persisted.", v3=v3),
             _param("fieldManager", "fieldManager is a name associated with the actor or entity that is making these changes.", v3=v3),
             _param("fieldValidation", "fieldValidation instructs the server on how to handle objects in the request "
                    "containing unknown or duplicate fields. Valid values are: Ignore, Warn, Strict.", v3=v3)]
    force = _param("force", "Force is going to \"force\" Apply requests.", "boolean", v3)
    path_params = [{"name": "name", "in": "path", "required": True, "description": "name of the object",
                    **({"schema": {"type": "string", "uniqueItems": True}} if v3 else {"type": "string", "uniqueItems": True})}]
    if rt.namespaced:
        path_params.append({"name": "namespace", "in": "path", "required": True, "description": "object name and auth scope",
                            **({"schema": {"type": "string", "uniqueItems": True}} if v3 else {"type": "string", "uniqueItems": True})})

    def op(action: str, verb: str, resp: dict[str, Any], params: list[dict[str, Any]], body: dict[str, Any] | None,
           kind: dict[str, str] = gvk, suffix: str = "") -> dict[str, Any]:
        o: dict[str, Any] = {"operationId": f"{verb}{rt.kind}{suffix}", "x-kubernetes-action": action,
                             "x-kubernetes-group-version-kind": kind, "parameters": params}
        if v3:
            o["responses"] = {"200": {"description": "OK", "content": {"application/json": {"schema": resp}}}}
            if body is not None:
                types = ["application/json"] if action != "patch" else [
                    "application/json-patch+json", "application/merge-patch+json",
                    "application/strategic-merge-patch+json", "application/apply-patch+yaml"]
                o["requestBody"] = {"content": {t: {"schema": body} for t in types}, "required": True}
        else:
            o["responses"] = {"200": {"description": "OK", "schema": resp}}
            if body is not None:
                o["parameters"] = [{"name": "body", "in": "body", "required": True, "schema": body}] + params
            o["consumes"] = ["*/*"]
            o["produces"] = ["application/json"]
        return o

    patch_body = {"$ref": ref_prefix + META + "Patch"} if v3 else {"type": "object"}
    paths: dict[str, dict[str, Any]] = {}
    coll_params = [p for p in path_params if p["name"] == "namespace"]
    paths[base] = {
        "get": op("list", "list", list_ref, [_param("labelSelector", "label selector", v3=v3),
                                             _param("fieldSelector", "field selector", v3=v3),
                                             _param("watch", "watch", "boolean", v3)], None),
        "post": op("post", "create", obj_ref, write, obj_ref),
        "delete": op("deletecollection", "deletecollection", status_ref, write[:1], None),
        "parameters": coll_params,
    }
    paths[base + "/{name}"] = {
        "get": op("get", "read", obj_ref, [], None),
        "put": op("put", "replace", obj_ref, write, obj_ref),
        "patch": op("patch", "patch", obj_ref, write + [force], patch_body),
        "delete": op("delete", "delete", status_ref, write[:1], None),
        "parameters": path_params,
    }
    if "status" in rt.subresources:
        paths[base + "/{name}/status"] = {
            "get": op("get", "read", obj_ref, [], None, suffix="Status"),
            "put": op("put", "replace", obj_ref, write, obj_ref, suffix="Status"),
            "patch": op("patch", "patch", obj_ref, write + [force], patch_body, suffix="Status"),
            "parameters": path_params,
        }
    if "scale" in rt.subresources:
        scale_kind = {"group": "autoscaling", "version": "v1", "kind": "Scale"}
        scale_ref = {"$ref": ref_prefix + "io.k8s.api.autoscaling.v1.Scale"}
        paths[base + "/{name}/scale"] = {
            "get": op("get", "read", scale_ref, [], None, scale_kind, "Scale"),
            "put": op("put", "replace", scale_ref, write, scale_ref, scale_kind, "Scale"),
            "patch": op("patch", "patch", scale_ref, write + [force], patch_body, scale_kind, "Scale"),
            "parameters": path_params,
        }
    return paths


def _document(types: list[ResourceType], v3: bool) -> dict[str, Any]:
    ref_prefix = "#/components/schemas/" if v3 else "#/definitions/"
    builtin_names = [n for n in (schema.definition_for(rt.group, rt.version, rt.kind) for rt in types if rt.builtin) if n]
    list_names = [n + "List" for n in builtin_names if n + "List" in schema.definitions()]
    defs = dict(schema.definitions_for(builtin_names + list_names + COMMON_DEFS + [META + "ObjectMeta", META + "ListMeta"],
                                       ref_prefix, v3))
    for rt in types:
        if not rt.builtin:
            defs[_def_name(rt)] = _custom_def(rt, ref_prefix, v3)
            defs[_def_name(rt) + "List"] = _custom_list_def(rt, ref_prefix)
    paths: dict[str, Any] = {}
    for rt in types:
        paths.update(_operations(rt, ref_prefix, v3))
    info = {"title": "Kubernetes", "version": schema.KUBERNETES_VERSION}
    if v3:
        return {"openapi": "3.0.0", "info": info, "paths": paths, "components": {"schemas": defs}}
    return {"swagger": "2.0", "info": info, "paths": paths, "definitions": defs}


def _signature(rt: ResourceType) -> tuple[Any, ...]:
    base: tuple[Any, ...] = (rt.group, rt.version, rt.kind, rt.plural, rt.namespaced, rt.subresources, rt.builtin)
    if rt.builtin:
        return base
    # Custom kinds differ by schema; hash it once per type object.
    digest = getattr(rt, "_schema_digest", None)
    if digest is None:
        digest = schema.document_hash(rt.schema_root() or {})
        rt._schema_digest = digest  # type: ignore[attr-defined]
    return (*base, digest)


# Documents are shared by every cluster in the process that serves the same types:
# nine simulated clusters build and hold each document once.
_shared_lock = threading.Lock()
_shared: dict[tuple[Any, ...], tuple[str, bytes]] = {}
_SHARED_MAX = 512


def _shared_document(types: list[ResourceType], v3: bool) -> tuple[str, bytes]:
    key = (v3, *sorted(_signature(rt) for rt in types))
    with _shared_lock:
        hit = _shared.get(key)
    if hit is None:
        doc = _document(types, v3=v3)
        hit = (schema.document_hash(doc), json.dumps(doc).encode())
        with _shared_lock:
            if len(_shared) >= _SHARED_MAX:
                _shared.clear()
            _shared[key] = hit
    return hit


class OpenApiCache:
    """Serialized OpenAPI documents of one cluster, rebuilt when its CRDs change."""

    def __init__(self, registry: Registry) -> None:
        self._registry = registry
        self._lock = threading.Lock()
        self._revision = -1
        self._v2: bytes | None = None
        self._v3: dict[str, tuple[str, bytes]] = {}

    def _refresh(self) -> None:
        if self._revision != self._registry.revision:
            self._v2, self._v3, self._revision = None, {}, self._registry.revision

    @staticmethod
    def _gv_path(group: str, version: str) -> str:
        return f"apis/{group}/{version}" if group else f"api/{version}"

    def v3(self, gv_path: str) -> tuple[str, bytes] | None:
        """(hash, body) of the OpenAPI v3 document of one group version (``apis/apps/v1``)."""
        with self._lock:
            self._refresh()
            hit = self._v3.get(gv_path)
            if hit is None:
                types = [rt for rt in self._registry.all() if self._gv_path(rt.group, rt.version) == gv_path]
                if not types:
                    return None
                hit = _shared_document(types, v3=True)
                self._v3[gv_path] = hit
            return hit

    def v3_root(self) -> dict[str, Any]:
        """``/openapi/v3``: where each group version's document is, with its content hash."""
        paths = {}
        for group, versions in self._registry.group_versions().items():
            for v in versions:
                gv = self._gv_path(group, v)
                hit = self.v3(gv)
                if hit:
                    paths[gv] = {"serverRelativeURL": f"/openapi/v3/{gv}?hash={hit[0]}"}
        return {"paths": paths}

    def v2(self) -> bytes:
        """``/openapi/v2``: one document for everything served."""
        with self._lock:
            self._refresh()
            if self._v2 is None:
                self._v2 = _shared_document(self._registry.all(), v3=False)[1]
            return self._v2
