"""Benchmark the simulated cluster through the official Python client.

The sim runs in a separate process (as in ``qonnect demo``, where agents and
sims do not share a GIL with the benchmark driver); one client issues requests
sequentially over a kept-alive connection. Reports requests per second for
get, list (100 ConfigMaps) and server-side apply (a Deployment whose replicas
change on every apply, so each one is a real write), and the sim process's
resident memory per 1,000 applied Deployments.

Cost per write against cluster size: 500 server-side applies (ConfigMaps,
Deployments of one replica and Services, as the agent applies them) into an empty
cluster with nodes, controllers and kubelet running (cloud-1's shape: ten nodes;
warmed by 30 applies first),
and the same 500 into a cluster that already holds 2,000 objects (the same mix,
plus what the controllers made of it: ReplicaSets, Pods, Endpoints, Events...).
The goal: the second within 1.3 times the first.

Part 2 adds the idle cost of a fleet: the nine clusters of repo-template in
one process (as ``qonnect sim`` runs them), with the Bookinfo manifests
applied to a few of them and every Pod Ready, then the process's resident
memory and its CPU use (user + system, percent of one core) over a quiet
interval.

    python benchmarks/sim.py            # readable table
    python benchmarks/sim.py --json     # one JSON object
    python benchmarks/sim.py --idle-only
    python benchmarks/sim.py --apply-only [--apply-objects 500 --prefill 2000]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _serve(conn: Any) -> None:
    from qonnect_gitops.sim import SimCluster

    cluster = SimCluster(name="bench")
    cluster.start()
    conn.send((cluster.kubeconfig(), os.getpid()))
    conn.recv()  # block until the driver is done
    cluster.stop()


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _serve_nodes(conn: Any) -> None:
    """A cluster shaped like cloud-1 (controllers, scheduler and kubelet running); answers count requests."""
    from qonnect_gitops.model.cluster import NodeShape
    from qonnect_gitops.sim import SimCluster

    shape = NodeShape.model_validate({"count": 10, "cpu": "32", "memory": "128Gi"})
    cluster = SimCluster(name="bench", nodes=[shape], startup_delay=0.2)
    cluster.start()
    conn.send((cluster.kubeconfig(), os.getpid()))
    while conn.recv() == "count":
        conn.send(cluster.core.store.count())
    cluster.stop()


def mixed_objects(prefix: str, n: int) -> list[dict[str, Any]]:
    """``n`` objects as the agent applies them: a ConfigMap, a Deployment, a Service selecting it, in turn."""
    out: list[dict[str, Any]] = []
    for i in range(n):
        name = f"{prefix}-{i // 3}"
        if i % 3 == 0:
            out.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default"},
                        "data": {"settings": "x" * 200}})
        elif i % 3 == 1:
            d = deployment(name, 1)
            d["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "10m",
                                                                                       "memory": "16Mi"}
            out.append(d)
        else:
            out.append({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": "default"},
                        "spec": {"selector": {"app": name}, "ports": [{"port": 80, "targetPort": 80}]}})
    return out


def apply_cost(objects: int, prefill: int) -> dict[str, Any]:
    """Seconds for ``objects`` server-side applies into an empty cluster and into one holding ``prefill`` objects."""
    from kubernetes import config, dynamic

    figures: dict[str, Any] = {"apply_objects": objects, "apply_prefill_objects": prefill}
    for label, fill in (("empty", 0), ("full", prefill)):
        parent, child = mp.Pipe()
        proc = mp.get_context("spawn").Process(target=_serve_nodes, args=(child,), daemon=True)
        proc.start()
        kubeconfig, _ = parent.recv()
        try:
            api = config.new_client_from_config_dict(kubeconfig)
            dyn = dynamic.DynamicClient(api)
            kinds = {k: dyn.resources.get(api_version=v, kind=k)
                     for v, k in (("v1", "ConfigMap"), ("apps/v1", "Deployment"), ("v1", "Service"))}

            def apply(objs: list[dict[str, Any]], dyn: Any = dyn, kinds: dict[str, Any] = kinds) -> float:
                started = time.perf_counter()
                for o in objs:
                    dyn.server_side_apply(kinds[o["kind"]], body=o, namespace="default", field_manager="bench")
                return time.perf_counter() - started

            # Warm the process first (schema caches, discovery): a few objects, so "empty" stays empty.
            apply(mixed_objects("warm", 30))
            parent.send("count")
            held = parent.recv()
            batch = 0
            while held < fill:
                apply(mixed_objects(f"fill{batch}", 150))
                batch += 1
                time.sleep(0.5)  # let the controllers catch up, as between two agent syncs
                parent.send("count")
                held = parent.recv()
            time.sleep(2.0 if fill else 0.5)
            figures[f"apply_{label}_objects_before"] = held
            figures[f"apply_{label}_seconds"] = round(apply(mixed_objects("bench", objects)), 2)
            api.close()
        finally:
            parent.send("stop")
            proc.join(timeout=10)
    figures["apply_full_over_empty"] = round(figures["apply_full_seconds"] / figures["apply_empty_seconds"], 2)
    return figures
BOOKINFO_CLUSTERS = ("cloud-1", "fog-1", "fog-2", "edge-1")


def _serve_fleet(conn: Any, startup_delay: float) -> None:
    from qonnect_gitops.model import load_goals, read_directory
    from qonnect_gitops.sim import SimFleet

    fleet = SimFleet.from_goals(load_goals(read_directory(os.path.join(REPO, "repo-template"))),
                                startup_delay=startup_delay)
    fleet.start()
    conn.send(({name: sim.kubeconfig() for name, sim in fleet.clusters.items()}, os.getpid()))
    conn.recv()
    fleet.stop()


def _cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime (fields 14 and 15 of stat)


def idle_fleet(seconds: float, startup_delay: float = 0.2) -> dict[str, Any]:
    """RSS and CPU of nine idle simulated clusters holding Bookinfo on a few of them."""
    import yaml
    from kubernetes import client, config, dynamic

    parent, child = mp.Pipe()
    proc = mp.get_context("spawn").Process(target=_serve_fleet, args=(child, startup_delay), daemon=True)
    proc.start()
    kubeconfigs, pid = parent.recv()
    try:
        docs = []
        manifests = os.path.join(REPO, "repo-template", "apps", "bookinfo", "manifests")
        for name in sorted(os.listdir(manifests)):
            with open(os.path.join(manifests, name), encoding="utf-8") as fh:
                docs += [d for d in yaml.safe_load_all(fh) if d]
        pods = 0
        for cluster in BOOKINFO_CLUSTERS:
            api = config.new_client_from_config_dict(kubeconfigs[cluster])
            dyn = dynamic.DynamicClient(api)
            client.CoreV1Api(api).create_namespace({"metadata": {"name": "bookinfo"}})
            for doc in docs:
                res = dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
                dyn.server_side_apply(res, body=doc, namespace="bookinfo", field_manager="bench")
            apps = client.AppsV1Api(api)
            deadline = time.monotonic() + 60
            while True:
                items = apps.list_namespaced_deployment("bookinfo").items
                if all((d.status.ready_replicas or 0) == d.spec.replicas for d in items):
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"Bookinfo not ready on {cluster}")
                time.sleep(0.1)
            pods += len(client.CoreV1Api(api).list_namespaced_pod("bookinfo").items)
            api.close()
        time.sleep(1.0)  # let the last status writes settle before measuring quiet
        ticks_before, started = _cpu_ticks(pid), time.monotonic()
        time.sleep(seconds)
        ticks = _cpu_ticks(pid) - ticks_before
        elapsed = time.monotonic() - started
        rss = _rss_kib(pid)
    finally:
        parent.send("stop")
        proc.join(timeout=10)
    return {
        "idle_fleet_clusters": len(kubeconfigs),
        "idle_fleet_bookinfo_clusters": list(BOOKINFO_CLUSTERS),
        "idle_fleet_ready_pods": pods,
        "idle_fleet_rss_mib": round(rss / 1024, 1),
        "idle_fleet_cpu_percent": round(ticks / os.sysconf("SC_CLK_TCK") / elapsed * 100, 2),
        "idle_fleet_seconds": round(elapsed, 1),
    }


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def _rate(fn: Any, seconds: float) -> tuple[float, int]:
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        fn(n)
        n += 1
    return n / (time.perf_counter() - start), n


def deployment(name: str, replicas: int) -> dict[str, Any]:
    """A typical small Deployment, as the agent would apply it."""
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "default",
                                                                         "labels": {"app": name}},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [
                         {"name": "app", "image": "nginx:1.25", "ports": [{"containerPort": 80}],
                          "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}}}}


def run(seconds: float, objects: int) -> dict[str, Any]:
    """Run every measurement and return the figures."""
    from kubernetes import client, config, dynamic

    parent, child = mp.Pipe()
    proc = mp.get_context("spawn").Process(target=_serve, args=(child,), daemon=True)
    proc.start()
    kubeconfig, pid = parent.recv()
    try:
        api = config.new_client_from_config_dict(kubeconfig)
        core = client.CoreV1Api(api)
        dyn = dynamic.DynamicClient(api)
        deployments = dyn.resources.get(api_version="apps/v1", kind="Deployment")
        for i in range(100):
            core.create_namespaced_config_map("default", {"metadata": {"name": f"cm-{i}", "labels": {"i": str(i)}},
                                                          "data": {"key": "value" * 10}})
        get_rps, get_n = _rate(lambda n: core.read_namespaced_config_map(f"cm-{n % 100}", "default"), seconds)
        list_rps, list_n = _rate(lambda n: core.list_namespaced_config_map("default"), seconds)
        apply_rps, apply_n = _rate(lambda n: dyn.server_side_apply(
            deployments, body=deployment("bench", 1 + n % 5), field_manager="bench"), seconds)
        rss_before = _rss_kib(pid)
        started = time.perf_counter()
        for i in range(objects):
            dyn.server_side_apply(deployments, body=deployment(f"mem-{i}", 2), field_manager="bench")
        create_rps = objects / (time.perf_counter() - started)
        rss_after = _rss_kib(pid)
    finally:
        parent.send("stop")
        proc.join(timeout=10)
    return {
        "sim": "separate process, official kubernetes Python client, one connection, sequential requests",
        "seconds_per_measurement": seconds,
        "get_rps": round(get_rps, 1), "get_requests": get_n,
        "list_100_rps": round(list_rps, 1), "list_requests": list_n,
        "ssa_update_rps": round(apply_rps, 1), "ssa_update_requests": apply_n,
        "ssa_create_rps": round(create_rps, 1),
        "objects_created": objects,
        "memory_per_1000_deployments_mib": round((rss_after - rss_before) / 1024 / objects * 1000, 2),
        "sim_rss_mib": round(rss_after / 1024, 1),
    }


def main() -> None:
    """Parse arguments, run, print."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--seconds", type=float, default=3.0, help="duration of each rate measurement")
    parser.add_argument("--objects", type=int, default=2000, help="Deployments created for the memory figure")
    parser.add_argument("--idle-seconds", type=float, default=10.0, help="how long the idle fleet's CPU is measured")
    parser.add_argument("--idle-only", action="store_true", help="only the idle fleet figures")
    parser.add_argument("--apply-only", action="store_true", help="only the apply cost against cluster size")
    parser.add_argument("--apply-objects", type=int, default=500, help="server-side applies measured")
    parser.add_argument("--prefill", type=int, default=2000, help="objects the full cluster holds first")
    args = parser.parse_args()
    figures: dict[str, Any] = {}
    if not args.idle_only and not args.apply_only:
        figures.update(run(args.seconds, args.objects))
    if not args.idle_only:
        figures.update(apply_cost(args.apply_objects, args.prefill))
    if not args.apply_only:
        figures.update(idle_fleet(args.idle_seconds))
    if args.json:
        print(json.dumps(figures))
        return
    rows = []
    if "apply_empty_seconds" in figures:
        empty = (f"{figures['apply_objects']} server-side applies, empty cluster "
                 f"({figures['apply_empty_objects_before']} objects)")
        full = (f"{figures['apply_objects']} server-side applies, cluster holding "
                f"{figures['apply_full_objects_before']} objects")
        rows += [(empty, f"{figures['apply_empty_seconds']} s"), (full, f"{figures['apply_full_seconds']} s"),
                 ("  full / empty (goal: at most 1.3)", f"{figures['apply_full_over_empty']}")]
    if "get_rps" in figures:
        print(f"sim: {figures['sim']}")
        rows += [("get ConfigMap", f"{figures['get_rps']} req/s"),
                 ("list 100 ConfigMaps", f"{figures['list_100_rps']} req/s"),
                 ("server-side apply (update)", f"{figures['ssa_update_rps']} req/s"),
                 ("server-side apply (create)", f"{figures['ssa_create_rps']} req/s"),
                 ("memory per 1,000 Deployments", f"{figures['memory_per_1000_deployments_mib']} MiB"),
                 ("sim RSS at the end", f"{figures['sim_rss_mib']} MiB")]
    if "idle_fleet_clusters" in figures:
        fleet = (f"idle fleet: {figures['idle_fleet_clusters']} clusters, Bookinfo on "
                 f"{len(figures['idle_fleet_bookinfo_clusters'])} ({figures['idle_fleet_ready_pods']} ready pods)")
        rows += [(fleet, ""),
                 ("  resident memory (one process)", f"{figures['idle_fleet_rss_mib']} MiB"),
                 (f"  CPU over {figures['idle_fleet_seconds']} s", f"{figures['idle_fleet_cpu_percent']} % of one core")]
    width = max(len(r[0]) for r in rows)
    for name, value in rows:
        print(f"  {name.ljust(width)}  {value}")


if __name__ == "__main__":
    main()
