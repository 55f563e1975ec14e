"""Part 2: injected faults (library and admin endpoint) and the Prometheus query API."""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import urllib3
from kubernetes.client.exceptions import ApiException

from qonnect_gitops.model import load_goals, read_directory
from qonnect_gitops.sim import SimCluster
from tests.sim.kubelet_helpers import (
    clients,
    deployment,
    make_sim,
    pods_of,
    ready,
    shape,
    wait_for,
)

REPO = Path(__file__).resolve().parents[2]


def _http(method: str, url: str, body: Any = None, form: dict[str, str] | None = None) -> tuple[int, dict[str, str], Any]:
    """A plain HTTP request as Prometheus clients and scripts make it."""
    data, headers = None, {}
    if body is not None:
        data, headers = json.dumps(body).encode(), {"Content-Type": "application/json"}
    if form is not None:
        data, headers = urllib.parse.urlencode(form).encode(), {"Content-Type": "application/x-www-form-urlencoded"}
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, dict(resp.headers), json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), json.loads(err.read())


def _refused(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(2)
        return s.connect_ex(("127.0.0.1", port)) != 0


def test_cluster_down_and_up_library_and_admin() -> None:
    with make_sim(shape(1, "2")) as sim:
        core, apps, *_ = clients(sim, retries=False)  # see the refusal itself, not urllib3's retries
        apps.create_namespaced_deployment("default", deployment("web", 1))
        sim.down()
        assert _refused(sim.port) and _refused(sim.prometheus_port)
        with pytest.raises(urllib3.exceptions.HTTPError):
            core.list_node()
        assert _http("GET", sim.admin_url + "/_sim/status")[2]["up"] is False
        sim.up()
        assert _http("GET", sim.prometheus_url + "/api/v1/query?query=up")[0] == 200
        assert [d.metadata.name for d in apps.list_namespaced_deployment("default").items] == ["web"]
        # The same over the admin endpoint, which stays reachable while the API is down.
        code, _, status = _http("POST", sim.admin_url + "/_sim/down")
        assert code == 200 and status["up"] is False and _refused(sim.port)
        code, _, status = _http("POST", sim.admin_url + "/_sim/up")
        assert code == 200 and status["up"] is True
        assert len(core.list_node().items) == 1


def test_injected_500s_are_deterministic_with_a_seed() -> None:
    with make_sim(shape(1, "2")) as sim:
        core, *_ = clients(sim)
        sim.faults.set_errors(1.0, 500)
        with pytest.raises(ApiException) as info:
            core.list_namespace()
        assert info.value.status == 500
        assert json.loads(info.value.body)["reason"] == "InternalError"
        sim.faults.clear()
        assert core.list_namespace().items

        def outcomes() -> list[bool]:
            out = []
            for _ in range(30):
                try:
                    core.list_namespace()
                    out.append(True)
                except ApiException as exc:
                    assert exc.status == 502
                    out.append(False)
            return out

        # 502 carries no Retry-After, so urllib3 hands every failure to the caller.
        sim.faults.set_errors(0.5, 502, seed=7)
        first = outcomes()
        sim.faults.set_errors(0.5, 502, seed=7)
        assert outcomes() == first
        assert 5 < first.count(False) < 25
        sim.faults.set_errors(0.5, 502, seed=8)
        assert outcomes() != first


def test_429_with_retry_after_over_admin_endpoint() -> None:
    with make_sim(shape(1, "2")) as sim:
        # urllib3 honours Retry-After on 429 and 503 by sleeping and retrying; see the answer itself.
        core, *_ = clients(sim, retries=False)
        code, _, status = _http("PUT", sim.admin_url + "/_sim/faults/errors",
                                {"rate": 1.0, "code": 429, "retryAfter": 3, "seed": 1})
        assert code == 200 and status["faults"]["code"] == 429
        code, headers, body = _http("GET", sim.url + "/api/v1/namespaces")
        assert code == 429 and headers["Retry-After"] == "3"
        assert body["reason"] == "TooManyRequests" and body["details"]["retryAfterSeconds"] == 3
        with pytest.raises(ApiException) as info:
            core.list_namespace()
        assert info.value.status == 429 and info.value.headers["Retry-After"] == "3"
        assert _http("DELETE", sim.admin_url + "/_sim/faults")[0] == 200
        assert core.list_namespace().items
        assert _http("PUT", sim.admin_url + "/_sim/faults/errors", {"rate": 2})[0] == 400
        assert _http("GET", sim.admin_url + "/_sim/nope")[0] == 404


def test_slow_responses() -> None:
    with make_sim(shape(1, "2")) as sim:
        core, *_ = clients(sim)
        core.list_namespace()  # connection set up outside the timing
        sim.faults.set_latency(0.4)
        started = time.monotonic()
        core.list_namespace()
        assert time.monotonic() - started >= 0.4
        _http("PUT", sim.admin_url + "/_sim/faults/latency", {"seconds": 0})
        started = time.monotonic()
        core.list_namespace()
        assert time.monotonic() - started < 0.3


def test_node_failure_reschedules_and_recovery() -> None:
    with make_sim(shape(2, "1")) as sim:
        core, apps, *_ = clients(sim)
        apps.create_namespaced_deployment("default", deployment("web", 2, cpu="400m"))
        wait_for(lambda: len([p for p in pods_of(core, "web") if ready(p)]) == 2, what="web ready")
        assert {p.spec.node_name for p in pods_of(core, "web")} == {"t-node-1", "t-node-2"}  # least allocated
        sim.fail_node("t-node-1")
        node = core.read_node("t-node-1")
        assert {c.type: c.status for c in node.status.conditions}["Ready"] == "Unknown"
        assert {t.key for t in node.spec.taints} == {"node.kubernetes.io/unreachable"}
        wait_for(lambda: len([p for p in pods_of(core, "web") if ready(p)]) == 2
                 and {p.spec.node_name for p in pods_of(core, "web")} == {"t-node-2"}, what="rescheduled on node 2")
        # Node 2 holds both (800m of 1 CPU); a third replica has nowhere to go.
        apps.patch_namespaced_deployment_scale("web", "default", {"spec": {"replicas": 3}})
        pending = wait_for(lambda: [p for p in pods_of(core, "web") if p.status.conditions
                                    and p.status.conditions[0].reason == "Unschedulable"], what="a pending pod")
        assert pending[0].status.conditions[0].message == (
            "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint "
            "{node.kubernetes.io/unreachable: }.")
        # Over the admin endpoint: recovery lets the pending replica bind to node 1.
        code, _, status = _http("POST", sim.admin_url + "/_sim/nodes/t-node-1/recover")
        assert code == 200 and all(n["ready"] for n in status["nodes"])
        wait_for(lambda: len([p for p in pods_of(core, "web") if ready(p)]) == 3, what="three ready")
        assert not core.read_node("t-node-1").spec.taints
        assert _http("POST", sim.admin_url + "/_sim/nodes/nope/fail")[0] == 404
        code, _, status = _http("POST", sim.admin_url + "/_sim/nodes/t-node-2/fail")
        assert code == 200 and [n["ready"] for n in status["nodes"]] == [True, False]


def _query(sim: SimCluster, q: str, post: bool = False) -> tuple[int, Any]:
    if post:
        code, _, body = _http("POST", sim.prometheus_url + "/api/v1/query", form={"query": q})
    else:
        code, _, body = _http("GET", sim.prometheus_url + "/api/v1/query?" + urllib.parse.urlencode({"query": q}))
    return code, body


def test_prometheus_query_api_serves_signals_and_changes() -> None:
    goals = load_goals(read_directory(REPO / "repo-template"))
    latencies = {t: ms for (s, t), ms in goals.latencies.items() if s == "edge-1"}
    with SimCluster.from_cluster(goals.clusters["edge-1"], startup_delay=0.05, latencies=latencies) as sim:
        code, body = _query(sim, 'qonnect_network_latency_ms{source="edge-1",target="eu-central"}')
        assert code == 200 and body["status"] == "success" and body["data"]["resultType"] == "vector"
        [sample] = body["data"]["result"]
        assert sample["metric"] == {"__name__": "qonnect_network_latency_ms", "source": "edge-1",
                                    "target": "eu-central"}
        ts, value = sample["value"]
        assert isinstance(ts, float) and abs(ts - time.time()) < 5 and value == "3"
        code, body = _query(sim, "qonnect_network_latency_ms", post=True)
        assert len(body["data"]["result"]) == len(latencies)
        # Changes at run time, from the library and from the admin endpoint.
        sim.signals.set_latency("eu-central", 12.5)
        sim.signals.set_traffic("bookinfo", "productpage", "eu-central", 120)
        _http("PUT", sim.admin_url + "/_sim/signals/traffic",
              {"app": "bookinfo", "component": "details", "region": "eu-west", "rps": 7.25})
        assert _query(sim, 'qonnect_network_latency_ms{target="eu-central"}')[1]["data"]["result"][0]["value"][1] \
            == "12.5"
        code, body = _query(sim, 'qonnect_component_requests_per_second{app="bookinfo"}')
        assert [(r["metric"]["component"], r["metric"]["region"], r["value"][1]) for r in body["data"]["result"]] \
            == [("details", "eu-west", "7.25"), ("productpage", "eu-central", "120")]
        code, body = _query(sim, 'qonnect_component_requests_per_second{component=~"product.*", region!="eu-west"}')
        assert [r["metric"]["component"] for r in body["data"]["result"]] == ["productpage"]
        code, body = _query(sim, '{__name__="qonnect_component_requests_per_second", component!~"product.*"}')
        assert [r["metric"]["component"] for r in body["data"]["result"]] == ["details"]
        _http("DELETE", sim.admin_url + "/_sim/signals/traffic",
              {"app": "bookinfo", "component": "details", "region": "eu-west"})
        assert len(_query(sim, "qonnect_component_requests_per_second")[1]["data"]["result"]) == 1
        assert _query(sim, "no_such_metric")[1] == {"status": "success",
                                                   "data": {"resultType": "vector", "result": []}}
        code, body = _query(sim, "rate(qonnect_component_requests_per_second[5m])")
        assert code == 400 and body["status"] == "error" and body["errorType"] == "bad_data"
        code, body = _query(sim, 'qonnect_network_latency_ms{target="eu')
        assert code == 400 and body["errorType"] == "bad_data"
