"""Field paths and field sets in the server-side apply ``FieldsV1`` encoding.

A *path* is a tuple of encoded path elements, each one of:

* ``f:<name>``   a struct field or a map key,
* ``k:<json>``   an item of an associative list, by its key fields (JSON object, keys sorted),
* ``v:<json>``   an item of a set list, by its value,
* ``i:<index>``  an item of a list by position.

A *field set* is a ``set`` of such paths; every path in it is a member (a field a
manager owns). ``encode`` turns a set into the nested ``fieldsV1`` object the API
serves (``{}`` for a leaf member, ``".": {}`` for a member that also has owned
children) and ``decode`` reverses it. The strings match the real API byte for byte
so managedFields written by a real server can be read here and vice versa.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

Path = tuple[str, ...]
FieldSet = set[Path]


def json_compact(value: Any) -> str:
    """JSON with no spaces and sorted object keys, as Go's encoder writes key values."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def field(name: str) -> str:
    """The path element of a struct field or map key."""
    return "f:" + name


def key(keys: Mapping[str, Any]) -> str:
    """The path element of an associative-list item with the given key fields."""
    return "k:" + json_compact(dict(keys))


def value(item: Any) -> str:
    """The path element of a set-list item."""
    return "v:" + json_compact(item)


def index(i: int) -> str:
    """The path element of a list item by position."""
    return "i:" + str(i)


def encode(fields: Iterable[Path]) -> dict[str, Any]:
    """Encode a field set as a ``fieldsV1`` object (sorted like the real API)."""
    root: dict[str, Any] = {}
    members: set[Path] = set(fields)
    for path in members:
        node = root
        for element in path:
            node = node.setdefault(element, {})
    # A member with owned children carries ".": {}; a member without children is just {}.
    # (A node that is not a member exists only because it has members below it.)
    for path in members:
        node = root
        for element in path:
            node = node[element]
        if node and "." not in node:
            node["."] = {}
    return _sorted(root)


def _order(element: str) -> tuple[int, str]:
    # The real serializer writes "." first, then fields, keys, values and indices.
    rank = {".": 0, "f": 1, "k": 2, "v": 3, "i": 4}[element[0]]
    return rank, element


def _sorted(node: dict[str, Any]) -> dict[str, Any]:
    return {k: _sorted(node[k]) for k in sorted(node, key=_order)}


def decode(fields_v1: Mapping[str, Any]) -> FieldSet:
    """Decode a ``fieldsV1`` object into a field set."""
    out: FieldSet = set()

    def walk(node: Mapping[str, Any], prefix: Path) -> None:
        for element, child in node.items():
            if element == ".":
                out.add(prefix)
                continue
            path = prefix + (element,)
            if not child:
                out.add(path)
            else:
                walk(child, path)

    walk(fields_v1, ())
    return out


def element_to_string(element: str) -> str:
    """One path element in the human form used by conflict messages."""
    kind, rest = element[0], element[2:]
    if kind == "f":
        return "." + rest
    if kind == "k":
        keys = json.loads(rest)
        return "[" + ",".join(f"{k}={json_compact(v)}" for k, v in keys.items()) + "]"
    if kind == "v":
        return "[=" + rest + "]"
    return "[" + rest + "]"


def path_to_string(path: Path) -> str:
    """A path in the human form the API uses in messages, e.g. ``.spec.containers[name="a"].image``."""
    return "".join(element_to_string(e) for e in path)


def prefixes(fields: Iterable[Path]) -> set[Path]:
    """Every strict ancestor of every path in ``fields`` (used to keep parents of owned fields)."""
    out: set[Path] = set()
    for p in fields:
        for i in range(len(p)):
            out.add(p[:i])
    return out
