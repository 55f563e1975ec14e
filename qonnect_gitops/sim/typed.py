"""Schema-aware operations on objects: field sets, structured merge, comparison, removal, checks.

These follow the semantics of the API server's structured merge (the rules of
``x-kubernetes-list-type``, ``x-kubernetes-list-map-keys`` and
``x-kubernetes-map-type``): struct fields and map keys merge recursively,
associative lists merge item by item on their keys, sets by value, atomic lists
and atomic maps are replaced whole. Objects are plain JSON values (dicts, lists,
scalars). ``MISSING`` marks an absent value, distinct from JSON ``null``.
"""

from __future__ import annotations

import copy
from typing import Any

from qonnect_gitops.sim import fieldpath as fp
from qonnect_gitops.sim.schema import KEY_DEFAULTS, TypeInfo, describe


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


def child_node(info: TypeInfo, name: str) -> Any:
    """The schema node of a struct field or map value (None: schemaless)."""
    if info.kind == "struct":
        node = info.fields.get(name)
        if node is not None:
            return node
        return info.elem
    if info.kind == "map":
        return info.elem
    return None


def is_declared(info: TypeInfo, name: str) -> bool:
    """Whether ``name`` is a declared struct field (not a free map key)."""
    return info.kind == "struct" and name in info.fields


def item_element(info: TypeInfo, item: Any) -> str | None:
    """The path element of a list item: ``k:{...}`` for associative lists, ``v:...`` for sets."""
    if info.list_type == "map" and info.keys and isinstance(item, dict):
        keys = {}
        for k in info.keys:
            if k in item:
                keys[k] = item[k]
            elif k in KEY_DEFAULTS:
                keys[k] = KEY_DEFAULTS[k]
        return fp.key(keys)
    if info.list_type == "set" or (info.list_type == "map" and not info.keys):
        return fp.value(item)
    return None


def _granular_map(info: TypeInfo, value: Any) -> bool:
    return isinstance(value, dict) and not info.atomic and info.kind in ("struct", "map", "any")


def _granular_list(info: TypeInfo, value: Any) -> bool:
    return isinstance(value, list) and info.kind == "list" and info.list_type in ("map", "set")


# --------------------------------------------------------------------------- field sets


def to_field_set(obj: Any, node: Any) -> fp.FieldSet:
    """The fields an object sets, as the API computes an applier's ownership."""
    out: fp.FieldSet = set()
    _to_set(obj, node, (), out)
    return out


def _to_set(value: Any, node: Any, path: fp.Path, out: fp.FieldSet) -> None:
    info = describe(node)
    if _granular_map(info, value):
        for k, v in value.items():
            cpath = path + (fp.field(k),)
            _to_set(v, child_node(info, k), cpath, out)
            # Empty or null values are leaves; free map keys are members in their own right.
            if v is None or (isinstance(v, dict) and not v) or not is_declared(info, k):
                out.add(cpath)
        return
    if _granular_list(info, value):
        for i, item in enumerate(value):
            pe = item_element(info, item) or fp.index(i)
            ipath = path + (pe,)
            if info.list_type == "map":
                _to_set(item, info.elem, ipath, out)
            out.add(ipath)
        return
    if path:
        out.add(path)


# --------------------------------------------------------------------------- merge


def _index(info: TypeInfo, items: list[Any]) -> tuple[list[str], dict[str, Any]]:
    pes: list[str] = []
    by_pe: dict[str, Any] = {}
    for i, item in enumerate(items):
        pe = item_element(info, item) or fp.index(i)
        pes.append(pe)
        by_pe.setdefault(pe, item)
    return pes, by_pe


def merge(live: Any, config: Any, node: Any) -> Any:
    """Merge ``config`` into ``live``: the config wins on every field it sets."""
    if config is MISSING:
        return copy.deepcopy(live)
    if live is MISSING or live is None:
        return copy.deepcopy(config)
    info = describe(node)
    if _granular_map(info, live) and _granular_map(info, config):
        out = dict(live)
        for k, v in config.items():
            out[k] = merge(live.get(k, MISSING), v, child_node(info, k))
        return out
    if _granular_list(info, live) and _granular_list(info, config):
        return _merge_list(info, live, config)
    return copy.deepcopy(config)


def _merge_list(info: TypeInfo, live: list[Any], config: list[Any]) -> list[Any]:
    l_pes, l_by = _index(info, live)
    r_pes, r_by = _index(info, config)
    r_set = set(r_pes)

    def merged(pe: str) -> Any:
        if info.list_type == "map":
            return merge(l_by.get(pe, MISSING), r_by[pe], info.elem)
        return copy.deepcopy(r_by[pe])

    out: list[Any] = []
    emitted: set[str] = set()
    ri = 0
    # Items only the live object has keep their place; items the config has come in
    # the config's order, each placed before the next shared item that follows it.
    for li, pe in enumerate(l_pes):
        if pe not in r_set:
            out.append(copy.deepcopy(live[li]))
            continue
        while pe not in emitted and ri < len(r_pes):
            rpe = r_pes[ri]
            ri += 1
            if rpe not in emitted:
                out.append(merged(rpe))
                emitted.add(rpe)
    for rpe in r_pes:
        if rpe not in emitted:
            out.append(merged(rpe))
            emitted.add(rpe)
    return out


