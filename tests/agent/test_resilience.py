"""Drift, Git outages and API faults: the cluster keeps what runs, nothing is pruned on error."""

from __future__ import annotations

import json
import threading
import time

from kubernetes import client

from qonnect_gitops.sim.errors import ApiError
from tests.agent.conftest import (
    Branch,
    Recorder,
    configmap,
    configmap_names,
    deployment,
    namespace,
    wait_for,
)


def _run(agent) -> threading.Thread:
    t = threading.Thread(target=agent.run, daemon=True)
    t.start()
    return t


def test_drift_is_corrected_within_one_drift_interval(make_agent, branch: Branch, apps):
    branch.publish([namespace("shop"), deployment("web", replicas=2)])
    agent = make_agent(interval=30.0, drift_interval=0.5)  # polls rarely: only the drift check can fix it
    thread = _run(agent)
    wait_for(lambda: agent.last and agent.last.applied, what="first sync")
    apps.patch_namespaced_deployment("web", "shop", {"spec": {"replicas": 5}})
    edited = time.monotonic()
    wait_for(lambda: apps.read_namespaced_deployment("web", "shop").spec.replicas == 2, timeout=5, what="self-heal")
    assert time.monotonic() - edited < 0.5 + 1.5
    # The counter moves when the healing pass ends, just after its write: wait for it.
    wait_for(lambda: agent.metrics.get("qonnect_agent_drift_corrections_total") >= 1, timeout=5,
             what="drift correction counted")
    agent.stop()
    thread.join(5)


def test_report_only_drift_is_reported_and_left_alone(make_agent, branch: Branch, apps, recorder: Recorder):
    branch.publish([namespace("shop"), deployment("web", replicas=2)])
    agent = make_agent(drift="report", interval=30.0, drift_interval=0.3, leads=(recorder.url,), token="t0k")
    thread = _run(agent)
    wait_for(lambda: agent.last and agent.last.applied, what="first sync")
    apps.patch_namespaced_deployment("web", "shop", {"spec": {"replicas": 5}})
    wait_for(lambda: any(r["sync"]["reason"] == "DriftDetected" for r in recorder.reports), what="drift report")
    report = next(r for r in recorder.reports if r["sync"]["reason"] == "DriftDetected")
    assert "Deployment.apps/shop/web (spec.replicas)" in report["sync"]["message"]
    time.sleep(0.8)  # more drift checks pass: still untouched
    assert apps.read_namespaced_deployment("web", "shop").spec.replicas == 5
    assert agent.metrics.get("qonnect_agent_drift_detected") == 1
    assert recorder.auth[-1] == "Bearer t0k"
    agent.stop()
    thread.join(5)


def test_git_down_keeps_workloads_reports_stale_then_catches_up(make_agent, branch: Branch, core, recorder: Recorder):
    branch.publish([namespace("shop"), configmap("a"), configmap("b")])
    agent = make_agent(leads=(recorder.url,))
    first = agent.sync()
    assert first.state == "Ready"
    branch.daemon.stop()
    down = agent.sync()
    assert down.source_stale and down.state == "Stalled" and down.reason == "SourceUnavailable"
    assert [r.reason for r in down.refusals] == ["BranchUnreadable"]
    assert down.applied.commit == first.commit
    assert configmap_names(core) == {"a", "b"}
    assert len(down.health) == 3  # health of what runs is still observed
    agent.reporter.start()
    wait_for(lambda: any(r["sync"]["reason"] == "SourceUnavailable" for r in recorder.reports), what="stale report")
    stale = [r for r in recorder.reports if r["sync"]["reason"] == "SourceUnavailable"][-1]
    assert stale["sync"]["message"].startswith("source stale for")
    assert stale["applied"]["commit"] == first.commit
    # Git comes back with a newer commit: the agent catches up.
    second = branch.publish([namespace("shop"), configmap("a"), configmap("c")])
    branch.daemon.start()
    up = agent.sync(full=False)
    assert up.commit == second and up.state == "Ready" and not up.source_stale
    assert configmap_names(core) == {"a", "c"}


