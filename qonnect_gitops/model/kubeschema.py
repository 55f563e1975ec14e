"""Kubernetes objects in goals, checked as the 1.37 API server would before anything is rendered.

Every manifest object is checked for: a well-formed ``apiVersion`` and ``kind``; a kind the
1.37 schemas know (from ``kubernetes-validate``) or a custom resource; a name that follows
its kind's rules; well-formed labels and annotations; and its fields against the kind's
schema, strictly, as the agent's ``fieldValidation=Strict`` applies it. Scope (namespaced
or cluster-wide) comes from ``kube_scopes`` for built-in kinds and from the
CustomResourceDefinitions in the goals for custom resources. A custom resource whose
definition is not in the goals cannot be checked beyond its name: it passes with a warning.

Pure: the schemas are package data, read once per process.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from jsonschema import Draft202012Validator  # type: ignore[import-untyped]
from jsonschema.exceptions import ValidationError  # type: ignore[import-untyped]

from qonnect_gitops.model.kube_scopes import CLUSTER_SCOPED, NOT_STORED
from qonnect_gitops.model.yamlpos import show_value

KUBERNETES_VERSION = "1.37"
_SCHEMA_DIR = "kubernetes-json-schema/v1.37.0-local-strict"
_DEFS = "#/$defs/"
_OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
MAX_ERRORS_PER_OBJECT = 10

_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_LABEL_RE = re.compile(f"^{_DNS_LABEL}$")
_DNS1035_RE = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_SUBDOMAIN_RE = re.compile(rf"^{_DNS_LABEL}(\.{_DNS_LABEL})*$")
_KIND_RE = re.compile(r"^[A-Za-z][A-Za-z0-9]{0,62}$")
_VERSION_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_NAME_RE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
MAX_ANNOTATIONS_BYTES = 256 * 1024

Loc = tuple[int | str, ...]


@dataclass(frozen=True)
class Finding:
    """One thing wrong (or, with ``warning``, worth knowing) about an object, at ``loc``."""

    loc: Loc
    message: str
    key: bool = False  # point at the key of ``loc`` rather than its value
    warning: bool = False


def split_api_version(api_version: str) -> tuple[str, str]:
    """``apps/v1`` -> (``apps``, ``v1``); ``v1`` -> (``""``, ``v1``)."""
    group, _, version = api_version.rpartition("/")
    return group, version


# -- the 1.37 schemas ----------------------------------------------------------------------------


@functools.cache
def _document() -> dict[str, Any]:
    ref = resources.files("kubernetes_validate").joinpath(f"{_SCHEMA_DIR}/_definitions.json")
    doc: dict[str, Any] = json.loads(ref.read_bytes())
    return doc


@functools.cache
def _index() -> dict[tuple[str, str, str], str]:
    """(group, version, kind) -> definition name, for every object kind of the schemas."""
    index: dict[tuple[str, str, str], str] = {}
    for name, node in _document()["$defs"].items():
        if "metadata" not in (node.get("properties") or {}):
            continue
        for gvk in node.get("x-kubernetes-group-version-kind", []):
            index.setdefault((gvk["group"], gvk["version"], gvk["kind"]), name)
    return index


@functools.cache
def builtin_groups() -> frozenset[str]:
    """Every API group of the 1.37 schemas (``""`` is the core group)."""
    return frozenset(
        gvk["group"] for node in _document()["$defs"].values()
        for gvk in node.get("x-kubernetes-group-version-kind", [])
    )


@functools.cache
def _builtin_validator(definition: str) -> Draft202012Validator:
    doc = _document()
    return Draft202012Validator({"$schema": doc["$schema"], "$id": doc["$id"], "$defs": doc["$defs"],
                                 "$ref": _DEFS + definition})


def builtin_namespaced(group: str, kind: str) -> bool:
    """Scope of a built-in kind (kinds not in ``CLUSTER_SCOPED`` are namespaced)."""
    return (group, kind) not in CLUSTER_SCOPED


# -- custom resources -------------------------------------------------------------------------


@dataclass(frozen=True)
class CustomKind:
    """A kind a CustomResourceDefinition in the goals defines."""

    group: str
    kind: str
    namespaced: bool
    schemas: Mapping[str, Mapping[str, Any] | None] = field(default_factory=dict)  # version -> schema


def custom_kinds(objects: Iterable[Any]) -> dict[tuple[str, str], CustomKind]:
    """The kinds defined by the CustomResourceDefinitions among ``objects`` (others ignored)."""
    out: dict[tuple[str, str], CustomKind] = {}
    for obj in objects:
        if not isinstance(obj, Mapping) or obj.get("kind") != "CustomResourceDefinition" \
                or split_api_version(str(obj.get("apiVersion", "")))[0] != "apiextensions.k8s.io":
            continue
        spec = obj.get("spec")
        if not isinstance(spec, Mapping):
            continue
        names = spec.get("names")
        group, kind = spec.get("group"), names.get("kind") if isinstance(names, Mapping) else None
        if not isinstance(group, str) or not isinstance(kind, str):
            continue
        schemas: dict[str, Mapping[str, Any] | None] = {}
        for version in spec.get("versions") or []:
            if isinstance(version, Mapping) and isinstance(version.get("name"), str):
                schema = (version.get("schema") or {}).get("openAPIV3Schema") \
                    if isinstance(version.get("schema"), Mapping) else None
                schemas[version["name"]] = schema if isinstance(schema, Mapping) else None
        out[(group, kind)] = CustomKind(group, kind, spec.get("scope", "Namespaced") != "Cluster", schemas)
    return out


def _strict(node: Any) -> Any:
    """An OpenAPI v3 schema of a CRD as JSON Schema 2020-12, strict like ``fieldValidation=Strict``:
    objects with declared properties refuse others unless they preserve unknown fields."""
    if not isinstance(node, Mapping):
        return {}
    out: dict[str, Any] = {}
    for key in ("type", "required", "enum", "minimum", "maximum", "minLength", "maxLength", "pattern",
                "minItems", "maxItems", "uniqueItems", "minProperties", "maxProperties", "multipleOf"):
        if key in node:
            out[key] = node[key]
    for key in ("exclusiveMinimum", "exclusiveMaximum"):  # booleans in OpenAPI v3, numbers in 2020-12
        bound = "minimum" if key == "exclusiveMinimum" else "maximum"
        if node.get(key) is True and bound in node:
            out[key] = out.pop(bound)
    if isinstance(node.get("properties"), Mapping):
        out["properties"] = {k: _strict(v) for k, v in node["properties"].items()}
    if isinstance(node.get("items"), Mapping):
        out["items"] = _strict(node["items"])
    if isinstance(node.get("additionalProperties"), Mapping):
        out["additionalProperties"] = _strict(node["additionalProperties"])
    elif node.get("additionalProperties") is False:
        out["additionalProperties"] = False
    for key in ("allOf", "anyOf", "oneOf"):
        if isinstance(node.get(key), list):
            out[key] = [_strict(v) for v in node[key]]
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    preserve = node.get("x-kubernetes-preserve-unknown-fields") or node.get("x-kubernetes-embedded-resource")
    if "properties" in out and "additionalProperties" not in out and not preserve:
        out["additionalProperties"] = False
    if node.get("nullable") and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    return out


@functools.lru_cache(maxsize=256)
def _custom_validator(schema_json: str) -> Draft202012Validator:
    root = _strict(json.loads(schema_json))
    if root.get("type") == "object" or "properties" in root:
        props = root.setdefault("properties", {})
        props["metadata"] = {"$ref": _DEFS + _OBJECT_META}
        props.setdefault("apiVersion", {"type": "string"})
        props.setdefault("kind", {"type": "string"})
    doc = _document()
    return Draft202012Validator({"$schema": doc["$schema"], "$id": doc["$id"], "$defs": doc["$defs"], **root})


# -- one object -----------------------------------------------------------------------------------


class KindCatalog:
    """What is known about kinds: the 1.37 built-ins and the custom kinds of the goals."""

    def __init__(self, custom: Mapping[tuple[str, str], CustomKind] | None = None) -> None:
        self.custom = dict(custom or {})

    def namespaced(self, api_version: str, kind: str) -> bool:
        """Whether objects of this kind live in a namespace; unknown custom kinds are assumed
        to (most are; the agent corrects it from the cluster's discovery)."""
        group, _ = split_api_version(api_version)
        if (group, kind) in self.custom:
            return self.custom[(group, kind)].namespaced
        return builtin_namespaced(group, kind)

    def check(self, obj: Mapping[str, Any]) -> list[Finding]:
        """Everything wrong with one object (a mapping with string apiVersion and kind)."""
        api_version, kind = str(obj.get("apiVersion", "")), str(obj.get("kind", ""))
        findings = _type_findings(api_version, kind)
        if findings:
            return findings
        group, version = split_api_version(api_version)
        meta = obj.get("metadata")
        meta = meta if isinstance(meta, Mapping) else {}
        name = meta.get("name")
        if isinstance(name, str):
            why = name_problem(group, kind, name)
            if why:
                findings.append(Finding(("metadata", "name"), why))
        findings += metadata_findings(meta)
        if group in builtin_groups() and (group, kind) not in self.custom:
            definition = _index().get((group, version, kind))
            if (group, kind) in NOT_STORED:
                return findings + [Finding(("kind",), f"{kind} cannot be applied: the API only accepts it as "
                                           "a request, it is never stored")]
            if definition is None:
                return findings + [Finding(("kind",), _unknown_kind(group, version, kind))]
            return findings + _schema_findings(lambda: _builtin_validator(definition), _builtin_quick(definition), obj)
        custom = self.custom.get((group, kind))
        if custom is None:
            return findings + [Finding(("apiVersion",), f"custom resource {kind} of {api_version}: its "
                                       f"CustomResourceDefinition is not in the goals, so only its name "
                                       "and labels were checked", warning=True)]
        if version not in custom.schemas:
            return findings + [Finding(("apiVersion",), f"the CustomResourceDefinition of {kind} in the "
                                       f"goals has no version '{version}'; expected one of: "
                                       f"{', '.join(sorted(custom.schemas)) or '(none)'}")]
        schema = custom.schemas[version]
        if schema is None:
            return findings
        schema_json = json.dumps(schema, sort_keys=True)
        return findings + _schema_findings(lambda: _custom_validator(schema_json), _custom_quick(schema_json), obj)


def _type_findings(api_version: str, kind: str) -> list[Finding]:
    out = []
    if not _KIND_RE.match(kind):
        out.append(Finding(("kind",), f"'{kind}' is not a kind; expected a CamelCase name of letters and "
                           "digits, e.g. Deployment"))
    group, version = split_api_version(api_version)
    if (group and (len(group) > 253 or not _SUBDOMAIN_RE.match(group))) or not _VERSION_RE.match(version):
        out.append(Finding(("apiVersion",), f"'{api_version}' is not an apiVersion; expected 'v1' or "
                           "'<group>/<version>', e.g. apps/v1"))
    return out


def _unknown_kind(group: str, version: str, kind: str) -> str:
    if kind == "List" or kind.endswith("List"):
        return (f"{kind} is a list, which the API does not store; put each of its items in its own "
                "YAML document (separated by ---)")
    versions = sorted(v for (g, v, k) in _index() if g == group and k == kind)
    if versions:
        return (f"{kind} is not served in {group or 'the core group'} {version} by Kubernetes "
                f"{KUBERNETES_VERSION}; expected one of the versions: {', '.join(versions)}")
    return f"Kubernetes {KUBERNETES_VERSION} has no kind {kind} in API group '{group or 'core'}'"


def name_problem(group: str, kind: str, name: str) -> str | None:
    """Why ``name`` is not a valid name for an object of ``kind``, or None.

    Namespaces are DNS labels, Services RFC 1035 labels, RBAC objects path segments,
    CronJobs subdomains of at most 52 characters, everything else DNS subdomains."""
    if kind == "Namespace" and group == "":
        ok = len(name) <= 63 and bool(_DNS_LABEL_RE.match(name))
        rule = ("an RFC 1123 label: at most 63 lowercase letters, digits and '-', starting and ending with a "
                "letter or digit")
    elif kind == "Service" and group == "":
        ok = len(name) <= 63 and bool(_DNS1035_RE.match(name))
        rule = ("an RFC 1035 label: at most 63 lowercase letters, digits and '-', starting with a letter and "
                "ending with a letter or digit")
    elif group == "rbac.authorization.k8s.io":
        ok = bool(name) and name not in (".", "..") and "/" not in name and "%" not in name
        rule = "a path segment: not '.' or '..' and without '/' or '%'"
    else:
        most = 52 if (group, kind) == ("batch", "CronJob") else 253
        ok = len(name) <= most and bool(_SUBDOMAIN_RE.match(name))
        rule = (f"a DNS subdomain: at most {most} lowercase letters, digits, '-' and '.', starting and "
                "ending with a letter or digit")
    return None if ok else f"'{_clip(name)}' is not a valid {kind} name; expected {rule}"


def _qualified_name_problem(key: str) -> str | None:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _SUBDOMAIN_RE.match(prefix)):
        return f"the prefix of '{_clip(key)}' is not a DNS subdomain"
    if len(name) > 63 or not _LABEL_NAME_RE.match(name):
        return (f"'{_clip(key)}' is not a valid key; expected an optional DNS-subdomain prefix and '/', then "
                "at most 63 letters, digits, '-', '_' and '.', starting and ending with a letter or digit")
    return None


