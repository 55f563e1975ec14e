"""How the lead reads a cluster's report when it judges ``qonnect/placed``."""
from __future__ import annotations

from typing import Any

import pytest

from qonnect_gitops.kb.records import ReportRecord, StoredReport
from qonnect_gitops.lead.review import cluster_progress, unschedulable_components
from tests.lead.harness import report

OLD, NEW = "a" * 40, "b" * 40


def stored(body: dict[str, Any]) -> StoredReport:
    return StoredReport(ReportRecord.from_json(body), received_at=0.0, count=1, skew_seconds=0.0)


def with_refusal(reason: str, commit: str, applied: str = OLD, generation: int = 4) -> dict[str, Any]:
    body = report("fog-1")
    body["applied"] = {"commit": applied, "generation": generation}
    body["refusals"] = [{"reason": reason, "message": "x", "commit": commit}]
    return body


@pytest.mark.parametrize("entry", [stored, lambda body: {"report": body}], ids=["typed", "json"])
def test_a_prune_the_agent_declined_on_the_applied_commit_is_no_failure(entry: Any) -> None:
    # the Namespace left behind when the last component moved away: the commit ran, and
    # the agent repeats the refusal on every pass, also before it fetched the next commit
    generation, healthy, refusals = cluster_progress(entry(with_refusal("ProtectedKind", OLD)))
    assert (generation, healthy, refusals) == (4, True, [])


@pytest.mark.parametrize("entry", [stored, lambda body: {"report": body}], ids=["typed", "json"])
def test_a_refused_newer_commit_counts(entry: Any) -> None:
    _, _, refusals = cluster_progress(entry(with_refusal("DuplicateObject", NEW)))
    assert refusals == ["DuplicateObject"]


def test_a_stale_generation_is_an_old_branch_not_a_failure() -> None:
    assert cluster_progress(stored(with_refusal("StaleGeneration", NEW)))[2] == []


def test_no_report_yet() -> None:
    assert cluster_progress(None) == (0, False, [])


@pytest.mark.parametrize("entry", [stored, lambda body: {"report": body}], ids=["typed", "json"])
def test_components_that_cannot_schedule_are_named(entry: Any) -> None:
    body = with_refusal("ProtectedKind", OLD)
    body["components"] = [
        {"component": "shop/big", "healthy": False, "readyReplicas": 0, "desiredReplicas": 1,
         "message": "Deployment big: 1 pod(s) unschedulable", "reason": "Unschedulable"},
        {"component": "shop/web", "healthy": False, "readyReplicas": 0, "desiredReplicas": 1},
        {"component": "shop/reviews", "healthy": True, "readyReplicas": 0, "desiredReplicas": 0,
         "reason": "CallerOnly"},
    ]
    assert unschedulable_components(entry(body)) == ["shop/big"]
    assert unschedulable_components(None) == []
