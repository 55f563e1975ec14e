"""How the files here were written: with the lead code of main at 985807a (before branch
heads), as ``PYTHONPATH=<main checkout>:<this checkout> python written_by.py <dir>``. The
lead listened on 127.0.0.1:28874 (a lone group), compacted after a few entries
(``raft.dump``), and the journal holds the entries after. ``expected.json`` is the KB that
those entries make. Kept as a record; the tests only read the files."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from qonnect_gitops.lead.raft.node import RaftNode
from qonnect_gitops.lead.raft.secret import RaftSecret
from qonnect_gitops.lead.raft.timing import RaftTiming
from tests.kb.transitions import T0


def main(data_dir: Path, addr: str = "127.0.0.1:28874") -> None:
    timing = RaftTiming(compaction_entries=6, compaction_seconds=3600)
    node = RaftNode(addr, [addr], data_dir, timing, secret=RaftSecret.generate())
    while not node.is_leader():
        time.sleep(0.05)
    commands = node.commands
    commands.record_leader("lead-1", node.term(), T0)
    for i in range(8):
        commands.register_member(f"lead-{i}", f"10.0.0.{i}:4321", f"10.0.0.{i}:8080",
                                 f"http://10.0.0.{i}:8080", T0 + i)
    time.sleep(1.5)  # the dump is written off the Raft thread
    commands.record_plan({"shop/web": {"edge-1": 2}}, {}, "new goals", "c1" * 20, node.term(), T0 + 10, [])
    commands.record_pool_clusters({"burst-1": {"pool": "cloud", "phase": "Provisioning", "nodes": 1,
                                               "tier": "cloud", "region": "eu-central"}}, T0 + 11)
    commands.issue_pool_token("burst-1", "ab" * 32, T0 + 12)
    commands.reject_proposal("key-1", "p1", "c1" * 20, "https://forge/pr/1", T0 + 13)
    commands.record_goals_failure("d1" * 20, ["qonnect.yaml:1:1: bad"], T0 + 14)
    commands.forget_member("10.0.0.7:4321", T0 + 15)
    kb = node.state.reader().read(lambda kb: kb.to_dict())
    node.destroy()
    (data_dir / "expected.json").write_text(json.dumps(kb, sort_keys=True, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