def metadata_findings(meta: Mapping[str, Any]) -> list[Finding]:
    """Malformed label keys and values, annotation keys, and annotations over 256 KiB."""
    out = []
    labels = meta.get("labels")
    for key, value in (labels.items() if isinstance(labels, Mapping) else ()):
        if not isinstance(key, str):
            continue
        why = _qualified_name_problem(key)
        if why:
            out.append(Finding(("metadata", "labels", key), f"label {why}", key=True))
        elif isinstance(value, str) and (len(value) > 63 or not _LABEL_VALUE_RE.match(value)):
            out.append(Finding(("metadata", "labels", key), f"label value '{_clip(value)}' is not valid; "
                               "expected at most 63 letters, digits, '-', '_' and '.', starting and ending "
                               "with a letter or digit (or empty)"))
    annotations = meta.get("annotations")
    if isinstance(annotations, Mapping):
        size = 0
        for key, value in annotations.items():
            if isinstance(key, str):
                why = _qualified_name_problem(key)
                if why:
                    out.append(Finding(("metadata", "annotations", key), f"annotation {why}", key=True))
                size += len(key) + (len(value) if isinstance(value, str) else 0)
        if size > MAX_ANNOTATIONS_BYTES:
            out.append(Finding(("metadata", "annotations"), f"annotations hold {size:,} bytes; Kubernetes "
                               "allows 256 KiB in all"))
    return out


