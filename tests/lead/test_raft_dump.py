"""The Raft full dump is compressed and written off the Raft thread (``_BackgroundDump``):
it holds the state as of the moment it was taken, it loads back after a restart, and
the writing runs on its own thread."""

from __future__ import annotations

import gzip
import logging
import time
from pathlib import Path

import pysyncobj.pickle as pysyncobj_pickle
from pysyncobj.config import SERIALIZER_STATE

from qonnect_gitops.lead.raft import RaftNode, RaftTiming, _BackgroundDump
from tests.ports import free_ports


def _finished(dump: _BackgroundDump) -> int:
    deadline = time.monotonic() + 10
    while (state := dump.checkSerializing()[0]) == SERIALIZER_STATE.SERIALIZING:
        assert time.monotonic() < deadline, "the dump was never written"
        time.sleep(0.01)
    return int(state)


def test_the_dump_holds_the_state_as_it_was_when_taken(tmp_path: Path) -> None:
    path = str(tmp_path / "raft.dump")
    dump = _BackgroundDump(path, 1000, False, None, None, None)
    state = {"reports": {"edge-1": [1]}}
    dump.serialize((state, ("entry",), ("entry0",), set()), 7)
    state["reports"]["edge-1"].append(2)  # the next entry applied, while the file is written
    state["reports"]["edge-2"] = [3]
    assert _finished(dump) == SERIALIZER_STATE.SUCCESS
    assert dump.checkSerializing()[0] == SERIALIZER_STATE.NOT_SERIALIZING  # reported once
    assert dump.deserialize()[0] == {"reports": {"edge-1": [1]}}


def test_a_dump_received_from_the_leader_is_not_overwritten_by_an_older_one(tmp_path: Path) -> None:
    """A follower may be sent the leader's dump while its own is still being written: the
    file left behind is the leader's, and its own dump is never reported done."""
    path = str(tmp_path / "raft.dump")
    dump = _BackgroundDump(path, 1000, False, None, None, None)
    dump.serialize(({"older": "x" * 5_000_000}, (), (), set()), 3)
    newer = gzip.compress(pysyncobj_pickle.dumps(({"newer": 1}, (), (), set())))
    assert dump.setTransmissionData((newer, True, True))
    assert dump.checkSerializing()[0] == SERIALIZER_STATE.NOT_SERIALIZING
    assert dump.deserialize()[0] == {"newer": 1}


def test_a_failed_write_is_reported_and_the_next_dump_is_tried(tmp_path: Path) -> None:
    dump = _BackgroundDump(str(tmp_path / "missing" / "raft.dump"), 1000, False, None, None, None)
    dump.serialize(({}, (), (), set()), 3)
    assert _finished(dump) == SERIALIZER_STATE.FAILED
    (tmp_path / "missing").mkdir()
    dump.serialize(({"a": 1}, (), (), set()), 4)
    assert _finished(dump) == SERIALIZER_STATE.SUCCESS
    assert dump.deserialize()[0] == {"a": 1}


def test_a_lead_compacts_off_its_raft_thread_and_restarts_from_the_dump(tmp_path: Path) -> None:
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("qonnect_gitops.lead.raft")
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    addr = f"127.0.0.1:{free_ports(1)[0]}"
    timing = RaftTiming(compaction_entries=20, compaction_seconds=3600)
    try:
        node = RaftNode(addr, [addr], tmp_path / "n", timing)
        try:
            deadline = time.monotonic() + 20
            while not node.is_leader():
                assert time.monotonic() < deadline, "no leader"
                time.sleep(0.05)
            for i in range(60):
                node.propose(node.state.member, f"lead-{i}", f"10.0.0.{i}:4321", f"10.0.0.{i}:8080",
                             f"http://10.0.0.{i}:8080", time.time())
            while not any("raft_dump_written" in r.getMessage() for r in records):
                assert time.monotonic() < deadline, "no dump written"
                time.sleep(0.05)
        finally:
            node.destroy()
        written = [r for r in records if "raft_dump_written" in r.getMessage()]
        assert {r.threadName for r in written} == {"raft-dump"}
        restarted = RaftNode(addr, [addr], tmp_path / "n", timing)
        try:
            deadline = time.monotonic() + 20
            while len(restarted.state.reader().read(lambda kb: dict(kb.members))) < 60:
                assert time.monotonic() < deadline, "state not restored"
                time.sleep(0.05)
        finally:
            restarted.destroy()
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
