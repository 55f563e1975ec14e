"""The object store of one simulated cluster: objects, resourceVersions and the watch log.

One re-entrant lock guards everything; a condition on it wakes watchers. Stored
objects are never mutated in place (writers store new dicts), so readers may
serialize what they got after releasing the lock.

Every read a write path or a controller needs is indexed, so the cost of a write
does not grow with the number of objects: keys are kept sorted per resource (paged
lists bisect to their start), objects by uid, dependents by owner uid, object counts
per namespace, and, for the resources asked for, objects by label.

A resource may also have a *virtual* collection: objects that exist without being
stored one by one (a pool of a million identical nodes). Reads see them; a write to
one stores it for real (it is "materialised"); deleting one leaves a tombstone.
"""

from __future__ import annotations

import bisect
import builtins
import heapq
import re
import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

GroupResource = tuple[str, str]  # (group, plural)
ObjKey = tuple[str, str]  # (namespace or "", name)
SortKey = tuple[Any, ...]  # how keys are ordered in lists (namespace, name; nodes in natural order)

NODES: GroupResource = ("", "nodes")
_NUMBERED = re.compile(r"^(.*?)(\d+)$")


def natural_key(name: str) -> tuple[str, int, str]:
    """``node-2`` before ``node-10``: names ending in a number sort by that number."""
    m = _NUMBERED.match(name)
    if m is None:
        return (name, -1, name)
    return (m.group(1), int(m.group(2)), name)


@dataclass(frozen=True)
class Event:
    """One change, as watchers see it."""

    rv: int
    type: str  # ADDED, MODIFIED, DELETED
    gr: GroupResource
    obj: dict[str, Any]
    prev: dict[str, Any] | None = None  # the object before a MODIFIED or DELETED event


class Expired(Exception):
    """The requested resourceVersion is older than the oldest event kept."""


class VirtualCollection(Protocol):
    """Objects of one resource that exist without being stored (see the module docstring)."""

    def get(self, name: str) -> dict[str, Any] | None:
        """The generated object, if ``name`` is one of the collection's and neither stored nor deleted."""

    def owns(self, name: str) -> bool:
        """Whether ``name`` belongs to the collection (stored or deleted ones included)."""

    def set_state(self, name: str, state: str | None) -> None:
        """Mark a member ``"stored"`` (materialised), ``"deleted"`` (tombstone) or back to virtual (None)."""

    def scan(self, after: SortKey | None) -> Iterator[tuple[SortKey, dict[str, Any]]]:
        """Virtual members in sort order, strictly after ``after``."""

    def count_after(self, after: SortKey | None) -> int:
        """How many virtual members sort strictly after ``after``."""

    def count(self) -> int:
        """How many virtual members there are."""


