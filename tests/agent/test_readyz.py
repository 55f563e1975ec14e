"""The agent's readiness (``GET /readyz`` on ``--metrics-addr``): not ready until its first
pass finished or its first report went out, ready from then on; ``/healthz`` answers
throughout. deploy/agent's readiness probe asks it."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

from qonnect_gitops.gitstore.daemon import free_port
from tests.agent.conftest import Branch, configmap, namespace, wait_for


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except urllib.error.URLError:  # not listening yet
        return 0, ""


def test_ready_once_the_first_pass_finished(make_agent, branch: Branch, sim) -> None:
    branch.publish([namespace("shop"), configmap("a")])
    port = free_port()
    agent = make_agent(interval=60.0, drift_interval=60.0, metrics_addr=f"127.0.0.1:{port}")
    base = f"http://127.0.0.1:{port}"
    sim.faults.set_latency(1.0)  # the first pass waits on the API server
    thread = threading.Thread(target=agent.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: _get(base + "/healthz")[0] == 200, what="the metrics server")
        code, body = _get(base + "/readyz")
        assert agent.last is None, "the first pass must still be running for this check"
        assert code == 503 and json.loads(body)["ready"] is False, body
        assert _get(base + "/healthz")[0] == 200, "alive while not ready"
        sim.faults.clear()
        wait_for(lambda: _get(base + "/readyz")[0] == 200, timeout=30, what="ready after the first pass")
        assert agent.last is not None
        code, body = _get(base + "/readyz")
        assert json.loads(body)["ready"] is True
    finally:
        sim.faults.clear()
        agent.stop()
        thread.join(10)


def test_a_report_alone_makes_it_ready() -> None:
    """An agent whose pass is slow but whose heartbeat reported is ready: the leads hear it."""
    from qonnect_gitops.agent.metrics import Metrics, serve

    metrics = Metrics()
    server = serve(f"127.0.0.1:{free_port()}", metrics, None, lambda: None)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        assert _get(base + "/readyz")[0] == 503
        metrics.inc("qonnect_agent_errors_total", kind="fetch")  # an error is not a finished pass
        assert _get(base + "/readyz")[0] == 503
        metrics.inc("qonnect_agent_heartbeats_total")
        assert _get(base + "/readyz")[0] == 200
    finally:
        server.shutdown()
        server.server_close()
