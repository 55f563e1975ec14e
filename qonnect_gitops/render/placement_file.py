"""The decision as the plan branch records it (and a new leader reads): ``placement.yaml``
and the ``placement/`` shards.

Layout (docs/git-layout.md)::

    placement.yaml            reason, unplaced, unmet, moves, provisioning, and
                              ``shards: placement`` (the components are in placement/)
    placement/<hh>.yaml       ``components`` and ``lastMoved`` of the components whose
                              name's SHA-1 starts with the two hex digits <hh>

At fleet scale the decision is megabytes (every component with its assignments and
reasons) while a decision changes a few components: one file would be rewritten and
pushed whole on every decision, a shard costs about 1/256 of it. A plan branch written
before the shards (one ``placement.yaml`` holding everything, no ``shards`` field) is
still read: ``load_placement`` gives the same document either way, the one dumping the
whole plan at once gives.

Each component's section is dumped once per ``ComponentPlan`` content (found by the
object first: the planner hands the same object to every cycle that keeps a component
as it was, then by its JSON) and the files are put together from those sections; only
the decision's header and lists are dumped anew.

The YAML loads back to ``plan.model_dump(mode="json", by_alias=True)`` (``provisioning``
left out when there is none, as the file always had it). Pure: the sections are a cache
of a function of the component plans alone.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

import yaml

from qonnect_gitops.model.plan import ComponentPlan, Plan

# libyaml's emitter gives the same YAML for plain data, in a fraction of the time; its
# loader reads a fleet's decision in a second where the pure-Python one takes tens.
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

PLACEMENT_FILE = "placement.yaml"
PLACEMENT_DIR = "placement"
SHARDS_FIELD = "shards"
"""The field of ``placement.yaml`` naming the directory of shards (its only value)."""
_SHARDED = ("components", "lastMoved")  # the fields kept per component, in the shards
_SHARD_NAME = re.compile(r"[0-9a-f]{2}\.yaml\Z")


class PlacementFileError(ValueError):
    """A plan commit's decision files cannot be read: the message names the file and field."""


def shard_of(component: str) -> str:
    """The path of the shard holding ``component``: 256 files by the first byte of the
    SHA-1 of its name (stable whatever the fleet; measured choice, docs/git-layout.md)."""
    return f"{PLACEMENT_DIR}/{hashlib.sha1(component.encode()).hexdigest()[:2]}.yaml"

class _Sections:
    """Each component's section of ``placement.yaml``, remembered for the next plans.

    By id of the component plan (each entry holds its object, so the id stays its own),
    and by content (its JSON, which pydantic writes in a few microseconds: a cycle that
    plans anew builds new but mostly equal objects). Only what the last two plans used is
    kept: a cache that kept every plan's component objects until a size limit held a
    leader's old plans alive, cycle after cycle (at 3,000 components, 30,000 objects and
    7 MiB a cycle), and every full garbage collection walked them."""

    def __init__(self) -> None:
        self.by_id: dict[int, tuple[ComponentPlan, str, bytes]] = {}
        self.by_content: dict[tuple[str, str], bytes] = {}
        self._previous_by_id: dict[int, tuple[ComponentPlan, str, bytes]] = {}
        self._previous_by_content: dict[tuple[str, str], bytes] = {}

    def section(self, key: str, component: ComponentPlan) -> bytes:
        """``key``'s entry under ``components:``, indented by two spaces."""
        hit = self.by_id.get(id(component)) or self._previous_by_id.get(id(component))
        if hit is not None and hit[0] is component and hit[1] == key:
            self.by_id[id(component)] = hit
            return hit[2]
        content = (key, component.model_dump_json(by_alias=True))
        section = self.by_content.get(content) or self._previous_by_content.get(content)
        if section is None:
            text = _dump({key: component.model_dump(mode="json", by_alias=True)})
            # Indenting every line keeps the YAML's structure: block mappings and sequences
            # nest by indentation, and a quoted scalar's continuation lines may be indented
            # more without changing its value (the dumper writes no block scalars here).
            section = b"".join(b"  " + line for line in text.splitlines(keepends=True))
        self.by_content[content] = section
        self.by_id[id(component)] = (component, key, section)
        return section

    def plan_done(self) -> None:
        """What this plan used becomes the previous plan's; older entries are dropped."""
        self._previous_by_id, self.by_id = self.by_id, {}
        self._previous_by_content, self.by_content = self.by_content, {}


_SECTIONS = _Sections()


