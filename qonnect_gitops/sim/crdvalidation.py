"""Custom resources against their CRD's ``openAPIV3Schema``: defaulting and validation as the API server does.

Structural-schema defaults (``default``) fill absent fields on every write; then
the object is checked against the schema's ``type``, ``required``, ``enum``,
``minimum``/``maximum`` (and exclusive forms), ``minLength``/``maxLength``,
``pattern``, ``minItems``/``maxItems``, ``uniqueItems``, ``minProperties``/
``maxProperties``, ``nullable``, ``x-kubernetes-int-or-string`` and, for
``x-kubernetes-list-type: set``/``map``, duplicates. Each failure is a cause
worded like the API server's field errors (``spec.replicas: Invalid value:
"x": spec.replicas in body must be of type integer: "string"``). CEL rules
(``x-kubernetes-validations``) are not evaluated.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

from qonnect_gitops.sim.typed import json_type

Cause = dict[str, str]


def _show(value: Any) -> str:
    return json.dumps(value, separators=(",", ":")) if not isinstance(value, (dict, list)) else \
        ("\"object\"" if isinstance(value, dict) else "\"array\"")


def apply_defaults(obj: Any, node: dict[str, Any] | None) -> Any:
    """``obj`` with the schema's defaults filled in where fields are absent (a copy)."""
    if not isinstance(node, dict):
        return obj
    if isinstance(obj, dict):
        out = dict(obj)
        props = node.get("properties") or {}
        for name, sub in props.items():
            if name not in out and isinstance(sub, dict) and "default" in sub:
                out[name] = copy.deepcopy(sub["default"])
            if name in out:
                out[name] = apply_defaults(out[name], sub)
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            for name, value in out.items():
                if name not in props:
                    out[name] = apply_defaults(value, extra)
        return out
    if isinstance(obj, list) and isinstance(node.get("items"), dict):
        return [apply_defaults(item, node["items"]) for item in obj]
    return obj


def validate(obj: Any, node: dict[str, Any] | None, path: str = "") -> list[Cause]:
    """Every way ``obj`` breaks the schema ``node`` (empty: valid); ``metadata`` is not looked into."""
    causes: list[Cause] = []
    _check(obj, node, path, causes)
    return causes


def _cause(causes: list[Cause], reason: str, path: str, message: str) -> None:
    causes.append({"reason": reason, "message": message, "field": path or "<root>"})


def _check(value: Any, node: dict[str, Any] | None, path: str, causes: list[Cause]) -> None:
    if not isinstance(node, dict) or path == "metadata":
        return
    if value is None:
        if not node.get("nullable") and node.get("type"):
            _cause(causes, "FieldValueInvalid", path, f'Invalid value: "null": {path or "body"} in body must be of '
                                                      f'type {node["type"]}: "null"')
        return
    want = node.get("type")
    have = json_type(value)
    int_or_string = node.get("x-kubernetes-int-or-string")
    if int_or_string:
        if have not in ("integer", "string"):
            _cause(causes, "FieldValueInvalid", path, f"Invalid value: {_show(value)}: {path} in body must be of "
                                                      f"type integer or string: \"{have}\"")
            return
    elif want and not (want == have or (want == "number" and have == "integer")):
        _cause(causes, "FieldValueInvalid", path, f"Invalid value: {_show(value)}: {path or 'body'} in body must be "
                                                  f"of type {want}: \"{have}\"")
        return
    if "enum" in node and value not in node["enum"]:
        supported = ", ".join(json.dumps(e) for e in node["enum"])
        _cause(causes, "FieldValueNotSupported", path, f"Unsupported value: {json.dumps(value)}: supported values: "
                                                       f"{supported}")
    if have in ("integer", "number"):
        _numbers(value, node, path, causes)
    elif have == "string":
        _strings(value, node, path, causes)
    elif have == "array":
        _arrays(value, node, path, causes)
    elif have == "object":
        _objects(value, node, path, causes)