# --------------------------------------------------------------------------- compare


class Comparison:
    """Fields added, modified and removed between two versions of an object."""

    def __init__(self) -> None:
        self.added: fp.FieldSet = set()
        self.modified: fp.FieldSet = set()
        self.removed: fp.FieldSet = set()

    def changed(self) -> fp.FieldSet:
        """Added or modified fields."""
        return self.added | self.modified


def compare(old: Any, new: Any, node: Any) -> Comparison:
    """Compare two objects field by field, as the API does to attribute an update."""
    c = Comparison()
    _cmp(old, new, node, (), c)
    return c


def _cmp(lhs: Any, rhs: Any, node: Any, path: fp.Path, c: Comparison) -> None:
    info = describe(node)
    l_map = _granular_map(info, lhs)
    r_map = _granular_map(info, rhs)
    # Two empty (or absent) maps compare as one leaf, keeping the empty/absent distinction.
    # A null is present (no "added" hook) but has no children.
    if (l_map or lhs is MISSING or lhs is None) and (r_map or rhs is MISSING or rhs is None) \
            and ((l_map and lhs) or (r_map and rhs)):
        lm = lhs if l_map else {}
        rm = rhs if r_map else {}
        for k in list(lm) + [k for k in rm if k not in lm]:
            cpath = path + (fp.field(k),)
            lv, rv = lm.get(k, MISSING), rm.get(k, MISSING)
            _cmp(lv, rv, child_node(info, k), cpath, c)
            if lv is MISSING:
                c.added.add(cpath)
            elif rv is MISSING:
                c.removed.add(cpath)
        return
    l_list = _granular_list(info, lhs)
    r_list = _granular_list(info, rhs)
    if (l_list or lhs is MISSING or lhs is None) and (r_list or rhs is MISSING or rhs is None) \
            and ((l_list and lhs) or (r_list and rhs)):
        l_pes, l_by = _index(info, lhs if l_list else [])
        r_pes, r_by = _index(info, rhs if r_list else [])
        for pe in l_pes + [p for p in r_pes if p not in l_by]:
            ipath = path + (pe,)
            lv, rv = l_by.get(pe, MISSING), r_by.get(pe, MISSING)
            if info.list_type == "map":
                _cmp(lv, rv, info.elem, ipath, c)
            if lv is MISSING:
                c.added.add(ipath)
            elif rv is MISSING:
                c.removed.add(ipath)
            elif info.list_type != "map" and lv != rv:
                c.modified.add(ipath)
        return
    if not path:
        return
    if lhs is MISSING:
        c.added.add(path)
    elif rhs is MISSING:
        c.removed.add(path)
    elif lhs != rhs or type(lhs) is not type(rhs):
        c.modified.add(path)


# Struct fields the Go types hold by value (not by pointer), so their zero value is an
# empty struct rather than absent. The schema cannot tell; these are the usual ones.
_BY_VALUE = frozenset({"metadata", "spec", "status", "template", "strategy", "updateStrategy"})


def zero_object(node: Any, depth: int = 0) -> dict[str, Any]:
    """An approximation of the Go zero value of a kind as JSON: what a create starts from.

    Required fields are present as null (slices, maps and pointers encode as null) and
    by-value structs as their own zero value, so a create's ownership entry marks only
    optional maps, lists and pointer structs it adds with ".", as the API does.
    """
    info = describe(node)
    out: dict[str, Any] = {}
    if info.kind != "struct" or depth > 6:
        return out
    for name, child in info.fields.items():
        cinfo = describe(child)
        if cinfo.kind == "struct" and name in _BY_VALUE:
            out[name] = zero_object(child, depth + 1)
        elif name in info.required:
            out[name] = None
    return out


# --------------------------------------------------------------------------- removal


def remove_paths(obj: Any, paths: fp.FieldSet, node: Any) -> Any:
    """A copy of ``obj`` without the given member fields (and list items)."""
    out = copy.deepcopy(obj)
    # Removing a field removes what is below it; removing children first could strip
    # an item of its key fields and make it unfindable.
    top = {p for p in paths if not any(p[:i] in paths for i in range(1, len(p)))}
    # Deepest first, so removing an item never shifts the position of another.
    for path in sorted(top, key=len, reverse=True):
        _remove(out, path, node)
    return out


def _remove(obj: Any, path: fp.Path, node: Any) -> None:
    cur, info = obj, describe(node)
    for depth, pe in enumerate(path):
        last = depth == len(path) - 1
        if pe.startswith("f:"):
            name = pe[2:]
            if not isinstance(cur, dict) or name not in cur:
                return
            if last:
                del cur[name]
                return
            node = child_node(info, name)
            cur, info = cur[name], describe(node)
        else:
            if not isinstance(cur, list):
                return
            idx = next((i for i, it in enumerate(cur) if (item_element(info, it) or fp.index(i)) == pe), None)
            if idx is None:
                return
            if last:
                del cur[idx]
                return
            node = info.elem
            cur, info = cur[idx], describe(node)


