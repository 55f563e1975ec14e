"""pysyncobj stores each replicated call in the journal and dumps by number, numbered in the
order of (code version, consumer, method name): these numbers must never change, or journals
and dumps written by an older lead replay the wrong methods. A new entry type is added at a
new code version (``ReplicatedKB.plan_changes``, ``ReplicatedKB.branch_heads``), which numbers
it after the others."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

from qonnect_gitops.kb.state import STATE_VERSION
from qonnect_gitops.lead.raft.node import RaftNode
from qonnect_gitops.lead.raft.secret import RaftSecret
from qonnect_gitops.lead.raft.state import BRANCH_HEADS_VERSION, CODE_VERSION
from qonnect_gitops.lead.raft.timing import RaftTiming
from tests.ports import _claim, free_ports

BEFORE_HEADS = Path(__file__).parent / "testdata" / "journal-before-heads"
BEFORE_HEADS_ADDR = "127.0.0.1:28874"  # the lone lead that wrote them: its address is in the dump

# The numbers the journals of leads before the branch heads hold: never change them.
NUMBERS = {
    "dynamic_v0": 0, "goals_failure_v0": 1, "goals_v0": 2, "leader_v0": 3, "member_removed_v0": 4,
    "member_v0": 5, "plan_v0": 6, "pool_token_v0": 7, "proposal_rejected_v0": 8, "reports_v0": 9,
    "plan_changes_v1": 10, "branch_heads_v2": 11,
}


def _numbers(node: RaftNode) -> dict[str, int]:
    return {name: number for (_, name), number in node.sync._methodToID.items()}


def test_replicated_methods_keep_their_numbers(tmp_path: Path) -> None:
    addr = f"127.0.0.1:{free_ports(1)[0]}"
    node = RaftNode(addr, [addr], tmp_path / "n", RaftTiming(), secret=RaftSecret.generate())
    try:
        assert _numbers(node) == NUMBERS
    finally:
        node.destroy()


def test_a_lone_lead_enables_the_heads_and_replays_them_after_a_restart(tmp_path: Path) -> None:
    addr = f"127.0.0.1:{free_ports(1)[0]}"
    node = RaftNode(addr, [addr], tmp_path / "n", RaftTiming(), secret=RaftSecret.generate())
    try:
        deadline = time.monotonic() + 20
        while not node.is_leader():
            assert time.monotonic() < deadline, "no leader"
            time.sleep(0.05)
        assert node.code_version() == 0  # a new group starts at version 0
        assert node.enable_code_version() == CODE_VERSION  # a lone lead: no member holds it back
        assert node.code_version() == CODE_VERSION
        assert node.commands.record_branch_heads({"edge-1": "a" * 40}, node.term())
    finally:
        node.destroy()
    restarted = RaftNode(addr, [addr], tmp_path / "n", RaftTiming(), secret=RaftSecret.generate())
    try:
        deadline = time.monotonic() + 20
        while restarted.state.reader().branch_heads() != {"edge-1": "a" * 40}:
            assert time.monotonic() < deadline, "heads not replayed from the journal"
            time.sleep(0.05)
        assert restarted.code_version() == CODE_VERSION  # the version switch is in the journal too
    finally:
        restarted.destroy()


def _plain_kb(node: RaftNode) -> dict[str, Any]:
    state = node.state.reader().read(lambda kb: kb.to_dict())
    return dict(json.loads(json.dumps(state, sort_keys=True)))


def _restored(node: RaftNode, expected: dict[str, Any], what: str) -> None:
    deadline = time.monotonic() + 20
    while True:
        got = _plain_kb(node)
        if got == expected and node.is_leader():
            return
        assert time.monotonic() < deadline, (what, sorted(k for k in expected if got.get(k) != expected[k]))
        time.sleep(0.05)


def _own(port: int) -> None:
    """Claim the fixed port from concurrent test processes (tests/ports.py); it lies below
    the range the OS hands out for free ports, so only another run of this test holds it."""
    deadline = time.monotonic() + 60
    while not _claim(port):
        assert time.monotonic() < deadline, f"port {port} stays claimed by another test process"
        time.sleep(0.5)


def test_a_journal_and_dump_written_before_the_heads_replay(tmp_path: Path) -> None:
    """The files a lead of the code before branch heads wrote (testdata/journal-before-heads/
    written_by.py) replay to the same KB; the heads are then enabled, recorded, and replayed
    with the old entries after another restart."""
    data = tmp_path / "n"
    shutil.copytree(BEFORE_HEADS, data)
    expected = json.loads((BEFORE_HEADS / "expected.json").read_text())
    # A dump of today's code says its own version and holds the health model's records
    # (empty here: the old files carry none); everything else must replay unchanged.
    expected.update(branchHeads={}, branchHeadsTerm=0, version=STATE_VERSION, clusterTracks={}, unreadySince={})
    _own(int(BEFORE_HEADS_ADDR.rsplit(":", 1)[1]))
    node = RaftNode(BEFORE_HEADS_ADDR, [BEFORE_HEADS_ADDR], data, RaftTiming(), secret=RaftSecret.generate())
    try:
        _restored(node, expected, "the old journal and dump")
        assert node.enable_code_version() == CODE_VERSION
        assert node.commands.record_branch_heads({"edge-1": "b" * 40}, node.term())
        expected.update(branchHeads={"edge-1": "b" * 40}, branchHeadsTerm=node.term())
    finally:
        node.destroy()
    restarted = RaftNode(BEFORE_HEADS_ADDR, [BEFORE_HEADS_ADDR], data, RaftTiming(), secret=RaftSecret.generate())
    try:
        _restored(restarted, expected, "old and new entries")
        assert restarted.code_version() >= BRANCH_HEADS_VERSION
    finally:
        restarted.destroy()
