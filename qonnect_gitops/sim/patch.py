"""Patch formats: JSON merge patch (RFC 7386), JSON patch (RFC 6902), strategic merge patch.

The strategic merge patch reads list strategies and merge keys from the schema
(``x-kubernetes-patch-strategy`` / ``x-kubernetes-patch-merge-key``) and honours
the directives ``$patch`` (replace, delete, merge), ``$retainKeys``,
``$setElementOrder/<list>`` and ``$deleteFromPrimitiveList/<list>`` that
kubectl's client-side apply sends.
"""

from __future__ import annotations

import copy
from typing import Any

from qonnect_gitops.sim.schema import TypeInfo, describe
from qonnect_gitops.sim.typed import child_node


class PatchError(ValueError):
    """A patch that cannot be applied (the API answers 422 or 400)."""


# --------------------------------------------------------------------------- JSON merge patch


def json_merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = json_merge_patch(out.get(k), v)
    return out


# --------------------------------------------------------------------------- JSON patch


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _container(doc: Any, parts: list[str]) -> tuple[Any, str]:
    cur = doc
    for p in parts[:-1]:
        if isinstance(cur, dict) and p in cur:
            cur = cur[p]
        elif isinstance(cur, list) and p.isdigit() and int(p) < len(cur):
            cur = cur[int(p)]
        else:
            raise PatchError(f"missing path element {p!r}")
    return cur, parts[-1]


def _get(doc: Any, parts: list[str]) -> Any:
    if not parts:
        return doc
    parent, last = _container(doc, parts)
    if isinstance(parent, dict) and last in parent:
        return parent[last]
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return parent[int(last)]
    raise PatchError(f"missing value at {'/'.join(parts)!r}")


def _add(doc: Any, parts: list[str], value: Any) -> Any:
    if not parts:
        return value
    parent, last = _container(doc, parts)
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-":
            parent.append(value)
        elif last.isdigit() and int(last) <= len(parent):
            parent.insert(int(last), value)
        else:
            raise PatchError(f"index {last!r} out of range")
    else:
        raise PatchError("cannot add into a scalar")
    return doc


def _remove(doc: Any, parts: list[str]) -> Any:
    parent, last = _container(doc, parts)
    if isinstance(parent, dict) and last in parent:
        del parent[last]
    elif isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        del parent[int(last)]
    else:
        raise PatchError(f"unable to remove nonexistent key: {last}")
    return doc


def json_patch(target: Any, ops: Any) -> Any:
    """RFC 6902 operations: add, remove, replace, move, copy, test."""
    if not isinstance(ops, list):
        raise PatchError("a JSON patch must be a list of operations")
    doc = copy.deepcopy(target)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op:
            raise PatchError("every JSON patch operation needs an \"op\"")
        kind, parts = op["op"], _pointer(op.get("path", ""))
        if kind == "add":
            doc = _add(doc, parts, copy.deepcopy(op.get("value")))
        elif kind == "remove":
            doc = _remove(doc, parts)
        elif kind == "replace":
            _get(doc, parts)
            if not parts:
                doc = copy.deepcopy(op.get("value"))
            else:
                parent, last = _container(doc, parts)
                if isinstance(parent, list):
                    parent[int(last)] = copy.deepcopy(op.get("value"))
                else:
                    parent[last] = copy.deepcopy(op.get("value"))
        elif kind in ("move", "copy"):
            src = _pointer(op.get("from", ""))
            value = copy.deepcopy(_get(doc, src))
            if kind == "move":
                doc = _remove(doc, src)
            doc = _add(doc, parts, value)
        elif kind == "test":
            if _get(doc, parts) != op.get("value"):
                raise PatchError(f"testing value {op.get('path')} failed")
        else:
            raise PatchError(f"Unexpected kind: {kind}")
    return doc


# --------------------------------------------------------------------------- strategic merge patch

_SET_ORDER = "$setElementOrder/"
_DELETE_PRIMITIVE = "$deleteFromPrimitiveList/"


