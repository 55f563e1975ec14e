"""The forges' OpenAPI descriptions as the fake forge uses them: route matching, request and
answer validation (jsonschema), and completion of answers with the fields a schema requires.

OpenAPI 3.0 (GitHub) and Swagger 2.0 (Gitea, GitLab) are both read. Schemas are turned into
JSON Schema draft 4 where they differ (``nullable`` / ``x-nullable`` become a ``null`` type)
and validated in place, so ``$ref`` pointers keep resolving inside the description.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from importlib import resources
from typing import Any

import jsonschema  # type: ignore[import-untyped]
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT4

_URI = "urn:qonnect-forge-spec:"


def _escape(part: str) -> str:
    return part.replace("~", "~0").replace("/", "~1")


def _nullable(node: Any) -> Any:
    """Draft 4 has no ``nullable``: add ``null`` to the type (or wrap) where it is set."""
    if isinstance(node, list):
        return [_nullable(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _nullable(v) for k, v in node.items()}
    if out.pop("nullable", False) or out.pop("x-nullable", False):
        if "type" in out and isinstance(out["type"], str):
            out["type"] = [out["type"], "null"]
            if "enum" in out and None not in out["enum"]:
                out["enum"] = [*out["enum"], None]
        else:
            out = {"anyOf": [out, {"type": "null"}]}
    return out


@dataclass(frozen=True)
class Parameter:
    name: str
    where: str  # path, query, header
    required: bool
    pointer: str  # of its schema (OpenAPI 3) or of itself (Swagger 2: the parameter is the schema)


@dataclass
class Operation:
    """One operation of the description, ready to match and validate."""

    method: str
    template: str
    pattern: re.Pattern[str]
    parameters: list[Parameter] = field(default_factory=list)
    body: str | None = None  # pointer to the request body schema
    body_required: bool = False
    answers: dict[str, str | None] = field(default_factory=dict)  # status -> schema pointer


class Spec:
    """One forge's trimmed description."""

    def __init__(self, name: str, document: dict[str, Any]) -> None:
        self.name = name
        self.raw = document
        self.doc = _nullable(document)
        self.swagger2 = "swagger" in document
        self.uri = _URI + name
        self.registry: Registry[Any] = Registry().with_resource(
            self.uri, Resource.from_contents(self.doc, default_specification=DRAFT4))
        self.operations = self._operations()

    @classmethod
    @cache
    def load(cls, name: str) -> Spec:
        """``github``, ``gitlab`` or ``gitea`` from the package data (parsed once)."""
        text = resources.files("qonnect_gitops.forge.fake").joinpath(f"openapi/{name}.json").read_text("utf-8")
        document = json.loads(text)
        extra = resources.files("qonnect_gitops.forge.fake").joinpath(f"openapi/{name}-extra.json")
        if extra.is_file():
            _merge_extra(document, json.loads(extra.read_text("utf-8")))
        return cls(name, document)

    # -------------------------------------------------------------- resolution

    def node(self, pointer: str) -> Any:
        node: Any = self.doc
        for part in pointer.lstrip("#/").split("/") if pointer.strip("#/") else []:
            key = part.replace("~1", "/").replace("~0", "~")
            node = node[int(key)] if isinstance(node, list) else node[key]
        return node

    def deref(self, pointer: str) -> str:
        """Follow ``$ref`` chains from ``pointer``; returns the pointer of the target."""
        seen = set()
        while True:
            node = self.node(pointer)
            ref = node.get("$ref") if isinstance(node, dict) else None
            if not isinstance(ref, str) or not ref.startswith("#/") or pointer in seen:
                return pointer
            seen.add(pointer)
            pointer = ref

    def _operations(self) -> list[Operation]:
        ops = []
        for template, item in self.doc["paths"].items():
            regex = "^" + re.sub(r"\\\{[^}]+\\\}", "([^/]+)", re.escape(template)) + "$"
            base = f"#/paths/{_escape(template)}"
            shared = [f"{base}/parameters/{i}" for i in range(len(item.get("parameters", [])))]
            for method, op in item.items():
                if method == "parameters":
                    continue
                at = f"{base}/{method}"
                operation = Operation(method.upper(), template, re.compile(regex))
                pointers = shared + [f"{at}/parameters/{i}" for i in range(len(op.get("parameters", [])))]
                for pointer in pointers:
                    pointer = self.deref(pointer)
                    param = self.node(pointer)
                    if param["in"] == "body":
                        operation.body = f"{pointer}/schema"
                        operation.body_required = bool(param.get("required"))
                        continue
                    schema = pointer if self.swagger2 else f"{pointer}/schema"
                    operation.parameters.append(Parameter(param["name"], param["in"],
                                                          bool(param.get("required")), schema))
                if "requestBody" in op:
                    body = self.deref(f"{at}/requestBody")
                    if "application/json" in self.node(body).get("content", {}):
                        operation.body = f"{body}/content/application~1json/schema"
                        operation.body_required = bool(self.node(body).get("required"))
                for status in op.get("responses", {}):
                    answer = self.deref(f"{at}/responses/{status}")
                    node = self.node(answer)
                    if self.swagger2:
                        operation.answers[status] = f"{answer}/schema" if "schema" in node else None
                    else:
                        content = node.get("content", {})
                        operation.answers[status] = (f"{answer}/content/application~1json/schema"
                                                     if "application/json" in content else None)
                ops.append(operation)
        return ops

    def match(self, method: str, path: str) -> tuple[Operation, dict[str, str]] | None:
        """The operation serving ``method path`` and its path parameters (decoded)."""
        from urllib.parse import unquote

        for op in self.operations:
            if op.method != method:
                continue
            found = op.pattern.match(path)
            if found:
                names = re.findall(r"\{([^}]+)\}", op.template)
                return op, {n: unquote(v) for n, v in zip(names, found.groups())}
        return None

    # -------------------------------------------------------------- validation

    def errors(self, pointer: str, instance: Any) -> list[str]:
        """Schema violations of ``instance`` against the schema at ``pointer``."""
        validator = jsonschema.Draft4Validator({"$ref": self.uri + pointer}, registry=self.registry)
        out = []
        for error in sorted(validator.iter_errors(instance), key=lambda e: list(e.absolute_path)):
            where = "/".join(str(p) for p in error.absolute_path) or "(root)"
            out.append(f"{where}: {error.message[:300]}")
        return out[:20]

    def request_errors(self, op: Operation, path_params: dict[str, str], query: dict[str, list[str]],
                       body: Any, has_body: bool) -> list[str]:
        """Everything wrong with a request for ``op``."""
        out: list[str] = []
        known = {p.name for p in op.parameters if p.where == "query"}
        for name in query:
            if name not in known:
                out.append(f"query parameter '{name}' is not described for {op.method} {op.template}")
        for param in op.parameters:
            if param.where == "path":
                out += [f"path {param.name}: {e}" for e in
                        self.errors(param.pointer, self._coerce(param.pointer, path_params.get(param.name)))]
            elif param.where == "query":
                values = query.get(param.name)
                if values is None:
                    if param.required:
                        out.append(f"query parameter '{param.name}' is required")
                    continue
                value = self._coerce(param.pointer, values if self._is_array(param.pointer) else values[-1])
                out += [f"query {param.name}: {e}" for e in self.errors(param.pointer, value)]
        if op.body is not None:
            if not has_body:
                if op.body_required:
                    out.append("a JSON body is required")
            else:
                out += [f"body {e}" for e in self.errors(op.body, body)]
        elif has_body:
            out.append(f"{op.method} {op.template} takes no body")
        return out

    def answer_errors(self, op: Operation, status: int, body: Any) -> list[str]:
        """Everything wrong with an answer of ``op``."""
        key = str(status) if str(status) in op.answers else "default" if "default" in op.answers else None
        if key is None:
            return [f"status {status} is not described for {op.method} {op.template}"]
        pointer = op.answers[key]
        if pointer is None:
            return []  # described without a schema (Gitea's errors carry their message in headers)
        schema = self.node(self.deref(pointer))
        if self.name == "gitlab" and isinstance(body, list) and schema.get("type") != "array":
            # GitLab's generated description gives list endpoints the item's schema.
            return [e for item in body for e in self.errors(pointer, item)]
        return self.errors(pointer, body)

    def _is_array(self, pointer: str) -> bool:
        return self.node(self.deref(pointer)).get("type") == "array"

    def _coerce(self, pointer: str, raw: Any) -> Any:
        """Query and path values arrive as strings: read them as their schema's type."""
        node = self.node(self.deref(pointer))
        kind = node.get("type")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), None)
        if kind == "array":
            values = raw if isinstance(raw, list) else [raw]
            if len(values) == 1 and node.get("collectionFormat", "csv") == "csv" and isinstance(values[0], str):
                values = values[0].split(",")
            item_pointer = f"{pointer}/items"
            return [self._coerce(item_pointer, v) for v in values]
        if not isinstance(raw, str):
            return raw
        try:
            if kind == "integer":
                return int(raw)
            if kind == "number":
                return float(raw)
        except ValueError:
            return raw
        if kind == "boolean" and raw in ("true", "false"):
            return raw == "true"
        return raw

    # -------------------------------------------------------------- completion

    def complete(self, pointer: str, instance: Any, now: datetime | None = None) -> Any:
        """``instance`` with every property the schema requires (recursively) filled in with
        a neutral value of the right type, for the fields the fake has nothing to say about."""
        return _Completer(self, now or datetime.now(tz=UTC)).fill(pointer, instance, 0)


