"""The comparison behind "apply only what differs"."""

from __future__ import annotations

from qonnect_gitops.agent import diff


def _cm(**meta) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "s", **meta},
            "data": {"k": "v"}}


def test_write_time_noise_and_status_are_ignored() -> None:
    live = _cm(resourceVersion="7", generation=3, uid="u1", creationTimestamp="t",
               managedFields=[{"manager": "qonnect-agent"}])
    live["status"] = {"replicas": 1}
    dry = _cm(resourceVersion="8", generation=4, uid="u1", creationTimestamp="t", managedFields=[])
    dry["status"] = {"replicas": 2}
    assert not diff.differs(dry, live)


def test_real_changes_differ_and_are_named() -> None:
    live = _cm(labels={"a": "1"})
    dry = _cm(labels={"a": "2"})
    dry["data"] = {"k": "w"}
    assert diff.differs(dry, live)
    assert diff.changed_paths(dry, live) == ["data.k", "metadata.labels.a"]
    assert diff.differs(dry, None) and diff.changed_paths(dry, None) == ["<created>"]


def test_managers_losing_fields() -> None:
    before = _cm(managedFields=[
        {"manager": "kubectl", "operation": "Apply", "fieldsV1": {"f:data": {"f:k": {}, "f:x": {}}}},
        {"manager": "helm", "operation": "Update", "fieldsV1": {"f:data": {"f:y": {}}}},
    ])
    after = _cm(managedFields=[
        {"manager": "kubectl", "operation": "Apply", "fieldsV1": {"f:data": {"f:x": {}}}},
        {"manager": "helm", "operation": "Update", "fieldsV1": {"f:data": {"f:y": {}}}},
        {"manager": "qonnect-agent", "operation": "Apply", "fieldsV1": {"f:data": {"f:k": {}}}},
    ])
    assert diff.managers_losing_fields(before, after) == ["kubectl"]
    gone = _cm(managedFields=[{"manager": "qonnect-agent", "operation": "Apply", "fieldsV1": {}}])
    assert diff.managers_losing_fields(before, gone) == ["helm", "kubectl"]
    assert diff.managers_losing_fields(None, after) == []


def test_drift_decisions() -> None:
    from qonnect_gitops.agent import drift
    from qonnect_gitops.agent.sync import ObjectResult

    assert drift.should_apply("heal", "c2", "c2") and drift.should_apply("report", "c2", "c1")
    assert not drift.should_apply("report", "c2", "c2")
    key = ("apps", "v1", "Deployment", "shop", "web")
    results = [ObjectResult(key, "configured", "spec.replicas"), ObjectResult(key, "unchanged")]
    assert drift.corrections(results, "c2", "c2", "c2") == results[:1]
    assert drift.corrections(results, "c3", "c2", "c2") == []  # a new head is a change, not drift
    assert drift.corrections(results, "c2", "c2", None) == []  # a retry after a failed pass is not drift
    found = [ObjectResult(key, "drifted", "spec.replicas")] * 7
    assert drift.drifted(found + results) == found
    assert drift.describe(found).endswith("Deployment.apps/shop/web (spec.replicas); and 2 more")
