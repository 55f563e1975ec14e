"""Reports as the Raft log and the Knowledge Base carry them: small typed records.

An ``AgentReport`` (pydantic, validated at the HTTP edge) becomes a ``ReportRecord``
of frozen dataclasses with plain numbers (millicores, bytes, milliseconds) so the
Raft thread never re-parses quantities and no reader looks values up by string
key. ``ReportEntry`` adds what the receiving lead knows: its own receipt time (the
only clock liveness and ordering use) and how far the agent's clock was from it.
The dump of the KB stores records as the report's JSON (``to_json``), so a dump
stays readable across code changes that keep the report format.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import msgspec

from qonnect_gitops.model.pool import ClusterApiStatus
from qonnect_gitops.model.quantity import format_bytes, format_millicores
from qonnect_gitops.model.report import (
    AgentReport,
    AppliedCommit,
    ComponentHealth,
    Latency,
    NodeCapacity,
    Traffic,
)
from qonnect_gitops.model.status import HealthReason, Refusal, SyncStatus


class _Record(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """Base of the records a report travels as: frozen msgspec structs, encoded as
    MessagePack arrays (field values in order, no names) through the Raft log.

    The leader encodes a batch once; every lead (the leader too: pysyncobj applies
    what it logged) decodes it into these structs in C, about 4 us a report where
    unpickling dataclasses took about 30. They pickle as ``cls(*fields)``, so entries
    journaled by a lead that pickled the former dataclass records as constructor
    arguments still load. ``gc=False``: they hold only strings, numbers and other
    records, so they can form no reference cycle and the collector need not track them.
    """


class NodeRecord(_Record, frozen=True):
    """One node: allocatable and free capacity in millicores and bytes."""

    name: str
    arch: str
    ready: bool
    allocatable_cpu: int
    allocatable_memory: int
    free_cpu: int
    free_memory: int


class ComponentRecord(_Record, frozen=True):
    """A component's health on the reporting cluster."""

    component: str
    healthy: bool
    ready_replicas: int
    desired_replicas: int
    completed: bool
    message: str
    reason: str | None = None  # model.status.HealthReason


class LatencyRecord(_Record, frozen=True):
    """Measured latency from the reporting cluster to a cluster or region."""

    to: str
    ms: float


class TrafficRecord(_Record, frozen=True):
    """Requests per second the reporting cluster serves for a component, by region."""

    component: str
    region: str
    rps: float


class SyncRecord(_Record, frozen=True):
    """The agent's sync status (``model.status.SyncStatus``)."""

    state: str
    reason: str
    message: str


class AppliedRecord(_Record, frozen=True):
    """The commit the cluster runs and its plan generation."""

    commit: str
    generation: int


class RefusalRecord(_Record, frozen=True):
    """Something the agent declined to do (``model.status.Refusal``)."""

    reason: str
    message: str
    commit: str | None


