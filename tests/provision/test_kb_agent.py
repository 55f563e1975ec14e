"""Pool clusters in the Knowledge Base (reports accepted, snapshot, survive a dump), what a
management cluster's agent says of Cluster API clusters, and the pool file's errors."""

from __future__ import annotations

from typing import Any

import pytest

from qonnect_gitops.agent.capi import cluster_health
from qonnect_gitops.agent.health import health_of
from qonnect_gitops.kb import KnowledgeBase
from qonnect_gitops.model import GoalsError, load_goals
from qonnect_gitops.model.report import AgentReport
from tests.kb.test_kb import T0, at, entry, kb_with_goals
from tests.lead.harness import report
from tests.provision.fleet import POOL, goals_files

FILE = "clusterPools/burst.yaml"
DYNAMIC = {"burst-1": {"pool": "burst", "phase": "provisioning", "nodes": 2, "tier": "cloud",
                       "region": "eu-central"}}


def test_a_pool_cluster_may_report_once_recorded_and_is_forgotten_when_removed() -> None:
    kb = kb_with_goals()
    [refused] = kb.apply_reports([entry("burst-1", T0 + 1)])
    assert not refused.stored and refused.refused == "undeclared"
    assert kb.apply_dynamic(DYNAMIC, T0 + 2) and not kb.apply_dynamic(DYNAMIC, T0 + 3)
    assert "burst-1 provisioning" in kb.decisions[-1]["summary"]
    # Not in the planner's snapshot until its agent reported (it is not a member yet).
    assert "burst-1" not in kb.snapshot(at(T0 + 3)).clusters
    [stored] = kb.apply_reports([entry("burst-1", T0 + 4, agent_time=T0 + 4)])
    assert stored.stored
    assert kb.snapshot(at(T0 + 5)).clusters["burst-1"].heartbeat_age_seconds == 1.0
    row = next(r for r in kb.cluster_rows(T0 + 5) if r["name"] == "burst-1")
    assert row["dynamic"]["phase"] == "provisioning" and row["tier"] == "cloud"
    copy = KnowledgeBase.from_dict(kb.to_dict())
    assert copy.dynamic == kb.dynamic
    assert kb.apply_dynamic({}, T0 + 6) and "burst-1" not in kb.reports
    assert "burst-1 removed" in kb.decisions[-1]["summary"]


def test_cluster_api_statuses_travel_from_the_management_report_to_the_snapshot() -> None:
    kb = kb_with_goals()
    body = report("edge-1", agent_time=T0)
    body["clusterApi"] = [{"name": "burst-1", "namespace": "qonnect-pools", "phase": "Failed",
                           "controlPlaneReady": False, "kubeconfig": False, "message": "no quota"}]
    kb.apply_reports([entry("edge-1", T0, body=body)])
    (status,) = kb.snapshot(at(T0 + 1)).cluster_api["edge-1"]
    assert (status.phase, status.message, status.ready) == ("Failed", "no quota", False)
    assert KnowledgeBase.from_dict(kb.to_dict()).snapshot(at(T0 + 1)).cluster_api == \
        kb.snapshot(at(T0 + 1)).cluster_api
    body["clusterApi"].append(dict(body["clusterApi"][0]))
    with pytest.raises(ValueError, match="duplicate"):
        AgentReport.model_validate(body)


def cluster(phase: str, available: str = "False", message: str = "") -> dict[str, Any]:
    return {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": "burst-1", "namespace": "qonnect-pools"},
            "status": {"phase": phase, "conditions": [
                {"type": "Available", "status": available, "reason": "r", "message": message}]}}


def test_a_cluster_object_is_healthy_when_provisioned_and_degraded_at_once_when_failed() -> None:
    assert cluster_health(cluster("Provisioned", "True"))[0] == "Healthy"
    assert cluster_health(cluster("Provisioning"))[0] == "Progressing"
    status, message = health_of(cluster("Failed", message="no capacity"))
    assert status == "Degraded" and "no capacity" in message


@pytest.mark.parametrize(("old", "new", "where"), [
    (b"namespace: qonnect-pools", b"namespace: kube-system", f"{FILE}:8:14: spec.namespace"),
    (b"managementCluster: cloud-1", b"managementCluster: cloud-9", f"{FILE}:7:22: spec.managementCluster"),
    (b"name: burst", b"name: other", f"{FILE}:5:9: metadata.name"),
    (b"region: eu-central", b"region: mars", f"{FILE}:21:11: spec.region"),
    (b"lingerSeconds: 20", b"lingerSeconds: 20\n  colour: blue", f"{FILE}:32:3: spec.colour"),
    (b"maxNodesPerCluster: 6", b"maxNodesPerCluster: 6, minNodesPerCluster: 9",
     f"{FILE}:7:3: spec: limits.minNodesPerCluster is above"),
])
def test_a_broken_pool_file_is_reported_with_file_line_and_field(old: bytes, new: bytes, where: str) -> None:
    assert POOL.count(old) == 1
    with pytest.raises(GoalsError) as exc:
        load_goals(goals_files(12, POOL.replace(old, new)))
    assert any(str(p).startswith(where) for p in exc.value.problems), [str(p) for p in exc.value.problems]


def test_the_pool_schema_is_exported() -> None:
    from qonnect_gitops.model.schema import combined_schema, schema_for
    assert schema_for("ClusterPool")["properties"]["kind"]["const"] == "ClusterPool"
    assert "ClusterPool" in combined_schema()["$defs"]


def test_the_leader_issues_agent_tokens_only_to_pool_clusters_and_they_end_with_them() -> None:
    kb = kb_with_goals()
    assert not kb.apply_pool_token("burst-1", "ab" * 32, T0)  # not a pool cluster (yet)
    kb.apply_dynamic(DYNAMIC, T0 + 1)
    assert kb.apply_pool_token("burst-1", "ab" * 32, T0 + 2)
    assert kb.pool_token_owner("ab" * 32) == "burst-1" and kb.pool_token_owner("cd" * 32) is None
    assert KnowledgeBase.from_dict(kb.to_dict()).pool_token_owner("ab" * 32) == "burst-1"
    kb.apply_pool_token("burst-1", "cd" * 32, T0 + 3)  # asked again: the old one is gone
    assert kb.pool_token_owner("ab" * 32) is None
    kb.apply_dynamic({}, T0 + 4)
    assert kb.pool_token_owner("cd" * 32) is None
