"""What a Raft full dump costs the Raft thread, at fleet scale.

    PYTHONPATH=. python benchmarks/raft_dump.py [--clusters 1000 3000] [--dumps 3] [--json]

Each size runs in a process of its own. A ``ReplicatedKB`` is filled as a lead's would be
(goals of N clusters, a plan, one report per cluster like the lead tests' agents send,
what is alive then frozen as ``freeze_long_lived`` does), then a thread standing for the
Raft thread ticks every 10 ms, applying a batch of 30 reports per tick, and at times
takes a full dump the way pysyncobj does (``ReplicatedKB._serialize`` and
``_BackgroundDump.serialize``, into a real file). Per size, the medians and worst of:

* ``capture_s`` / ``capture_cpu_s``: wall and CPU time of the Raft thread inside the two
  calls (the stall a dump causes there);
* ``written_s``: from the start of the dump to the file written (the background part);
* ``tick_gap_s``: the longest gap between two ticks while the dump was being made, i.e.
  what the Raft thread felt of it all, the background thread's share of the
  interpreter included;
* ``idle_tick_gap_s``: the longest gap outside dumps (what the machine's load costs);
* ``dump_gzip_bytes``: the size of the file.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pysyncobj.config import SERIALIZER_STATE  # type: ignore[import-untyped]

from qonnect_gitops.kb import ReportEntry, ReportRecord, WorkloadRecord
from qonnect_gitops.lead.raft.collector import GcPauses, freeze_long_lived
from qonnect_gitops.lead.raft.dump import _BackgroundDump
from qonnect_gitops.lead.raft.state import ReplicatedKB
from qonnect_gitops.model.report import AgentReport
from tests.lead.harness import report

TICK = 0.01
BATCH = 30


def _entry(cluster: str, at: float) -> ReportEntry:
    record = ReportRecord.from_report(AgentReport.model_validate(report(cluster, agent_time=at)))
    return ReportEntry(cluster, at, record, 0.0)


def _filled(clusters: int) -> tuple[ReplicatedKB, list[str]]:
    state = ReplicatedKB()
    names = [f"edge-{i:05d}" for i in range(clusters)]
    inventory = {name: {"tier": "edge", "region": "eu-central", "distribution": "k3s", "nodes": 2,
                        "cpuMillis": 8000, "memoryBytes": 16 << 30} for name in names}
    heartbeat = {"intervalSeconds": 10.0, "graceSeconds": 40.0, "latencyWindowSeconds": 30.0}
    workloads = {"shop/web": WorkloadRecord("Deployment", "0" * 16)}
    now = time.time()
    kb = state.kb
    kb.apply_goals("c" * 40, inventory, heartbeat, workloads, now)
    kb.apply_plan({"shop/web": {name: 1 for name in names}}, {}, "new goals", "c" * 40, 1, now)
    # Two rounds of reports: the latency history holds more than one sample.
    for round_ in range(2):
        kb.apply_reports([_entry(name, now + round_) for name in names])
    freeze_long_lived()
    return state, names


def _measure(clusters: int, dumps: int) -> dict[str, Any]:
    GcPauses.install()
    state, names = _filled(clusters)
    # Reports are built before the run: the ticking thread only applies them.
    template = [_entry(name, 0.0) for name in names[:BATCH]]
    results: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        dump = _BackgroundDump(str(Path(tmp) / "raft.dump"), 2 ** 16, False, None, None, None)
        stop = threading.Event()
        done = threading.Event()
        idle = [0.0]  # the longest tick gap outside dumps: what the machine's load costs alone

        def raft_thread() -> None:
            at = time.time() + 10
            taken = 0
            current: dict[str, float] | None = None
            last = time.perf_counter()
            next_dump = last + 1.0
            while not stop.is_set():
                tick = time.perf_counter()
                if current is not None:
                    current["tick_gap_s"] = max(current["tick_gap_s"], tick - last)
                else:
                    idle[0] = max(idle[0], tick - last)
                last = tick
                at += 0.001
                entries = [ReportEntry(e.cluster, at, e.record, 0.0) for e in template]
                with state.lock:  # what ReplicatedKB.reports does for a committed entry
                    state.kb.apply_reports(entries)
                if current is not None:
                    status, _ = dump.checkSerializing()
                    if status != SERIALIZER_STATE.SERIALIZING:
                        current["written_s"] = time.perf_counter() - current.pop("started")
                        results.append(current)
                        current = None
                        next_dump = time.perf_counter() + 0.5
                        if taken == dumps:
                            done.set()
                            return
                elif tick >= next_dump:
                    started, cpu = time.perf_counter(), time.thread_time()
                    data = [{}, state._serialize()]
                    dump.serialize((data, ("x", 2, 1), ("x", 1, 1), set()), 1)
                    current = {"capture_s": time.perf_counter() - started,
                               "capture_cpu_s": time.thread_time() - cpu,
                               "tick_gap_s": 0.0, "started": started}
                    taken += 1
                time.sleep(TICK)

        def guarded() -> None:
            try:
                raft_thread()
            finally:
                done.set()

        thread = threading.Thread(target=guarded, name="raft")
        thread.start()
        done.wait(600)
        stop.set()
        thread.join()
        size = Path(tmp, "raft.dump").stat().st_size
    out: dict[str, Any] = {"clusters": clusters, "dumps": len(results), "dump_gzip_bytes": size,
                           "idle_tick_gap_s": round(idle[0], 4)}
    for key in ("capture_s", "capture_cpu_s", "written_s", "tick_gap_s"):
        values = [r[key] for r in results]
        out[key] = {"median": round(statistics.median(values), 4), "max": round(max(values), 4)}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clusters", type=int, nargs="+", default=[1000, 3000])
    parser.add_argument("--dumps", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a child process's size
    args = parser.parse_args()
    if args.one:
        gc.collect()
        print(json.dumps(_measure(args.one, args.dumps)))
        return 0
    sizes: dict[str, Any] = {}
    for n in args.clusters:
        child = subprocess.run([sys.executable, __file__, "--one", str(n), "--dumps", str(args.dumps)],
                               capture_output=True, text=True, check=True)
        sizes[str(n)] = json.loads(child.stdout.strip().splitlines()[-1])
        if not args.json:
            s = sizes[str(n)]
            print(f"{n:>6} clusters: capture {s['capture_s']['median']:.4f} s "
                  f"(max {s['capture_s']['max']:.4f}, CPU {s['capture_cpu_s']['median']:.4f}), "
                  f"longest tick gap {s['tick_gap_s']['max']:.4f} s "
                  f"(outside dumps {s['idle_tick_gap_s']:.4f}), "
                  f"written after {s['written_s']['median']:.2f} s, "
                  f"{s['dump_gzip_bytes'] / 1e6:.1f} MB gzip", flush=True)
    if args.json:
        print(json.dumps({"sizes": sizes}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
