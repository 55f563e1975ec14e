"""Heartbeats do not wait for passes (issue 31): a real agent against the simulated cluster,
reporting to a loopback stand-in for a lead that records when each report arrived.

A slow API server (every request answered after a delay longer than the report interval),
an API server that goes down in the middle of a pass, and one that accepts requests and
never answers: the reports keep their interval and say what is true, and no pass hangs.
The faults are set through the sim's admin port, as an operator's script would.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
import urllib.request
from typing import Any

from qonnect_gitops.agent.agent import Agent
from qonnect_gitops.sim import SimCluster
from tests.agent.conftest import Branch, Recorder, configmap, namespace, wait_for

REPORT_INTERVAL = 0.5
# The largest gap between two reports these tests accept: a few report intervals, room for
# a loaded machine (threads wake late, the loopback lead answers late). The code before
# heartbeats ran on their own sent nothing for the whole of a pass.
GAP = 4 * REPORT_INTERVAL


def admin(sim: SimCluster, method: str, path: str, body: dict[str, Any] | None = None) -> None:
    data = json.dumps(body).encode() if body is not None else b""
    req = urllib.request.Request(f"{sim.admin_url}/_sim/{path}", data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 200


def run(agent: Agent) -> threading.Thread:
    thread = threading.Thread(target=agent.run, daemon=True)
    thread.start()
    return thread


def received(recorder: Recorder, since: float, until: float) -> list[tuple[float, dict[str, Any]]]:
    """The reports that arrived between ``since`` and ``until`` (monotonic), with their times."""
    return [(t, r) for t, r in zip(recorder.times, recorder.reports, strict=False) if since <= t <= until]


def gaps(times: list[float]) -> list[float]:
    return [round(b - a, 2) for a, b in itertools.pairwise(times)]


def objects(n: int, data: str) -> list[dict[str, Any]]:
    return [namespace("shop"), *(configmap(f"c{i}", data={"k": data}) for i in range(n))]


def test_reports_keep_the_interval_and_say_progressing_while_a_slow_pass_runs(
        make_agent, branch: Branch, sim: SimCluster, recorder: Recorder):
    branch.publish(objects(6, "one"))
    agent = make_agent(leads=(recorder.url,), interval=300.0, drift_interval=600.0,
                       report_interval=REPORT_INTERVAL, api_timeout=10.0)
    thread = run(agent)
    try:
        wait_for(lambda: agent.last and agent.last.state == "Ready", timeout=30, what="first pass")
        # Every API request is answered one second late: longer than the report interval.
        admin(sim, "PUT", "faults/latency", {"seconds": 1.0})
        head = branch.publish(objects(6, "two"))
        start = time.monotonic()
        agent.poll_git_now()
        wait_for(lambda: agent.last and agent.last.commit == head, timeout=120, what="the slow pass")
        end = time.monotonic()
        admin(sim, "DELETE", "faults")
        during = received(recorder, start, end)
        seconds = end - start
        assert seconds > 3 * GAP, f"the pass took {seconds:.1f} s: too short to show anything"
        times = [start, *(t for t, _ in during), end]
        assert max(gaps(times)) <= GAP, f"report gaps during a {seconds:.1f} s pass: {gaps(times)}"
        running = [r["sync"] for _, r in during if "sync pass running" in r["sync"]["message"]]
        assert running, [r["sync"] for _, r in during]
        assert all((s["state"], s["reason"]) == ("Reconciling", "Progressing") for s in running), running
        # The heartbeats keep what the last pass knew: its components and what runs.
        first = next(r for _, r in during if "sync pass running" in r["sync"]["message"])
        assert [c["component"] for c in first["components"]] == ["shop/web"]
        assert first["applied"]["generation"] == 1
        assert recorder.reports[-1]["sync"]["state"] == "Ready"
    finally:
        agent.stop()
        thread.join(10)


def test_reports_say_api_unavailable_soon_after_the_api_server_goes_down_mid_pass(
        make_agent, branch: Branch, sim: SimCluster, recorder: Recorder):
    branch.publish(objects(6, "one"))
    api_timeout = 2.0
    agent = make_agent(leads=(recorder.url,), interval=300.0, drift_interval=600.0,
                       report_interval=REPORT_INTERVAL, api_timeout=api_timeout)
    thread = run(agent)
    try:
        wait_for(lambda: agent.last and agent.last.state == "Ready", timeout=30, what="first pass")
        admin(sim, "PUT", "faults/latency", {"seconds": 0.5})
        branch.publish(objects(6, "two"))
        agent.poll_git_now()
        wait_for(lambda: "sync pass running" in recorder.reports[-1]["sync"]["message"], timeout=30,
                 what="a pass under way")
        admin(sim, "POST", "down")
        down = time.monotonic()
        wait_for(lambda: recorder.reports[-1]["sync"]["reason"] == "ApiUnavailable", timeout=30,
                 what="a report saying ApiUnavailable")
        seen = recorder.times[-1] - down
        # Requests in flight end within one --api-timeout, the next fail at once: the bound
        # is twice the timeout, plus a report interval for the next heartbeat.
        assert seen <= 2 * api_timeout + GAP, f"ApiUnavailable reported {seen:.1f} s after the API went down"
        time.sleep(8 * REPORT_INTERVAL)  # the outage goes on: heartbeats keep saying so, no flapping
        admin(sim, "DELETE", "faults")
        admin(sim, "POST", "up")
        up = time.monotonic()
        outage = received(recorder, down, up)
        times = [down, *(t for t, _ in outage), up]
        assert max(gaps(times)) <= GAP, f"report gaps while the API server was down: {gaps(times)}"
        said = [r["sync"]["reason"] for t, r in outage if t >= down + seen]
        assert set(said) == {"ApiUnavailable"}, said
        # The API server answers again: the agent notices within a report interval or so
        # and syncs at once (its passes had backed off to 300 s).
        wait_for(lambda: recorder.reports[-1]["sync"]["state"] == "Ready", timeout=30, what="Ready again")
        assert recorder.times[-1] - up <= 10 * GAP, f"Ready {recorder.times[-1] - up:.1f} s after the API came back"
    finally:
        agent.stop()
        thread.join(10)


def _hang(prefix: str, release: threading.Event) -> Any:
    """A server hook: requests under ``prefix`` are accepted and never answered (until released)."""

    def hook(handler: Any, method: str, path: str) -> bool:
        if not path.startswith(prefix):
            return False
        release.wait(120)
        handler.close_connection = True
        return True

    return hook


def test_a_pass_against_an_api_server_that_never_answers_ends_within_the_timeout(
        make_agent, branch: Branch, sim: SimCluster):
    branch.publish(objects(4, "one"))
    api_timeout = 1.0
    agent = make_agent(api_timeout=api_timeout)
    assert agent.sync().state == "Ready"
    release = threading.Event()
    try:
        # First the requests for the app's objects hang (40 of them, applied 8 at a time;
        # the inventory's writes go through), then every request.
        for prefix, objects_now in (("/api/v1/namespaces/shop/", objects(40, "two")), ("/", objects(40, "three"))):
            sim.server.hooks.append(_hang(prefix, release))
            head = branch.publish(objects_now)
            start = time.monotonic()
            result = agent.sync()
            seconds = time.monotonic() - start
            sim.server.hooks.clear()
            assert result.state == "Stalled" and result.reason == "ApiUnavailable", (result.reason, result.message)
            # With the app's requests hanging the pass got to apply; with all of them, only
            # to reading the inventory (before the head's objects are read).
            assert result.commit == (head if prefix != "/" else None), result.message
            assert seconds <= 2 * api_timeout + 3.0, f"the pass took {seconds:.1f} s (requests under {prefix} hang)"
    finally:
        release.set()
    # The API server answers again: the next pass applies the head (the inventory's journal
    # knows what the interrupted pass may have created).
    ok = agent.sync()
    assert ok.state == "Ready" and ok.applied is not None and ok.applied.generation == 3, ok.message


def test_what_a_heartbeat_says():
    from qonnect_gitops.agent.agent import heartbeat_status
    from qonnect_gitops.model.status import SyncStatus

    ready = SyncStatus(state="Ready", reason="ReconciliationSucceeded", message="applied abc")
    refused = SyncStatus(state="Stalled", reason="PruneLimitExceeded", message="removes 3 of 4 objects")
    unavailable = SyncStatus(state="Stalled", reason="ApiUnavailable", message="cannot read the inventory")
    # No pass under way (or a short one): the last pass's result, as it was.
    assert heartbeat_status(ready, None, "apply", None, 0.0) == ready
    assert heartbeat_status(refused, None, "apply", None, 0.0) == refused
    # A long pass: Reconciling/Progressing with its age and phase...
    long = heartbeat_status(ready, 12.4, "apply", None, 0.0)
    assert (long.state, long.reason) == ("Reconciling", "Progressing")
    assert long.message == "sync pass running for 12 s (apply)"
    assert heartbeat_status(None, 3.0, "fetch", None, 0.0).reason == "Progressing"  # the first pass
    # ... but a refusal stands until a pass ends otherwise (the leads keep the cluster
    # cordoned instead of flapping to Ready while it tries again) ...
    kept = heartbeat_status(refused, 12.0, "guards", None, 0.0)
    assert (kept.state, kept.reason) == ("Stalled", "PruneLimitExceeded")
    assert kept.message == "sync pass running for 12 s (guards); the last pass: removes 3 of 4 objects"
    # ... and an ApiUnavailable pass does not, once the API server answers again.
    assert heartbeat_status(unavailable, 12.0, "apply", None, 0.0).reason == "Progressing"
    # The API server known not to answer comes first, whatever the last pass said.
    for last, running in ((ready, None), (refused, 12.0), (None, 3.0), (None, None)):
        down = heartbeat_status(last, running, "apply", "Read timed out", 7.2)
        assert (down.state, down.reason) == ("Stalled", "ApiUnavailable")
        assert down.message.startswith("the API server has not answered for 7 s (Read timed out)")
    long_message = SyncStatus(state="Stalled", reason="ApplyFailed", message="x" * 1024)
    assert len(heartbeat_status(long_message, 5.0, "apply", None, 0.0).message) == 1024
