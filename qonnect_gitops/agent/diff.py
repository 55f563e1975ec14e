"""Comparing what the API would make of our manifest (dry-run) with what runs.

Both sides come from the same API server, so defaulting is already applied; only
metadata that changes on every write is dropped (resourceVersion, managedFields,
generation, timestamps), and status, as Argo CD's diff normalisers do.
"""

from __future__ import annotations

from typing import Any

_NOISE = ("resourceVersion", "managedFields", "generation", "creationTimestamp", "uid", "selfLink")


def normalise(obj: dict[str, Any] | None) -> dict[str, Any] | None:
    """A copy without write-time noise and without ``status``: an apply of the main
    resource never changes status, and controllers update it between our GET and our
    dry-run, which would otherwise look like drift."""
    if obj is None:
        return None
    out = {k: v for k, v in obj.items() if k != "status"}
    meta = dict(out.get("metadata") or {})
    for key in _NOISE:
        meta.pop(key, None)
    out["metadata"] = meta
    return out


def differs(dry_run: dict[str, Any], live: dict[str, Any] | None) -> bool:
    """True when applying would change the live object (or it does not exist)."""
    return live is None or normalise(dry_run) != normalise(live)


def changed_paths(dry_run: dict[str, Any], live: dict[str, Any] | None, limit: int = 5) -> list[str]:
    """A few dotted paths that differ, for messages (``spec.replicas``)."""
    if live is None:
        return ["<created>"]
    out: list[str] = []
    _walk(normalise(dry_run), normalise(live), "", out, limit)
    return out


def _walk(a: Any, b: Any, path: str, out: list[str], limit: int) -> None:
    if len(out) >= limit or a == b:
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            _walk(a.get(key), b.get(key), f"{path}.{key}" if path else str(key), out, limit)
        return
    out.append(path or "<root>")


def managers_losing_fields(before: dict[str, Any] | None, after: dict[str, Any]) -> list[str]:
    """Other field managers whose owned fields shrank between ``before`` and ``after``
    (a forced apply took them over)."""
    if before is None:
        return []

    def owned(obj: dict[str, Any]) -> dict[tuple[str, str], Any]:
        out = {}
        for entry in (obj.get("metadata") or {}).get("managedFields") or []:
            if entry.get("manager") == "qonnect-agent" and entry.get("operation") == "Apply":
                continue
            out[(entry.get("manager", ""), entry.get("operation", ""))] = entry.get("fieldsV1")
        return out

    old, new = owned(before), owned(after)
    lost = []
    for key, fields in old.items():
        if new.get(key) != fields and _count(new.get(key)) < _count(fields):
            lost.append(key[0])
    return sorted(set(lost))


def _count(fields: Any) -> int:
    if not isinstance(fields, dict):
        return 0
    return sum(1 + _count(v) for v in fields.values())
