"""The garbage collector's pauses in a leader's process during fleet-sized cycles.

    PYTHONPATH=. nice python benchmarks/gc_pauses.py --clusters 1000 [--long 0.04] [--json]

Runs ``benchmarks/fleet.py``'s cycles at N clusters in this process (goals loads,
plans, the KB's snapshots, renderings, decision writes and pushes) with the collector as
a lead runs it (``GcPauses`` installed: its thresholds, young generations frozen) and
times every collection, wall-clock and CPU on the collecting thread. Prints, per stage
(the function running, or the one that last returned: ``after_load_goals``), how many
collections ran and the longest; and for every collection longer than ``--long``
seconds, the objects it walked outside the frozen ones (per generation), the young
count ``gc.get_count()`` showed, the biggest containers among them and their types:
what built the pause. Measuring costs time (each collection's objects are listed at its
start), outside the timed part.
"""

from __future__ import annotations

import argparse
import collections
import functools
import gc
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import benchmarks.fleet as fleet
import qonnect_gitops.kb as kb
from qonnect_gitops.lead import reconcile
from qonnect_gitops.lead.raft.collector import GC_THRESHOLDS, GcPauses

DETAIL_ABOVE = 20_000  # objects walked: list the biggest and the types


class Recorder:
    """``gc.callbacks`` pair around every collection: ``first`` lists what the collection
    will walk (it runs before ``GcPauses``' freeze), ``last`` times it."""

    def __init__(self, long: float) -> None:
        self.long = long
        self.stage = "start"
        self.stages: dict[str, dict[str, Any]] = {}
        self.long_ones: list[dict[str, Any]] = []
        self._seen: dict[str, Any] = {}
        self._clock = (0.0, 0.0)

    def first(self, phase: str, info: dict[str, int]) -> None:
        if phase != "start":
            return
        generation = info["generation"]
        per = [len(gc.get_objects(g)) for g in range(3)]
        seen: dict[str, Any] = {"generation": generation, "count0": gc.get_count()[0], "per_generation": per}
        if sum(per[:generation + 1]) > DETAIL_ABOVE:
            listed = [gc.get_objects(g) for g in range(generation + 1)]
            ours = {id(objects) for objects in listed}  # the lists themselves are young too
            walked = [o for objects in listed for o in objects if id(o) not in ours]
            del listed
            seen["biggest"] = sorted(((_size(o), type(o).__name__) for o in walked), reverse=True)[:4]
            seen["types"] = collections.Counter(type(o).__name__ for o in walked).most_common(6)
            del walked
        self._seen = seen

    def last(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._clock = (time.perf_counter(), time.thread_time())
            return
        wall, cpu = time.perf_counter() - self._clock[0], time.thread_time() - self._clock[1]
        stage = self.stages.setdefault(self.stage, {"collections": 0, "longest_s": 0.0, "most_cpu_s": 0.0})
        stage["collections"] += 1
        stage["longest_s"] = round(max(stage["longest_s"], wall), 4)
        stage["most_cpu_s"] = round(max(stage["most_cpu_s"], cpu), 4)
        if wall > self.long:
            self.long_ones.append({"stage": self.stage, "seconds": round(wall, 4), "cpu": round(cpu, 4),
                                   "collected": info["collected"], "frozen": gc.get_freeze_count(), **self._seen})

    def staged(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` marking the stage while it runs (and ``after_<name>`` once it returned)."""
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            self.stage = name
            try:
                return fn(*args, **kwargs)
            finally:
                self.stage = f"after_{name}"
        return wrapper


def _size(obj: Any) -> int:
    try:
        return len(obj)
    except TypeError:
        return -1


def measure(clusters: int, long: float) -> dict[str, Any]:
    """Every collection of ``fleet.run`` at ``clusters``, as a lead's collector runs."""
    recorder = Recorder(long)
    fleet.load_goals = recorder.staged("load_goals", fleet.load_goals)  # type: ignore[assignment]
    fleet.make_plan = recorder.staged("plan", fleet.make_plan)  # type: ignore[assignment]
    fleet.fleet_kb = recorder.staged("fleet_kb", fleet.fleet_kb)  # type: ignore[assignment]
    reconcile.load_goals = recorder.staged("load_goals", reconcile.load_goals)  # type: ignore[assignment]
    reconcile.plan_with_pools = recorder.staged("plan", reconcile.plan_with_pools)  # type: ignore[assignment]
    reconcile.render = recorder.staged("render", reconcile.render)  # type: ignore[assignment]
    kb.KnowledgeBase.snapshot = recorder.staged("snapshot", kb.KnowledgeBase.snapshot)  # type: ignore[method-assign]
    fleet.reconcile_once = recorder.staged("reconcile_once", fleet.reconcile_once)  # type: ignore[assignment]
    gc.set_threshold(*GC_THRESHOLDS)
    pauses = GcPauses.install()
    gc.callbacks.insert(0, recorder.first)
    gc.callbacks.append(recorder.last)
    try:
        with tempfile.TemporaryDirectory(prefix="qonnect-gc-") as tmp:
            fleet.run(clusters, Path(tmp))
    finally:
        gc.callbacks.remove(recorder.first)
        gc.callbacks.remove(recorder.last)
        pauses.release()
    every = recorder.stages.values()
    return {"clusters": clusters, "longest_s": max(s["longest_s"] for s in every),
            "most_cpu_s": max(s["most_cpu_s"] for s in every), "young_frozen": pauses.young_frozen,
            "stages": recorder.stages, "long": recorder.long_ones}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clusters", type=int, default=1000, help="fleet size")
    parser.add_argument("--long", type=float, default=0.04, help="explain collections longer than this (s)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    out = measure(args.clusters, args.long)
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"{out['clusters']} clusters: longest collection {out['longest_s']} s, most CPU in one "
          f"{out['most_cpu_s']} s; young generations frozen {out['young_frozen']}")
    for name, stage in out["stages"].items():
        print(f"  {name:24} {stage['collections']:5} collections, longest {stage['longest_s']:.3f} s "
              f"(cpu {stage['most_cpu_s']:.3f} s)")
    for one in out["long"]:
        print(f"  long: {one}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
