"""Health per kind against YAML fixtures of real objects (gitops-engine ``pkg/health`` style)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from qonnect_gitops.agent import health
from qonnect_gitops.model.status import HealthReason

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


def test_only_a_component_made_of_jobs_claims_completion() -> None:
    """Issue 30, 7: the lead removes a component fleet-wide when it hears "completed"; an
    honest agent claims it only for Jobs, never for a CronJob or a Deployment beside a Job."""
    labels = {"qonnect.io/app": "bookinfo", "qonnect.io/component": "batch"}
    job = load("job-complete")
    job["metadata"]["labels"] = dict(labels)
    web = load("deployment-healthy")
    web["metadata"]["labels"] = dict(labels)
    cron = {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "nightly", "labels": dict(labels)},
            "spec": {"schedule": "0 3 * * *"}}
    assert health.rollup([(job, health.health_of(job))])[0].completed
    for beside in (web, cron):
        rolled = health.rollup([(o, health.health_of(o)) for o in (job, beside)])
        assert not rolled[0].completed, beside["kind"]
    assert not health.rollup([(cron, health.health_of(cron))])[0].completed


def _pod(labels: dict[str, str], phase: str = "Pending", conditions: list[dict[str, Any]] | None = None,
         ns: str = "shop") -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": ns, "labels": labels},
            "status": {"phase": phase, "conditions": conditions or []}}


UNSCHEDULABLE = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                 "lastTransitionTime": "2026-01-01T00:00:00Z",
                 "message": "0/2 nodes are available: 2 Insufficient cpu."}
T0 = datetime(2026, 1, 1, tzinfo=UTC).timestamp()


def test_selects_match_labels_and_expressions() -> None:
    sel = {"matchLabels": {"app": "a"}, "matchExpressions": [
        {"key": "tier", "operator": "In", "values": ["web"]}, {"key": "canary", "operator": "DoesNotExist"}]}
    assert health.selects(sel, {"app": "a", "tier": "web"})
    assert not health.selects(sel, {"app": "a", "tier": "db"})
    assert not health.selects(sel, {"app": "a", "tier": "web", "canary": "1"})
    assert not health.selects({}, {"app": "a"})  # an empty selector owns no pod


def test_unschedulable_after_the_grace_only() -> None:
    dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "big", "namespace": "shop"},
           "spec": {"selector": {"matchLabels": {"app": "big"}}}}
    pods = [_pod({"app": "big"}, conditions=[UNSCHEDULABLE]), _pod({"app": "other"}, conditions=[UNSCHEDULABLE])]
    assert health.unschedulable(dep, pods, now=T0 + 59, grace=60) is None
    verdict = health.unschedulable(dep, pods, now=T0 + 61, grace=60)
    assert verdict is not None
    (status, message), reason = verdict
    assert (status, reason) == ("Degraded", HealthReason.UNSCHEDULABLE)
    assert message.startswith("1 pod(s) unschedulable for 61s") and "Insufficient cpu" in message
    # The same pod in another namespace, or one that got scheduled, is not its pod / not stuck.
    assert health.unschedulable(dep, [_pod({"app": "big"}, conditions=[UNSCHEDULABLE], ns="x")], T0 + 61, 60) is None
    assert health.unschedulable(dep, [_pod({"app": "big"}, phase="Running", conditions=[UNSCHEDULABLE])],
                                T0 + 61, 60) is None


def test_service_endpoints_hosted_or_caller_only() -> None:
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "shop"},
           "spec": {"selector": {"app": "web"}}}
    backend = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "shop"},
               "spec": {"template": {"metadata": {"labels": {"app": "web", "v": "1"}}}}}
    ready = _pod({"app": "web"}, "Running", [{"type": "Ready", "status": "True"}])
    not_ready = _pod({"app": "web"}, "Running", [{"type": "Ready", "status": "False"}])
    assert health.service_endpoints(svc, ("Healthy", ""), [backend], [ready]) is None
    assert health.service_endpoints(svc, ("Healthy", ""), [backend], [not_ready]) == (
        ("Progressing", "no ready pod matches the selector: the Service has no endpoints"),
        HealthReason.NO_READY_ENDPOINTS)
    published = {**svc, "spec": {**svc["spec"], "publishNotReadyAddresses": True}}
    assert health.service_endpoints(published, ("Healthy", ""), [backend], [not_ready]) is None
    verdict = health.service_endpoints(svc, ("Healthy", ""), [], [])
    assert verdict is not None and verdict[0][0] == "Healthy" and verdict[1] == HealthReason.CALLER_ONLY
    elsewhere = {**backend, "metadata": {"name": "web", "namespace": "other"}}
    assert health.service_endpoints(svc, ("Healthy", ""), [elsewhere], [])[1] == HealthReason.CALLER_ONLY
    no_selector = {**svc, "spec": {}}
    assert health.service_endpoints(no_selector, ("Healthy", ""), [backend], []) is None


def test_rollup_carries_the_reason_of_the_worst_object() -> None:
    labels = {"qonnect.io/app": "shop", "qonnect.io/component": "big"}
    dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "big", "namespace": "shop",
                                                                        "labels": labels}, "spec": {"replicas": 1}}
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "big", "namespace": "shop", "labels": labels}}
    reasons = {("apps", "v1", "Deployment", "shop", "big"): HealthReason.UNSCHEDULABLE}
    [c] = health.rollup([(svc, ("Healthy", "")), (dep, ("Degraded", "1 pod(s) unschedulable"))], reasons)
    assert (c.status, c.reason) == ("Degraded", HealthReason.UNSCHEDULABLE)
    caller = {("", "v1", "Service", "shop", "big"): HealthReason.CALLER_ONLY}
    [only] = health.rollup([(svc, ("Healthy", "caller-only"))], caller)
    assert (only.status, only.reason, only.message) == ("Healthy", HealthReason.CALLER_ONLY, "Service big: caller-only")


def test_the_unschedulable_reason_outlives_the_progress_deadline() -> None:
    """After progressDeadlineSeconds the Deployment is Degraded on its own; the pods still say why."""
    dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "big", "namespace": "shop"},
           "spec": {"selector": {"matchLabels": {"app": "big"}}},
           "status": {"conditions": [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}]}}
    pods = [_pod({"app": "big"}, conditions=[UNSCHEDULABLE])]
    deadline = ("Degraded", "deployment exceeded its progress deadline")
    verdict = health.pod_verdict(dep, deadline, [], pods, now=T0 + 700, grace=120)
    assert verdict is not None and verdict[0][0] == "Degraded" and verdict[1] == HealthReason.UNSCHEDULABLE
    # Healthy workloads, missing ones (no status) and kinds without pods are not looked at.
    assert not health.needs_pods(dep, ("Healthy", ""))
    assert not health.needs_pods({**dep, "status": None}, ("Degraded", "object is missing"))
    assert not health.needs_pods({"apiVersion": "v1", "kind": "ConfigMap"}, ("Healthy", ""))


def test_pod_index_narrows_to_pods_with_a_selector_pair() -> None:
    web, db = _pod({"app": "web", "tier": "f"}), _pod({"app": "db", "tier": "b"})
    index = health.PodIndex([web, db])
    svc = {"apiVersion": "v1", "kind": "Service", "spec": {"selector": {"app": "web", "tier": "f"}}}
    dep = {"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"selector": {"matchLabels": {"app": "db"}}}}
    by_expression = {"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"selector": {"matchExpressions": [
        {"key": "app", "operator": "Exists"}]}}}
    assert index.candidates(svc) == [web]
    assert index.candidates(dep) == [db]
    assert index.candidates(by_expression) == [web, db]  # nothing to narrow by: every pod
    assert index.candidates({**svc, "spec": {"selector": {"app": "none"}}}) == []
