"""The Kubernetes 1.37 schema: type metadata for merging and validation, and OpenAPI documents.

The definitions come from the ``kubernetes-validate`` package (JSON Schema files
generated from the upstream OpenAPI, with the ``x-kubernetes-*`` list and patch
metadata kept). They are loaded once per process, lazily, and shared by every
simulated cluster: parsing them costs tens of milliseconds and a few MB.

``describe(node)`` turns a schema node (built-in definition or CRD
``openAPIV3Schema``) into a ``TypeInfo`` with what structured merge needs: struct
fields, map element, list type and keys, patch strategy and merge key.
"""

from __future__ import annotations

import copy
import hashlib
import json
import threading
from dataclasses import dataclass, field
from importlib import util as importlib_util
from pathlib import Path as FsPath
from typing import Any

KUBERNETES_VERSION = "v1.37.0"
_DEFS_PREFIX = "#/$defs/"
_lock = threading.Lock()
_defs: dict[str, Any] | None = None
_gvk_index: dict[tuple[str, str, str], str] | None = None

# Key fields the API server defaults before identifying list items (the upstream
# OpenAPI carries these as `default`, the JSON Schema files lost them).
KEY_DEFAULTS: dict[str, Any] = {"protocol": "TCP"}


def _definitions_file() -> FsPath:
    spec = importlib_util.find_spec("kubernetes_validate")
    if spec is None or spec.origin is None:
        raise RuntimeError("the kubernetes-validate package is required for the simulated cluster")
    base = FsPath(spec.origin).parent / "kubernetes-json-schema" / f"{KUBERNETES_VERSION}-local"
    return base / "_definitions.json"


def definitions() -> dict[str, Any]:
    """All built-in definitions by name (``io.k8s.api.apps.v1.Deployment``...), loaded once."""
    global _defs, _gvk_index
    if _defs is None:
        with _lock:
            if _defs is None:
                with open(_definitions_file(), encoding="utf-8") as fh:
                    raw = json.load(fh)["$defs"]
                index: dict[tuple[str, str, str], str] = {}
                for name, node in raw.items():
                    for gvk in node.get("x-kubernetes-group-version-kind", []):
                        # DeleteOptions and friends are registered in every group; keep
                        # the first name seen for a GVK (there is exactly one for real kinds).
                        index.setdefault((gvk["group"], gvk["version"], gvk["kind"]), name)
                _gvk_index = index
                _defs = raw
    return _defs


def definition_for(group: str, version: str, kind: str) -> str | None:
    """The definition name of a built-in kind, or None."""
    definitions()
    assert _gvk_index is not None
    return _gvk_index.get((group, version, kind))


def ref_node(def_name: str) -> dict[str, Any]:
    """A schema node referring to a built-in definition."""
    return {"$ref": _DEFS_PREFIX + def_name}


