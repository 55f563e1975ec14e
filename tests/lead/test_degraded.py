"""A cycle whose planning with measurements fails plans from liveness alone (failover
goes on) and says so; without a fallback the error surfaces."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from qonnect_gitops.gitstore.remote import Mirror
from qonnect_gitops.lead.loop import liveness_only
from qonnect_gitops.lead.reconcile import reconcile_once
from qonnect_gitops.model import Goals, Observed
from qonnect_gitops.model.observed import ObservedCluster, ObservedTraffic
from tests.lead.harness import commit_goals, goals_files

NOW = datetime(2026, 6, 1, tzinfo=UTC)


def broken(goals: Goals) -> Observed:
    raise OverflowError("cannot convert float infinity to integer")


def liveness(goals: Goals) -> Observed:
    return Observed(now=NOW, clusters={"edge-1": ObservedCluster(healthy=False)})


def test_planning_falls_back_to_liveness_and_reports_why(tmp_path: Path) -> None:
    commit_goals(tmp_path / "goals.git", goals_files(["edge-1", "edge-2"], shop=True))
    mirror = Mirror(tmp_path / "mirror.git", str(tmp_path / "goals.git"))
    with pytest.raises(OverflowError):
        reconcile_once(mirror, broken, now=NOW)
    result = reconcile_once(mirror, broken, now=NOW, fallback=liveness)
    assert result.degraded is not None and "OverflowError" in result.degraded
    assert result.written is not None and result.written.plan_commit is not None


def test_liveness_only_keeps_health_and_drops_measurements() -> None:
    observed = Observed(now=NOW, clusters={"edge-1": ObservedCluster(healthy=False, heartbeat_age_seconds=30)},
                        traffic=(ObservedTraffic(component="shop/web", region="eu", rps=5.0),),
                        completed_jobs=("shop/migrate",))
    bare = liveness_only(observed)
    assert bare.clusters["edge-1"] == ObservedCluster(healthy=False, heartbeat_age_seconds=30)
    assert bare.traffic == () and bare.latencies == () and bare.completed_jobs == ("shop/migrate",)
