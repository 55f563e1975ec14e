"""Report records: the JSON the full dump stores and the pickles the Raft log carries."""

from __future__ import annotations

import pickle
from datetime import UTC, datetime
from typing import Any

import pytest

from qonnect_gitops.kb.records import ReportEntry, ReportRecord, ReportVerdict
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


def test_log_pickles_round_trip_and_old_pickles_still_load() -> None:
    record = ReportRecord.from_report(AgentReport.model_validate(_report(8)))
    entry = ReportEntry(record.cluster, 1.5, record, -0.25)
    verdict = ReportVerdict(True, 3, ("shop/c1",), None)
    for value in (entry, verdict, [entry, entry]):
        assert pickle.loads(pickle.dumps(value)) == value
    # Entries journaled by an older lead were pickled with the dataclass state protocol.
    old_style: list[Any] = [entry, record, record.nodes[0], verdict]
    for value in old_style:
        cls: Any = type(value)
        state = value.__getstate__()
        rebuilt = cls.__new__(cls)
        rebuilt.__setstate__(state)
        assert rebuilt == value
