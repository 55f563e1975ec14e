"""Field ownership: server-side apply and the ``Update`` managers of ordinary writes.

Follows the documented server-side apply rules: every manager owns a set of
fields (stored in ``metadata.managedFields`` in the ``FieldsV1`` encoding);
applying a value another manager owns with a different value is a conflict
unless forced; two managers applying the same value share ownership; a field
an applier stops applying is removed unless another manager still owns it;
non-apply writes give their manager ownership of whatever they changed.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from qonnect_gitops.sim import fieldpath as fp
from qonnect_gitops.sim import typed

APPLY = "Apply"
UPDATE = "Update"

# Fields the API server never tracks ownership of: identity and server-owned metadata.
_STRIPPED: tuple[fp.Path, ...] = (
    ("f:apiVersion",),
    ("f:kind",),
    ("f:metadata", "f:name"),
    ("f:metadata", "f:namespace"),
    ("f:metadata", "f:uid"),
    ("f:metadata", "f:resourceVersion"),
    ("f:metadata", "f:generation"),
    ("f:metadata", "f:creationTimestamp"),
    ("f:metadata", "f:deletionTimestamp"),
    ("f:metadata", "f:deletionGracePeriodSeconds"),
    ("f:metadata", "f:managedFields"),
    ("f:metadata", "f:selfLink"),
)


def now_rfc3339() -> str:
    """The current time as the API writes timestamps (seconds, UTC, ``Z``)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@dataclass
class Manager:
    """One ``managedFields`` entry."""

    manager: str
    operation: str
    api_version: str
    fields: fp.FieldSet = field(default_factory=set)
    subresource: str = ""
    time: str | None = None

    @property
    def ident(self) -> tuple[str, str, str, str]:
        """What makes two entries the same manager (appliers are not split by version)."""
        return (self.manager, self.operation, self.api_version if self.operation == UPDATE else "", self.subresource)

    def describe(self) -> str:
        """The manager as conflict messages name it: ``"kubectl" using apps/v1`` for updaters."""
        text = f'"{self.manager}"'
        if self.subresource:
            text += f' with subresource "{self.subresource}"'
        if self.operation == UPDATE:
            text += f" using {self.api_version}"
        return text


def decode_managed(entries: Iterable[dict[str, Any]] | None) -> list[Manager]:
    """Parse ``metadata.managedFields``."""
    out = []
    for e in entries or []:
        out.append(Manager(
            manager=e.get("manager", ""), operation=e.get("operation", UPDATE),
            api_version=e.get("apiVersion", ""), fields=fp.decode(e.get("fieldsV1") or {}),
            subresource=e.get("subresource", ""), time=e.get("time")))
    return out


def encode_managed(managers: Iterable[Manager]) -> list[dict[str, Any]]:
    """Serialize managers in the API's order: Apply before Update, then by time and name."""
    def order(m: Manager) -> tuple[str, str, str, str, str]:
        return (m.operation, m.time or "", m.manager, m.api_version, m.subresource)

    out = []
    for m in sorted(managers, key=order):
        entry: dict[str, Any] = {
            "manager": m.manager, "operation": m.operation, "apiVersion": m.api_version,
        }
        if m.time:
            entry["time"] = m.time
        entry["fieldsType"] = "FieldsV1"
        entry["fieldsV1"] = fp.encode(m.fields)
        if m.subresource:
            entry["subresource"] = m.subresource
        out.append(entry)
    return out


def _filter(fields: fp.FieldSet, ignored: tuple[fp.Path, ...]) -> fp.FieldSet:
    drop = _STRIPPED + ignored
    return {p for p in fields if p and not any(p[:len(d)] == d for d in drop)}


def _path_order(path: fp.Path) -> tuple[tuple[int, str], ...]:
    rank = {"f": 1, "k": 2, "v": 3, "i": 4}
    return tuple((rank[e[0]], e) for e in path)


class ApplyConflict(Exception):
    """An apply would change fields other managers own; carries the API's message and causes."""

    def __init__(self, conflicts: list[tuple[Manager, fp.Path]]) -> None:
        self.conflicts = sorted(conflicts, key=lambda c: (c[0].manager, _path_order(c[1])))
        super().__init__(self.message())

    def message(self) -> str:
        """The Status message, worded like the API server's."""
        if len(self.conflicts) == 1:
            m, p = self.conflicts[0]
            return f"Apply failed with 1 conflict: conflict with {m.describe()}: {fp.path_to_string(p)}"
        lines: list[str] = []
        seen: list[str] = []
        by_manager: dict[str, list[fp.Path]] = {}
        for m, p in self.conflicts:
            d = m.describe()
            if d not in by_manager:
                seen.append(d)
                by_manager[d] = []
            by_manager[d].append(p)
        for d in sorted(seen):
            lines.append(f"conflicts with {d}:")
            lines += [f"- {fp.path_to_string(p)}" for p in by_manager[d]]
        return f"Apply failed with {len(self.conflicts)} conflicts: " + "\n".join(lines)

    def causes(self) -> list[dict[str, str]]:
        """Status causes, one per conflicting field."""
        return [{"reason": "FieldManagerConflict", "message": f"conflict with {m.describe()}",
                 "field": fp.path_to_string(p)} for m, p in self.conflicts]


