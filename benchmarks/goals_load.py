"""Goals loading at fleet scale: a new leader's cold load, and the reloads after one push.

    PYTHONPATH=. python benchmarks/goals_load.py [--clusters 1000 3000] [--json]

Each size runs in a process of its own (so peak memory is that size's alone), on the goals
of ``benchmarks/fleet.py`` (N cluster files and up to 10 N components, one manifest each,
as many as the goals tree's file limit allows):

* ``cold_s``: ``load_goals`` with an empty parse cache (a new leader);
* ``one_manifest_s``: the same goals with one manifest changed, the cache warm (a push);
* ``one_cluster_s``: one cluster file changed;
* ``fleet_defaults_s``: the stability defaults of ``qonnect.yaml`` changed (every
  component depends on them, so every one is resolved again from parsed documents);
* ``unchanged_s``: the same goals again;
* ``reparsed_*``: files parsed by that reload (the cache's misses);
* ``*_cpu_s``: the same in CPU seconds of this process (steadier than wall time on a
  shared machine);
* ``rss_mib``: the process's resident memory after the cold load, above what it held
  before (Python seldom gives memory back, so this is about the peak);
* ``peak_mib`` / ``retained_mib``: Python's allocations (``tracemalloc``, in a second cold
  load after the timed ones) at their peak during the load, and still held after it with
  the goals and the cache kept (garbage collected).
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

from benchmarks.fleet import cluster_name, components_per_cluster, fleet_goals, within_limits
from qonnect_gitops.model import ParseCache, load_goals


def _rss_mib(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def measure(clusters: int) -> dict[str, Any]:
    """Every figure at one size, in this process."""
    files = within_limits(fleet_goals(clusters, components_per_cluster(clusters)))
    components = sum(1 for p in files if "/manifests/" in p)
    out: dict[str, Any] = {"clusters": clusters, "components": components, "files": len(files)}
    gc.collect()
    base = _rss_mib("VmRSS")
    cache = ParseCache()
    start, cpu = time.perf_counter(), time.process_time()
    goals = load_goals(files, cache)
    out["cold_s"] = round(time.perf_counter() - start, 3)
    out["cold_cpu_s"] = round(time.process_time() - cpu, 3)
    gc.collect()
    out["rss_mib"] = round(_rss_mib("VmRSS") - base, 1)
    assert len(goals.clusters) == clusters

    manifest = "apps/app-00003/manifests/c1.yaml"
    cluster = f"clusters/{cluster_name(clusters // 2)}.yaml"
    edits = {
        "one_manifest": (manifest, files[manifest].replace(b"image: ", b"image: x")),
        "one_cluster": (cluster, files[cluster].replace(b"carbonIntensity: ", b"carbonIntensity: 1")),
        "fleet_defaults": ("qonnect.yaml", files["qonnect.yaml"] + b"  stability:\n    cooldownSeconds: 900\n"),
        "unchanged": ("qonnect.yaml", files["qonnect.yaml"]),
    }
    for name, (path, body) in edits.items():
        load_goals(files, cache)  # back to the first goals, so each reload changes one thing
        edited = dict(files)
        edited[path] = body
        parsed = cache.parsed
        start, cpu = time.perf_counter(), time.process_time()
        load_goals(edited, cache)
        out[f"{name}_s"] = round(time.perf_counter() - start, 3)
        out[f"{name}_cpu_s"] = round(time.process_time() - cpu, 3)
        out[f"reparsed_{name}"] = cache.parsed - parsed
    del goals, cache
    gc.collect()
    tracemalloc.start()
    held = load_goals(files, ParseCache())
    gc.collect()
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    out["peak_mib"], out["retained_mib"] = round(peak / 2**20, 1), round(current / 2**20, 1)
    del held
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--clusters", type=int, nargs="+", default=[1000, 3000])
    parser.add_argument("--json", action="store_true", help="print {\"sizes\": {N: figures}}")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a child measuring one size
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(measure(args.one)))
        return 0
    sizes: dict[str, Any] = {}
    for n in args.clusters:
        child = subprocess.run([sys.executable, __file__, "--one", str(n)], capture_output=True, text=True,
                               check=True)
        sizes[str(n)] = json.loads(child.stdout.strip().splitlines()[-1])
        if not args.json:
            print(" ".join(f"{k}={v}" for k, v in sizes[str(n)].items()), flush=True)
    if args.json:
        print(json.dumps({"sizes": sizes}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