def placement_files(plan: Plan) -> dict[str, bytes]:
    """The decision's files: ``placement.yaml`` and a shard for each first byte of a
    component name's hash that ``components`` or ``lastMoved`` has (path -> bytes)."""
    exclude: set[str] = {"components", "last_moved"} | ({"provisioning"} if plan.provisioning is None else set())
    rest = plan.model_dump(mode="json", by_alias=True, exclude=exclude)
    header = [_dump({"reason": rest.pop("reason")}), f"{SHARDS_FIELD}: {PLACEMENT_DIR}\n".encode()]
    if rest:
        header.append(_dump(rest))
    files = {PLACEMENT_FILE: b"".join(header)}
    sections: dict[str, list[bytes]] = {}
    for key, component in plan.components.items():
        sections.setdefault(shard_of(key), []).append(_SECTIONS.section(key, component))
    if plan.components:
        _SECTIONS.plan_done()
    moved: dict[str, dict[str, str]] = {}
    if plan.last_moved:
        dumped = plan.model_dump(mode="json", by_alias=True, include={"last_moved"})["lastMoved"]
        for key in sorted(dumped):
            moved.setdefault(shard_of(key), {})[key] = dumped[key]
    for path in sorted(sections.keys() | moved.keys()):
        parts = [b"components:\n", *sections[path]] if path in sections else []
        if path in moved:
            parts.append(_dump({"lastMoved": moved[path]}))
        files[path] = b"".join(parts)
    return files


def load_placement(header: bytes, shards: Callable[[], Mapping[str, bytes]]) -> dict[str, Any]:
    """The decision document of a plan commit (what ``Plan.model_validate`` takes) from
    its ``placement.yaml`` and, when that names them, its shards: ``shards()`` gives the
    files under ``placement/`` by path, and is not called for a ``placement.yaml`` written
    before the shards, which holds everything. Raises ``PlacementFileError`` naming the
    file and field for anything else."""
    doc = _load(PLACEMENT_FILE, header)
    if SHARDS_FIELD not in doc:
        return doc  # one file, as plan branches were written before the shards
    where = doc.pop(SHARDS_FIELD)
    if where != PLACEMENT_DIR:
        raise PlacementFileError(f"{PLACEMENT_FILE}: field {SHARDS_FIELD!r}: expected {PLACEMENT_DIR!r}, "
                                 f"found {where!r}")
    for field in _SHARDED:
        if field in doc:
            raise PlacementFileError(f"{PLACEMENT_FILE}: field {field!r}: belongs in the {PLACEMENT_DIR}/ files "
                                     f"when {SHARDS_FIELD!r} is set")
    found: dict[str, dict[str, Any]] = {field: {} for field in _SHARDED}
    for path, raw in sorted(shards().items()):
        name = path.removeprefix(f"{PLACEMENT_DIR}/")
        if name == path or not _SHARD_NAME.match(name):
            raise PlacementFileError(f"{path}: not a shard: expected {PLACEMENT_DIR}/<two hex digits>.yaml")
        data = _load(path, raw)
        for field in data.keys() - set(_SHARDED):
            raise PlacementFileError(f"{path}: field {field!r}: not expected (a shard has {', '.join(_SHARDED)})")
        for field in _SHARDED:
            entries = data.get(field, {})
            if not isinstance(entries, dict):
                raise PlacementFileError(f"{path}: field {field!r}: expected a mapping by component, "
                                         f"found {type(entries).__name__}")
            for key, value in entries.items():
                if not isinstance(key, str) or shard_of(key) != path:
                    where_ok = shard_of(key) if isinstance(key, str) else "no shard (not a string)"
                    raise PlacementFileError(f"{path}: field {field!r}: component {key!r} belongs in {where_ok}")
                found[field][key] = value
    doc["components"] = dict(sorted(found["components"].items()))
    doc["lastMoved"] = dict(sorted(found["lastMoved"].items()))
    return doc


def placement_of(files: Mapping[str, bytes]) -> dict[str, Any] | None:
    """``load_placement`` of a plan tree given as files (path -> bytes, as ``render``
    gives it); None without ``placement.yaml``."""
    header = files.get(PLACEMENT_FILE)
    if header is None:
        return None
    prefix = f"{PLACEMENT_DIR}/"
    return load_placement(header, lambda: {path: data for path, data in files.items() if path.startswith(prefix)})


def file_of_field(loc: tuple[str | int, ...], sharded: bool) -> str:
    """The decision file holding the field at ``loc`` (a validation error's location in
    the document ``load_placement`` gives), in the sharded layout or the single file."""
    if sharded and len(loc) > 1 and loc[0] in _SHARDED and isinstance(loc[1], str):
        return shard_of(loc[1])
    return PLACEMENT_FILE


