"""Label and field selectors in the query-string syntax of the Kubernetes API."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

# The structured match lives with the label vocabulary (the agent uses it too); kept importable here.
from qonnect_gitops.model.labels import match_label_selector_object  # noqa: F401


class SelectorError(ValueError):
    """A selector the API would reject with 400 BadRequest."""


Matcher = Callable[[Mapping[str, str]], bool]

_KEY = r"[A-Za-z0-9./_-]+"
_SET_RE = re.compile(rf"^\s*(!?)\s*({_KEY})\s+(in|notin)\s*\(([^)]*)\)\s*$")
_CMP_RE = re.compile(rf"^\s*({_KEY})\s*(==|!=|=)\s*([A-Za-z0-9._-]*)\s*$")
_EXISTS_RE = re.compile(rf"^\s*(!?)\s*({_KEY})\s*$")


def _split(expr: str) -> list[str]:
    # Commas separate requirements except inside the parentheses of a set.
    parts, depth, cur = [], 0, ""
    for ch in expr:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p for p in parts if p.strip()]


def parse_label_selector(expr: str | None) -> Matcher:
    """Compile ``a=b,c!=d,e in (x,y),f notin (z),g,!h`` into a predicate on labels."""
    if not expr or not expr.strip():
        return lambda labels: True
    reqs: list[Matcher] = []
    for part in _split(expr):
        reqs.append(_label_requirement(part))
    return lambda labels: all(r(labels) for r in reqs)


def _label_requirement(part: str) -> Matcher:
    m = _SET_RE.match(part)
    if m and not m.group(1):
        key, op = m.group(2), m.group(3)
        values = {v.strip() for v in m.group(4).split(",") if v.strip()}
        if op == "in":
            return lambda labels: key in labels and labels[key] in values
        return lambda labels: key not in labels or labels[key] not in values
    m = _CMP_RE.match(part)
    if m:
        key, op, wanted = m.groups()
        if op == "!=":
            return lambda labels: labels.get(key) != wanted
        return lambda labels: key in labels and labels[key] == wanted
    m = _EXISTS_RE.match(part)
    if m:
        negated, key = m.groups()
        if negated:
            return lambda labels: key not in labels
        return lambda labels: key in labels
    raise SelectorError(f"unable to parse requirement: {part.strip()!r}")


def _get_path(obj: Mapping[str, Any], dotted: str) -> str:
    cur: Any = obj
    for part in dotted.split("."):
        if not isinstance(cur, Mapping) or part not in cur:
            return ""
        cur = cur[part]
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return "" if cur is None else str(cur)


def parse_field_selector(expr: str | None, supported: tuple[str, ...]) -> Callable[[Mapping[str, Any]], bool]:
    """Compile a field selector over the given supported paths (``metadata.name`` and friends)."""
    if not expr or not expr.strip():
        return lambda obj: True
    reqs: list[Callable[[Mapping[str, Any]], bool]] = []
    for part in _split(expr):
        m = re.match(r"^\s*([A-Za-z0-9._-]+)\s*(==|!=|=)\s*(.*?)\s*$", part)
        if not m:
            raise SelectorError(f"invalid selector: {part.strip()!r}; can't understand {part.strip()!r}")
        path, op, val = m.groups()
        if path not in supported:
            raise SelectorError(f'field label not supported: {path}')
        reqs.append(_field_requirement(path, op, val))
    return lambda obj: all(r(obj) for r in reqs)


def _field_requirement(path: str, op: str, wanted: str) -> Callable[[Mapping[str, Any]], bool]:
    if op == "!=":
        return lambda obj: _get_path(obj, path) != wanted
    return lambda obj: _get_path(obj, path) == wanted


def selector_to_string(selector: Mapping[str, Any] | None) -> str:
    """A structured LabelSelector in query syntax (what Scale.status.selector holds)."""
    if not selector:
        return ""
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for req in selector.get("matchExpressions") or []:
        k, op, values = req.get("key"), req.get("operator"), sorted(req.get("values") or [])
        if op == "In":
            parts.append(f"{k} in ({','.join(values)})")
        elif op == "NotIn":
            parts.append(f"{k} notin ({','.join(values)})")
        elif op == "Exists":
            parts.append(k)
        elif op == "DoesNotExist":
            parts.append("!" + k)
    return ",".join(parts)