def strategic_merge_patch(original: Any, patch: Any, node: Any) -> Any:
    """Apply a strategic merge patch to ``original`` using the schema at ``node``."""
    if not isinstance(patch, dict):
        raise PatchError("a strategic merge patch must be an object")
    return _smp_map(original if isinstance(original, dict) else {}, patch, describe(node))


def _smp_map(original: dict[str, Any], patch: dict[str, Any], info: TypeInfo) -> Any:
    directive = patch.get("$patch")
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if directive == "delete":
        return None
    out = copy.deepcopy(original)
    retain = patch.get("$retainKeys")
    for k, v in patch.items():
        if k.startswith((_SET_ORDER, _DELETE_PRIMITIVE)) or k in ("$patch", "$retainKeys"):
            continue
        child = child_node(info, k) if info.kind in ("struct", "map") else None
        cinfo = describe(child)
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict) and cinfo.kind in ("struct", "map", "any") and not cinfo.atomic:
            current = out.get(k)
            merged = _smp_map(current if isinstance(current, dict) else {}, v, cinfo)
            if merged is None:
                out.pop(k, None)
            else:
                out[k] = merged
        elif isinstance(v, list) and cinfo.kind == "list":
            current = out.get(k)
            out[k] = _smp_list(current if isinstance(current, list) else [], v, cinfo)
        else:
            out[k] = copy.deepcopy(v)
    for k, v in patch.items():
        if k.startswith(_DELETE_PRIMITIVE):
            name = k[len(_DELETE_PRIMITIVE):]
            if isinstance(out.get(name), list):
                out[name] = [x for x in out[name] if x not in v]
    for k, v in patch.items():
        if k.startswith(_SET_ORDER):
            name = k[len(_SET_ORDER):]
            child = child_node(info, name) if info.kind in ("struct", "map") else None
            if isinstance(out.get(name), list):
                out[name] = _reorder(out[name], v, describe(child))
    if isinstance(retain, list):
        out = {k: v for k, v in out.items() if k in retain}
    return out


def _merges(info: TypeInfo) -> bool:
    return "merge" in info.patch_strategy.split(",")


def _smp_list(original: list[Any], patch: list[Any], info: TypeInfo) -> list[Any]:
    if not _merges(info):
        return [_strip_directives(x) for x in copy.deepcopy(patch)]
    if any(isinstance(x, dict) and x.get("$patch") == "replace" and len(x) == 1 for x in patch):
        return [_strip_directives(x) for x in copy.deepcopy(patch)
                if not (isinstance(x, dict) and x.get("$patch") == "replace")]
    key = info.merge_key
    if not key:
        # A merging list of scalars: a union keeping the original order.
        out = copy.deepcopy(original)
        for x in patch:
            if x not in out:
                out.append(copy.deepcopy(x))
        return out
    out = copy.deepcopy(original)
    elem = describe(info.elem)
    for item in patch:
        if not isinstance(item, dict):
            raise PatchError(f"list items with merge key {key!r} must be objects")
        idx = next((i for i, o in enumerate(out) if isinstance(o, dict) and o.get(key) == item.get(key)), None)
        if item.get("$patch") == "delete":
            if idx is not None:
                del out[idx]
            continue
        if idx is None:
            out.append(_strip_directives(copy.deepcopy(item)))
        else:
            merged = _smp_map(out[idx], item, elem)
            if merged is not None:
                out[idx] = merged
    return out


def _strip_directives(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_directives(v) for k, v in value.items()
                if not k.startswith("$")}
    if isinstance(value, list):
        return [_strip_directives(v) for v in value]
    return value


def _reorder(items: list[Any], order: list[Any], info: TypeInfo) -> list[Any]:
    key = info.merge_key

    def ident(x: Any) -> Any:
        return x.get(key) if key and isinstance(x, dict) else x

    wanted = [ident(o) for o in order]
    listed = [x for w in wanted for x in items if ident(x) == w]
    rest = [x for x in items if ident(x) not in wanted]
    return listed + rest
