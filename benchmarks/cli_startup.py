"""Benchmark what ``qonnect --help`` and each subcommand's ``--help`` cost to start.

Each is run as its own process running ``qonnect_gitops.cli.main``, as the installed
``qonnect`` script does, several times; the figure is the process's CPU time
(user + system, from ``resource.getrusage(RUSAGE_CHILDREN)``), the median of the runs.
CPU time is what a command costs whatever else the machine is doing; wall time is
printed beside it with the load average, for reading the two together.

    python benchmarks/cli_startup.py              # readable table
    python benchmarks/cli_startup.py --json       # one JSON object
    python benchmarks/cli_startup.py --runs 9
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from qonnect_gitops.cli import COMMANDS

# What the installed `qonnect` script runs (pyproject's [project.scripts]).
ENTRY = "import sys; from qonnect_gitops.cli import main; sys.exit(main())"


def _child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(args: list[str], runs: int) -> dict[str, Any]:
    """Median CPU and wall seconds of ``qonnect ARGS`` over ``runs`` processes."""
    cpu: list[float] = []
    wall: list[float] = []
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    for _ in range(runs):
        before, start = _child_cpu(), time.perf_counter()
        done = subprocess.run([sys.executable, "-c", ENTRY, *args], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
        wall.append(time.perf_counter() - start)
        cpu.append(_child_cpu() - before)
        if done.returncode != 0:
            raise SystemExit(f"qonnect {' '.join(args)} exited {done.returncode}: {done.stderr.decode()}")
    return {"args": " ".join(args), "cpu_s": round(statistics.median(cpu), 3),
            "wall_s": round(statistics.median(wall), 3)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="processes per command (default 5)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    opts = parser.parse_args()
    load_before = os.getloadavg()
    rows = [measure(["--help"], opts.runs)]
    rows += [measure([name, "--help"], opts.runs) for name in COMMANDS]
    result = {"runs": opts.runs, "cpus": os.cpu_count(), "load_before": [round(x, 2) for x in load_before],
              "load_after": [round(x, 2) for x in os.getloadavg()], "commands": rows,
              "max_cpu_s": max(r["cpu_s"] for r in rows)}
    if opts.json:
        print(json.dumps(result))
        return 0
    print(f"{'command':<24} {'cpu s':>7} {'wall s':>7}")
    for row in rows:
        print(f"qonnect {row['args']:<16} {row['cpu_s']:>7.3f} {row['wall_s']:>7.3f}")
    print(f"max cpu {result['max_cpu_s']:.3f} s; median of {opts.runs} runs each; "
          f"load (1, 5, 15 min) before {result['load_before']}, after {result['load_after']}, {result['cpus']} cpus")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