class Store:
    """Objects by group-resource and (namespace, name), with a global resourceVersion."""

    def __init__(self, history: int = 1000) -> None:
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self._rv = 0
        self._objects: dict[GroupResource, dict[ObjKey, dict[str, Any]]] = {}
        self._sorted: dict[GroupResource, list[SortKey]] = {}
        self._events: deque[Event] = deque(maxlen=history)
        self._oldest_rv = 0  # events after this rv are all in the log
        self.closed = False
        # Indexes for the garbage collector, controllers and namespace deletion, so none scans everything.
        self._by_uid: dict[str, tuple[GroupResource, ObjKey]] = {}
        self._dependents: dict[str, set[tuple[GroupResource, ObjKey]]] = {}
        self._per_namespace: dict[str, int] = {}
        self._labelled: set[GroupResource] = set()
        self._by_label: dict[tuple[GroupResource, str, str, str], set[str]] = {}
        self.virtual: dict[GroupResource, VirtualCollection] = {}

    @property
    def resource_version(self) -> int:
        """The newest resourceVersion handed out."""
        with self.lock:
            return self._rv

    def next_rv(self) -> int:
        """Reserve the next resourceVersion (caller holds the lock)."""
        self._rv += 1
        return self._rv

    # ------------------------------------------------------------------ ordering

    @staticmethod
    def sort_key(gr: GroupResource, key: ObjKey) -> SortKey:
        """The position of ``key`` in lists of ``gr``: by namespace and name (Nodes in natural order)."""
        if gr == NODES:
            return (key[0], *natural_key(key[1]))
        return key

    @staticmethod
    def key_of(gr: GroupResource, skey: SortKey) -> ObjKey:
        """The object key a sort key stands for."""
        return (skey[0], skey[-1])

    # ------------------------------------------------------------------ reads

    def get(self, gr: GroupResource, namespace: str, name: str) -> dict[str, Any] | None:
        """The stored (or virtual) object, or None."""
        with self.lock:
            obj = self._objects.get(gr, {}).get((namespace, name))
            if obj is None and gr in self.virtual and not namespace:
                return self.virtual[gr].get(name)
            return obj

    def scan(self, gr: GroupResource, namespace: str | None = None,
             after: SortKey | None = None) -> Iterator[tuple[SortKey, dict[str, Any]]]:
        """Objects in list order, lazily, strictly after ``after``; caller holds the lock while iterating."""
        stored = self._scan_stored(gr, namespace, after)
        virtual = self.virtual.get(gr)
        if virtual is None or namespace:
            return stored
        return heapq.merge(stored, virtual.scan(after), key=lambda pair: pair[0])

    def _scan_stored(self, gr: GroupResource, namespace: str | None,
                     after: SortKey | None) -> Iterator[tuple[SortKey, dict[str, Any]]]:
        keys = self._sorted.get(gr, [])
        table = self._objects.get(gr, {})
        lo = 0
        if namespace is not None:
            lo = bisect.bisect_left(keys, (namespace,))
        if after is not None:
            lo = max(lo, bisect.bisect_right(keys, after))
        for i in range(lo, len(keys)):
            skey = keys[i]
            if namespace is not None and skey[0] != namespace:
                return
            obj = table.get(self.key_of(gr, skey))
            if obj is not None:
                yield skey, obj

    def count_after(self, gr: GroupResource, namespace: str | None, after: SortKey | None) -> int:
        """How many objects a list of ``gr`` (in ``namespace`` or all) still has after ``after``."""
        with self.lock:
            keys = self._sorted.get(gr, [])
            if namespace is not None:
                lo, hi = bisect.bisect_left(keys, (namespace,)), bisect.bisect_left(keys, (namespace + "\x00",))
            else:
                lo, hi = 0, len(keys)
            if after is not None:
                lo = max(lo, bisect.bisect_right(keys, after))
            n = max(0, hi - lo)
            virtual = self.virtual.get(gr)
            if virtual is not None and not namespace:
                n += virtual.count_after(after)
            return n

    def list(self, gr: GroupResource, namespace: str | None = None) -> builtins.list[dict[str, Any]]:
        """Stored objects of a group-resource, in one namespace or all, in list order (no virtual ones)."""
        with self.lock:
            return [o for _, o in self._scan_stored(gr, namespace, None)]

    def count(self) -> int:
        """How many objects the store holds (stored ones)."""
        with self.lock:
            return sum(len(t) for t in self._objects.values())

    def size(self, gr: GroupResource) -> int:
        """How many objects of ``gr`` exist, virtual ones included."""
        with self.lock:
            n = len(self._objects.get(gr, {}))
            virtual = self.virtual.get(gr)
            return n + (virtual.count() if virtual is not None else 0)

    def group_resources(self) -> builtins.list[GroupResource]:
        """Every group-resource that has (or had) objects."""
        with self.lock:
            return list(self._objects)

    def namespaced_objects(self, namespace: str) -> Iterator[tuple[GroupResource, dict[str, Any]]]:
        """Every object in a namespace (snapshot)."""
        with self.lock:
            items = [(gr, o) for gr in self._objects for _, o in self._scan_stored(gr, namespace, None)]
        yield from items

    # ------------------------------------------------------------------ label index

    def index_labels(self, gr: GroupResource) -> None:
        """Keep an index of ``gr``'s objects by label (for ``select``)."""
        with self.lock:
            if gr in self._labelled:
                return
            self._labelled.add(gr)
            for key, obj in self._objects.get(gr, {}).items():
                self._label_index(gr, key, None, obj)

    def select(self, gr: GroupResource, namespace: str, match_labels: dict[str, str]) -> builtins.list[dict[str, Any]]:
        """Objects of an indexed ``gr`` in ``namespace`` carrying every label of ``match_labels`` (sorted by name)."""
        with self.lock:
            if not match_labels:
                return self.list(gr, namespace)
            sets = []
            for k, v in match_labels.items():
                names = self._by_label.get((gr, namespace, k, v))
                if not names:
                    return []
                sets.append(names)
            sets.sort(key=len)
            names = set(sets[0])
            for s in sets[1:]:
                names &= s
            table = self._objects.get(gr, {})
            return [table[(namespace, n)] for n in sorted(names) if (namespace, n) in table]

    def _label_index(self, gr: GroupResource, key: ObjKey, old: dict[str, Any] | None,
                     new: dict[str, Any] | None) -> None:
        old_labels = ((old or {}).get("metadata") or {}).get("labels") or {}
        new_labels = ((new or {}).get("metadata") or {}).get("labels") or {}
        for k, v in old_labels.items():
            if new_labels.get(k) != v:
                names = self._by_label.get((gr, key[0], k, v))
                if names is not None:
                    names.discard(key[1])
                    if not names:
                        del self._by_label[(gr, key[0], k, v)]
        for k, v in new_labels.items():
            if old_labels.get(k) != v:
                self._by_label.setdefault((gr, key[0], k, v), set()).add(key[1])

    # ------------------------------------------------------------------ writes

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
            if prev is None:
                virtual = self.virtual.get(gr)
                if virtual is not None and not key[0] and virtual.owns(key[1]):
                    prev = virtual.get(key[1])
                    virtual.set_state(key[1], "stored")
                bisect.insort(self._sorted.setdefault(gr, []), self.sort_key(gr, key))
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
                keys = self._sorted[gr]
                i = bisect.bisect_left(keys, self.sort_key(gr, key))
                if i < len(keys) and keys[i] == self.sort_key(gr, key):
                    del keys[i]
            virtual = self.virtual.get(gr)
            if virtual is not None and not key[0] and virtual.owns(key[1]):
                prev = prev or virtual.get(key[1])
                virtual.set_state(key[1], "deleted")
            if prev is not None:
                self._index(gr, key, prev, None)
            rv = self.next_rv()
            gone = dict(obj)
            gone["metadata"] = dict(meta, resourceVersion=str(rv))
            self._record(Event(rv, "DELETED", gr, gone, prev))
            return gone

    def _index(self, gr: GroupResource, key: ObjKey, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        if gr in self._labelled:
            self._label_index(gr, key, old, new)
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
        """The stored object with this uid, if it exists."""
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

    # ------------------------------------------------------------------ the watch log

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

