"""The template fleet under a real lead group: simulated agents and Git-side checks.

Agents are simulated by posting reports with each cluster's token; the Git side is
read with plain ``git`` from the served bare repository, as an outsider would.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

from qonnect_gitops.lead.reconcile import placement_document
from tests.goals_repo import GoalsRepo
from tests.lead.harness import Lead, LeadGroup, http

TEMPLATE_CLUSTERS = [f"{tier}-{i}" for tier in ("cloud", "edge", "fog") for i in (1, 2, 3)]


def fast_heartbeat(goals: GoalsRepo, interval: float = 0.5, grace: float = 3.0,
                   cooldown: float | None = None) -> str:
    """Shorten the template's heartbeat (and optionally the cooldown) in one goals commit."""
    path = goals.work / "qonnect.yaml"
    text = path.read_text()
    text = text.replace("intervalSeconds: 2", f"intervalSeconds: {interval}")
    text = text.replace("graceSeconds: 8", f"graceSeconds: {grace}")
    if cooldown is not None:
        text = text.replace("cooldownSeconds: 120", f"cooldownSeconds: {cooldown}")
    path.write_text(text)
    return goals.commit("test: fast heartbeat")


def agent_report(cluster: str, latency_ms: float | None = None) -> dict[str, Any]:
    """A minimal healthy report; with ``latency_ms``, a measurement to eu-central."""
    now = time.time()
    body: dict[str, Any] = {
        "cluster": cluster,
        "agentTime": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now))
        + f"{now % 1:.6f}"[1:] + "Z",
        "sync": {"state": "Ready", "reason": "ApplySucceeded", "message": "all applied"},
    }
    if latency_ms is not None:
        body["latencies"] = [{"to": "eu-central", "ms": latency_ms}]
    return body


class Agents:
    """A thread posting a report for every cluster each ``interval`` seconds, to any
    lead that answers; clusters in ``silent`` send nothing; ``latency`` overrides."""

    def __init__(self, group: LeadGroup, clusters: list[str], interval: float = 0.5) -> None:
        self.group = group
        self.clusters = clusters
        self.interval = interval
        self.silent: set[str] = set()
        self.latency: dict[str, float] = {}
        self.accepted = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Agents:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def send_round(self) -> None:
        for cluster in self.clusters:
            if cluster in self.silent:
                continue
            body = agent_report(cluster, self.latency.get(cluster))
            for lead in self.group.leads:
                if not lead.alive():
                    continue
                try:
                    code, _, _ = http("POST", f"{lead.url}/v1/clusters/{cluster}/report", body,
                                      token=self.group.tokens[cluster], timeout=2)
                except OSError:
                    continue
                if code == 200:
                    self.accepted += 1
                    break

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            self.send_round()
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - started)))


def git(goals: GoalsRepo, *args: str) -> str:
    return subprocess.run(["git", "-C", str(goals.bare), *args], capture_output=True, text=True,
                          check=True).stdout


def placement(goals: GoalsRepo, rev: str = "qonnect/plan") -> dict[str, dict[str, int]]:
    """``{component: {cluster: replicas}}`` of the plan commit at ``rev``."""
    doc = placement_document(goals.bare, goals.rev(rev))
    return {key: {a["cluster"]: a["replicas"] for a in comp["assignments"] if a["replicas"]}
            for key, comp in doc["components"].items()}


def generation(goals: GoalsRepo, rev: str = "qonnect/plan") -> int:
    return int(goals.trailers(rev)["Qonnect-Generation"][0])


def plan_history(goals: GoalsRepo) -> list[str]:
    """Plan commits, oldest first (first parents only: the plan branch is linear)."""
    return git(goals, "rev-list", "--first-parent", "--reverse", "qonnect/plan").split()


def check_consistent(goals: GoalsRepo, clusters: list[str]) -> str:
    """Every cluster branch holds exactly its subtree of the plan head (the empty tree
    when the plan has none); generations along the plan branch strictly increase.
    Returns the plan head."""
    head = goals.rev("qonnect/plan")
    empty = git(goals, "hash-object", "-t", "tree", "/dev/null").strip()
    for cluster in clusters:
        branch_tree = git(goals, "rev-parse", f"cluster/{cluster}^{{tree}}").strip()
        try:
            want = git(goals, "rev-parse", f"{head}:clusters/{cluster}").strip()
        except subprocess.CalledProcessError:
            want = empty
        assert branch_tree == want, f"cluster/{cluster} is not the subtree of plan {head[:12]}"
    generations = [generation(goals, c) for c in plan_history(goals)]
    assert generations == sorted(set(generations)), f"generations not increasing: {generations}"
    return head


def consistent_at(goals: GoalsRepo, clusters: list[str], source: str) -> bool:
    """Whether the decision for goals commit ``source`` is fully out: plan and fan-out."""
    if not goals.has("qonnect/plan") or goals.trailers("qonnect/plan")["Qonnect-Source"] != [source]:
        return False
    try:
        check_consistent(goals, clusters)
    except (AssertionError, subprocess.CalledProcessError):
        return False
    return True


def wait_for(predicate: Callable[[], Any], timeout: float, what: str,
             group: LeadGroup | None = None) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except (subprocess.CalledProcessError, KeyError):
            value = None
        if value:
            return value
        time.sleep(0.05)
    tails = group.log_tails(25) if group else ""
    raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{tails}")


def leader_status(group: LeadGroup, leader: Lead) -> dict[str, Any]:
    status = group.status(leader)
    assert status is not None
    return status
