"""What validating goals in a child process would cost the leader's cycle, against what it
costs in the lead's own process with its parse cache (issue 30, point 2).

    PYTHONPATH=. nice python benchmarks/validate_in_child.py [--clusters 0 1000 10000] [--json]

``0`` is repo-template itself; other sizes are ``benchmarks/fleet.py``'s generated goals
(within the default tree limits). Per size:

* ``in_process_cold_cpu_s`` / ``_s``: ``load_goals`` with an empty parse cache (a new leader);
* ``in_process_push_cpu_s`` / ``_s``: the reload after a push that changed one manifest, the
  cache warm: what each new goals commit costs the leader's cycle today;
* ``child_cpu_s`` / ``child_s``: ``qonnect validate DIR`` in a child process (a new
  interpreter, imports, reading the tree, a cold load: a child has no cache the next push
  could reuse), CPU of the child and wall clock;
* ``child_startup_cpu_s``: of that, starting the interpreter and importing the loader;
* ``load``: the machine's 1-minute load average when the size was measured.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.fleet import components_per_cluster, fleet_goals, within_limits
from qonnect_gitops.model import ParseCache, load_goals, read_directory
from qonnect_gitops.model.limits import TreeLimits

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "repo-template"


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _child(args: list[str]) -> tuple[float, float]:
    """(CPU, wall) seconds of one child ``python ARGS``."""
    cpu, start = _children_cpu(), time.perf_counter()
    subprocess.run([sys.executable, *args], cwd=ROOT, check=False, capture_output=True,
                   env={**os.environ, "PYTHONPATH": str(ROOT)})
    return round(_children_cpu() - cpu, 3), round(time.perf_counter() - start, 3)


def measure(clusters: int) -> dict[str, Any]:
    """Every figure at one size."""
    files = read_directory(TEMPLATE) if clusters == 0 else within_limits(
        fleet_goals(clusters, components_per_cluster(clusters)))
    limits = TreeLimits(files=max(len(files), 1) * 2, bytes=1 << 30)
    out: dict[str, Any] = {"clusters": clusters or "template", "files": len(files), "load": os.getloadavg()[0]}
    cache = ParseCache()
    cpu, start = time.process_time(), time.perf_counter()
    load_goals(files, cache, limits)
    out["in_process_cold_cpu_s"] = round(time.process_time() - cpu, 3)
    out["in_process_cold_s"] = round(time.perf_counter() - start, 3)
    manifest = next(p for p in sorted(files) if "/manifests/" in p)
    pushed = dict(files)
    pushed[manifest] = files[manifest].replace(b"replicas:", b"replicas:", 1) + b"# pushed\n"
    cpu, start = time.process_time(), time.perf_counter()
    load_goals(pushed, cache, limits)
    out["in_process_push_cpu_s"] = round(time.process_time() - cpu, 3)
    out["in_process_push_s"] = round(time.perf_counter() - start, 3)
    with tempfile.TemporaryDirectory(prefix="qonnect-bench-") as tmp:
        for path, body in files.items():
            target = Path(tmp) / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(body)
        out["child_cpu_s"], out["child_s"] = _child(
            ["-m", "qonnect_gitops", "validate", tmp, "--goals-max-files", str(limits.files),
             "--goals-max-bytes", str(limits.bytes)])
    out["child_startup_cpu_s"], _ = _child(["-c", "import qonnect_gitops.cli, qonnect_gitops.model.loader"])
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--clusters", type=int, nargs="+", default=[0, 1000, 10000])
    parser.add_argument("--json", action="store_true", help="one JSON object per size, a line each")
    args = parser.parse_args(argv)
    for n in args.clusters:
        figures = measure(n)
        print(json.dumps(figures) if args.json else " ".join(f"{k}={v}" for k, v in figures.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
