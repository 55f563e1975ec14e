"""What recording the cluster branch heads in the Knowledge Base costs, and what it buys.

    PYTHONPATH=. python benchmarks/branch_heads.py [--clusters 1000 3000] [--group 1000] [--json]

In process, per size N (``--clusters``):

* ``entries_full`` / ``entry_bytes_max``: the Raft entries recording every head at once (a
  first decision, a new leader's first fetch) and the largest one pickled, against
  pysyncobj's 64 KiB append size;
* ``apply_full_ms`` / ``apply_one_ms``: applying those entries, and one entry moving one head
  (what each lead's Raft thread spends);
* ``diff_one_ms``: the leader's comparison of its mirror's heads with the KB's when one moved
  (once per cycle);
* ``answer_lookup_us``: the per-report read (``KBReader.cluster_generation``: generations
  and head under the replica's lock);
* ``dump_heads_bytes``: what the heads add to a full dump (pickle, gzip level 1 as written).

With ``--group N``: three real leads over loopback with N clusters and a local bare repo.
After the first decision, one report per cluster is sent to the leads in turn (as a Service
in front of them spreads them) and ``answers_with_commit`` counts the answers naming exactly
the head the Git server holds for that cluster (before the heads were recorded only the
leader's answers did: about one in three).
"""

from __future__ import annotations

import argparse
import gzip
import json
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from qonnect_gitops.kb import KBReader, KnowledgeBase
from qonnect_gitops.lead.loop import heads_changes, heads_chunks
from qonnect_gitops.lead.raft.pickling import RAFT_PICKLE_PROTOCOL


def _commit(i: int, salt: str = "") -> str:
    import hashlib

    return hashlib.sha1(f"{salt}{i}".encode()).hexdigest()


def in_process(n: int) -> dict[str, Any]:
    """The figures of one size (see the module docstring)."""
    names = [f"edge-{i:05d}" for i in range(n)]
    heads = {name: _commit(i) for i, name in enumerate(names)}
    chunks = heads_chunks(dict(heads))
    kb = KnowledgeBase()
    empty_dump = len(gzip.compress(pickle.dumps(kb.to_dict(), RAFT_PICKLE_PROTOCOL), 1))
    start = time.perf_counter()
    for chunk in chunks:
        kb.apply_branch_heads(chunk, 1)
    apply_full = time.perf_counter() - start
    moved = dict(heads)
    moved[names[n // 2]] = _commit(n // 2, "moved")
    start = time.perf_counter()
    diff = heads_changes(dict(kb.branch_heads), moved)
    diff_one = time.perf_counter() - start
    start = time.perf_counter()
    kb.apply_branch_heads(diff, 1)
    apply_one = time.perf_counter() - start
    reader = KBReader(__import__("threading").RLock(), lambda: kb)
    lookups = 20_000
    start = time.perf_counter()
    for i in range(lookups):
        reader.cluster_generation(names[i % n])
    lookup = (time.perf_counter() - start) / lookups
    dump = len(gzip.compress(pickle.dumps(kb.to_dict(), RAFT_PICKLE_PROTOCOL), 1))
    return {
        "clusters": n,
        "entries_full": len(chunks),
        "entry_bytes_max": max(len(pickle.dumps(c, RAFT_PICKLE_PROTOCOL)) for c in chunks),
        "apply_full_ms": round(apply_full * 1000, 2),
        "apply_one_ms": round(apply_one * 1000, 4),
        "diff_one_ms": round(diff_one * 1000, 2),
        "answer_lookup_us": round(lookup * 1e6, 2),
        "dump_heads_bytes": dump - empty_dump,
    }


def group_answers(n: int, workdir: Path) -> dict[str, Any]:
    """Three real leads, N clusters: the share of report answers naming the server's head."""
    from tests.lead.harness import LeadGroup, http, report

    names = [f"edge-{i:05d}" for i in range(n)]
    group = LeadGroup(workdir / "group", clusters=names, shop=False,
                      extra_args=["--report-rate", "100000", "--report-burst", "100000",
                                  "--poll-seconds", "10", "--log-level", "warning"])
    group.start_all()
    try:
        timeout = 60 + n / 20
        leader = group.wait_leader(timeout=timeout)
        group.wait_until(lambda: ((group.status(leader) or {}).get("loop") or {}).get("cycles", 0) >= 1,
                         what="first cycle", timeout=timeout)
        out = subprocess.run(["git", "-C", str(group.repo_path), "for-each-ref", "--format=%(refname) %(objectname)",
                              "refs/heads/cluster/"], capture_output=True, text=True, check=True).stdout
        server = {ref[len("refs/heads/cluster/"):]: oid for ref, oid in (ln.split() for ln in out.splitlines())}
        time.sleep(1.0)  # the heads entries follow the push within the cycle; let followers apply them
        by_role: dict[str, list[int]] = {"leader": [0, 0], "follower": [0, 0]}
        start = time.perf_counter()
        for i, name in enumerate(names):
            lead = group.leads[i % len(group.leads)]
            code, _, body = http("POST", f"{lead.url}/v1/clusters/{name}/report", report(name),
                                 token=group.tokens[name], timeout=10)
            role = "leader" if lead is leader else "follower"
            by_role[role][1] += 1
            if code == 200 and isinstance(body, dict) and body.get("commit") == server.get(name):
                by_role[role][0] += 1
        seconds = time.perf_counter() - start
        answered = sum(v[1] for v in by_role.values())
        named = sum(v[0] for v in by_role.values())
        return {"clusters": n, "branches_on_server": len(server), "answers": answered,
                "answers_with_commit": named, "share_with_commit": round(named / answered, 4),
                "leader_answers_with_commit": f"{by_role['leader'][0]}/{by_role['leader'][1]}",
                "follower_answers_with_commit": f"{by_role['follower'][0]}/{by_role['follower'][1]}",
                "reports_seconds": round(seconds, 2)}
    finally:
        group.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clusters", type=int, nargs="+", default=[1000, 3000])
    parser.add_argument("--group", type=int, default=None, help="also run three real leads with N clusters")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result: dict[str, Any] = {"sizes": {str(n): in_process(n) for n in args.clusters}}
    if args.group:
        with tempfile.TemporaryDirectory() as tmp:
            result["group"] = group_answers(args.group, Path(tmp))
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    for size, fig in result["sizes"].items():
        print(f"{size} clusters: " + ", ".join(f"{k}={v}" for k, v in fig.items() if k != "clusters"))
    if "group" in result:
        print("group: " + ", ".join(f"{k}={v}" for k, v in result["group"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
