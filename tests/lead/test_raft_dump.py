"""The Raft full dump is built, pickled, compressed and written off the Raft thread
(``_BackgroundDump``; the Raft thread only captures the state): it holds the state as of
the moment it was taken, whatever the Raft thread applies meanwhile, it loads back after a
restart, and the work runs on its own thread."""

from __future__ import annotations

import gzip
import logging
import pickle
import threading
import time
from pathlib import Path
from typing import Any

import pysyncobj.pickle as pysyncobj_pickle
import pytest
from pysyncobj.config import SERIALIZER_STATE

from qonnect_gitops.kb import KnowledgeBase, ReportEntry
from qonnect_gitops.kb.records import encode_entry, pack_entries
from qonnect_gitops.lead.raft import dump as raft_dump
from qonnect_gitops.lead.raft.dump import StateCapture, _BackgroundDump, _pickled, _plain, _YieldingPickler
from qonnect_gitops.lead.raft.node import RaftNode
from qonnect_gitops.lead.raft.secret import RaftSecret
from qonnect_gitops.lead.raft.state import ReplicatedKB
from qonnect_gitops.lead.raft.timing import RaftTiming
from tests.kb.test_kb import rep
from tests.kb.transitions import T0, every_transition, filled_kb
from tests.ports import free_ports


def _finished(dump: _BackgroundDump) -> int:
    deadline = time.monotonic() + 10
    while (state := dump.checkSerializing()[0]) == SERIALIZER_STATE.SERIALIZING:
        assert time.monotonic() < deadline, "the dump was never written"
        time.sleep(0.01)
    return int(state)


def _lone_leader(addr: str, data_dir: Path, timing: RaftTiming) -> RaftNode:
    """A group of one lead, once it leads."""
    node = RaftNode(addr, [addr], data_dir, timing, secret=RaftSecret.generate())
    deadline = time.monotonic() + 20
    while not node.is_leader():
        if time.monotonic() > deadline:
            node.destroy()
            raise AssertionError("no leader")
        time.sleep(0.05)
    return node


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