def _schema_findings(validator: Callable[[], Draft202012Validator], quick: _Check | None,
                     obj: Mapping[str, Any]) -> list[Finding]:
    """jsonschema's errors in ``obj``; none when the quick check passes it (jsonschema, and
    the validator it builds for the kind, are then not needed at all)."""
    if _valid(quick, obj):
        return []
    out: list[Finding] = []
    for error in sorted(validator().iter_errors(obj), key=lambda e: [str(p) for p in e.absolute_path]):
        out.append(_finding(error))
        if len(out) >= MAX_ERRORS_PER_OBJECT:
            break
    return out


def _finding(error: ValidationError) -> Finding:
    loc: Loc = tuple(error.absolute_path)
    value = error.instance
    if error.validator == "additionalProperties" and isinstance(value, Mapping):
        allowed = sorted((error.schema.get("properties") or {}) if isinstance(error.schema, Mapping) else ())
        extra = sorted(str(k) for k in value if k not in allowed)
        expected = f"; expected one of: {', '.join(allowed[:30])}" if allowed else ""
        return Finding(loc + (extra[0],) if extra else loc, f"unknown field '{extra[0] if extra else '?'}'"
                       f"{expected}", key=bool(extra))
    if error.validator == "required":
        missing = str(error.validator_value[0]) if isinstance(error.validator_value, Sequence) else "?"
        for item in error.validator_value if isinstance(error.validator_value, Sequence) else ():
            if isinstance(value, Mapping) and item not in value:
                missing = str(item)
                break
        return Finding(loc, f"required field '{missing}' is missing")
    if error.validator == "type":
        return Finding(loc, f"got {show_value(value)}; expected {_types(error.validator_value)}")
    if error.validator == "enum":
        choices = ", ".join(repr(v) for v in error.validator_value if v is not None)
        return Finding(loc, f"got {show_value(value)}; expected one of: {choices}")
    if error.validator in ("oneOf", "anyOf"):
        kinds = [_types(s.get("type")) for s in error.validator_value if isinstance(s, Mapping) and "type" in s]
        if kinds:
            return Finding(loc, f"got {show_value(value)}; expected {' or '.join(kinds)}")
    return Finding(loc, _clip(error.message, 200))


