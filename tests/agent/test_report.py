"""Health, capacity, Prometheus signals and delivery of reports to the leads."""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from kubernetes import client

from qonnect_gitops.agent.report import Reporter
from qonnect_gitops.gitstore.daemon import free_port
from qonnect_gitops.model.report import AgentReport
from qonnect_gitops.model.status import SyncStatus
from tests.agent.conftest import (
    Branch,
    Recorder,
    configmap,
    configmap_names,
    deployment,
    namespace,
    wait_for,
)


def kubelet_reports_ready(apps: client.AppsV1Api, name: str, ns: str = "shop") -> None:
    """Write Deployment status through the status subresource, the way its controller would."""
    dep = apps.read_namespaced_deployment(name, ns)
    n = dep.spec.replicas
    apps.patch_namespaced_deployment_status(name, ns, {"status": {
        "observedGeneration": dep.metadata.generation, "replicas": n, "updatedReplicas": n,
        "readyReplicas": n, "availableReplicas": n,
        "conditions": [{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"}]}})


def test_health_follows_status_and_is_reported_per_component(make_agent, branch: Branch, apps, recorder: Recorder):
    branch.publish([namespace("shop"), deployment("web", replicas=2), configmap("web-config", component="web")])
    agent = make_agent(leads=(recorder.url,))
    first = agent.sync()
    assert first.state == "Reconciling" and first.exit_code == 2
    report = agent.build_report(first)
    assert [(c.component, c.healthy, c.ready_replicas, c.desired_replicas) for c in report.components] == [
        ("shop/web", False, 0, 2)]
    # --once style: wait for health while "the kubelet" makes it ready.
    threading.Timer(0.3, kubelet_reports_ready, (apps, "web")).start()
    waited = agent.sync(full=True, wait=5.0)
    assert waited.state == "Ready" and waited.exit_code == 0, waited.message
    report = agent.build_report(waited)
    assert [(c.component, c.healthy, c.ready_replicas) for c in report.components] == [("shop/web", True, 2)]
    assert report.applied.generation == 1 and report.attempted == waited.commit


def test_failed_rollout_fails_fast(make_agent, branch: Branch, apps):
    branch.publish([namespace("shop"), deployment("web")])
    agent = make_agent()
    agent.sync()
    dep = apps.read_namespaced_deployment("web", "shop")
    apps.patch_namespaced_deployment_status("web", "shop", {"status": {
        "observedGeneration": dep.metadata.generation, "replicas": 2, "updatedReplicas": 1,
        "conditions": [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
                        "message": "timed out"}]}})
    result = agent.sync(full=True, wait=20.0)
    assert result.seconds < 20.0  # it stopped at the failed condition, not at the end of the wait
    assert result.reason == "HealthCheckFailed" and result.exit_code == 2


def test_node_capacity_from_pods_requests(make_agent, branch: Branch, core):
    for name, cpu in (("n1", "4"), ("n2", "2")):
        core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name=name, labels={"kubernetes.io/arch": "arm64"})))
        core.patch_node_status(name, {"status": {"allocatable": {"cpu": cpu, "memory": "8Gi"},
                                                 "conditions": [{"type": "Ready", "status": (name == "n1" and "True") or "False"}]}})
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="work")))

    def pod(name: str, node: str, cpu: str, mem: str, phase: str = "Running") -> None:
        core.create_namespaced_pod("work", client.V1Pod(
            metadata=client.V1ObjectMeta(name=name),
            spec=client.V1PodSpec(node_name=node, containers=[client.V1Container(
                name="c", image="x", resources=client.V1ResourceRequirements(requests={"cpu": cpu, "memory": mem}))])))
        core.patch_namespaced_pod_status(name, "work", {"status": {"phase": phase}})

    pod("p1", "n1", "500m", "1Gi")
    pod("p2", "n1", "250m", "512Mi")
    pod("done", "n1", "2", "4Gi", phase="Succeeded")
    branch.publish([namespace("shop"), configmap("a")])
    agent = make_agent()
    report = agent.build_report(agent.sync())
    nodes = {n.name: n for n in report.nodes}
    assert nodes["n1"].ready and not nodes["n2"].ready and nodes["n1"].arch == "arm64"
    assert nodes["n1"].free_cpu == 3250 and nodes["n1"].free_memory == 8 * 2**30 - 1536 * 2**20
    assert nodes["n2"].free_cpu == 2000


def test_latency_and_traffic_from_prometheus(make_agent, branch: Branch):
    queries: list[str] = []

    class Prom(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            q = parse_qs(urlsplit(self.path).query)["query"][0]
            queries.append(q)
            if q.startswith("lat_ms"):
                result = [{"metric": {"source": "edge-1", "target": "cloud-1"}, "value": [1, "41.5"]},
                          {"metric": {"source": "edge-1", "target": "eu-central"}, "value": [1, "12"]},
                          {"metric": {"source": "edge-1", "target": "x"}, "value": [1, "NaN"]}]
            else:
                result = [{"metric": {"app": "shop", "component": "web", "region": "eu-central"}, "value": [1, "120"]}]
            body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Prom)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        branch.publish([namespace("shop"), configmap("a")])
        agent = make_agent(prometheus=f"http://127.0.0.1:{srv.server_address[1]}", latency_metric="lat_ms",
                           traffic_metric="rps_metric")
        report = agent.build_report(agent.sync())
    finally:
        srv.shutdown()
        srv.server_close()
    assert queries == ['lat_ms{source="edge-1"}', "rps_metric"]
    assert [(lat.to, lat.ms) for lat in report.latencies] == [("cloud-1", 41.5), ("eu-central", 12.0)]
    assert [(t.component, t.region, t.rps) for t in report.traffic] == [("shop/web", "eu-central", 120.0)]