class ReportRecord(_Record, frozen=True):
    """What one agent report says, typed. ``agent_time`` is information only."""

    cluster: str
    agent_time: float
    sync: SyncRecord
    applied: AppliedRecord | None
    attempted: str | None
    refusals: tuple[RefusalRecord, ...]
    components: tuple[ComponentRecord, ...]
    nodes: tuple[NodeRecord, ...]
    latencies: tuple[LatencyRecord, ...]
    traffic: tuple[TrafficRecord, ...]
    # Frozen pydantic models: MessagePack carries them as their JSON (``_encode_extra``).
    cluster_api: tuple[ClusterApiStatus, ...] = ()

    @classmethod
    def from_report(cls, report: AgentReport) -> ReportRecord:
        """The record of a validated report (positional arguments: this runs for every
        report on the HTTP thread)."""
        sync, applied = report.sync, report.applied
        return cls(
            report.cluster,
            report.agent_time.timestamp(),
            SyncRecord(sync.state, sync.reason, sync.message),
            AppliedRecord(applied.commit, applied.generation) if applied else None,
            report.attempted,
            tuple([RefusalRecord(r.reason, r.message, r.commit) for r in report.refusals]),
            tuple([ComponentRecord(c.component, c.healthy, c.ready_replicas, c.desired_replicas,
                                   c.completed, c.message, c.reason)
                   for c in report.components]),
            tuple([NodeRecord(n.name, n.arch, n.ready, n.allocatable_cpu, n.allocatable_memory,
                              n.free_cpu, n.free_memory)
                   for n in report.nodes]),
            tuple([LatencyRecord(lat.to, lat.ms) for lat in report.latencies]),
            tuple([TrafficRecord(t.component, t.region, t.rps) for t in report.traffic]),
            report.cluster_api,
        )

    def to_report(self) -> AgentReport:
        """Back to the wire model (for dumps and the API)."""
        return AgentReport(
            cluster=self.cluster,
            agent_time=datetime.fromtimestamp(self.agent_time, tz=UTC),
            applied=AppliedCommit(commit=self.applied.commit, generation=self.applied.generation)
            if self.applied else None,
            attempted=self.attempted,
            sync=SyncStatus.model_validate({"state": self.sync.state, "reason": self.sync.reason,
                                            "message": self.sync.message}),
            refusals=tuple(Refusal.model_validate({"reason": r.reason, "message": r.message,
                                                   "commit": r.commit}) for r in self.refusals),
            components=tuple(
                ComponentHealth(component=c.component, healthy=c.healthy,
                                ready_replicas=c.ready_replicas,
                                desired_replicas=c.desired_replicas, completed=c.completed,
                                message=c.message,
                                reason=HealthReason(c.reason) if c.reason else None)
                for c in self.components
            ),
            nodes=tuple(
                NodeCapacity.model_validate({
                    "name": n.name, "arch": n.arch, "ready": n.ready,
                    "allocatableCpu": f"{n.allocatable_cpu}m", "allocatableMemory": n.allocatable_memory,
                    "freeCpu": f"{n.free_cpu}m", "freeMemory": n.free_memory,
                })
                for n in self.nodes
            ),
            latencies=tuple(Latency(to=lat.to, ms=lat.ms) for lat in self.latencies),
            traffic=tuple(Traffic(component=t.component, region=t.region, rps=t.rps)
                          for t in self.traffic),
            cluster_api=self.cluster_api,
        )

    def sync_json(self) -> dict[str, Any]:
        return {"state": self.sync.state, "reason": self.sync.reason, "message": self.sync.message}

    def applied_json(self) -> dict[str, Any] | None:
        if self.applied is None:
            return None
        return {"commit": self.applied.commit, "generation": self.applied.generation}

    def refusals_json(self) -> list[dict[str, Any]]:
        return [{"reason": r.reason, "message": r.message, "commit": r.commit} for r in self.refusals]

    def to_json(self) -> dict[str, Any]:
        """The report's JSON (camelCase), as an agent would send it: what
        ``to_report().model_dump(mode="json", by_alias=True)`` gives, built directly.

        The Raft full dump holds one per cluster and is written on the Raft thread: through
        pydantic a fleet of 10,000 took 3.4 s, long enough to cost leadership."""
        return {
            "cluster": self.cluster,
            "agentTime": _iso_z(self.agent_time),
            "applied": self.applied_json(),
            "attempted": self.attempted,
            "sync": self.sync_json(),
            "refusals": self.refusals_json(),
            "components": [_component_json(c) for c in self.components],
            "nodes": [{"name": n.name, "arch": n.arch, "ready": n.ready,
                       "allocatableCpu": _millicores_text(n.allocatable_cpu),
                       "allocatableMemory": _bytes_text(n.allocatable_memory),
                       "freeCpu": _millicores_text(n.free_cpu),
                       "freeMemory": _bytes_text(n.free_memory)} for n in self.nodes],
            "latencies": [{"to": lat.to, "ms": lat.ms} for lat in self.latencies],
            "traffic": [{"component": t.component, "region": t.region, "rps": t.rps}
                        for t in self.traffic],
            "clusterApi": [c.model_dump(mode="json", by_alias=True) for c in self.cluster_api],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ReportRecord:
        """Rebuild from ``to_json`` output (validated again: a dump is input too)."""
        return cls.from_report(AgentReport.model_validate(data))


_EPOCH = datetime(1970, 1, 1)
# The full dump formats every node's quantities on the Raft thread (format_bytes was a
# third of it at 3,000 clusters); nodes report the same few values again and again.
_bytes_text = functools.lru_cache(maxsize=4096)(format_bytes)
_millicores_text = functools.lru_cache(maxsize=4096)(format_millicores)


def _iso_z(ts: float) -> str:
    """Unix seconds as pydantic writes an aware UTC datetime (``...Z``); naive arithmetic
    from the epoch is ten times cheaper than ``fromtimestamp(ts, tz=UTC)``."""
    return (_EPOCH + timedelta(seconds=ts)).isoformat() + "Z"


def _component_json(c: ComponentRecord) -> dict[str, Any]:
    out: dict[str, Any] = {"component": c.component, "healthy": c.healthy,
                           "readyReplicas": c.ready_replicas, "desiredReplicas": c.desired_replicas,
                           "completed": c.completed, "message": c.message}
    if c.reason is not None:  # left out when None, as ComponentHealth serialises it
        out["reason"] = c.reason
    return out


class ReportEntry(_Record, frozen=True):
    """One report as it travels through the Raft log."""

    cluster: str
    received_at: float  # the receiving lead's clock: liveness and ordering use only this
    record: ReportRecord
    skew_seconds: float = 0.0  # agent clock minus lead clock at receipt (information)


def _encode_extra(value: Any) -> Any:
    """What MessagePack cannot carry natively: the Cluster API statuses, as their JSON."""
    if isinstance(value, ClusterApiStatus):
        return value.model_dump(mode="json", by_alias=True)
    raise NotImplementedError(f"cannot encode {type(value).__name__}")


def _decode_extra(kind: type, value: Any) -> Any:
    """``_encode_extra`` undone (validated again, like every input of the KB)."""
    if kind is ClusterApiStatus:
        return ClusterApiStatus.model_validate(value)
    raise NotImplementedError(f"cannot decode {kind.__name__}")


_ENTRY_ENCODER = msgspec.msgpack.Encoder(enc_hook=_encode_extra)
_ENTRIES_DECODER = msgspec.msgpack.Decoder(list[ReportEntry], dec_hook=_decode_extra)


def encode_entry(entry: ReportEntry) -> bytes:
    """One entry as MessagePack (an array of its field values, records nested alike)."""
    return _ENTRY_ENCODER.encode(entry)


def pack_entries(encoded: Sequence[bytes]) -> bytes:
    """A batch of ``encode_entry`` outputs as one MessagePack array (what a Raft entry
    carries): the array's header, then the entries as they are, without re-encoding."""
    count = len(encoded)
    if count < 16:
        header = bytes((0x90 | count,))
    elif count < 1 << 16:
        header = b"\xdc" + count.to_bytes(2, "big")
    else:
        header = b"\xdd" + count.to_bytes(4, "big")
    return header + b"".join(encoded)


def unpack_entries(blob: bytes) -> list[ReportEntry]:
    """The entries of a ``pack_entries`` batch; ``msgspec.DecodeError`` (a ``ValueError``)
    for bytes that are not one."""
    return _ENTRIES_DECODER.decode(blob)


RefusedReport = Literal["superseded", "undeclared"]
"""Why the KB did not store a report: a report received later is already stored, or
the cluster left the goals between the HTTP check and the commit."""


@dataclass(frozen=True, slots=True)
class ReportVerdict:
    """What the KB did with one report entry (returned to the lead that proposed it)."""

    stored: bool
    generation: int  # the plan generation at which the cluster's desired state last changed
    ignored: tuple[str, ...] = ()  # components whose claims were not the cluster's to make
    refused: RefusedReport | None = None


@dataclass(frozen=True, slots=True)
class StoredReport:
    """The latest report the KB holds for a cluster."""

    record: ReportRecord
    received_at: float
    count: int
    skew_seconds: float


@dataclass(frozen=True, slots=True)
class WorkloadRecord:
    """What the KB knows of a declared component's workload (from the goals)."""

    kind: str
    digest: str  # of the workload object: a changed Job is a new Job
    deadline: float = 600.0  # progress deadline: placed but not ready after this long is not running

    @property
    def completable(self) -> bool:
        """Whether a report may say it ran to completion: only a Job ends. A CronJob runs on
        schedule for as long as it is declared, so a claim that one completed (which would
        take it off every cluster) is never taken."""
        return self.kind == "Job"


@dataclass(frozen=True, slots=True)
class CompletedJob:
    """A Job that ran to completion on a cluster the plan placed it on."""

    cluster: str
    at: float
    digest: str
