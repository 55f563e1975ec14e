"""Benchmark of a lead's idle fetch from a local remote (a path, as the demo, the test
harness and single-host setups use) with one branch per cluster.

Run from the project root::

    PYTHONPATH=. python benchmarks/idle_fetch.py --clusters 1000 10000
    PYTHONPATH=. python benchmarks/idle_fetch.py --clusters 1000 --json

For each size: a bare repository with ``main``, the plan branch and N cluster branches
(a commit each), refs loose (as a fan-out push leaves them on the server) and then
packed; a mirror that fetched it once; then the median time of an idle ``Mirror.fetch``
(nothing moved on the remote) and of a full one. Figures only, no goal asserted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pygit2

from qonnect_gitops.cli.table import format_table
from qonnect_gitops.gitstore.remote import Mirror


def served_fleet(bare: Path, clusters: int) -> None:
    """A bare goals repository with main, the plan branch and ``clusters`` cluster branches, loose."""
    repo = pygit2.init_repository(str(bare), bare=True, initial_head="main")
    sig = pygit2.Signature("op", "op@example.org", 1_700_000_000, 0)
    tb = repo.TreeBuilder()
    tb.insert("qonnect.yaml", repo.create_blob(b"review: false\n"), pygit2.enums.FileMode.BLOB)
    tree = tb.write()
    main = repo.create_commit("refs/heads/main", sig, sig, "goals", tree, [])
    plan = repo.create_commit("refs/heads/qonnect/plan", sig, sig, "plan", tree, [main])
    lines = []
    for c in range(clusters):
        commit = repo.create_commit(None, sig, sig, f"cluster c{c:05d}", tree, [plan])
        lines.append(f"create refs/heads/cluster/c{c:05d} {commit}\n")
    subprocess.run(["git", "-C", str(bare), "update-ref", "--stdin"], input="".join(lines).encode(), check=True)


def median_seconds(action, runs: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def run(clusters: int, runs: int) -> dict[str, float | int]:
    """The figures of one fleet size."""
    figures: dict[str, float | int] = {"clusters": clusters}
    with tempfile.TemporaryDirectory(prefix="qonnect-idle-fetch-") as tmp:
        root = Path(tmp)
        bare = root / "goals.git"
        served_fleet(bare, clusters)
        mirror = Mirror(root / "lead.git", str(bare), gc=False)
        start = time.perf_counter()
        mirror.fetch()
        figures["first_fetch_s"] = time.perf_counter() - start
        for refs in ("loose", "packed"):
            if refs == "packed":
                subprocess.run(["git", "-C", str(bare), "pack-refs", "--all"], check=True)
            figures[f"idle_fetch_{refs}_s"] = median_seconds(mirror.fetch, runs)
            figures[f"full_fetch_{refs}_s"] = median_seconds(lambda: mirror.fetch(full=True), max(1, runs // 3))
    return figures


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print a table or JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clusters", type=int, nargs="+", default=[1000])
    parser.add_argument("--runs", type=int, default=9, help="idle fetches timed per size (the median is shown)")
    parser.add_argument("--json", action="store_true", help='print {"sizes": {"<N>": {...}}}')
    args = parser.parse_args(argv)
    sizes = {str(n): run(n, args.runs) for n in args.clusters}
    if args.json:
        print(json.dumps({"sizes": {n: {k: round(v, 4) if isinstance(v, float) else v for k, v in f.items()}
                                    for n, f in sizes.items()}}))
        return 0
    keys = [k for k in next(iter(sizes.values())) if k != "clusters"]
    rows = [(k, *(f"{f[k]:.4f}" for f in sizes.values())) for k in keys]
    print(format_table(("FIGURE (median s)", *(f"{n} clusters" for n in sizes)), rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