def _report(n: int) -> AgentReport:
    return AgentReport(cluster="edge-1", agent_time=datetime.fromtimestamp(1_800_000_000 + n, UTC),
                       sync=SyncStatus(state="Ready", reason="Test", message=str(n)))


def test_reporter_tries_other_leads_and_newest_replaces_queued(recorder: Recorder):
    dead = f"http://127.0.0.1:{free_port()}"
    recorder.status = 503
    rep = Reporter((dead, recorder.url), "edge-1", "tok", backoff=0.05, backoff_max=0.1)
    rep.start()
    try:
        rep.submit(_report(1))
        wait_for(lambda: rep.failures >= 2, what="failed attempts")
        rep.submit(_report(2))
        rep.submit(_report(3))
        recorder.status = 200
        assert rep.flush(5)
        time.sleep(0.3)
        assert [r["sync"]["message"] for r in recorder.reports] == ["3"]
        assert recorder.reports[0]["path"] == "/v1/clusters/edge-1/report"
        assert "503" in rep.last_error and dead in rep.last_error
    finally:
        rep.stop()


def test_lead_announcing_newer_generation_triggers_sync(make_agent, branch: Branch, recorder: Recorder, core):
    branch.publish([namespace("shop"), configmap("a")])
    agent = make_agent(leads=(recorder.url,), interval=60.0, drift_interval=60.0, report_interval=0.2)
    thread = threading.Thread(target=agent.run, daemon=True)
    thread.start()
    wait_for(lambda: agent.last and agent.last.applied, what="first sync")
    branch.publish([namespace("shop"), configmap("b")])
    recorder.response = {"accepted": True, "generation": 2, "planGeneration": 2}
    wait_for(lambda: configmap_names(core) == {"b"},
             timeout=5, what="sync on the lead's word")
    agent.stop()
    thread.join(5)


def test_component_labels_the_lead_would_refuse_do_not_sink_the_report(make_agent, branch: Branch):
    bad = configmap("x", component="Web.Frontend")
    branch.publish([namespace("shop"), configmap("a"), bad])
    agent = make_agent()
    report = agent.build_report(agent.sync())
    assert [c.component for c in report.components] == ["shop/web"]
    AgentReport.model_validate(json.loads(report.model_dump_json(by_alias=True)))


def test_an_announced_generation_that_cannot_be_applied_does_not_spin(make_agent, branch: Branch, recorder: Recorder):
    branch.publish([namespace("shop"), configmap("a")])
    recorder.response = {"accepted": True, "generation": 99}  # the lead knows of a commit we will never see
    agent = make_agent(leads=(recorder.url,), interval=60.0, drift_interval=60.0, report_interval=0.1)
    thread = threading.Thread(target=agent.run, daemon=True)
    thread.start()
    time.sleep(1.5)
    agent.stop()
    thread.join(5)
    syncs = sum(v for (name, _), v in agent.metrics._values.items() if name == "qonnect_agent_syncs_total")
    assert 1 <= syncs <= 3, syncs  # the first pass, one on the announcement; heartbeats do not re-trigger
    assert len(recorder.reports) >= 5  # heartbeats kept flowing


def test_the_fleet_heartbeat_sets_the_report_interval(make_agent, branch: Branch, recorder: Recorder):
    branch.publish([namespace("shop"), configmap("a")])
    # The agent's own interval is far too long for an 8 s grace; the lead's answer governs.
    recorder.response = {"accepted": True, "generation": 1, "heartbeatIntervalSeconds": 0.2}
    agent = make_agent(leads=(recorder.url,), interval=60.0, drift_interval=60.0, report_interval=30.0)
    thread = threading.Thread(target=agent.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: len(recorder.reports) >= 5, timeout=10, what="reports at the fleet's interval")
        assert agent.report_interval == 0.2
    finally:
        agent.stop()
        thread.join(5)


def test_health_of_many_objects_of_a_kind_read_by_list(make_agent, branch: Branch):
    """More than three Deployments in a namespace are read with one list, whose items carry
    no apiVersion/kind; the roll-up reads both (it raised KeyError and killed the agent)."""
    names = ["a", "b", "c", "d", "e"]
    branch.publish([namespace("shop"), *(deployment(n) for n in names)])
    agent = make_agent()
    result = agent.sync()
    assert result.state in ("Reconciling", "Ready"), result.message
    report = agent.build_report(result)
    assert sorted(c.component for c in report.components) == [f"shop/{n}" for n in names]
    assert all(c.desired_replicas == 2 for c in report.components)
