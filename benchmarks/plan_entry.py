"""What recording one decision in the KB costs every lead, whole or as its changes.

    PYTHONPATH=. python benchmarks/plan_entry.py [--components 10000 100000] [--json]

The leader records each decision through Raft before it pushes (``ReconcileLoop._record_plan``):
either the whole placement (``ReplicatedKB.plan`` -> ``KnowledgeBase.apply_plan``) or what
changed against the decision it recorded last (``ReplicatedKB.plan_changes`` ->
``apply_plan_changes``). Per size (components on ``components / 10`` clusters, two or three
replicas each) and per decision (one component moved, 1 % moved, every component moved),
for both forms:

* ``entry_bytes`` / ``zlib_bytes``: the entry's arguments pickled as pysyncobj pickles a
  command, and compressed as it compresses messages;
* ``encode_cpu_s``: pickling and compressing (the proposing leader);
* ``decode_cpu_s``: decompressing and unpickling (every follower's Raft thread);
* ``apply_cpu_s``: the KB transition (every lead's Raft thread).

CPU seconds, the median of three runs, in one process.
"""

from __future__ import annotations

import argparse
import json
import pickle
import statistics
import sys
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from qonnect_gitops.kb import KnowledgeBase, placement_changes
from qonnect_gitops.lead.raft.pickling import RAFT_PICKLE_PROTOCOL

RUNS = 3
T0 = 1_800_000_000.0


def _placement(components: int, shift: int = 0, moved: int = 0) -> dict[str, dict[str, int]]:
    """``components`` placed on ``components // 10`` clusters; the first ``moved`` of them
    (spread over the keys) one cluster further along."""
    clusters = max(2, components // 10)
    step = max(1, components // moved) if moved else 0
    out: dict[str, dict[str, int]] = {}
    for i in range(components):
        far = 1 if moved and i % step == 0 and i // step < moved else 0
        a, b = (i * 7 + far + shift) % clusters, (i * 13 + 1) % clusters
        out[f"app-{i // 10:05d}/c{i % 10}"] = {f"edge-{a:05d}": 2, f"edge-{b:05d}": 1} if a != b else {
            f"edge-{a:05d}": 3}
    return out


def _cpu(fn: Callable[..., Any], *args: Any) -> tuple[float, Any]:
    start = time.process_time()
    value = fn(*args)
    return time.process_time() - start, value


def _encode(args: tuple[Any, ...]) -> bytes:
    return zlib.compress(pickle.dumps(args, protocol=RAFT_PICKLE_PROTOCOL))


def _decode(packed: bytes) -> Any:
    return pickle.loads(zlib.decompress(packed))


def _median(samples: list[float]) -> float:
    return round(statistics.median(samples), 4)


def measure(components: int, moved: int) -> dict[str, Any]:
    """Both forms of the decision that moves ``moved`` of ``components``."""
    before, after = _placement(components), _placement(components, moved=moved)
    changed, removed = placement_changes(before, after)
    forms = {
        "whole": (after, {}, "rescheduling", None, 1, T0 + 1, []),
        "changes": (1, changed, removed, {}, "rescheduling", None, 1, T0 + 1, []),
    }
    out: dict[str, Any] = {"components": components, "moved": len(changed) + len(removed)}
    for form, args in forms.items():
        encode, decode, apply = [], [], []
        for _ in range(RUNS):
            kb = KnowledgeBase()
            kb.apply_plan(before, {}, "initial", None, 1, T0)
            seconds, packed = _cpu(_encode, args)
            encode.append(seconds)
            seconds, decoded = _cpu(_decode, packed)
            decode.append(seconds)
            transition = kb.apply_plan if form == "whole" else kb.apply_plan_changes
            seconds, generation = _cpu(transition, *decoded)
            apply.append(seconds)
            assert generation == 2 and kb.placements == {c: w for c, w in after.items() if w}, form
        out[form] = {"entry_bytes": len(pickle.dumps(args, protocol=RAFT_PICKLE_PROTOCOL)), "zlib_bytes": len(packed),
                     "encode_cpu_s": _median(encode), "decode_cpu_s": _median(decode),
                     "apply_cpu_s": _median(apply)}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--components", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = [measure(n, moved) for n in args.components for moved in (1, max(1, n // 100), n)]
    if args.json:
        print(json.dumps({"decisions": rows}, indent=2))
        return 0
    print(f"{'components':>10} {'moved':>7} {'form':>8} {'entry':>10} {'zlib':>9} "
          f"{'encode s':>9} {'decode s':>9} {'apply s':>8} {'all leads s':>11}")
    for row in rows:
        for form in ("whole", "changes"):
            f = row[form]
            # The leader encodes and applies; two followers decode and apply.
            total = f["encode_cpu_s"] + 3 * f["apply_cpu_s"] + 2 * f["decode_cpu_s"]
            print(f"{row['components']:>10,} {row['moved']:>7,} {form:>8} {f['entry_bytes']:>10,} "
                  f"{f['zlib_bytes']:>9,} {f['encode_cpu_s']:>9.4f} {f['decode_cpu_s']:>9.4f} "
                  f"{f['apply_cpu_s']:>8.4f} {total:>11.3f}")
        whole, changes = row["whole"], row["changes"]
        print(f"{'':>10} {'':>7} {'ratio':>8} {whole['entry_bytes'] / changes['entry_bytes']:>9.0f}x "
              f"{whole['zlib_bytes'] / changes['zlib_bytes']:>8.0f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
