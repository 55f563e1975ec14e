"""The garbage collector recorder (``GcPauses``) lives exactly as long as the Raft nodes
that use it: it is registered in ``gc.callbacks`` while a node runs and gone once the
last node stopped or was dropped, with the collector's thresholds as they were. Left
registered, it logged ``gc_pause_long`` into pytest's closed streams at the end of a test
run (``--- Logging error --- ValueError: I/O operation on closed file``)."""

from __future__ import annotations

import gc
import logging
from pathlib import Path

from qonnect_gitops.lead.raft import GC_THRESHOLDS, GcPauses, RaftNode
from tests.ports import free_ports


def _recorders() -> list[GcPauses]:
    """The ``GcPauses`` whose callback is registered with the collector now."""
    return [cb.__self__ for cb in gc.callbacks if isinstance(getattr(cb, "__self__", None), GcPauses)]


def _single(tmp_path: Path, name: str) -> RaftNode:
    """A one-member group (it leads itself) on a free loopback port."""
    addr = f"127.0.0.1:{free_ports(1)[0]}"
    return RaftNode(addr, [addr], tmp_path / name)


def test_the_recorder_is_removed_when_the_last_node_stops(tmp_path: Path) -> None:
    before, thresholds = _recorders(), gc.get_threshold()
    first = _single(tmp_path, "a")
    second = _single(tmp_path, "b")
    try:
        assert len(_recorders()) == len(before) + 1  # one per process, shared
        assert gc.get_threshold() == GC_THRESHOLDS
        first.destroy()
        assert len(_recorders()) == len(before) + 1  # the second node still runs
    finally:
        first.destroy()  # twice is harmless
        second.destroy()
    assert _recorders() == before
    assert gc.get_threshold() == thresholds
    # A node started afterwards gets a recorder again.
    third = _single(tmp_path, "c")
    try:
        assert len(_recorders()) == len(before) + 1
    finally:
        third.destroy()
    assert _recorders() == before


def test_a_node_dropped_without_destroy_takes_its_recorder_along(tmp_path: Path) -> None:
    before = _recorders()
    node = _single(tmp_path, "a")
    sync = node.sync  # kept to stop its threads and sockets below
    try:
        assert len(_recorders()) == len(before) + 1
        del node
        gc.collect()
        assert _recorders() == before
    finally:
        sync.destroy()


def test_a_stopped_node_leaves_nothing_that_logs_a_pause(tmp_path: Path) -> None:
    """After the node stopped, a long collection logs nothing (the recorder's threshold
    set to zero makes every collection "long" while it is registered)."""
    node = _single(tmp_path, "a")
    recorder = node.gc_pauses
    recorder.log_above = 0.0
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("qonnect_gitops.lead.raft")
    logger.addHandler(handler)
    try:
        gc.collect()
        assert any("gc_pause_long" in r.getMessage() for r in records)  # it was recording
        node.destroy()
        records.clear()
        gc.collect()
        assert not any("gc_pause_long" in r.getMessage() for r in records)
    finally:
        logger.removeHandler(handler)
        node.destroy()
