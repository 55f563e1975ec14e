"""The object store of one simulated cluster: objects, resourceVersions and the watch log.

One re-entrant lock guards everything; a condition on it wakes watchers. Stored
objects are never mutated in place (writers store new dicts), so readers may
serialize what they got after releasing the lock.
"""

from __future__ import annotations

import builtins
import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

GroupResource = tuple[str, str]  # (group, plural)
ObjKey = tuple[str, str]  # (namespace or "", name)


@dataclass(frozen=True)
class Event:
    """One change, as watchers see it."""

    rv: int
    type: str  # ADDED, MODIFIED, DELETED
    gr: GroupResource
    obj: dict[str, Any]
    prev: dict[str, Any] | None = None  # the object before a MODIFIED event (selector transitions)


class Expired(Exception):
    """The requested resourceVersion is older than the oldest event kept."""


class Store:
    """Objects by group-resource and (namespace, name), with a global resourceVersion."""

    def __init__(self, history: int = 1000) -> None:
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self._rv = 0
        self._objects: dict[GroupResource, dict[ObjKey, dict[str, Any]]] = {}
        self._events: deque[Event] = deque(maxlen=history)
        self._oldest_rv = 0  # events after this rv are all in the log
        self.closed = False
        # Indexes for the garbage collector and namespace deletion, so neither scans everything.
        self._by_uid: dict[str, tuple[GroupResource, ObjKey]] = {}
        self._dependents: dict[str, set[tuple[GroupResource, ObjKey]]] = {}
        self._per_namespace: dict[str, int] = {}

    @property
    def resource_version(self) -> int:
        """The newest resourceVersion handed out."""
        with self.lock:
            return self._rv

    def next_rv(self) -> int:
        """Reserve the next resourceVersion (caller holds the lock)."""
        self._rv += 1
        return self._rv

    def get(self, gr: GroupResource, namespace: str, name: str) -> dict[str, Any] | None:
        """The stored object or None."""
        with self.lock:
            return self._objects.get(gr, {}).get((namespace, name))

    def list(self, gr: GroupResource, namespace: str | None = None) -> builtins.list[dict[str, Any]]:
        """Objects of a group-resource, in one namespace or all, sorted by namespace and name."""
        with self.lock:
            table = self._objects.get(gr, {})
            keys = sorted(k for k in table if namespace is None or k[0] == namespace)
            return [table[k] for k in keys]

    def count(self) -> int:
        """How many objects the store holds."""
        with self.lock:
            return sum(len(t) for t in self._objects.values())

    def group_resources(self) -> builtins.list[GroupResource]:
        """Every group-resource that has (or had) objects."""
        with self.lock:
            return list(self._objects)

    def namespaced_objects(self, namespace: str) -> Iterator[tuple[GroupResource, dict[str, Any]]]:
        """Every object in a namespace (snapshot)."""
        with self.lock:
            items = [(gr, o) for gr, t in self._objects.items() for k, o in t.items() if k[0] == namespace]
        yield from items

    def put(self, gr: GroupResource, obj: dict[str, Any], event_type: str) -> dict[str, Any]:
        """Store ``obj`` with a fresh resourceVersion and record the event."""
        with self.lock:
            rv = self.next_rv()
            meta = dict(obj["metadata"])
            meta["resourceVersion"] = str(rv)
            stored = dict(obj)
            stored["metadata"] = meta
            table = self._objects.setdefault(gr, {})
            key = (meta.get("namespace", ""), meta["name"])
            prev = table.get(key)
            table[key] = stored
            self._index(gr, key, prev, stored)
            self._record(Event(rv, event_type, gr, stored, prev))
            return stored

    def remove(self, gr: GroupResource, obj: dict[str, Any]) -> dict[str, Any]:
        """Delete an object; the DELETED event carries a fresh resourceVersion, as the API's does."""
        with self.lock:
            meta = obj["metadata"]
            key = (meta.get("namespace", ""), meta["name"])
            prev = self._objects.get(gr, {}).pop(key, None)
            if prev is not None:
                self._index(gr, key, prev, None)
            rv = self.next_rv()
            gone = dict(obj)
            gone["metadata"] = dict(meta, resourceVersion=str(rv))
            self._record(Event(rv, "DELETED", gr, gone))
            return gone

    def _index(self, gr: GroupResource, key: ObjKey, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        for obj, sign in ((old, -1), (new, 1)):
            if obj is None:
                continue
            meta = obj["metadata"]
            uid = meta.get("uid")
            for ref in meta.get("ownerReferences") or []:
                owned = self._dependents.setdefault(ref.get("uid", ""), set())
                if sign > 0:
                    owned.add((gr, key))
                else:
                    owned.discard((gr, key))
                    if not owned:
                        del self._dependents[ref.get("uid", "")]
            if uid:
                if sign > 0:
                    self._by_uid[uid] = (gr, key)
                elif self._by_uid.get(uid) == (gr, key):
                    del self._by_uid[uid]
            if key[0]:
                self._per_namespace[key[0]] = self._per_namespace.get(key[0], 0) + sign

    def by_uid(self, uid: str) -> tuple[GroupResource, dict[str, Any]] | None:
        """The object with this uid, if it exists."""
        with self.lock:
            hit = self._by_uid.get(uid)
            if hit is None:
                return None
            obj = self._objects.get(hit[0], {}).get(hit[1])
            return (hit[0], obj) if obj is not None else None

    def dependents(self, uid: str) -> builtins.list[tuple[GroupResource, dict[str, Any]]]:
        """Objects with an ownerReference to ``uid``."""
        with self.lock:
            out = []
            for gr, key in sorted(self._dependents.get(uid, ())):
                obj = self._objects.get(gr, {}).get(key)
                if obj is not None:
                    out.append((gr, obj))
            return out

    def namespace_count(self, namespace: str) -> int:
        """How many objects live in a namespace."""
        with self.lock:
            return self._per_namespace.get(namespace, 0)

    def _record(self, event: Event) -> None:
        if len(self._events) == self._events.maxlen:
            self._oldest_rv = self._events[0].rv
        self._events.append(event)
        self.changed.notify_all()

    def events_after(self, rv: int) -> builtins.list[Event]:
        """Events newer than ``rv`` (caller holds the lock); raises Expired when compacted."""
        if rv < self._oldest_rv:
            raise Expired(f"too old resource version: {rv} ({self._oldest_rv + 1})")
        if not self._events or self._events[-1].rv <= rv:
            return []
        # Events are in rv order: scan from the end, which is where watchers usually are.
        out: builtins.list[Event] = []
        for ev in reversed(self._events):
            if ev.rv <= rv:
                break
            out.append(ev)
        out.reverse()
        return out

    def close(self) -> None:
        """Wake and end every watcher."""
        with self.lock:
            self.closed = True
            self.changed.notify_all()