def test_a_dump_received_from_the_leader_is_not_overwritten_by_an_older_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A follower may be sent the leader's dump while its own is still being made: the
    Raft thread does not wait for it, the file left behind is the leader's, and its own
    dump is never reported done (nor its temporary file left)."""
    held, resume = threading.Event(), threading.Event()
    pickled = raft_dump._pickled

    def held_pickled(data: Any) -> bytes:
        held.set()
        assert resume.wait(10)
        return pickled(data)

    monkeypatch.setattr(raft_dump, "_pickled", held_pickled)
    path = str(tmp_path / "raft.dump")
    dump = _BackgroundDump(path, 1000, False, None, None, None)
    dump.serialize(({"older": "x" * 5_000_000}, (), (), set()), 3)
    assert held.wait(10)
    [older] = [t for t in threading.enumerate() if t.name == "raft-dump"]
    newer = gzip.compress(pysyncobj_pickle.dumps(({"newer": 1}, (), (), set())))
    assert dump.setTransmissionData((newer, True, True))
    assert older.is_alive()  # returned without waiting for it
    assert dump.checkSerializing()[0] == SERIALIZER_STATE.NOT_SERIALIZING
    assert dump.deserialize()[0] == {"newer": 1}
    resume.set()
    older.join(10)
    assert not older.is_alive()
    assert dump.deserialize()[0] == {"newer": 1}
    assert dump.checkSerializing()[0] == SERIALIZER_STATE.NOT_SERIALIZING
    assert sorted(p.name for p in tmp_path.iterdir()) == ["raft.dump"]


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
        node = _lone_leader(addr, tmp_path / "n", timing)
        try:
            deadline = time.monotonic() + 20
            for i in range(60):
                node.commands.register_member(f"lead-{i}", f"10.0.0.{i}:4321", f"10.0.0.{i}:8080",
                                              f"http://10.0.0.{i}:8080", time.time())
            while not any("raft_dump_written" in r.getMessage() for r in records):
                assert time.monotonic() < deadline, "no dump written"
                time.sleep(0.05)
        finally:
            node.destroy()
        written = [r for r in records if "raft_dump_written" in r.getMessage()]
        assert {r.threadName for r in written} == {"raft-dump"}
        restarted = RaftNode(addr, [addr], tmp_path / "n", timing, secret=RaftSecret.generate())
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


@pytest.mark.parametrize("paused_in", ["building", "pickling"])
def test_entries_applied_while_the_dump_is_made_do_not_reach_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, paused_in: str) -> None:
    """The dump's thread is held once it is building the plain dict from the capture, or
    pickling it; meanwhile the Raft thread applies an entry of every kind. The file holds
    the state at the index the dump claims, and it restores to exactly that state."""
    state = ReplicatedKB()
    state.kb = filled_kb()
    at_capture = pickle.loads(pickle.dumps(state.kb.to_dict()))
    reached, resume = threading.Event(), threading.Event()

    def hold() -> None:
        if not reached.is_set():
            reached.set()
            assert resume.wait(10)

    if paused_in == "building":
        plain = StateCapture.plain

        def held_plain(self: StateCapture) -> dict[str, Any]:
            hold()
            return plain(self)

        monkeypatch.setattr(StateCapture, "plain", held_plain)
    else:
        def held_persistent_id(self: _YieldingPickler, obj: Any) -> None:
            hold()

        monkeypatch.setattr(_YieldingPickler, "persistent_id", held_persistent_id)
    dump = _BackgroundDump(str(tmp_path / "raft.dump"), 1000, False, None, None, None)
    last, before = ("entry-8", 8, 1), ("entry-7", 7, 1)
    dump.serialize(([{"pysyncobj": 1}, state._serialize()], last, before, set()), 7)
    assert reached.wait(10)
    assert dump.checkSerializing() == (SERIALIZER_STATE.SERIALIZING, 7)
    with state.lock:  # as ReplicatedKB's replicated methods apply committed entries
        every_transition(state.kb, T0 + 10)
    resume.set()
    assert _finished(dump) == SERIALIZER_STATE.SUCCESS
    data = dump.deserialize()
    assert data[0][0] == {"pysyncobj": 1} and data[1:3] == (last, before)
    assert data[0][1] == at_capture  # a plain dict, as pysyncobj's own dump would hold
    assert KnowledgeBase.from_dict(data[0][1]).to_dict() == at_capture
    # The entries did change the live state, and the dump's thread (which empties what
    # it built as it frees it) left the live state exactly as the entries made it.
    assert state.kb.to_dict() != at_capture
    same_log = filled_kb()
    every_transition(same_log, T0 + 10)
    assert state.kb.to_dict() == same_log.to_dict()


def test_the_dump_is_pickled_as_pysyncobj_pickles_it() -> None:
    """Same bytes as ``pysyncobj.pickle.dumps`` of the plain dict: dumps written before
    and after read alike, by any lead."""
    state = ReplicatedKB()
    state.kb = filled_kb()
    data: tuple[Any, ...] = ([{"a": 1}, state._serialize()], ("x", 2, 1), ("x", 1, 1), set())
    assert _pickled(data) == pysyncobj_pickle.dumps(([{"a": 1}, state.kb.to_dict()],
                                                     ("x", 2, 1), ("x", 1, 1), set()))
    assert state.kb.to_dict() == filled_kb().to_dict()  # the live state is left alone
    assert _plain(([{}, state._serialize()], (), (), set()))[0][1] == state.kb.to_dict()
    with pytest.raises(TypeError):
        pickle.dumps(data)  # a capture never reaches a file unconverted


def test_a_lead_restarts_from_dumps_made_while_reports_were_applied(tmp_path: Path) -> None:
    """Dumps every few entries while reports keep committing: the restarted lead (its
    last dump, then the journal after the dump's index) holds exactly the state before
    the stop (a report that leaked into a dump from after its index would be applied
    twice, and its cluster's report count would be one too high). The real path end to
    end; the test above is the one that holds the dump's thread where a leak would show."""
    addr = f"127.0.0.1:{free_ports(1)[0]}"
    timing = RaftTiming(compaction_entries=8, compaction_seconds=3600)
    node = _lone_leader(addr, tmp_path / "n", timing)
    try:
        records = {name: rep(name) for name in ("edge-1", "edge-2", "edge-3")}
        for i in range(150):
            batch = [ReportEntry(name, T0 + i, record) for name, record in records.items()]
            node.commands.store_reports(pack_entries([encode_entry(e) for e in batch]))
        final = node.state.reader().read(lambda kb: kb.to_dict())
        assert node.raft_status()["logLength"] < 150  # compacted: the dumps were made
    finally:
        node.destroy()
    assert final["reports"]["edge-1"]["count"] == 150
    restarted = RaftNode(addr, [addr], tmp_path / "n", timing, secret=RaftSecret.generate())
    try:
        deadline = time.monotonic() + 20
        while restarted.state.reader().read(lambda kb: kb.to_dict()) != final:
            assert time.monotonic() < deadline, "state not restored as it was"
            time.sleep(0.05)
    finally:
        restarted.destroy()
