"""Health per kind against YAML fixtures of real objects (gitops-engine ``pkg/health`` style)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from qonnect_gitops.agent import health

DATA = Path(__file__).parent / "testdata"


def load(name: str) -> dict:
    return yaml.safe_load((DATA / f"{name}.yaml").read_text())


CASES = [
    ("deployment-healthy", "Healthy", "3 of 3 replicas available"),
    ("deployment-old-generation", "Progressing", "observe generation 4"),
    ("deployment-rolling", "Progressing", "1 of 3 replicas updated"),
    ("deployment-deadline", "Degraded", "progress deadline"),
    ("deployment-deadline-old-generation", "Progressing", "observe generation 6"),
    ("deployment-unavailable", "Progressing", "1 of 2 updated replicas available"),
    ("deployment-no-status", "Progressing", "waiting for the controller"),
    ("statefulset-healthy", "Healthy", "3 of 3 replicas ready"),
    ("statefulset-rolling", "Progressing", "1 of 3 replicas updated"),
    ("statefulset-not-ready", "Progressing", "1 of 3 replicas ready"),
    ("daemonset-healthy", "Healthy", "4 of 4 pods available"),
    ("daemonset-rolling", "Progressing", "2 of 4 pods updated"),
    ("job-complete", "Healthy", "completed"),
    ("job-failed", "Degraded", "BackoffLimitExceeded"),
    ("job-running", "Progressing", "1 active"),
    ("service-clusterip", "Healthy", ""),
    ("service-lb-pending", "Progressing", "load balancer"),
    ("service-lb-ready", "Healthy", "203.0.113.10"),
    ("pvc-bound", "Healthy", "bound"),
    ("pvc-pending", "Progressing", "waiting"),
    ("pvc-lost", "Degraded", "lost"),
]


@pytest.mark.parametrize(("fixture", "status", "fragment"), CASES)
def test_fixture(fixture: str, status: str, fragment: str) -> None:
    got = health.health_of(load(fixture))
    assert got[0] == status, got
    assert fragment in got[1]


def test_every_fixture_is_covered() -> None:
    assert {p.stem for p in DATA.glob("*.yaml")} == {c[0] for c in CASES}


def test_missing_object_and_unknown_kind() -> None:
    assert health.health_of(None)[0] == "Degraded"
    assert health.health_of({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}) == ("Healthy", "")


def test_pvc_without_phase_is_unknown_and_not_ready() -> None:
    pvc = load("pvc-pending")
    del pvc["status"]
    assert health.persistentvolumeclaim(pvc)[0] == "Unknown"
    rolled = health.rollup([({**pvc, "metadata": {**pvc["metadata"], "labels": {
        "qonnect.io/app": "bookinfo", "qonnect.io/component": "mongodb"}}}, health.health_of(pvc))])
    assert rolled[0].status == "Unknown"


def test_rollup_per_component() -> None:
    ok = load("deployment-healthy")
    svc = load("service-lb-pending")
    svc["metadata"]["labels"] = {"qonnect.io/app": "bookinfo", "qonnect.io/component": "reviews"}
    job = load("job-complete")
    job["metadata"]["labels"] = {"qonnect.io/app": "bookinfo", "qonnect.io/component": "migrate"}
    unlabelled = load("deployment-unavailable")
    out = health.rollup([(o, health.health_of(o)) for o in (ok, svc, job, unlabelled)])
    by = {c.component: c for c in out}
    assert set(by) == {"bookinfo/reviews", "bookinfo/migrate"}
    assert by["bookinfo/reviews"].status == "Progressing" and "gateway" in by["bookinfo/reviews"].message
    assert (by["bookinfo/reviews"].ready, by["bookinfo/reviews"].desired) == (3, 3)
    assert by["bookinfo/migrate"].completed and by["bookinfo/migrate"].status == "Healthy"
