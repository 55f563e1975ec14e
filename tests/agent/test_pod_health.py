"""Health that needs the pods beside an object, against a sim with nodes, a scheduler and
kubelets: workloads whose pods can never schedule, Services with and without backends here.
The official kubernetes client reads what the sim's scheduler wrote."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, config

from qonnect_gitops.model.status import HealthReason
from qonnect_gitops.sim import SimCluster
from tests.agent.conftest import CLUSTER, LABELS, Branch, deployment, namespace
from tests.sim.kubelet_helpers import make_sim, shape, wait_for


@pytest.fixture
def sim() -> Iterator[SimCluster]:
    """Two small amd64 nodes: nothing bigger than 2 CPUs, no arm64."""
    with make_sim(shape(2, "2", "4Gi"), name=CLUSTER, namespace_delay=0.0) as cluster:
        yield cluster


def service(name: str, selector: dict[str, str], component: str, annotations: dict[str, str] | None = None
            ) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "shop", "labels": {**LABELS, "qonnect.io/component": component}}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta,
            "spec": {"selector": selector, "ports": [{"port": 80, "targetPort": 80}]}}


def with_pod_spec(dep: dict[str, Any], **pod_spec: Any) -> dict[str, Any]:
    dep["spec"]["template"]["spec"].update(pod_spec)
    return dep


def scheduler_refused(core: client.CoreV1Api, app: str) -> bool:
    pods = core.list_namespaced_pod("shop", label_selector=f"app={app}").items
    return bool(pods) and all(any(c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
                                  for c in p.status.conditions or []) for p in pods)


def components(agent: Any, result: Any) -> dict[str, Any]:
    return {c.component: c for c in agent.build_report(result).components}


def test_pods_that_can_never_schedule_make_the_component_unschedulable(make_agent, branch: Branch, sim: SimCluster):
    big = deployment("big", replicas=1)
    big["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "8"
    arm = with_pod_spec(deployment("arm", replicas=1), nodeSelector={"kubernetes.io/arch": "arm64"})
    branch.publish([namespace("shop"), big, arm, deployment("web", replicas=1)])
    core = client.CoreV1Api(config.new_client_from_config_dict(sim.kubeconfig()))

    # Within the grace an unschedulable pod is only progress (an autoscaler may add a node).
    patient = make_agent(unschedulable_grace=3600.0)
    first = patient.sync()
    wait_for(lambda: scheduler_refused(core, "big") and scheduler_refused(core, "arm"), what="scheduler verdicts")
    waited = patient.sync(full=True, wait=3.0)
    seen = components(patient, waited)
    assert first.state in ("Reconciling", "Ready")
    assert not seen["shop/big"].healthy and seen["shop/big"].reason is None
    assert seen["shop/web"].healthy, seen["shop/web"].message

    # Past the grace: Degraded with a machine reason, the sync stalls on health.
    agent = make_agent(unschedulable_grace=0.0)
    result = agent.sync(full=True)
    seen = components(agent, result)
    for name in ("shop/big", "shop/arm"):
        assert not seen[name].healthy
        assert seen[name].reason == HealthReason.UNSCHEDULABLE, seen[name]
    assert "Insufficient cpu" in seen["shop/big"].message
    assert seen["shop/web"].healthy and seen["shop/web"].reason is None
    assert result.state == "Stalled" and result.reason == "HealthCheckFailed", result.message
    # The reason survives the wire model the lead validates.
    wire = agent.build_report(result).model_dump(mode="json", by_alias=True)
    reasons = {c["component"]: c.get("reason", "absent") for c in wire["components"]}
    assert reasons["shop/arm"] == "Unschedulable"
    assert reasons["shop/web"] == "absent"  # a lead from before the field refuses even a null one


def test_service_endpoints_where_backends_run_and_caller_only(make_agent, branch: Branch, sim: SimCluster):
    stuck = with_pod_spec(deployment("ratings", replicas=1), nodeSelector={"kubernetes.io/arch": "arm64"})
    branch.publish([
        namespace("shop"), deployment("web", replicas=1), stuck,
        service("web", {"app": "web"}, "web"),  # backends here and ready
        service("ratings", {"app": "ratings"}, "ratings"),  # backends here, none ready
        # rendered for callers only (marked for a Cilium global service); no backend here
        service("reviews", {"app": "reviews"}, "reviews",
                {"service.cilium.io/global": "true", "service.cilium.io/shared": "false"}),
    ])
    agent = make_agent(unschedulable_grace=3600.0)
    agent.sync()
    result = agent.sync(full=True, wait=3.0)
    health = {o["metadata"]["name"]: h for o, h in result.health if o["kind"] == "Service"}
    assert health["web"][0] == "Healthy"
    assert health["ratings"][0] == "Progressing" and "no endpoints" in health["ratings"][1]
    assert health["reviews"][0] == "Healthy" and "Cilium global service" in health["reviews"][1]
    seen = components(agent, result)
    assert seen["shop/web"].healthy and seen["shop/web"].reason is None
    assert not seen["shop/ratings"].healthy
    assert seen["shop/reviews"].healthy and seen["shop/reviews"].reason == HealthReason.CALLER_ONLY
    assert result.state == "Reconciling"
