"""Crash safety: ``qonnect agent`` killed with SIGKILL at random points of its passes, over
many rounds, never leaves an object behind that a later commit cannot prune.

Each round publishes a commit that replaces every ConfigMap of the previous round, starts
the agent as a real process, and kills it (-9) at a point drawn at random: after a random
number of this round's objects exist (mid-apply), after a random number of the last
round's objects are gone (mid-prune), or after a random delay (anywhere, including
start-up and the inventory writes). A final commit is then applied to completion and
nothing labelled as ours may remain but what it lists.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from kubernetes import client

from qonnect_gitops.sim import SimCluster
from tests.agent.conftest import CLUSTER, Branch, configmap, namespace
from tests.conftest import ROOT

ROUNDS = 14  # at least; more (up to MAX_ROUNDS) until enough kills landed mid-apply
MAX_ROUNDS = 40
PER_ROUND = 40


def _ours(core: client.CoreV1Api) -> set[str]:
    items = core.list_namespaced_config_map("shop", label_selector="app.kubernetes.io/managed-by=qonnect").items
    return {c.metadata.name for c in items}


def _until(predicate: Callable[[], bool], proc: subprocess.Popen[bytes], timeout: float) -> None:
    """Poll fast until ``predicate`` holds, the agent exits, or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if predicate():
            return
        time.sleep(0.003)


@pytest.mark.timeout(900)
def test_kill_9_at_random_points_leaves_nothing_unprunable(sim: SimCluster, branch: Branch, core, tmp_path: Path):
    rng = random.Random(int(os.environ.get("QONNECT_CRASH_SEED", "1515")))
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(sim.kubeconfig_yaml())
    sim.faults.set_latency(0.015, jitter=0.015)  # passes long enough to be hit in the middle
    command = [sys.executable, "-m", "qonnect_gitops", "agent", "--cluster", CLUSTER, "--repo", branch.url,
               "--kubeconfig", str(kubeconfig), "--cache-dir", str(tmp_path / "cache"), "--interval", "0.05",
               "--drift-interval", "3600", "--log-level", "warning"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    log = open(tmp_path / "agent.log", "ab")  # noqa: SIM115 - closed at the end
    hits = {"apply": 0, "prune": 0, "time": 0}
    try:
        for rnd in range(MAX_ROUNDS):
            if rnd >= ROUNDS and hits["apply"] >= 3:
                break
            names = [f"r{rnd}-{i}" for i in range(PER_ROUND)]
            previous = {f"r{rnd - 1}-{i}" for i in range(PER_ROUND)}
            branch.publish([namespace("shop")] + [configmap(n) for n in names], prune_limit=10_000)
            proc = subprocess.Popen(command, env=env, cwd=ROOT, stdout=log, stderr=log)
            mode = rng.choice(["apply", "apply", "prune", "time"]) if rnd else "apply"
            if mode == "apply":
                want = rng.randint(1, PER_ROUND - 1)
                _until(lambda names=set(names), want=want: len(_ours(core) & names) >= want, proc, 30)
            elif mode == "prune":
                left = rng.randint(1, PER_ROUND - 1)
                _until(lambda previous=previous, left=left: len(_ours(core) & previous) <= left, proc, 30)
            else:
                time.sleep(rng.uniform(0.2, 3.0))
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
            present = _ours(core)
            if mode == "apply" and 0 < len(present & set(names)) < PER_ROUND:
                hits["apply"] += 1
            elif mode == "prune" and 0 < len(present & previous) < PER_ROUND:
                hits["prune"] += 1
            elif mode == "time":
                hits["time"] += 1
        # The kills did land mid-pass: the test is not vacuous.
        assert hits["apply"] >= 3, hits
        final = branch.publish([namespace("shop"), configmap("final")], prune_limit=10_000)
        done = subprocess.run([*command, "--once", "--wait-timeout", "0"], env=env, cwd=ROOT,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    finally:
        log.close()
    assert _ours(core) == {"final"}
    inventory = json.loads(core.read_namespaced_config_map("qonnect-inventory", "qonnect-system").data["inventory"])
    assert inventory["commit"] == final
    assert sorted(k[4] for k in inventory["objects"]) == ["final", "shop"]
