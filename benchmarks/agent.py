"""Benchmark the resource agent end to end: Git commit → objects applied in the cluster.

A simulated cluster runs in its own process, a ``git daemon`` serves the goals
repository, and ``qonnect agent`` runs as a third process exactly as deployed
(poll interval 10 s; a signed push webhook triggers the sync, as a forge would).
For 10 and 500 objects (ConfigMaps, Deployments, Services in one namespace) it
measures the time from the cluster-branch commit landing to every object being
present with the commit's content, read through the official client; then the
time to apply a commit that changes one object among them (the agent dry-runs
all of them), and the time until every Deployment is Ready: the sim has four nodes and
its fake kubelet starts a pod 1 s after it is bound, as the demo runs it. Finally the
agent's RSS and CPU while idle.

``--prune N`` measures pruning instead: N ConfigMaps are applied, then a commit removes
them all while the sim answers ``--fault-rate`` of API requests (default 30 %) with 500
(its seeded fault injection); the figure is the time of the pass that deletes them
(parallel deletes, per-object backoff), and the passes needed until none is left.

    python benchmarks/agent.py            # readable table
    python benchmarks/agent.py --json     # one JSON object
    python benchmarks/agent.py --prune 2300 --fault-rate 0.3
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SECRET = b"bench-secret"


def _keys(tmp: Path) -> Any:
    """The leader's signing key in ``tmp`` and the agent's trusted-keys file beside it: the
    agent verifies every commit it applies, as in production."""
    from qonnect_gitops.gitstore.signing import new_key_file

    key = new_key_file(tmp / "signing-key", "bench-lead")
    (tmp / "trusted-keys").write_text(f"{key.public.openssh} bench-lead\n")
    return key


def _serve(conn: Any) -> None:
    from qonnect_gitops.model.cluster import NodeShape
    from qonnect_gitops.sim import SimCluster

    nodes = [NodeShape(count=4, cpu="16", memory="64Gi", pods=250)]
    cluster = SimCluster(name="edge-1", nodes=nodes, startup_delay=1.0)
    cluster.start()
    conn.send(cluster.kubeconfig_yaml())
    conn.send(cluster.admin_url)
    conn.recv()
    cluster.stop()


def _prune_benchmark(count: int, fault_rate: float, workers: int) -> dict[str, Any]:
    """Apply ``count`` ConfigMaps, then time the pass that prunes them all under faults."""
    import yaml

    from qonnect_gitops.agent.agent import Agent
    from qonnect_gitops.agent.config import AgentConfig
    from qonnect_gitops.gitstore.daemon import GitDaemon
    from qonnect_gitops.gitstore.store import GitStore
    from qonnect_gitops.gitstore.trailers import DecisionMeta

    tmp = Path(tempfile.mkdtemp(prefix="qonnect-bench-prune-"))
    parent, child = mp.Pipe()
    sim = mp.Process(target=_serve, args=(child,), daemon=True)
    sim.start()
    kubeconfig, admin = yaml.safe_load(parent.recv()), parent.recv()
    (tmp / "srv").mkdir()
    store = GitStore.init_bare(tmp / "srv" / "goals.git", signer=_keys(tmp))
    daemon = GitDaemon(tmp / "srv").start()
    labels = {"app.kubernetes.io/managed-by": "qonnect", "qonnect.io/app": "bench", "qonnect.io/component": "c"}

    def publish(generation: int, n: int) -> None:
        ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bench", "labels": labels}}
        files = {"placement.yaml": f"g: {generation}\n".encode(),
                 "clusters/edge-1/_cluster/namespace-bench.yaml": yaml.safe_dump(ns).encode()}
        for i in range(n):
            meta = {"name": f"cm{i}", "namespace": "bench", "labels": labels}
            files[f"clusters/edge-1/bench/c/configmap-cm{i}.yaml"] = yaml.safe_dump(
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"i": str(i)}}).encode()
        store.write_decision(files, summary=f"bench {generation}", body="", clusters=["edge-1"],
                             timestamp=1_800_000_000 + generation, prune_limits={"edge-1": 100_000},
                             meta=DecisionMeta(source="0" * 40, term=1, generation=generation, reason="scaling"))

    def faults(rate: float) -> None:
        body = json.dumps({"rate": rate, "code": 500, "seed": 15}).encode()
        urllib.request.urlopen(urllib.request.Request(f"{admin}/_sim/faults/errors", data=body, method="PUT"),
                               timeout=10).read()

    try:
        agent = Agent(AgentConfig(cluster="edge-1", repo=daemon.url("goals.git"), kubeconfig=kubeconfig,
                                  cache_dir=tmp / "cache", prune_workers=workers,
                                  trusted_keys=tmp / "trusted-keys"))
        publish(1, count)
        start = time.perf_counter()
        applied = agent.sync()
        t_apply = time.perf_counter() - start
        assert applied.state == "Ready", applied.message
        publish(2, 0)
        faults(fault_rate)
        start = time.perf_counter()
        first = agent.sync()
        t_first = time.perf_counter() - start
        deleted, passes = len(first.pruned.deleted), 1
        while first.pruned.errors and passes < 10:
            again = agent.sync()
            deleted += len(again.pruned.deleted)
            passes += 1
            first = again
        t_all = time.perf_counter() - start
        faults(0.0)
        return {"objects": count, "fault_rate": fault_rate, "workers": workers,
                "apply_seconds": round(t_apply, 2), "prune_pass_seconds": round(t_first, 2),
                "deleted_in_first_pass": len(agent.last.pruned.deleted) if passes == 1 else None,
                "passes_until_all_deleted": passes, "all_deleted_seconds": round(t_all, 2),
                "deleted": deleted, "final_state": str(first.state), "retried_requests": agent.kube.retried}
    finally:
        daemon.stop()
        parent.send("done")
        sim.join(10)


def _objects(n: int, tag: str) -> list[dict[str, Any]]:
    labels = {"app.kubernetes.io/managed-by": "qonnect", "qonnect.io/app": "bench"}
    out: list[dict[str, Any]] = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bench", "labels": labels}}]
    i = 0
    while len(out) < n:
        comp = f"c{i // 3}"
        lab = {**labels, "qonnect.io/component": comp, "bench/tag": tag}
        kind = i % 3
        if kind == 0:
            out.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": comp, "namespace": "bench",
                        "labels": lab}, "data": {"tag": tag}})
        elif kind == 1:
            out.append({"apiVersion": "apps/v1", "kind": "Deployment",
                        "metadata": {"name": comp, "namespace": "bench", "labels": lab},
                        "spec": {"replicas": 1, "selector": {"matchLabels": {"c": comp}},
                                 "template": {"metadata": {"labels": {"c": comp}}, "spec": {"containers": [
                                     {"name": "app", "image": "nginx:1.27",
                                      "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}}}})
        else:
            out.append({"apiVersion": "v1", "kind": "Service", "metadata": {"name": comp, "namespace": "bench",
                        "labels": lab}, "spec": {"selector": {"c": comp}, "ports": [{"port": 80}]}})
        i += 1
    return out


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--sizes", default="10,500")
    parser.add_argument("--idle-seconds", type=float, default=30.0)
    parser.add_argument("--interval", type=float, default=10.0, help="the agent's poll interval")
    parser.add_argument("--prune", type=int, default=0, metavar="N",
                        help="measure pruning N objects under injected 500s instead")
    parser.add_argument("--fault-rate", type=float, default=0.3, help="with --prune: share of requests failing")
    parser.add_argument("--workers", type=int, default=16, help="with --prune: parallel deletes")
    args = parser.parse_args()
    if args.prune:
        figures = _prune_benchmark(args.prune, args.fault_rate, args.workers)
        if args.json:
            print(json.dumps(figures, indent=2))
        else:
            print(f"prune benchmark: {figures['objects']} objects applied in {figures['apply_seconds']}s; with "
                  f"{figures['fault_rate']:.0%} of API requests answered 500, the prune pass took "
                  f"{figures['prune_pass_seconds']}s ({figures['workers']} parallel deletes); all "
                  f"{figures['deleted']} deleted after {figures['passes_until_all_deleted']} pass(es), "
                  f"{figures['all_deleted_seconds']}s; {figures['retried_requests']} requests retried")
        return 0

    import yaml
    from kubernetes import client, config

    from qonnect_gitops.gitstore.daemon import GitDaemon, free_port
    from qonnect_gitops.gitstore.store import GitStore
    from qonnect_gitops.gitstore.trailers import DecisionMeta

    tmp = Path(tempfile.mkdtemp(prefix="qonnect-bench-agent-"))
    parent, child = mp.Pipe()
    sim = mp.Process(target=_serve, args=(child,), daemon=True)
    sim.start()
    kubeconfig = tmp / "kubeconfig"
    kubeconfig.write_text(parent.recv())
    parent.recv()  # the admin URL (faults), unused here
    api = config.new_client_from_config(config_file=str(kubeconfig))
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    (tmp / "srv").mkdir()
    store = GitStore.init_bare(tmp / "srv" / "goals.git", signer=_keys(tmp))
    daemon = GitDaemon(tmp / "srv").start()
    port = free_port()
    (tmp / "secret").write_text(SECRET.decode())
    generation = 0

    def publish(objs: list[dict[str, Any]], notify: bool = True) -> float:
        nonlocal generation
        generation += 1
        files = {"placement.yaml": f"g: {generation}\n".encode()}
        for o in objs:
            m = o["metadata"]
            path = f"_cluster/namespace-{m['name']}.yaml" if o["kind"] == "Namespace" else \
                f"bench/{m['labels']['qonnect.io/component']}/{o['kind'].lower()}-{m['name']}.yaml"
            files[f"clusters/edge-1/{path}"] = yaml.safe_dump(o).encode()
        store.write_decision(files, summary=f"bench {generation}", body="", clusters=["edge-1"],
                             timestamp=1_800_000_000 + generation, prune_limits={"edge-1": 100_000},
                             meta=DecisionMeta(source="0" * 40, term=1, generation=generation, reason="scaling"))
        landed = time.perf_counter()
        if not notify:
            return landed
        body = b'{"ref":"refs/heads/cluster/edge-1"}'
        sig = "sha256=" + hmac.new(SECRET, body, hashlib.sha256).hexdigest()
        urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/webhook", data=body, method="POST",
                                                      headers={"X-Hub-Signature-256": sig}), timeout=5)
        return landed

    def applied(objs: list[dict[str, Any]], tag: str) -> bool:
        want = sum(o["kind"] != "Namespace" for o in objs)
        sel = f"bench/tag={tag}"
        got = len(core.list_namespaced_config_map("bench", label_selector=sel).items) + \
            len(apps.list_namespaced_deployment("bench", label_selector=sel).items) + \
            len(core.list_namespaced_service("bench", label_selector=sel).items)
        return got == want

    def ready(tag: str, since: float, timeout: float = 300) -> float:
        """Until every Deployment of this commit reports all its replicas ready."""
        sel = f"bench/tag={tag}"
        while time.perf_counter() - since < timeout:
            deployments = apps.list_namespaced_deployment("bench", label_selector=sel).items
            if deployments and all((d.status.ready_replicas or 0) >= (d.spec.replicas or 0)
                                   for d in deployments):
                return time.perf_counter() - since
            time.sleep(0.05)
        raise TimeoutError(f"deployments with tag {tag} not ready within {timeout}s")

    def synced(commit: str, since: float, timeout: float = 300) -> float:
        """Until the agent's metrics say this commit is applied (inventory written, prune done)."""
        needle = f'commit="{commit}"'
        while time.perf_counter() - since < timeout:
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
            if needle in text:
                return time.perf_counter() - since
            time.sleep(0.02)
        raise TimeoutError(f"commit {commit} not recorded as applied within {timeout}s")

    def wait(objs: list[dict[str, Any]], tag: str, since: float, timeout: float = 300) -> float:
        while time.perf_counter() - since < timeout:
            try:
                if applied(objs, tag):
                    return time.perf_counter() - since
            except client.ApiException:
                pass
            time.sleep(0.02)
        raise TimeoutError(f"objects with tag {tag} not applied within {timeout}s")

    results: dict[str, Any] = {"unit": "seconds", "measures": "applied, synced and healthy (sim start-up delay 1 s)",
                               "sizes": {}}
    agent = None
    agent_log = open(tmp / "agent.log", "wb")  # noqa: SIM115 - closed in finally, after the agent exits
    try:
        publish(_objects(1, "boot"), notify=False)  # the branch must exist before the agent starts
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        agent = subprocess.Popen([sys.executable, "-m", "qonnect_gitops", "agent", "--cluster", "edge-1",
                                  "--repo", daemon.url("goals.git"), "--kubeconfig", str(kubeconfig),
                                  "--cache-dir", str(tmp / "cache"), "--interval", str(args.interval), "--drift-interval", "3600",
                                  "--webhook-addr", f"127.0.0.1:{port}", "--metrics-addr", f"127.0.0.1:{port}",
                                  "--webhook-secret-file", str(tmp / "secret"), "--log-level", "warning",
                                  "--trusted-keys", str(tmp / "trusted-keys")],
                                 env=env, stderr=agent_log)
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        time.sleep(1.0)
        for n in (int(s) for s in args.sizes.split(",")):
            objs = _objects(n, f"n{n}")
            since = publish(objs)
            t_full = wait(objs, f"n{n}", since)
            t_full_sync = synced(store.cluster_head("edge-1"), since)
            t_healthy = ready(f"n{n}", since)
            changed = [dict(o) for o in objs]
            # one object changes: its tag moves; measure until it shows
            one = next(i for i, o in enumerate(changed) if o["kind"] == "ConfigMap")
            changed[one] = {**changed[one], "metadata": {**changed[one]["metadata"],
                            "labels": {**changed[one]["metadata"]["labels"], "bench/tag": f"n{n}-one"}}}
            since = publish(changed)
            t_one = synced(store.cluster_head("edge-1"), since)
            assert len(core.list_namespaced_config_map("bench", label_selector=f"bench/tag=n{n}-one").items) == 1
            results["sizes"][str(n)] = {"commit_to_objects_applied": round(t_full, 3),
                                        "commit_to_sync_complete": round(t_full_sync, 3),
                                        "commit_to_healthy": round(t_healthy, 3),
                                        "one_change_to_sync_complete": round(t_one, 3)}
            time.sleep(1.0)
        time.sleep(2.0)
        cpu0, t0 = _cpu_seconds(agent.pid), time.perf_counter()
        time.sleep(args.idle_seconds)
        cpu1, t1 = _cpu_seconds(agent.pid), time.perf_counter()
        results["idle"] = {"rss_mib": round(_rss_kib(agent.pid) / 1024, 1),
                           "cpu_percent": round(100 * (cpu1 - cpu0) / (t1 - t0), 2),
                           "seconds": round(t1 - t0, 1), "poll_interval": args.interval,
                           "objects_managed": int(args.sizes.split(",")[-1])}
    finally:
        if agent is not None:
            agent.terminate()
            try:
                agent.wait(10)
            except subprocess.TimeoutExpired:
                agent.kill()
        agent_log.close()
        daemon.stop()
        parent.send("done")
        sim.join(10)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print(f"agent benchmark ({results['measures']})")
        for n, r in results["sizes"].items():
            print(f"  {n:>4} objects: commit -> all objects applied {r['commit_to_objects_applied']:.3f}s, "
                  f"-> sync complete {r['commit_to_sync_complete']:.3f}s, -> all Deployments Ready "
                  f"{r['commit_to_healthy']:.3f}s; one change among them -> sync complete "
                  f"{r['one_change_to_sync_complete']:.3f}s")
        idle = results["idle"]
        print(f"  idle ({idle['objects_managed']} objects, poll every {idle['poll_interval']}s): "
              f"RSS {idle['rss_mib']} MiB, CPU {idle['cpu_percent']}% over {idle['seconds']}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