# --------------------------------------------------------------------------- checks


class Problems:
    """What a schema check found: unknown fields (by path) and type errors."""

    def __init__(self) -> None:
        self.unknown: list[str] = []
        self.unknown_typed: list[str] = []
        self.types: list[str] = []


def json_type(value: Any) -> str:
    """The JSON Schema type of a value: boolean, integer, number, string, array, object or null."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "null"


def _jtype(value: Any) -> str:
    # The words Go's decoder uses in its type errors.
    return {"boolean": "bool", "integer": "number"}.get(json_type(value), json_type(value))


def sanitize(obj: Any, node: Any, problems: Problems, default_keys: bool, path: str = "", spath: str = "") -> Any:
    """Drop fields the schema does not declare (recording them), check scalar types.

    ``problems.unknown`` gets paths as strict decoding words them (``spec.containers[0].x``),
    ``problems.unknown_typed`` as structured merge does (``.spec.containers[name="a"].x``).
    With ``default_keys`` list-map items missing a defaulted key field (``protocol``)
    get its default, as the API server's defaulting does for stored objects.
    """
    info = describe(node)
    if obj is None:
        return None
    if info.kind in ("struct", "map"):
        if not isinstance(obj, dict):
            problems.types.append(f"{path or '<root>'}: expected object, got {_jtype(obj)}")
            return obj
        out: dict[str, Any] = {}
        for k, v in obj.items():
            cpath = f"{path}.{k}" if path else k
            cspath = f"{spath}.{k}"
            child = child_node(info, k)
            if info.kind == "struct" and k not in info.fields and info.elem is None:
                if info.preserve_unknown:
                    out[k] = v
                else:
                    problems.unknown.append(cpath)
                    problems.unknown_typed.append(cspath)
                continue
            out[k] = sanitize(v, child, problems, default_keys, cpath, cspath)
        return out
    if info.kind == "list":
        if not isinstance(obj, list):
            problems.types.append(f"{path}: expected array, got {_jtype(obj)}")
            return obj
        items = []
        for i, item in enumerate(obj):
            pe = item_element(info, item) if isinstance(item, (dict, str, int, float, bool)) else None
            ispath = spath + (fp.element_to_string(pe) if pe else f"[{i}]")
            item = sanitize(item, info.elem, problems, default_keys, f"{path}[{i}]", ispath)
            if default_keys and info.list_type == "map" and isinstance(item, dict):
                for k in info.keys:
                    if k not in item and k in KEY_DEFAULTS:
                        item[k] = KEY_DEFAULTS[k]
            items.append(item)
        return items
    if info.kind == "scalar":
        t = _jtype(obj)
        allowed = set()
        for st in info.scalar_types:
            allowed |= {"integer": {"number"}, "number": {"number"}, "string": {"string"},
                        "boolean": {"bool"}}.get(st, set())
        if allowed and t not in allowed:
            want = "/".join(sorted(info.scalar_types))
            problems.types.append(f"{path}: expected {want}, got {t}")
        elif "integer" in info.scalar_types and "number" not in info.scalar_types and isinstance(obj, float):
            if obj != int(obj):
                problems.types.append(f"{path}: expected integer, got number")
            else:
                return int(obj)
        return obj
    return obj


def drop_empty(obj: Any, node: Any) -> Any:
    """Remove nulls, empty maps and empty lists as Go's ``omitempty`` encoding does on write."""
    info = describe(node)
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            child = child_node(info, k) if info.kind in ("struct", "map") else None
            cinfo = describe(child)
            v = drop_empty(v, child)
            if v is None:
                continue
            if isinstance(v, list) and not v:
                continue
            # Maps (not structs) disappear when empty; empty structs stay as {}.
            if isinstance(v, dict) and not v and cinfo.kind == "map":
                continue
            out[k] = v
        return out
    if isinstance(obj, list):
        elem = info.elem if info.kind == "list" else None
        return [drop_empty(v, elem) for v in obj]
    return obj


def missing_required(obj: Any, node: Any, path: str = "") -> list[str]:
    """Paths of required fields that are absent, below the top level (for 422 Invalid)."""
    info = describe(node)
    out: list[str] = []
    if info.kind == "struct" and isinstance(obj, dict):
        if path:
            for r in info.required:
                if obj.get(r) in (None, "", [], {}) and r in info.fields:
                    if describe(info.fields[r]).kind == "scalar" and obj.get(r) == "" :
                        continue
                    out.append(f"{path}.{r}")
        for k, v in obj.items():
            if k in info.fields:
                out += missing_required(v, info.fields[k], f"{path}.{k}" if path else k)
    elif info.kind == "list" and isinstance(obj, list):
        for i, item in enumerate(obj):
            out += missing_required(item, info.elem, f"{path}[{i}]")
    elif info.kind == "map" and isinstance(obj, dict):
        for k, v in obj.items():
            out += missing_required(v, info.elem, f"{path}[{k}]")
    return out