def _types(spec: Any) -> str:
    names = {"string": "a string", "integer": "an integer", "number": "a number", "boolean": "true or false",
             "object": "a mapping", "array": "a list", "null": "nothing"}
    types = [spec] if isinstance(spec, str) else [t for t in (spec or []) if t != "null"]
    return " or ".join(names.get(t, str(t)) for t in types) or "a value"


def _clip(text: str, most: int = 80) -> str:
    return text if len(text) <= most else text[: most - 3] + "..."


# -- a quick yes for valid objects -----------------------------------------------------------------
#
# jsonschema resolves every $ref through its registry and builds an error object per keyword: most
# of a load's time in goals of many manifests, nearly all of them valid. A schema is compiled once
# into plain functions that say only "valid", exactly as jsonschema would for the keywords the
# Kubernetes schemas use; anything else (another keyword, a Python type YAML does not produce)
# makes the check unsure, and jsonschema decides. An object the check does not pass is always
# validated by jsonschema, which names its errors: problems and messages are jsonschema's alone.


class _Unsure(Exception):
    """The quick check cannot answer exactly like jsonschema: jsonschema decides."""


_Check = Callable[[Any], bool]
_ANNOTATIONS = frozenset({"description", "format", "title", "default", "example", "examples", "$comment",
                          "deprecated", "readOnly", "writeOnly"})
