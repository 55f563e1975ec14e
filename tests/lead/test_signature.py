"""Which reports trigger a cycle: the coarse report signature (pure)."""

from __future__ import annotations

from typing import Any

from qonnect_gitops.kb import ReportRecord
from qonnect_gitops.lead.loop import report_signature
from qonnect_gitops.model.report import AgentReport
from tests.lead.harness import report

ENVELOPES = {"eu-central": [15.0, 20.0, 25.0]}


def body(ready: tuple[bool, ...] = (True, True), free: str = "3", ms: float | None = 10.0,
         latencies: list[dict[str, Any]] | None = None) -> ReportRecord:
    out = report("edge-1")
    out["nodes"] = [{"name": f"n{i}", "ready": r, "allocatableCpu": "4", "allocatableMemory": "8Gi",
                     "freeCpu": free, "freeMemory": "4Gi"} for i, r in enumerate(ready)]
    out["latencies"] = latencies if latencies is not None else (
        [{"to": "eu-central", "ms": ms}] if ms is not None else [])
    return ReportRecord.from_report(AgentReport.model_validate(out))


def sig(**kw: Any) -> tuple[Any, ...]:
    return report_signature(body(**kw), ENVELOPES)


def test_noise_within_a_band_triggers_nothing() -> None:
    assert sig(ms=10.0) == sig(ms=14.9)  # jitter under the lowest envelope
    assert sig(free="3") == sig(free="3100m")  # a little CPU used, same quarter


def test_node_not_ready_capacity_lost_and_envelope_crossed_trigger() -> None:
    base = sig()
    assert sig(ready=(True, False)) != base  # a node NotReady
    assert sig(ready=(True,)) != base  # a node gone
    assert sig(free="1") != base  # capacity lost: free CPU fell by a quarter or more
    assert sig(ms=16.0) != base  # the 15 ms envelope broken
    assert sig(ms=16.0)[3] < sig(ms=30.0)[3]  # more envelopes broken counts higher
    assert sig(ms=None) != base  # no longer measured


def test_unknown_region_and_missing_fields_are_harmless() -> None:
    assert report_signature(body(ready=(), ms=None), ENVELOPES)[:6] == (0, 0, 0, 0, (), ())
    assert report_signature(body(latencies=[{"to": "mars", "ms": 900}]), ENVELOPES)[3] == 0


def test_a_cluster_api_cluster_changing_phase_triggers() -> None:
    """A management cluster's report: a pool cluster turning ready (or failing) is worth a cycle."""
    def with_cluster(phase: str) -> tuple[Any, ...]:
        out = report("edge-1")
        out["clusterApi"] = [{"name": "burst-1", "namespace": "qonnect-pools", "phase": phase,
                              "controlPlaneReady": phase == "Provisioned", "kubeconfig": phase == "Provisioned"}]
        return report_signature(ReportRecord.from_report(AgentReport.model_validate(out)), ENVELOPES)
    assert with_cluster("Provisioning") != with_cluster("Provisioned") != with_cluster("Failed")
    assert with_cluster("Provisioning") == with_cluster("Provisioning")
