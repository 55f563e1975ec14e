"""Crash safety: ``qonnect agent`` killed with SIGKILL at random points of its passes, over
many rounds, never leaves an object behind that a later commit cannot prune, and never
stalls its cluster.

The first test: each round publishes a commit that replaces every ConfigMap of the
previous round, starts the agent as a real process, and kills it (-9) at a point drawn at
random: after a random number of this round's objects exist (mid-apply), after a random
number of the last round's objects are gone (mid-prune), or after a random delay
(anywhere, including start-up and the inventory writes). A final commit is then applied
to completion and nothing labelled as ours may remain but what it lists.

The second (issue 30, 3): a large branch change per round (hundreds of objects, most of
them replaced, with the Qonnect-Prune-Limit the leader writes: exactly what the commit
removes from its parent), the agent killed at a random point of the pass (notably after
the inventory is written and before the prune), sometimes twice, then usually a newer
commit on top; each round ends with one ``--once`` pass that must leave the cluster at
the branch head, Ready, with no orphans and no wrong prunes (the objects every commit
holds keep their uid; objects the agent never created are untouched). Before the journal,
a kill between the inventory write and the prune made every later commit
``PruneLimitExceeded``: the interrupted pass's leftovers counted as removals the leader
never ordered.
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
from typing import Any

import pytest
from kubernetes import client, config

from qonnect_gitops.model.cluster import NodeShape
from qonnect_gitops.sim import SimCluster
from tests.agent.conftest import CLUSTER, LABELS, Branch, configmap, configmap_names, deployment, namespace
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
               "--drift-interval", "3600", "--log-level", "warning", "--trusted-keys", str(branch.trusted)]
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


STABLE = 60  # ConfigMaps every commit holds (plus two Deployments)
CHURN = 240  # ConfigMaps each commit replaces
MODES = ("apply", "journal", "prune-write", "prune-write", "prune", "time")


def _inventory(core: client.CoreV1Api) -> dict[str, Any] | None:
    try:
        cm = core.read_namespaced_config_map("qonnect-inventory", "qonnect-system")
    except client.ApiException:
        return None
    return json.loads((cm.data or {}).get("inventory") or "null")


def _managed(core: client.CoreV1Api, apps: client.AppsV1Api) -> dict[str, str]:
    """Every object of ours in "shop" (ConfigMaps and Deployments): name -> uid."""
    selector = "app.kubernetes.io/managed-by=qonnect"
    items = [*core.list_namespaced_config_map("shop", label_selector=selector).items,
             *apps.list_namespaced_deployment("shop", label_selector=selector).items]
    return {i.metadata.name: i.metadata.uid for i in items}


@pytest.fixture
def sim_with_nodes() -> Any:
    with SimCluster(name=CLUSTER, nodes=[NodeShape.model_validate({"count": 2, "cpu": "4", "memory": "8Gi"})],
                    startup_delay=0.05, bookmark_interval=0.3, namespace_delay=0.0) as cluster:
        yield cluster


@pytest.mark.timeout(1800)
def test_kill_9_at_random_points_of_large_passes_never_stalls_the_cluster(sim_with_nodes: SimCluster, branch: Branch,
                                                                         tmp_path: Path):
    sim = sim_with_nodes
    rounds = int(os.environ.get("QONNECT_CRASH_ROUNDS", "12"))
    rng = random.Random(int(os.environ.get("QONNECT_CRASH_SEED", "3003")))
    api = config.new_client_from_config_dict(sim.kubeconfig())
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(sim.kubeconfig_yaml())
    command = [sys.executable, "-m", "qonnect_gitops", "agent", "--cluster", CLUSTER, "--repo", branch.url,
               "--kubeconfig", str(kubeconfig), "--cache-dir", str(tmp_path / "cache"), "--interval", "0.05",
               "--drift-interval", "3600", "--log-level", "warning", "--trusted-keys", str(branch.trusted)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    log = open(tmp_path / "agent.log", "ab")  # noqa: SIM115 - closed at the end
    stable = [configmap(f"s{i}") for i in range(STABLE)] + [deployment(n, replicas=1) for n in ("web", "api")]
    state: dict[str, Any] = {"commit": 0, "churn": set()}  # the branch head's churned names

    def publish() -> tuple[str, set[str]]:
        """A commit replacing every churned ConfigMap, with the leader's exact prune limit."""
        state["commit"] += 1
        names = {f"c{state['commit']}-{i}" for i in range(CHURN)}
        removed = len(state["churn"])
        head = branch.publish([namespace("shop"), *stable, *(configmap(n) for n in sorted(names))],
                              prune_limit=removed or None)
        state["churn"] = names
        return head, names

    def kill(proc: subprocess.Popen[bytes]) -> None:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)

    def settle() -> subprocess.CompletedProcess[str]:
        return subprocess.run([*command, "--once", "--wait-timeout", "60"], env=env, cwd=ROOT, capture_output=True,
                              text=True, timeout=300)

    publish()
    first = settle()
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    # Objects the agent never created (one with a forged ownership label): never touched.
    core.create_namespaced_config_map("shop", client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="theirs"), data={"k": "theirs"}))
    core.create_namespaced_config_map("shop", client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="lookalike", labels=LABELS), data={"k": "lookalike"}))
    uids = {n: u for n, u in _managed(core, apps).items() if not n.startswith("c")}  # stable ones, and lookalike
    assert len(uids) == STABLE + 2 + 1
    hits = {mode: 0 for mode in MODES}
    sim.faults.set_latency(0.008, jitter=0.008)  # passes long enough to be hit in the middle
    started = time.monotonic()
    try:
        order: list[str] = []
        played = 0
        for rnd in range(2 * rounds):
            if rnd >= rounds and hits["prune-write"] >= 3 and hits["apply"] + hits["journal"] >= 3:
                break  # at least ``rounds``, more until enough kills landed where they were aimed
            if not order:
                order = rng.sample(MODES, len(MODES))  # every kind of point, in a random order
            mode = order.pop()
            previous = set(state["churn"])
            head, names = publish()
            proc = subprocess.Popen(command, env=env, cwd=ROOT, stdout=log, stderr=log)
            if mode == "apply":
                want = rng.randint(1, CHURN - 1)
                _until(lambda names=names, want=want: len(set(_managed(core, apps)) & names) >= want, proc, 120)
            elif mode == "journal":
                _until(lambda head=head: (_inventory(core) or {}).get("pass", {}).get("commit") == head, proc, 120)
            elif mode == "prune-write":
                _until(lambda head=head: (_inventory(core) or {}).get("pass", {}).get("phase") == "prune"
                       and (_inventory(core) or {}).get("commit") == head, proc, 120)
            elif mode == "prune":
                left = rng.randint(1, CHURN - 1)
                _until(lambda previous=previous, left=left: len(set(_managed(core, apps)) & previous) <= left, proc,
                       120)
            else:
                time.sleep(rng.uniform(0.5, 4.0))
            kill(proc)
            inv = _inventory(core) or {}
            landed = {"apply": inv.get("pass", {}).get("phase") == "apply",
                      "journal": inv.get("pass", {}).get("commit") == head,
                      "prune-write": inv.get("pass", {}).get("phase") == "prune",
                      "prune": inv.get("pass", {}).get("phase") == "prune",
                      "time": True}
            hits[mode] += landed[mode]
            if rng.random() < 0.3:  # killed again, while finishing or undoing the first interruption
                proc = subprocess.Popen(command, env=env, cwd=ROOT, stdout=log, stderr=log)
                time.sleep(rng.uniform(0.5, 3.0))
                kill(proc)
            if rng.random() < 0.75:  # the leader moved on while the agent was down
                head, names = publish()
            done = settle()
            assert done.returncode == 0, (rnd, mode, done.stdout[-3000:] + done.stderr[-3000:])
            present = _managed(core, apps)
            assert set(present) == set(uids) | names, (rnd, mode)  # no orphans, nothing missing
            assert {n: present[n] for n in uids} == uids, (rnd, mode)  # no wrong prunes
            assert {"theirs", "lookalike"} <= configmap_names(core)
            inv = _inventory(core) or {}
            assert inv["commit"] == head and "pass" not in inv and "arriving" not in inv, (rnd, mode)
            assert len(inv["objects"]) == 1 + STABLE + 2 + CHURN and "leaving" not in inv, (rnd, mode)
            played += 1
    finally:
        log.close()
    load = os.getloadavg()
    print(f"crash rounds={played} seconds={time.monotonic() - started:.0f} hits={hits} "
          f"load={load[0]:.1f},{load[1]:.1f},{load[2]:.1f}")
    # The kills did land where they were aimed: the test is not vacuous.
    assert hits["prune-write"] >= 3 and hits["apply"] + hits["journal"] >= 3, hits