# jsonschema's type checks of draft 2020-12, for the Python types YAML builds (bool is not a number).
_TYPE_CHECKS: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: type(v) is str,
    "object": lambda v: type(v) is dict,
    "array": lambda v: type(v) is list,
    "boolean": lambda v: type(v) is bool,
    "null": lambda v: v is None,
    "integer": lambda v: type(v) is int or (type(v) is float and v.is_integer()),
    "number": lambda v: type(v) is int or type(v) is float,
}
_KNOWN_TYPES = (str, dict, list, bool, int, float, type(None))


class _QuickSchema:
    """Compiles a JSON Schema (2020-12, local ``#/$defs/`` references) into validity checks."""

    def __init__(self, root: Mapping[str, Any]) -> None:
        self.defs: Mapping[str, Any] = root.get("$defs") or {}
        self.compiled: dict[str, _Check] = {}
        self.root = self.compile({k: v for k, v in root.items() if k not in ("$schema", "$id", "$defs")})

    def ref(self, target: str) -> _Check:
        if not target.startswith(_DEFS) or target[len(_DEFS):] not in self.defs:
            raise _Unsure  # only local definitions are compiled
        name = target[len(_DEFS):]
        if name not in self.compiled:
            self.compiled[name] = _pending  # a recursive definition refers to itself
            self.compiled[name] = self.compile(self.defs[name])
        return lambda value: self.compiled[name](value)

    def compile(self, node: Any) -> _Check:
        if node is True or node == {}:
            return lambda value: True
        if not isinstance(node, Mapping):
            raise _Unsure
        checks: list[_Check] = []
        for key in node:
            if key not in _ANNOTATIONS and not key.startswith("x-kubernetes-") and key not in (
                    "type", "$ref", "properties", "additionalProperties", "required", "items", "enum", "oneOf"):
                raise _Unsure
        if "$ref" in node:
            checks.append(self.ref(node["$ref"]))
        if "type" in node:
            types = [node["type"]] if isinstance(node["type"], str) else list(node["type"])
            if not all(t in _TYPE_CHECKS for t in types):
                raise _Unsure
            tests = [_TYPE_CHECKS[t] for t in types]
            checks.append(lambda value: any(test(value) for test in tests))
        if "enum" in node:
            choices = node["enum"]
            if not all(type(c) is str or c is None for c in choices):
                raise _Unsure
            allowed = frozenset(choices)
            checks.append(lambda value: (value is None or type(value) is str) and value in allowed)
        if "required" in node:
            required = tuple(node["required"])
            checks.append(lambda value: type(value) is not dict or all(k in value for k in required))
        if "properties" in node or "additionalProperties" in node:
            checks.append(self._mapping(node))
        if "items" in node:
            if not isinstance(node["items"], Mapping):
                raise _Unsure
            item = self.compile(node["items"])
            checks.append(lambda value: type(value) is not list or all(item(v) for v in value))
        if "oneOf" in node:
            options = [self.compile(o) for o in node["oneOf"]]
            checks.append(lambda value: sum(1 for o in options if o(value)) == 1)
        if len(checks) == 1:
            return checks[0]
        return lambda value: all(check(value) for check in checks)

    def _mapping(self, node: Mapping[str, Any]) -> _Check:
        properties = {k: self.compile(v) for k, v in (node.get("properties") or {}).items()}
        extra = node.get("additionalProperties", True)
        closed = extra is False
        other = None if extra is True or closed else self.compile(extra)

        def check(value: Any) -> bool:
            if type(value) is not dict:
                return True
            for key, item in value.items():
                prop = properties.get(key)
                if prop is not None:
                    if not prop(item):
                        return False
                elif closed:
                    return False
                elif other is not None and not other(item):
                    return False
            return True
        return check