def _deref(node: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if ref is None:
        return node
    return definitions()[ref[len(_DEFS_PREFIX):]]


def _types(node: dict[str, Any]) -> set[str]:
    t = node.get("type")
    if t is None:
        return set()
    if isinstance(t, str):
        return {t}
    return {x for x in t if x != "null"}


@dataclass(eq=False)
class TypeInfo:
    """What structured merge, patching and validation need to know about one schema node."""

    kind: str  # "struct", "map", "list", "scalar" or "any" (schemaless: deduced like upstream)
    fields: dict[str, Any] = field(default_factory=dict)
    elem: Any = None  # map value / list item schema node
    list_type: str = "atomic"  # "atomic", "set" or "map"
    keys: tuple[str, ...] = ()
    atomic: bool = False  # map/struct with x-kubernetes-map-type: atomic
    patch_strategy: str = ""
    merge_key: str = ""
    preserve_unknown: bool = False
    required: tuple[str, ...] = ()
    scalar_types: frozenset[str] = frozenset()
    int_or_string: bool = False


ANY = TypeInfo(kind="any")
_info_cache: dict[int, tuple[Any, TypeInfo]] = {}


def describe(node: Any) -> TypeInfo:
    """The ``TypeInfo`` of a schema node (cached; nodes are kept alive by the cache)."""
    if node is None:
        return ANY
    hit = _info_cache.get(id(node))
    if hit is not None and hit[0] is node:
        return hit[1]
    info = _describe(node)
    _info_cache[id(node)] = (node, info)
    return info


def _describe(node: dict[str, Any]) -> TypeInfo:
    target = _deref(node)
    # Patch and list metadata live on the property that refers to a type, not on the type.
    strategy = node.get("x-kubernetes-patch-strategy", target.get("x-kubernetes-patch-strategy", ""))
    merge_key = node.get("x-kubernetes-patch-merge-key", target.get("x-kubernetes-patch-merge-key", ""))
    preserve = bool(target.get("x-kubernetes-preserve-unknown-fields") or node.get("x-kubernetes-preserve-unknown-fields"))
    if target.get("x-kubernetes-int-or-string"):
        return TypeInfo(kind="scalar", scalar_types=frozenset({"string", "integer"}), int_or_string=True)
    one_of = target.get("oneOf") or target.get("anyOf")
    if one_of and not target.get("properties"):
        kinds: set[str] = set()
        for alt in one_of:
            kinds |= _types(alt)
        if kinds and kinds <= {"string", "integer", "number", "boolean"}:
            return TypeInfo(kind="scalar", scalar_types=frozenset(kinds), int_or_string="integer" in kinds)
    types = _types(target)
    if "array" in types:
        list_type = node.get("x-kubernetes-list-type") or target.get("x-kubernetes-list-type")
        keys = tuple(node.get("x-kubernetes-list-map-keys") or target.get("x-kubernetes-list-map-keys") or ())
        if not list_type:
            # Upstream's rule for lists without explicit metadata: a merge strategy with a
            # key is an associative list, without a key a set, anything else is atomic.
            if "merge" in strategy.split(","):
                list_type = "map" if merge_key else "set"
                keys = (merge_key,) if merge_key else ()
            else:
                list_type = "atomic"
        return TypeInfo(kind="list", elem=target.get("items"), list_type=list_type, keys=keys,
                        patch_strategy=strategy, merge_key=merge_key)
    props = target.get("properties")
    addl = target.get("additionalProperties")
    atomic = (node.get("x-kubernetes-map-type") or target.get("x-kubernetes-map-type")) == "atomic"
    if props is not None or "object" in types or addl is not None:
        if props:
            return TypeInfo(kind="struct", fields=props, atomic=atomic, patch_strategy=strategy,
                            merge_key=merge_key, preserve_unknown=preserve,
                            required=tuple(target.get("required", ())),
                            elem=addl if isinstance(addl, dict) else None)
        if isinstance(addl, dict):
            return TypeInfo(kind="map", elem=addl, atomic=atomic, patch_strategy=strategy)
        # An object with no declared shape (RawExtension, preserve-unknown-fields): deduced.
        return TypeInfo(kind="any", atomic=atomic, preserve_unknown=True, patch_strategy=strategy)
    if types:
        return TypeInfo(kind="scalar", scalar_types=frozenset(types))
    return ANY


def kind_root(group: str, version: str, kind: str) -> dict[str, Any] | None:
    """The root schema node of a built-in kind, or None when the kind is not built in."""
    name = definition_for(group, version, kind)
    return ref_node(name) if name else None


def crd_root(openapi_v3_schema: dict[str, Any] | None) -> dict[str, Any]:
    """The root schema node of a custom resource version, with ObjectMeta filled in like the API."""
    base: dict[str, Any] = copy.deepcopy(openapi_v3_schema) if openapi_v3_schema else {
        "type": "object", "x-kubernetes-preserve-unknown-fields": True}
    props = base.setdefault("properties", {})
    props["metadata"] = ref_node("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta")
    props.setdefault("apiVersion", {"type": "string"})
    props.setdefault("kind", {"type": "string"})
    base.setdefault("type", "object")
    return base


# --------------------------------------------------------------------------- OpenAPI


def _refs_closure(names: list[str]) -> list[str]:
    defs = definitions()
    seen: set[str] = set()
    stack = list(names)
    while stack:
        name = stack.pop()
        if name in seen or name not in defs:
            continue
        seen.add(name)
        stack.extend(_refs_in(defs[name]))
    return sorted(seen)


def _refs_in(node: Any) -> list[str]:
    out: list[str] = []
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(_DEFS_PREFIX):
            out.append(ref[len(_DEFS_PREFIX):])
        for v in node.values():
            out.extend(_refs_in(v))
    elif isinstance(node, list):
        for v in node:
            out.extend(_refs_in(v))
    return out


def to_openapi(node: Any, ref_prefix: str, v3: bool) -> Any:
    """Convert a JSON Schema 2020-12 node (as shipped) to the OpenAPI v2/v3 dialect the API serves."""
    if isinstance(node, list):
        return [to_openapi(v, ref_prefix, v3) for v in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    one_of = node.get("oneOf")
    if one_of and not node.get("properties"):
        kinds: set[str] = set()
        for alt in one_of:
            kinds |= _types(alt)
        if kinds == {"string", "integer"}:
            return {"type": "string", "format": "int-or-string", **_keep_text(node)}
        if kinds == {"string", "number"}:
            return {"type": "string", "format": "quantity", **_keep_text(node)}
    for k, v in node.items():
        if k == "$ref":
            target = ref_prefix + v[len(_DEFS_PREFIX):]
            if v3 and len(node) > 1:
                # OpenAPI v3 ignores siblings of $ref; the API wraps it in allOf.
                out["allOf"] = [{"$ref": target}]
            else:
                out["$ref"] = target
        elif k == "type":
            types = [v] if isinstance(v, str) else [t for t in v if t != "null"]
            if types:
                out["type"] = types[0]
        elif k in ("$schema", "$id"):
            continue
        elif k == "properties" and isinstance(v, dict):
            # The shipped files pin apiVersion/kind with an enum; the API does not.
            out[k] = {p: to_openapi({a: b for a, b in s.items() if not (p in ("apiVersion", "kind") and a == "enum")},
                                    ref_prefix, v3) for p, s in v.items()}
        elif k == "enum" and isinstance(v, list):
            out[k] = [e for e in v if e is not None]
        else:
            out[k] = to_openapi(v, ref_prefix, v3)
    return out


def _keep_text(node: dict[str, Any]) -> dict[str, Any]:
    return {k: node[k] for k in ("description",) if k in node}


def document_hash(doc: dict[str, Any]) -> str:
    """The content hash the API puts in ``serverRelativeURL`` (uppercase SHA-512 hex)."""
    return hashlib.sha512(json.dumps(doc, sort_keys=True).encode()).hexdigest().upper()


_openapi_cache: dict[tuple[str, ...], Any] = {}


def definitions_for(def_names: list[str], ref_prefix: str, v3: bool) -> dict[str, Any]:
    """Converted definitions for the given kinds and everything they refer to (cached per set)."""
    cache_key = (ref_prefix, str(v3), *sorted(def_names))
    hit = _openapi_cache.get(cache_key)
    if hit is None:
        defs = definitions()
        hit = {n: to_openapi(defs[n], ref_prefix, v3) for n in _refs_closure(def_names)}
        _openapi_cache[cache_key] = hit
    return hit
