"""deploy/'s NetworkPolicies, evaluated on the flows the product needs and on the ones it
must not get (tests/deploy/netpol.py evaluates them as the API documents). Ports come from
the workloads, so a port changed in a manifest but not in its policy fails here.

The leads: the API from the agent, the observer, the other leads and labelled namespaces
(ingress controller, Prometheus); Raft between leads only; out to DNS, the other leads, Git
and forges. The agent: in only /metrics from Prometheus (and the webhook where enabled); out
to DNS, the leads, its API server, Git, Prometheus."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT
from tests.deploy.helm import render
from tests.deploy.netpol import Cluster, External, Node, Pod
from tests.deploy.workloads import container, one

DEPLOY = ROOT / "deploy"
NS = "qonnect-system"
NAMESPACES = {
    NS: {},
    "kube-system": {},
    "ingress-nginx": {"qonnect.io/lead-clients": "true"},
    "monitoring": {"qonnect.io/prometheus": "true"},
    "forge-hooks": {"qonnect.io/agent-webhook": "true"},
    "shop": {},
}
GIT = External("140.82.112.3")
GIT6 = External("2606:50c0:8000::153")
API_SERVER = External("192.168.10.2")  # a control-plane node, where the `kubernetes` Service leads


def pod_of(objects: list[dict[str, Any]], kind: str, name: str) -> Pod:
    workload = one(objects, kind, name)
    ports = {p["name"]: p["containerPort"] for p in container(workload)["ports"]}
    return Pod(NS, dict(workload["spec"]["template"]["metadata"]["labels"]), ports)


def policies(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == "NetworkPolicy"]


class Fleet:
    """The pods of deploy/ and their neighbours, with the policies of ``objects``."""

    def __init__(self, objects: list[dict[str, Any]], observer: list[dict[str, Any]]) -> None:
        self.cluster = Cluster(NAMESPACES, policies(objects) + policies(observer))
        self.lead = pod_of(objects, "StatefulSet", "qonnect-lead")
        self.agent = pod_of(objects, "Deployment", "qonnect-agent")
        self.observer = pod_of(observer, "Deployment", "qonnect-observer") if observer else Pod(NS, {})
        self.dns = Pod("kube-system", {"k8s-app": "kube-dns"}, {"dns": 53})
        self.ingress = Pod("ingress-nginx", {"app.kubernetes.io/name": "ingress-nginx"})
        self.prometheus = Pod("monitoring", {"app.kubernetes.io/name": "prometheus"}, {"web": 9090})
        self.hook_relay = Pod("forge-hooks", {"app": "relay"})
        self.app = Pod("shop", {"app": "web"}, {"http": 8080})
        self.neighbour = Pod(NS, {"app": "something-else"})  # another pod in the leads' namespace

    def ok(self, src: Any, dst: Any, port: int | str, protocol: str = "TCP") -> bool:
        number = dst.ports[port] if isinstance(port, str) else port
        return self.cluster.allowed(src, dst, number, protocol)


@pytest.fixture(scope="module")
def fleet() -> Fleet:
    from tests.deploy.kustomize import kubectl, kustomize

    try:
        kubectl()
    except FileNotFoundError:  # pragma: no cover
        pytest.skip("kubectl not installed")
    return Fleet(kustomize(DEPLOY), kustomize(DEPLOY / "observer"))


@pytest.mark.slow
def test_the_leads_api_is_open_to_the_agents_the_leads_and_labelled_namespaces(fleet: Fleet) -> None:
    f = fleet
    for client in (f.agent, f.observer, f.lead, f.ingress, f.prometheus):
        assert f.ok(client, f.lead, "http"), client
    for stranger in (f.neighbour, f.app, f.hook_relay, GIT):
        assert not f.ok(stranger, f.lead, "http"), stranger
    assert f.ok(Node(), f.lead, "http"), "the kubelet's probes"


@pytest.mark.slow
def test_raft_is_between_leads_only(fleet: Fleet) -> None:
    f = fleet
    assert f.ok(f.lead, f.lead, "raft")
    for other in (f.agent, f.observer, f.ingress, f.prometheus, f.neighbour, f.app, GIT):
        assert not f.ok(other, f.lead, "raft"), other
    assert not f.ok(f.lead, f.agent, "metrics"), "the leads never call the agent"


@pytest.mark.slow
def test_the_leads_reach_dns_git_and_forges_and_nothing_else(fleet: Fleet) -> None:
    f = fleet
    assert f.ok(f.lead, f.dns, 53, "UDP") and f.ok(f.lead, f.dns, 53, "TCP")
    for git in (GIT, GIT6):
        for port in (443, 22, 9418):
            assert f.ok(f.lead, git, port), (git, port)
    assert not f.ok(f.lead, GIT, 80), "plain HTTP is not Git"
    assert not f.ok(f.lead, External("8.8.8.8"), 53, "UDP"), "DNS only through the cluster's resolver"
    assert not f.ok(f.lead, API_SERVER, 6443), "the leads never call the Kubernetes API"
    assert not f.ok(f.lead, f.prometheus, "web")
    assert not f.ok(f.lead, f.app, "http")


@pytest.mark.slow
def test_the_agent_takes_only_metrics_from_prometheus(fleet: Fleet) -> None:
    f = fleet
    for agent in (f.agent, f.observer):
        assert f.ok(f.prometheus, agent, "metrics")
        for other in (f.ingress, f.hook_relay, f.lead, f.neighbour, f.app):
            assert not f.ok(other, agent, "metrics"), other
        assert not f.ok(f.prometheus, agent, 8080)
        assert f.ok(Node(), agent, "metrics"), "the kubelet's probes"


@pytest.mark.slow
def test_the_agent_reaches_what_a_sync_and_a_report_need(fleet: Fleet) -> None:
    f = fleet
    for agent in (f.agent, f.observer):
        assert f.ok(agent, f.dns, 53, "UDP") and f.ok(agent, f.dns, 53, "TCP")
        assert f.ok(agent, f.lead, "http"), "the leads beside it"
        assert f.ok(agent, API_SERVER, 6443) and f.ok(agent, API_SERVER, 443)
        for port in (443, 22, 9418):
            assert f.ok(agent, GIT, port) and f.ok(agent, GIT6, port)
        assert f.ok(agent, f.prometheus, "web")
        assert not f.ok(agent, f.lead, "raft")
        assert not f.ok(agent, f.app, "http"), "no application pod"
        assert not f.ok(agent, External("8.8.8.8"), 53, "UDP")
        assert not f.ok(agent, GIT, 80)


@pytest.mark.slow
def test_the_webhook_component_opens_the_metrics_port_to_labelled_namespaces(tmp_path: Path) -> None:
    from tests.deploy.kustomize import kustomize, overlay

    hooked = Fleet(overlay(tmp_path / "hook", DEPLOY, ("components/agent-webhook",)), kustomize(DEPLOY / "observer"))
    assert hooked.ok(hooked.hook_relay, hooked.agent, "metrics")
    assert not hooked.ok(hooked.hook_relay, hooked.observer, "metrics"), "the observer has no webhook"
    assert not hooked.ok(hooked.app, hooked.agent, "metrics")


def test_narrowed_git_cidrs_are_all_the_leads_reach() -> None:
    """What docs/deploy.md tells users to adapt, through the chart's values."""
    objects = render({"networkPolicy": {"git": {"to": [{"ipBlock": {"cidr": "192.0.2.0/24"}}], "ports": [443]},
                                        "apiServer": {"to": [{"ipBlock": {"cidr": "192.168.10.0/28"}}],
                                                      "ports": [6443]}}})
    f = Fleet(objects, [])
    assert f.ok(f.lead, External("192.0.2.7"), 443)
    assert not f.ok(f.lead, GIT, 443) and not f.ok(f.lead, External("192.0.2.7"), 22)
    assert f.ok(f.agent, API_SERVER, 6443) and not f.ok(f.agent, External("192.168.10.99"), 6443)


def test_without_policies_nothing_is_isolated() -> None:
    objects = render({"networkPolicy": {"enabled": False}})
    assert not policies(objects)
    f = Fleet(objects, [])
    assert f.ok(f.app, f.lead, "raft") and f.ok(f.lead, External("8.8.8.8"), 53, "UDP")