def is_placement_path(path: str) -> bool:
    """Whether ``path`` of a plan tree is one of the decision's files (not a manifest)."""
    return path == PLACEMENT_FILE or path.startswith(f"{PLACEMENT_DIR}/")


def _load(path: str, raw: bytes) -> dict[str, Any]:
    try:
        data = yaml.load(raw, Loader=_LOADER)
    except yaml.YAMLError as exc:
        raise PlacementFileError(f"{path}: not YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise PlacementFileError(f"{path}: expected a mapping, found {type(data).__name__}")
    return data


def placement_yaml(plan: Plan) -> bytes:
    """The whole decision as one ``placement.yaml``, as plan branches held it before the
    shards (``load_placement`` reads both; ``render`` writes ``placement_files``)."""
    exclude: set[str] = {"components"} | ({"provisioning"} if plan.provisioning is None else set())
    rest = plan.model_dump(mode="json", by_alias=True, exclude=exclude)
    parts = [_dump({"reason": rest.pop("reason")})]
    if plan.components:
        parts.append(b"components:\n")
        parts += [_SECTIONS.section(key, component) for key, component in plan.components.items()]
        _SECTIONS.plan_done()
    else:
        parts.append(b"components: {}\n")
    if rest:
        parts.append(_dump(rest))
    return b"".join(parts)


def _dump(data: Any) -> bytes:
    fast = plain_yaml(data)
    if fast is not None:
        return fast
    return yaml.dump(data, Dumper=_DUMPER, sort_keys=False, default_flow_style=False,
                     allow_unicode=True, width=4096).encode()


# What the fast writer takes as it is: a key in plain style that no YAML 1.1 resolver
# reads as anything but a string, and strings it can quote as JSON does (printable
# ASCII: JSON's escapes are YAML's).
_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_NOT_PLAIN = frozenset({"y", "n", "yes", "no", "on", "off", "true", "false", "null"})
_QUOTABLE = re.compile(r"[ -~]*\Z")


def plain_yaml(data: Any) -> bytes | None:
    """Block-style YAML for plain data (mappings with string keys, lists, strings, ints,
    floats, booleans, None), strings double-quoted; None when the data holds anything
    else (the caller dumps it with PyYAML). PyYAML's representer is most of a plan's
    dump time; this writes the same values in a tenth of it."""
    out: list[str] = []
    try:
        _block(data, 0, out)
    except _Unplain:
        return None
    return "".join(out).encode()


class _Unplain(Exception):
    """Something the fast writer leaves to PyYAML."""


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return ".nan"
        if math.isinf(value):
            return ".inf" if value > 0 else "-.inf"
        text = repr(value)
        # YAML 1.1 reads a float only with a dot: 1e-05 would come back as a string.
        return text.replace("e", ".0e", 1) if "." not in text and "e" in text else text
    if isinstance(value, str) and _QUOTABLE.match(value):
        return json.dumps(value)
    raise _Unplain


def _key(key: Any) -> str:
    if not isinstance(key, str):
        raise _Unplain
    if _PLAIN_KEY.match(key) and key.lower() not in _NOT_PLAIN:
        return key
    return _scalar(key)


def _block(value: Any, indent: int, out: list[str]) -> None:
    """``value`` (a non-empty mapping or list, or a scalar at the top) at ``indent``."""
    pad = " " * indent
    if isinstance(value, dict) and value:
        for key, item in value.items():
            out.append(f"{pad}{_key(key)}:")
            _after_key(item, indent, out)
    elif isinstance(value, list) and value:
        for item in value:
            if isinstance(item, dict) and item:
                first = True
                for key, sub in item.items():
                    out.append(f"{pad}- {_key(key)}:" if first else f"{pad}  {_key(key)}:")
                    _after_key(sub, indent + 2, out)
                    first = False
            elif isinstance(item, (dict, list)):
                if item:
                    raise _Unplain  # a list right inside a list
                out.append(f"{pad}- {'{}' if isinstance(item, dict) else '[]'}\n")
            else:
                out.append(f"{pad}- {_scalar(item)}\n")
    else:
        out.append(f"{pad}{_flow(value)}\n")


def _after_key(item: Any, indent: int, out: list[str]) -> None:
    if isinstance(item, (dict, list)) and item:
        out.append("\n")
        _block(item, indent + 2, out)
    else:
        out.append(f" {_flow(item)}\n")


def _flow(value: Any) -> str:
    if isinstance(value, dict):
        if value:
            raise _Unplain
        return "{}"
    if isinstance(value, list):
        if value:
            raise _Unplain
        return "[]"
    return _scalar(value)