def _fail_first(n: int, code: int, methods: tuple[str, ...], retry_after: str | None = None):
    state = {"left": n, "seen": 0}
    lock = threading.Lock()

    def hook(handler, method, path):
        if method not in methods or not path.startswith(("/api/v1/namespaces/shop", "/apis/apps")):
            return False
        with lock:
            state["seen"] += 1
            if state["left"] <= 0:
                return False
            state["left"] -= 1
        if retry_after is None:
            handler.send_api_error(ApiError(code, "InternalError", "injected fault"))
        else:
            handler._drain()
            body = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 429,
                               "reason": "TooManyRequests", "message": "slow down"}).encode()
            handler.send_response(429)
            handler.send_header("Retry-After", retry_after)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(body)))
            handler.end_headers()
            handler.wfile.write(body)
        return True

    return hook, state


def test_500s_are_retried_and_converge(make_agent, branch: Branch, sim, core):
    branch.publish([namespace("shop")] + [configmap(n) for n in "abcd"])
    hook, state = _fail_first(6, 500, ("GET", "PATCH"))
    sim.server.hooks.append(hook)
    agent = make_agent()
    result = agent.sync()
    assert state["left"] == 0 and state["seen"] > 6
    assert result.state == "Ready", result.message
    assert configmap_names(core) == set("abcd")
    assert agent.kube.retried >= 6


def test_429_retry_after_is_honoured(make_agent, branch: Branch, sim, core):
    branch.publish([namespace("shop"), configmap("a")])
    hook, state = _fail_first(1, 429, ("PATCH",), retry_after="1")
    sim.server.hooks.append(hook)
    agent = make_agent()
    start = time.monotonic()
    result = agent.sync()
    assert result.state == "Ready" and state["left"] == 0
    assert time.monotonic() - start >= 1.0  # waited as told, not the 10 ms test backoff


def test_persistent_api_errors_never_prune(make_agent, branch: Branch, sim, core):
    branch.publish([namespace("shop")] + [configmap(n) for n in "abc"])
    agent = make_agent(api_retries=2)
    agent.sync()
    branch.publish([namespace("shop"), configmap("a", data={"k": "changed"}), configmap("b")])  # c removed
    hook, _ = _fail_first(10_000, 503, ("PATCH",))
    sim.server.hooks.append(hook)
    failed = agent.sync()
    assert failed.state == "Stalled" and failed.reason == "ApplyFailed" and failed.exit_code == 1
    assert failed.pruned.deleted == []
    assert configmap_names(core) == set("abc")
    assert failed.applied.generation == 1  # what runs is still the first commit
    sim.server.hooks.clear()
    ok = agent.sync()
    assert ok.state == "Ready" and [k[4] for k in ok.pruned.deleted] == ["c"]
    assert core.read_namespaced_config_map("a", "shop").data == {"k": "changed"}


def test_sim_down_then_up(make_agent, branch: Branch, sim, core):
    branch.publish([namespace("shop"), configmap("a")])
    agent = make_agent(api_retries=1)
    agent.sync()
    sim.stop()
    down = agent.sync()
    assert down.state == "Stalled" and down.reason == "ApiUnavailable"
    sim.start()
    branch.publish([namespace("shop"), configmap("b")])
    up = agent.sync()
    assert up.state == "Ready"
    assert configmap_names(client.CoreV1Api(core.api_client)) == {"b"}


def test_loop_survives_a_crashing_pass(make_agent, branch: Branch, core):
    branch.publish([namespace("shop"), configmap("a")])
    agent = make_agent(interval=0.1)
    real = agent._sync
    calls = {"n": 0}

    def flaky(full):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("boom")
        return real(full)

    agent._sync = flaky
    thread = _run(agent)
    wait_for(lambda: agent.last and agent.last.state == "Ready", what="a pass after the crash")
    assert agent.metrics.get("qonnect_agent_errors_total", kind="internal") == 1
    agent.stop()
    thread.join(5)


def test_stage_order():
    from qonnect_gitops.agent.sync import stage_of

    kinds = [("apps/v1", "Deployment"), ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"),
             ("v1", "Namespace"), ("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
             ("rbac.authorization.k8s.io/v1", "ClusterRole"), ("v1", "ConfigMap"),
             ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration")]
    staged = sorted(kinds, key=lambda k: stage_of({"apiVersion": k[0], "kind": k[1]}))
    assert [stage_of({"apiVersion": a, "kind": k}) for a, k in staged] == [0, 0, 0, 1, 1, 2, 2]
    assert {k for _, k in staged[:3]} == {"Namespace", "CustomResourceDefinition", "ClusterRole"}
