"""How regularly an agent reports while its passes are slow or its API server fails.

A simulated cluster (four nodes) runs in its own process, a ``git daemon`` serves the
goals repository, ``qonnect agent`` runs as a third process exactly as deployed, and a
loopback stand-in for a lead records when each report arrives and what it says. Three
phases, each started by a signed push webhook after a new commit of ``--objects``
ConfigMaps:

* **slow**: every API request is answered ``--latency`` seconds late (the sim's admin
  port, ``PUT /_sim/faults/latency``), longer than the report interval;
* **down**: the same, and the API server stops (``POST /_sim/down``) in the middle of the
  pass; later it comes back;
* **hang**: every request is held for ten minutes (accepted, never answered in time).

Figures: the pass's duration, the gaps between reports during it (largest, median, and how
many were longer than two report intervals), what the reports said, how long until they
said ``ApiUnavailable`` and until ``Ready`` again, and the machine's load. ``--busy N``
runs N CPU-bound processes beside it (the issue's loaded laptop).

    python benchmarks/heartbeat.py
    python benchmarks/heartbeat.py --busy 2 --json
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import itertools
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SECRET = b"bench-secret"


def _serve(conn: Any) -> None:
    from qonnect_gitops.model.cluster import NodeShape
    from qonnect_gitops.sim import SimCluster

    cluster = SimCluster(name="edge-1", nodes=[NodeShape(count=4, cpu="16", memory="64Gi", pods=250)])
    cluster.start()
    conn.send(cluster.kubeconfig_yaml())
    conn.send(cluster.admin_url)
    conn.recv()


def _spin(stop: Any) -> None:
    while not stop.is_set():
        sum(i * i for i in range(10_000))


class Lead:
    """Records (arrival, sync state, reason, message, attempted) of every report."""

    def __init__(self, interval: float) -> None:
        self.reports: list[tuple[float, str, str, str, str | None]] = []
        rec = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                sync = body["sync"]
                rec.reports.append((time.monotonic(), sync["state"], sync["reason"], sync.get("message", ""),
                                    body.get("attempted")))
                data = json.dumps({"accepted": True, "generation": 0, "heartbeatIntervalSeconds": interval}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def between(self, since: float, until: float) -> list[tuple[float, str, str, str, str | None]]:
        return [r for r in list(self.reports) if since <= r[0] <= until]

    def wait(self, predicate: Any, timeout: float, what: str) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for r in list(self.reports)[-3:]:
                if predicate(r):
                    return r[0]
            time.sleep(0.02)
        raise TimeoutError(f"no report {what} within {timeout:.0f} s")


def _gaps(since: float, until: float, reports: list[tuple[float, str, str, str, str | None]],
          interval: float) -> dict[str, Any]:
    times = [since, *(r[0] for r in reports), until]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    return {"reports": len(reports), "largest_gap_s": round(max(gaps), 2),
            "median_gap_s": round(statistics.median(gaps), 2),
            "gaps_over_2_intervals": sum(g > 2 * interval for g in gaps)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--objects", type=int, default=60, help="ConfigMaps per commit")
    parser.add_argument("--report-interval", type=float, default=1.0)
    parser.add_argument("--latency", type=float, default=1.5, help="seconds each API request is answered late")
    parser.add_argument("--api-timeout", type=float, default=5.0)
    parser.add_argument("--busy", type=int, default=0, help="CPU-bound processes to run beside")
    args = parser.parse_args()

    import yaml

    from qonnect_gitops.gitstore.daemon import GitDaemon, free_port
    from qonnect_gitops.gitstore.store import GitStore
    from qonnect_gitops.gitstore.trailers import DecisionMeta

    interval = args.report_interval
    tmp = Path(tempfile.mkdtemp(prefix="qonnect-bench-heartbeat-"))
    stop_busy = mp.Event()
    busy = [mp.Process(target=_spin, args=(stop_busy,), daemon=True) for _ in range(args.busy)]
    for proc in busy:
        proc.start()
    parent, child = mp.Pipe()
    sim = mp.Process(target=_serve, args=(child,), daemon=True)
    sim.start()
    kubeconfig = tmp / "kubeconfig"
    kubeconfig.write_text(parent.recv())
    admin_url = parent.recv()
    (tmp / "srv").mkdir()
    store = GitStore.init_bare(tmp / "srv" / "goals.git")
    daemon = GitDaemon(tmp / "srv").start()
    port = free_port()
    (tmp / "secret").write_text(SECRET.decode())
    lead = Lead(interval)
    labels = {"app.kubernetes.io/managed-by": "qonnect", "qonnect.io/app": "bench", "qonnect.io/component": "c"}
    generation = 0

    def publish(tag: str, notify: bool = True) -> str:
        nonlocal generation
        generation += 1
        ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bench", "labels": labels}}
        files = {"placement.yaml": f"g: {generation}\n".encode(),
                 "clusters/edge-1/_cluster/namespace-bench.yaml": yaml.safe_dump(ns).encode()}
        for i in range(args.objects):
            meta = {"name": f"cm{i}", "namespace": "bench", "labels": labels}
            files[f"clusters/edge-1/bench/c/configmap-cm{i}.yaml"] = yaml.safe_dump(
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"tag": tag}}).encode()
        store.write_decision(files, summary=f"bench {generation}", body="", clusters=["edge-1"],
                             timestamp=1_800_000_000 + generation, prune_limits={"edge-1": 100_000},
                             meta=DecisionMeta(source="0" * 40, term=1, generation=generation, reason="scaling"))
        head = store.cluster_head("edge-1")
        assert head is not None
        if notify:
            body = b'{"ref":"refs/heads/cluster/edge-1"}'
            sig = "sha256=" + hmac.new(SECRET, body, hashlib.sha256).hexdigest()
            urllib.request.urlopen(urllib.request.Request(
                f"http://127.0.0.1:{port}/webhook", data=body, method="POST",
                headers={"X-Hub-Signature-256": sig}), timeout=10).read()
        return head

    def sim_admin(method: str, path: str, body: dict[str, Any] | None = None) -> None:
        data = json.dumps(body).encode() if body is not None else b""
        urllib.request.urlopen(urllib.request.Request(f"{admin_url}/_sim/{path}", data=data, method=method,
                                                      headers={"Content-Type": "application/json"}), timeout=10).read()

    def done(head: str) -> Any:
        return lambda r: r[4] == head and "sync pass running" not in r[3] and r[2] != "ApiUnavailable"

    figures: dict[str, Any] = {"report_interval_s": interval, "api_latency_s": args.latency,
                               "api_timeout_s": args.api_timeout, "objects": args.objects, "busy": args.busy,
                               "load_before": [round(x, 2) for x in os.getloadavg()]}
    agent = None
    agent_log = open(tmp / "agent.log", "wb")  # noqa: SIM115 - closed in finally, after the agent exits
    try:
        head = publish("boot", notify=False)
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        agent = subprocess.Popen([
            sys.executable, "-m", "qonnect_gitops", "agent", "--cluster", "edge-1", "--repo", daemon.url("goals.git"),
            "--kubeconfig", str(kubeconfig), "--cache-dir", str(tmp / "cache"), "--interval", "300",
            "--drift-interval", "3600", "--report-interval", str(interval), "--lead", lead.url,
            "--api-timeout", str(args.api_timeout), "--webhook-addr", f"127.0.0.1:{port}",
            "--webhook-secret-file", str(tmp / "secret"), "--log-level", "warning"], env=env, stderr=agent_log)
        lead.wait(lambda r: r[4] == head and r[1] == "Ready", 60, "Ready after start")
        time.sleep(2 * interval)

        # slow: every request answered late, a pass over the new commit
        sim_admin("PUT", "faults/latency", {"seconds": args.latency})
        start = time.monotonic()
        head = publish("slow")
        end = lead.wait(done(head), 600, "ending the slow pass")
        during = lead.between(start, end)
        figures["slow"] = {"pass_s": round(end - start, 2), **_gaps(start, end, during[:-1], interval),
                           "said": sorted({f"{r[1]}/{r[2]}" for r in during})}
        time.sleep(2 * interval)

        # down: the API server stops in the middle of a pass, and comes back
        head = publish("down")
        start = time.monotonic()
        lead.wait(lambda r: "sync pass running" in r[3], 120, "saying a pass runs")
        sim_admin("POST", "down")
        down = time.monotonic()
        seen = lead.wait(lambda r: r[2] == "ApiUnavailable", 120, "saying ApiUnavailable")
        time.sleep(10 * interval)
        sim_admin("DELETE", "faults")
        sim_admin("POST", "up")
        up = time.monotonic()
        ready = lead.wait(lambda r: r[4] == head and r[1] == "Ready", 120, "Ready after the API came back")
        outage = lead.between(down, up)
        figures["down"] = {"api_unavailable_after_s": round(seen - down, 2), **_gaps(down, up, outage, interval),
                           "said_after_first_api_unavailable": sorted({f"{r[1]}/{r[2]}" for r in outage
                                                                       if r[0] >= seen}),
                           "ready_after_up_s": round(ready - up, 2), "pass_before_down_s": round(down - start, 2)}
        time.sleep(2 * interval)

        # hang: requests accepted and held far beyond the timeout
        sim_admin("PUT", "faults/latency", {"seconds": 600})
        start = time.monotonic()
        head = publish("hang")
        seen = lead.wait(lambda r: r[2] == "ApiUnavailable", 300, "saying ApiUnavailable")
        ended = lead.wait(lambda r: r[2] == "ApiUnavailable" and "sync pass running" not in r[3], 300,
                          "ending the pass")
        figures["hang"] = {"api_unavailable_after_s": round(seen - start, 2),
                           "pass_ended_after_s": round(ended - start, 2),
                           **_gaps(start, ended, lead.between(start, ended), interval)}
        figures["load_after"] = [round(x, 2) for x in os.getloadavg()]
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
        sim.join(5)
        if sim.is_alive():
            sim.terminate()
        stop_busy.set()
        for proc in busy:
            proc.join(5)
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        s, d, h = figures["slow"], figures["down"], figures["hang"]
        print(f"load {figures['load_before']} -> {figures['load_after']} ({args.busy} busy processes beside); "
              f"report interval {interval:g} s, {args.objects} objects")
        print(f"slow API ({args.latency:g} s a request): pass {s['pass_s']} s, {s['reports']} reports during it, "
              f"largest gap {s['largest_gap_s']} s, median {s['median_gap_s']} s, "
              f"{s['gaps_over_2_intervals']} gaps over 2 intervals; said {', '.join(s['said'])}")
        print(f"API down mid-pass: ApiUnavailable reported after {d['api_unavailable_after_s']} s; "
              f"{d['reports']} reports while down, largest gap {d['largest_gap_s']} s; said "
              f"{', '.join(d['said_after_first_api_unavailable'])} after that; Ready {d['ready_after_up_s']} s "
              f"after it came back")
        print(f"API hangs (--api-timeout {args.api_timeout:g} s): ApiUnavailable after "
              f"{h['api_unavailable_after_s']} s, pass ended after {h['pass_ended_after_s']} s, "
              f"largest report gap {h['largest_gap_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