def _pending(value: Any) -> bool:
    raise _Unsure  # pragma: no cover - a definition used while it is compiled


def _quick(schema: Mapping[str, Any]) -> _Check | None:
    try:
        return _QuickSchema(schema).root
    except _Unsure:
        return None


@functools.cache
def _builtin_schemas() -> _QuickSchema:
    """The 1.37 definitions, each compiled once, when a kind first refers to it."""
    return _QuickSchema(_document())


@functools.cache
def _builtin_quick(definition: str) -> _Check | None:
    try:
        return _builtin_schemas().ref(_DEFS + definition)
    except _Unsure:
        return None


@functools.lru_cache(maxsize=256)
def _custom_quick(schema_json: str) -> _Check | None:
    return _quick(_custom_validator(schema_json).schema)


def _valid(check: _Check | None, obj: Any) -> bool:
    """True only when jsonschema would find no error in ``obj``; False when it might."""
    if check is None or not _plain(obj):
        return False
    try:
        return check(obj)
    except (_Unsure, RecursionError):
        return False


def _plain(value: Any, depth: int = 0) -> bool:
    """Whether ``value`` holds only the Python types the quick check answers for."""
    kind = type(value)
    if kind is dict:
        return depth < 200 and all(type(k) is str and _plain(v, depth + 1) for k, v in value.items())
    if kind is list:
        return depth < 200 and all(_plain(v, depth + 1) for v in value)
    return kind in _KNOWN_TYPES
