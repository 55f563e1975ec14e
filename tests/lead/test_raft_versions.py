"""pysyncobj stores each replicated call in the journal and dumps by number, numbered in the
order of (code version, consumer, method name): these numbers must never change, or journals
and dumps written by an older lead replay the wrong methods. A new entry type is added at a
new code version (``ReplicatedKB.branch_heads``), which numbers it after the others."""

from __future__ import annotations

import time
from pathlib import Path

from qonnect_gitops.lead.raft import BRANCH_HEADS_VERSION, RaftNode, RaftTiming
from tests.ports import free_ports

# The numbers the journals of leads before the branch heads hold: never change them.
NUMBERS = {
    "dynamic_v0": 0, "goals_failure_v0": 1, "goals_v0": 2, "leader_v0": 3, "member_removed_v0": 4,
    "member_v0": 5, "plan_v0": 6, "pool_token_v0": 7, "proposal_rejected_v0": 8, "reports_v0": 9,
    "branch_heads_v1": 10,
}


def _numbers(node: RaftNode) -> dict[str, int]:
    return {name: number for (_, name), number in node.sync._methodToID.items()}


def test_replicated_methods_keep_their_numbers(tmp_path: Path) -> None:
    addr = f"127.0.0.1:{free_ports(1)[0]}"
    node = RaftNode(addr, [addr], tmp_path / "n", RaftTiming())
    try:
        assert _numbers(node) == NUMBERS
    finally:
        node.destroy()


def test_a_lone_lead_enables_the_heads_and_replays_them_after_a_restart(tmp_path: Path) -> None:
    addr = f"127.0.0.1:{free_ports(1)[0]}"
    node = RaftNode(addr, [addr], tmp_path / "n", RaftTiming())
    try:
        deadline = time.monotonic() + 20
        while not node.is_leader():
            assert time.monotonic() < deadline, "no leader"
            time.sleep(0.05)
        assert not node.heads_enabled()  # a new group starts at version 0
        assert node.enable_heads()
        assert node.heads_enabled()
        assert node.propose(node.state.branch_heads, {"edge-1": "a" * 40}, node.term())
    finally:
        node.destroy()
    restarted = RaftNode(addr, [addr], tmp_path / "n", RaftTiming())
    try:
        deadline = time.monotonic() + 20
        while restarted.state.reader().branch_heads() != {"edge-1": "a" * 40}:
            assert time.monotonic() < deadline, "heads not replayed from the journal"
            time.sleep(0.05)
        assert restarted.heads_enabled()  # the version switch is in the journal too
        assert int(restarted.sync.getCodeVersion()) == BRANCH_HEADS_VERSION
    finally:
        restarted.destroy()
