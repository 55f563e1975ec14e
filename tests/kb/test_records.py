"""Report records: the JSON the full dump stores and the MessagePack the Raft log carries."""

from __future__ import annotations

import pickle
from datetime import UTC, datetime
from typing import Any

import pytest

from qonnect_gitops.kb.records import (
    AppliedRecord,
    ComponentRecord,
    LatencyRecord,
    NodeRecord,
    RefusalRecord,
    ReportEntry,
    ReportRecord,
    ReportVerdict,
    SyncRecord,
    TrafficRecord,
    encode_entry,
    pack_entries,
    unpack_entries,
)
from qonnect_gitops.model.report import AgentReport


def _report(variant: int) -> dict[str, Any]:
    """Reports that cover every field and the formatting corners of quantities and times."""
    second = datetime(2026, 3, 1, 12, 0, variant % 60, 0 if variant % 2 else 250_000 * variant % 1_000_000,
                      tzinfo=UTC)
    body: dict[str, Any] = {
        "cluster": f"edge-{variant}",
        "agentTime": second.isoformat().replace("+00:00", "Z"),
        "sync": {"state": "Ready", "reason": "ApplySucceeded", "message": "applied" * (variant % 2)},
        "nodes": [
            {"name": f"n{i}", "arch": "arm64" if i % 2 else "amd64", "ready": bool(i % 3),
             "allocatableCpu": ["4", "3500m", "1m", 2.5][i % 4],
             "allocatableMemory": ["8Gi", "1000", 123456789, "1.5Gi"][i % 4],
             "freeCpu": ["1", "250m", "1m", "2"][i % 4],
             "freeMemory": ["512Mi", "999", 1, "1Gi"][i % 4]}
            for i in range(variant % 5)
        ],
        "components": [
            {"component": f"shop/c{i}", "healthy": bool(i % 2), "readyReplicas": i,
             "desiredReplicas": i + 1, "completed": i == 3, "message": f"m{i}" if i else "",
             **({"reason": "Unschedulable"} if i == 1 else {})}
            for i in range(variant % 4)
        ],
        "latencies": [{"to": f"r{i}", "ms": [12.5, 0, 600000, 1e-3][i % 4]} for i in range(variant % 3)],
        "traffic": [{"component": "shop/c0", "region": f"r{i}", "rps": [40, 0.5, 1e9][i % 3]}
                    for i in range(variant % 3)],
    }
    if variant % 3 == 0:
        body["applied"] = {"commit": "a" * 40, "generation": variant}
        body["attempted"] = "b" * 7
        body["refusals"] = [{"reason": "EmptyDesiredSet", "message": "empty", "commit": "c" * 40},
                            {"reason": "PruneLimitExceeded"}]
    if variant % 4 == 0:
        body["clusterApi"] = [{"name": "pool-1", "namespace": "capi", "phase": "Provisioned",
                               "controlPlaneReady": True, "kubeconfig": True}]
    return body


@pytest.mark.parametrize("variant", range(12))
def test_to_json_is_what_pydantic_writes(variant: int) -> None:
    record = ReportRecord.from_report(AgentReport.model_validate(_report(variant)))
    assert record.to_json() == record.to_report().model_dump(mode="json", by_alias=True)
    # And it reads back to the same record (the dump's round trip).
    assert ReportRecord.from_json(record.to_json()) == record


# ``[ReportEntry]`` as a lead pickled it into the Raft log before batches were packed as
# MessagePack (records were dataclasses then, pickled as constructor arguments): written
# by that code, so a journal it left still replays.
_PICKLED_BY_DATACLASS_RECORDS = bytes.fromhex(
    "800495ca010000000000005d948c19716f6e6e6563745f6769746f70732e6b622e7265636f726473948c0b5265706f72"
    "74456e747279949394288c06656467652d319447400400000000000068018c0c5265706f72745265636f7264949394"
    "286804473ff800000000000068018c0a53796e635265636f72649493948c055265616479948c0e4170706c79537563"
    "636565646564948c016d948794529468018c0d4170706c6965645265636f72649493948c0761616161616161944b02"
    "869452944e68018c0d5265667573616c5265636f72649493948c0f456d70747944657369726564536574948c05656d"
    "707479944e87945294859468018c0f436f6d706f6e656e745265636f7264949394288c0873686f702f77656294884b"
    "014b02898c00948c0d556e7363686564756c61626c659474945294859468018c0a4e6f64655265636f726494939428"
    "8c026e31948c05616d64363494884da00f8a0500000000024dc4098a05000000800174945294859468018c0d4c6174"
    "656e63795265636f72649493948c0265759447402900000000000086945294859468018c0d54726166666963526563"
    "6f7264949394681c682b474044000000000000879452948594297494529447bfd000000000000074945294612e")


def test_log_pickles_round_trip_and_old_pickles_still_load() -> None:
    record = ReportRecord.from_report(AgentReport.model_validate(_report(8)))
    entry = ReportEntry(record.cluster, 1.5, record, -0.25)
    verdict = ReportVerdict(True, 3, ("shop/c1",), None)
    for value in (entry, verdict, [entry, entry]):
        assert pickle.loads(pickle.dumps(value)) == value
    old = pickle.loads(_PICKLED_BY_DATACLASS_RECORDS)
    assert old == [ReportEntry("edge-1", 2.5, ReportRecord(
        "edge-1", 1.5, SyncRecord("Ready", "ApplySucceeded", "m"), AppliedRecord("a" * 7, 2), None,
        (RefusalRecord("EmptyDesiredSet", "empty", None),),
        (ComponentRecord("shop/web", True, 1, 2, False, "", "Unschedulable"),),
        (NodeRecord("n1", "amd64", True, 4000, 8 * 2**30, 2500, 6 * 2**30),),
        (LatencyRecord("eu", 12.5),), (TrafficRecord("shop/web", "eu", 40.0),)), -0.25)]


@pytest.mark.parametrize("count", [0, 1, 15, 16, 200, 70_000])
def test_packed_batches_round_trip(count: int) -> None:
    """What a Raft entry carries: every field back, Cluster API statuses included, at
    every size of MessagePack array header."""
    entries = [ReportEntry(f"edge-{i}", 1000.0 + i,
                           ReportRecord.from_report(AgentReport.model_validate(_report(i % 12))), i / 8)
               for i in range(min(count, 200))]
    entries = (entries * (count // max(1, len(entries)) + 1))[:count]
    assert unpack_entries(pack_entries([encode_entry(e) for e in entries])) == entries


def test_packed_batch_of_garbage_is_refused() -> None:
    with pytest.raises(ValueError):
        unpack_entries(b"\x91\xc1")
