"""A report body straight to its ``ReportRecord``, for the reports agents send every day.

The careful way (``lead.http.parse_report``: pydantic's ``AgentReport``, then
``ReportRecord.from_report``) costs about 80 us a report on the HTTP thread. Here
msgspec decodes the JSON in C into typed structs that carry the same limits
(unknown fields refused, strict types, lengths, patterns, number ranges, list
lengths), the few rules a struct cannot say (enumerations, quantities, free within
allocatable, unique keys, an aware RFC 3339 time) are checked in Python, and the
record is built from the structs.

``record_of`` only ever accepts: every body it does not take whole, for whatever
reason, returns None and goes the careful way, which accepts it or words the
refusal (HTTP 400 naming the field) exactly as before. It is stricter than the
careful way where that was simpler (an integer written ``2.0``, a boolean written
``"true"``, a name ending in a newline, a time without ``T`` or ``Z``/offset, any
Cluster API status): those reports take the careful way too. That it never
accepts what the careful way refuses, and that what it accepts becomes the same
record, is checked by ``tests/lead/test_report_fast.py`` (a property test over
generated and mutated bodies).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any

import msgspec

from qonnect_gitops.kb.records import (
    AppliedRecord,
    ComponentRecord,
    LatencyRecord,
    NodeRecord,
    RefusalRecord,
    ReportRecord,
    SyncRecord,
    TrafficRecord,
)
from qonnect_gitops.logs import redact
from qonnect_gitops.model.base import DNS_LABEL_CHARS
from qonnect_gitops.model.report import (
    COMMIT_CHARS,
    COMPONENT_CHARS,
    MAX_COMPONENTS,
    MAX_GENERATION,
    MAX_LATENCIES,
    MAX_LATENCY_MS,
    MAX_NODES,
    MAX_REFUSALS,
    MAX_REPLICAS,
    MAX_RPS,
    MAX_TRAFFIC,
    node_bytes,
    node_millicores,
)
from qonnect_gitops.model.status import MAX_MESSAGE, REASON_CHARS, HealthReason, RefusalReason, SyncState

# The careful models' patterns, anchored with \Z: Python's ``$`` also matches before a
# final newline, so these refuse a little more (and the careful way then decides).
_Name = Annotated[str, msgspec.Meta(max_length=63, pattern=rf"^{DNS_LABEL_CHARS}\Z")]
_Commit = Annotated[str, msgspec.Meta(pattern=rf"^{COMMIT_CHARS}\Z")]
_Component = Annotated[str, msgspec.Meta(pattern=rf"^{COMPONENT_CHARS}\Z")]
_Reason = Annotated[str, msgspec.Meta(pattern=rf"^{REASON_CHARS}\Z")]
_Message = Annotated[str, msgspec.Meta(max_length=MAX_MESSAGE)]
_Replicas = Annotated[int, msgspec.Meta(ge=0, le=MAX_REPLICAS)]
# A quantity as JSON may write it; checked by the careful model's own validator.
_Quantity = str | int | float

_SYNC_STATES = frozenset(s.value for s in SyncState)
_REFUSAL_REASONS = frozenset(r.value for r in RefusalReason)
_HEALTH_REASONS = frozenset(r.value for r in HealthReason)
_ARCHES = frozenset(("amd64", "arm64"))
# RFC 3339 with a 'T', at most microseconds and a zone: what agents write; anything else
# (pydantic accepts more) takes the careful way.
_AWARE_TIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,6})?"
                         r"(Z|[+-][0-9]{2}:[0-9]{2})")
_cpu_check = node_millicores
_memory_check = node_bytes
# Accepted quantities by their JSON type and value ("4" and 4 both mean 4 cores, but are
# kept apart): each node carries four and agents send the same few again and again.
# Bounded: a flood of distinct values only misses. Refusals are never kept.
_QUANTITIES_KEPT = 4096
_cpu_seen: dict[tuple[type, _Quantity], int] = {}
_memory_seen: dict[tuple[type, _Quantity], int] = {}


def _units(seen: dict[tuple[type, _Quantity], int], check: Callable[[Any], int], value: _Quantity) -> int:
    """``check(value)``, remembered in ``seen`` once accepted."""
    key = (type(value), value)
    units = seen.get(key)
    if units is None:
        units = check(value)  # ValueError for a refused quantity: never kept
        if len(seen) >= _QUANTITIES_KEPT:
            seen.clear()
        seen[key] = units
    return units
# Agents send the same few messages in every report; redaction is two regex passes.
_redacted = functools.lru_cache(maxsize=4096)(redact)


class _Wire(msgspec.Struct, forbid_unknown_fields=True, rename="camel", frozen=True, gc=False):
    """Base of the wire structs: camelCase names, unknown fields refused."""


class _Sync(_Wire, frozen=True):
    state: str
    reason: _Reason
    message: _Message = ""


class _Refusal(_Wire, frozen=True):
    reason: str
    message: _Message = ""
    commit: _Commit | None = None


class _Applied(_Wire, frozen=True):
    commit: _Commit
    generation: Annotated[int, msgspec.Meta(ge=0, le=MAX_GENERATION)]


class _ComponentHealth(_Wire, frozen=True):
    component: _Component
    healthy: bool
    ready_replicas: _Replicas
    desired_replicas: _Replicas
    completed: bool = False
    message: Annotated[str, msgspec.Meta(max_length=512)] = ""
    reason: str | None = None


class _Node(_Wire, frozen=True):
    name: Annotated[str, msgspec.Meta(min_length=1, max_length=253)]
    allocatable_cpu: _Quantity
    allocatable_memory: _Quantity
    free_cpu: _Quantity
    free_memory: _Quantity
    arch: str = "amd64"
    ready: bool = True


class _Latency(_Wire, frozen=True):
    to: _Name
    ms: Annotated[float, msgspec.Meta(ge=0, le=MAX_LATENCY_MS)]


class _Traffic(_Wire, frozen=True):
    component: _Component
    region: _Name
    rps: Annotated[float, msgspec.Meta(ge=0, le=MAX_RPS)]


class _Report(_Wire, frozen=True):
    cluster: _Name
    agent_time: str
    sync: _Sync
    applied: _Applied | None = None
    attempted: _Commit | None = None
    refusals: Annotated[tuple[_Refusal, ...], msgspec.Meta(max_length=MAX_REFUSALS)] = ()
    components: Annotated[tuple[_ComponentHealth, ...], msgspec.Meta(max_length=MAX_COMPONENTS)] = ()
    nodes: Annotated[tuple[_Node, ...], msgspec.Meta(max_length=MAX_NODES)] = ()
    latencies: Annotated[tuple[_Latency, ...], msgspec.Meta(max_length=MAX_LATENCIES)] = ()
    traffic: Annotated[tuple[_Traffic, ...], msgspec.Meta(max_length=MAX_TRAFFIC)] = ()
    # Any Cluster API status takes the careful way (its model has more rules).
    cluster_api: Annotated[tuple[None, ...], msgspec.Meta(max_length=0)] = ()


_DECODER = msgspec.json.Decoder(_Report)


class _NotFast(Exception):
    """The body is not one this path takes whole: the careful way decides."""


def record_of(body: bytes) -> ReportRecord | None:
    """The record of a report body this path accepts whole (messages redacted, as the
    careful way stores them), or None: then ``parse_report`` decides."""
    try:
        return _record(_DECODER.decode(body))
    except Exception:  # noqa: BLE001 - whatever it is, the careful way decides and words it
        return None


def _record(wire: _Report) -> ReportRecord:
    sync = wire.sync
    if sync.state not in _SYNC_STATES:
        raise _NotFast
    if not _AWARE_TIME.fullmatch(wire.agent_time):
        raise _NotFast
    agent_time = datetime.fromisoformat(wire.agent_time).timestamp()
    refusals = []
    for r in wire.refusals:
        if r.reason not in _REFUSAL_REASONS:
            raise _NotFast
        refusals.append(RefusalRecord(r.reason, _redacted(r.message), r.commit))
    components = []
    for c in wire.components:
        if c.reason is not None and c.reason not in _HEALTH_REASONS:
            raise _NotFast
        components.append(ComponentRecord(c.component, c.healthy, c.ready_replicas, c.desired_replicas,
                                          c.completed, _redacted(c.message), c.reason))
    nodes = []
    for n in wire.nodes:
        if n.arch not in _ARCHES:
            raise _NotFast
        allocatable_cpu = _units(_cpu_seen, _cpu_check, n.allocatable_cpu)
        free_cpu = _units(_cpu_seen, _cpu_check, n.free_cpu)
        allocatable_memory = _units(_memory_seen, _memory_check, n.allocatable_memory)
        free_memory = _units(_memory_seen, _memory_check, n.free_memory)
        if free_cpu > allocatable_cpu or free_memory > allocatable_memory:
            raise _NotFast
        nodes.append(NodeRecord(n.name, n.arch, n.ready, allocatable_cpu, allocatable_memory,
                                free_cpu, free_memory))
    latencies = [LatencyRecord(lat.to, float(lat.ms)) for lat in wire.latencies]
    traffic = [TrafficRecord(t.component, t.region, float(t.rps)) for t in wire.traffic]
    # No two entries of a list may share their key (``AgentReport._unique_keys``).
    if (_repeats([n.name for n in nodes]) or _repeats([c.component for c in components])
            or _repeats([lat.to for lat in latencies])
            or _repeats([(t.component, t.region) for t in traffic])):
        raise _NotFast
    applied = wire.applied
    return ReportRecord(
        wire.cluster, agent_time, SyncRecord(sync.state, sync.reason, _redacted(sync.message)),
        AppliedRecord(applied.commit, applied.generation) if applied is not None else None,
        wire.attempted, tuple(refusals), tuple(components), tuple(nodes), tuple(latencies),
        tuple(traffic), ())


def _repeats(keys: list[Any]) -> bool:
    return len(keys) > 1 and len(set(keys)) != len(keys)
