"""``placement.yaml``: the decision as the plan branch records it (and a new leader reads).

At fleet scale the file is megabytes (every component with its assignments and reasons)
and is written for every decision, while a decision changes a few components. Each
component's section is therefore dumped once per ``ComponentPlan`` content (found by the
object first: the planner hands the same object to every cycle that keeps a component
as it was, then by its JSON) and the file is put together from those sections; only the
decision's header and lists are dumped anew.

The YAML is what dumping the whole plan at once gives, up to layout: it loads back to
``plan.model_dump(mode="json", by_alias=True)`` (``provisioning`` left out when there is
none, as the file always had it). Pure: the sections are a cache of a function of the
component plans alone.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import yaml

from qonnect_gitops.model.plan import ComponentPlan, Plan

# libyaml's emitter gives the same YAML for plain data, in a fraction of the time.
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)

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


def placement_yaml(plan: Plan) -> bytes:
    """The text of ``placement.yaml`` for ``plan``."""
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