def _numbers(value: float, node: dict[str, Any], path: str, causes: list[Cause]) -> None:
    if "minimum" in node:
        exclusive = node.get("exclusiveMinimum") is True
        if value < node["minimum"] or (exclusive and value == node["minimum"]):
            _cause(causes, "FieldValueInvalid", path, f"Invalid value: {_show(value)}: {path} in body should be "
                   f"greater than {'' if exclusive else 'or equal to '}{node['minimum']}")
    if "maximum" in node:
        exclusive = node.get("exclusiveMaximum") is True
        if value > node["maximum"] or (exclusive and value == node["maximum"]):
            _cause(causes, "FieldValueInvalid", path, f"Invalid value: {_show(value)}: {path} in body should be "
                   f"less than {'' if exclusive else 'or equal to '}{node['maximum']}")
    if node.get("multipleOf") and value % node["multipleOf"]:
        _cause(causes, "FieldValueInvalid", path, f"Invalid value: {_show(value)}: {path} in body should be a "
                                                  f"multiple of {node['multipleOf']}")


def _strings(value: str, node: dict[str, Any], path: str, causes: list[Cause]) -> None:
    if "maxLength" in node and len(value) > node["maxLength"]:
        _cause(causes, "FieldValueTooLong", path, f"Too long: may not be more than {node['maxLength']} bytes")
    if "minLength" in node and len(value) < node["minLength"]:
        _cause(causes, "FieldValueInvalid", path, f"Invalid value: {_show(value)}: {path} in body should be at "
                                                  f"least {node['minLength']} chars long")
    pattern = node.get("pattern")
    if pattern:
        try:
            matched = re.search(pattern, value) is not None
        except re.error:
            matched = True  # a pattern Go accepts and Python does not: do not refuse the object for it
        if not matched:
            _cause(causes, "FieldValueInvalid", path, f"Invalid value: {_show(value)}: {path} in body should match "
                                                      f"'{pattern}'")


def _arrays(value: list[Any], node: dict[str, Any], path: str, causes: list[Cause]) -> None:
    if "maxItems" in node and len(value) > node["maxItems"]:
        _cause(causes, "FieldValueTooMany", path, f"Too many: {len(value)}: must have at most {node['maxItems']} "
                                                  "items")
    if "minItems" in node and len(value) < node["minItems"]:
        _cause(causes, "FieldValueInvalid", path, f"Invalid value: {len(value)}: {path} in body should have at "
                                                  f"least {node['minItems']} items")
    list_type = node.get("x-kubernetes-list-type")
    if node.get("uniqueItems") or list_type == "set":
        seen: set[str] = set()
        for i, item in enumerate(value):
            text = json.dumps(item, sort_keys=True)
            if text in seen:
                _cause(causes, "FieldValueDuplicate", f"{path}[{i}]", f"Duplicate value: {json.dumps(item)}")
            seen.add(text)
    if list_type == "map":
        keys = node.get("x-kubernetes-list-map-keys") or []
        seen_keys: set[str] = set()
        for i, item in enumerate(value):
            if isinstance(item, dict):
                text = json.dumps({k: item.get(k) for k in keys}, sort_keys=True)
                if text in seen_keys:
                    _cause(causes, "FieldValueDuplicate", f"{path}[{i}]", f"Duplicate value: {text}")
                seen_keys.add(text)
    items = node.get("items")
    for i, item in enumerate(value):
        _check(item, items if isinstance(items, dict) else None, f"{path}[{i}]", causes)


def _objects(value: dict[str, Any], node: dict[str, Any], path: str, causes: list[Cause]) -> None:
    props = node.get("properties") or {}
    for name in node.get("required") or []:
        if name not in value:
            _cause(causes, "FieldValueRequired", f"{path}.{name}" if path else name, "Required value")
    if "maxProperties" in node and len(value) > node["maxProperties"]:
        _cause(causes, "FieldValueTooMany", path, f"Too many: {len(value)}: must have at most "
                                                  f"{node['maxProperties']} items")
    if "minProperties" in node and len(value) < node["minProperties"]:
        _cause(causes, "FieldValueInvalid", path, f"Invalid value: {len(value)}: {path} in body should have at "
                                                  f"least {node['minProperties']} properties")
    extra = node.get("additionalProperties")
    for name, sub in value.items():
        child = f"{path}.{name}" if path else name
        if name in props:
            _check(sub, props[name], child, causes)
        elif isinstance(extra, dict):
            _check(sub, extra, child, causes)
