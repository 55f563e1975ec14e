"""``placement.yaml``: the decision as the plan branch records it (and a new leader reads).

At fleet scale the file is megabytes (every component with its assignments and reasons)
and is written for every decision, while a decision changes a few components. Each
component's section is therefore dumped once per ``ComponentPlan`` object (the planner
hands the same object to every cycle that keeps a component as it was) and the file is
put together from those sections; only the decision's header and lists are dumped anew.

The YAML is what dumping the whole plan at once gives, up to layout: it loads back to
``plan.model_dump(mode="json", by_alias=True)`` (``provisioning`` left out when there is
none, as the file always had it). Pure: the sections are a cache of a function of the
component plans alone.
"""

from __future__ import annotations

from typing import Any

import yaml

from qonnect_gitops.model.plan import ComponentPlan, Plan

# libyaml's emitter gives the same YAML for plain data, in a fraction of the time.
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)

# By id of the component plan; each entry holds its object so the id stays its own.
_SECTIONS: dict[int, tuple[ComponentPlan, str, bytes]] = {}
_SECTIONS_MAX = 1 << 18


def placement_yaml(plan: Plan) -> bytes:
    """The text of ``placement.yaml`` for ``plan``."""
    exclude: set[str] = {"components"} | ({"provisioning"} if plan.provisioning is None else set())
    rest = plan.model_dump(mode="json", by_alias=True, exclude=exclude)
    parts = [_dump({"reason": rest.pop("reason")})]
    if plan.components:
        parts.append(b"components:\n")
        parts += [_section(key, component) for key, component in plan.components.items()]
    else:
        parts.append(b"components: {}\n")
    if rest:
        parts.append(_dump(rest))
    return b"".join(parts)


def _section(key: str, component: ComponentPlan) -> bytes:
    """``key``'s entry under ``components:``, indented by two spaces."""
    hit = _SECTIONS.get(id(component))
    if hit is not None and hit[0] is component and hit[1] == key:
        return hit[2]
    text = _dump({key: component.model_dump(mode="json", by_alias=True)})
    # Indenting every line keeps the YAML's structure: block mappings and sequences
    # nest by indentation, and a quoted scalar's continuation lines may be indented
    # more without changing its value (the dumper writes no block scalars here).
    section = b"".join(b"  " + line for line in text.splitlines(keepends=True))
    if len(_SECTIONS) >= _SECTIONS_MAX:
        _SECTIONS.clear()
    _SECTIONS[id(component)] = (component, key, section)
    return section


def _dump(data: Any) -> bytes:
    return yaml.dump(data, Dumper=_DUMPER, sort_keys=False, default_flow_style=False,
                     allow_unicode=True, width=4096).encode()