class _Completer:
    def __init__(self, spec: Spec, now: datetime) -> None:
        self.spec = spec
        self.now = now.isoformat().replace("+00:00", "Z")

    def fill(self, pointer: str, value: Any, depth: int) -> Any:
        pointer = self.spec.deref(pointer)
        node = self.spec.node(pointer)
        if depth > 12:
            return value
        if "allOf" in node:
            for i in range(len(node["allOf"])):
                value = self.fill(f"{pointer}/allOf/{i}", value if value is not None else {}, depth + 1)
            return value
        for key in ("anyOf", "oneOf"):
            if key in node:
                options = [i for i, o in enumerate(node[key]) if o.get("type") != "null"]
                if value is None and len(options) < len(node[key]):
                    return None  # nullable: nothing to say
                if options and (value is None or isinstance(value, dict)):
                    return self.fill(f"{pointer}/{key}/{options[0]}", value, depth + 1)
                return value
        kind = node.get("type")
        if isinstance(kind, list):
            if value is None and "null" in kind:
                return None
            kind = next((k for k in kind if k != "null"), None)
        if kind == "object" or (kind is None and "properties" in node):
            out = dict(value) if isinstance(value, dict) else {}
            props = node.get("properties", {})
            for name in node.get("required", []):
                if name not in out and name in props:
                    out[name] = self.fill(f"{pointer}/properties/{_escape(name)}", None, depth + 1)
            for name in list(out):
                if name not in props:
                    continue
                sub = f"{pointer}/properties/{_escape(name)}"
                if out[name] is None and not self.accepts_null(sub) and name not in node.get("required", []):
                    del out[name]  # an optional field the description does not let be null: leave it out
                elif out[name] is not None:
                    out[name] = self.fill(sub, out[name], depth + 1)
            return out
        if kind == "array" and isinstance(value, list) and "items" in node:
            return [self.fill(f"{pointer}/items", v, depth + 1) for v in value]
        if value is not None:
            return self.typed(kind, value)
        if "enum" in node:
            return node["enum"][0]
        return self.scalar(kind, node.get("format"))

    def accepts_null(self, pointer: str) -> bool:
        node = self.spec.node(self.spec.deref(pointer))
        kind = node.get("type")
        if isinstance(kind, list):
            return "null" in kind
        return any(o.get("type") == "null" for key in ("anyOf", "oneOf") for o in node.get(key, []))

    @staticmethod
    def typed(kind: Any, value: Any) -> Any:
        """A scalar written the way the description types it (GitLab's generated description
        types many numbers and flags as strings)."""
        if kind == "string" and isinstance(value, bool):
            return "true" if value else "false"
        if kind == "string" and isinstance(value, int | float):
            return str(value)
        return value

    def scalar(self, kind: Any, fmt: Any) -> Any:
        if kind == "array":
            return []
        if kind == "integer":
            return 0
        if kind == "number":
            return 0.0
        if kind == "boolean":
            return False
        if fmt == "date-time":
            return self.now
        if fmt in ("uri", "url"):
            return "http://fake.invalid/"
        return ""


def _merge_extra(document: dict[str, Any], extra: dict[str, Any]) -> None:
    """Add operations described elsewhere (see SOURCES.md) to a description."""
    for path, item in extra.get("paths", {}).items():
        document["paths"].setdefault(path, {}).update(copy.deepcopy(item))
    for section in ("definitions",):
        document.setdefault(section, {}).update(copy.deepcopy(extra.get(section, {})))