def _without_managed(obj: dict[str, Any] | None) -> dict[str, Any]:
    if not obj:
        return {}
    out = copy.copy(obj)
    meta = dict(out.get("metadata") or {})
    meta.pop("managedFields", None)
    out["metadata"] = meta
    return out


def apply(live: dict[str, Any] | None, config: dict[str, Any], node: Any, manager: str, force: bool,
          api_version: str, subresource: str = "", ignored: tuple[fp.Path, ...] = ()) -> tuple[dict[str, Any], list[Manager]]:
    """Server-side apply ``config`` over ``live``; returns the new object (without managedFields) and managers.

    Raises ``ApplyConflict`` when other managers own fields the config changes and ``force`` is false.
    """
    managers = decode_managed((live or {}).get("metadata", {}).get("managedFields"))
    base = _without_managed(live)
    config_set = _filter(typed.to_field_set(config, node), ignored)
    merged = typed.merge(base, config, node)
    me = Manager(manager, APPLY, api_version, config_set, subresource)
    previous = next((m for m in managers if m.ident == me.ident), None)
    managers = [m for m in managers if m.ident != me.ident]
    if previous is not None and previous.fields:
        # Fields this manager applied before and no longer applies go away, unless
        # someone (including itself, now) still owns them or something below them.
        owned: fp.FieldSet = set(config_set)
        for m in managers:
            owned |= m.fields
        below_owned = fp.prefixes(owned)
        dropped = {p for p in previous.fields - owned if p not in below_owned}
        if dropped:
            merged = typed.remove_paths(merged, dropped, node)
    cmp = typed.compare(base, merged, node)
    changed = _filter(cmp.changed(), ignored)
    removed = _filter(cmp.removed, ignored)
    conflicts: list[tuple[Manager, fp.Path]] = []
    for m in managers:
        for p in m.fields & changed:
            conflicts.append((m, p))
    if conflicts and not force:
        raise ApplyConflict(conflicts)
    for m in managers:
        m.fields = m.fields - changed - removed if force else m.fields - removed
    object_changed = bool(changed or removed)
    if previous is not None and previous.fields == config_set and not object_changed:
        me.time = previous.time
    else:
        me.time = now_rfc3339()
    result = [m for m in managers if m.fields]
    if me.fields:
        result.append(me)
    return merged, result


def update(live: dict[str, Any] | None, new: dict[str, Any], node: Any, manager: str, api_version: str,
           subresource: str = "", ignored: tuple[fp.Path, ...] = (), zero: dict[str, Any] | None = None) -> list[Manager]:
    """Managers after a non-apply write (create, update, patch) by ``manager``.

    ``zero`` stands for the empty object a create starts from (the API starts from
    the Go zero value, whose always-present structs are not "added" by a create).
    """
    sent = (new.get("metadata") or {}).get("managedFields", None)
    if sent == []:
        return []  # an explicit empty list resets ownership tracking, as the API allows
    managers = decode_managed(sent) if sent else []
    if not managers:
        managers = decode_managed((live or {}).get("metadata", {}).get("managedFields"))
    base = _without_managed(live) if live else (zero or {})
    cmp = typed.compare(base, _without_managed(new), node)
    changed = _filter(cmp.changed(), ignored)
    removed = _filter(cmp.removed, ignored)
    me = Manager(manager, UPDATE, api_version, set(), subresource)
    previous = next((m for m in managers if m.ident == me.ident), None)
    others = [m for m in managers if m.ident != me.ident]
    for m in others:
        # An update is always forced: whatever it changed is now its own.
        m.fields = m.fields - changed - removed
    me.fields = ((previous.fields if previous else set()) - removed) | changed
    me.fields = _filter(me.fields, ignored)
    if previous is not None and not (changed or removed):
        me.time = previous.time
    else:
        me.time = now_rfc3339()
    result = [m for m in others if m.fields]
    if me.fields:
        result.append(me)
    return result
