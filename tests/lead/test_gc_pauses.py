"""The garbage collector recorder (``GcPauses``) lives exactly as long as the Raft nodes
that use it: it is registered in ``gc.callbacks`` while a node runs and gone once the
last node stopped or was dropped, with the collector's thresholds as they were. Left
registered, it logged ``gc_pause_long`` into pytest's closed streams at the end of a test
run (``--- Logging error --- ValueError: I/O operation on closed file``)."""

from __future__ import annotations

import gc
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path

from qonnect_gitops.kb import KnowledgeBase, heartbeat_from_goals, inventory_from_goals, workloads_from_goals
from qonnect_gitops.lead.raft.collector import GC_THRESHOLDS, GcPauses
from qonnect_gitops.lead.raft.node import RaftNode
from qonnect_gitops.lead.raft.secret import RaftSecret
from qonnect_gitops.model import CurrentPlacement, ParseCache, load_goals
from qonnect_gitops.placement import plan
from qonnect_gitops.render import render
from tests.ports import free_ports


def _recorders() -> list[GcPauses]:
    """The ``GcPauses`` whose callback is registered with the collector now."""
    return [cb.__self__ for cb in gc.callbacks if isinstance(getattr(cb, "__self__", None), GcPauses)]


def _single(tmp_path: Path, name: str) -> RaftNode:
    """A one-member group (it leads itself) on a free loopback port."""
    addr = f"127.0.0.1:{free_ports(1)[0]}"
    return RaftNode(addr, [addr], tmp_path / name, secret=RaftSecret.generate())


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


def _cycle_structures(files: dict[str, bytes], cache: ParseCache, at: datetime) -> list[object]:
    """What a leader's cycle builds and keeps until the next one (and ``GcPauses`` may
    freeze): the goals, the Knowledge Base's inventory and snapshot, the plan, its
    rendering."""
    goals = load_goals(files, cache)
    kb = KnowledgeBase()
    kb.apply_goals("0" * 40, inventory_from_goals(goals), heartbeat_from_goals(goals),
                   workloads_from_goals(goals), at.timestamp())
    observed = kb.snapshot(at)
    decision = plan(goals, observed, CurrentPlacement())
    again = plan(goals, observed, decision.current())
    return [goals, kb, observed, decision, again, render(goals, again)]


def test_what_a_cycle_builds_is_freed_by_reference_counting(template_files: dict[str, bytes]) -> None:
    """Frozen objects are freed only by reference counting: what a cycle builds (which the
    recorder freezes when it is big) must hold no reference cycle, or each frozen cycle
    would stay for the life of the lead. With ``DEBUG_SAVEALL`` the collector keeps
    everything it would have freed as cyclic garbage in ``gc.garbage``."""
    at = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    cache = ParseCache()
    _cycle_structures(template_files, cache, at)  # first use: lazy module-level set-up
    gc.collect()
    assert not gc.garbage
    # Held until the end: an earlier test's stopped Raft node, still referenced by its
    # exiting thread now, must not turn into garbage in the middle and be counted here.
    existing = gc.get_objects()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for second in range(3):  # a new load, plan and rendering each time, as cycles go
            kept = _cycle_structures(dict(template_files), cache, at + timedelta(seconds=second))
            assert kept[3].components  # it planned something
            del kept
        gc.collect()
        cyclic = [type(o).__qualname__ for o in gc.garbage]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        del existing
    assert cyclic == []


def test_young_generations_at_their_normal_largest_are_collected_not_frozen() -> None:
    """Only a graph built with the collector off is frozen: with the lead's thresholds the
    young generations never grow past the freeze bound by themselves (generation 0 at its
    threshold, generation 1 holding that many survivors of each collection before its
    own), so a lead under load never freezes its cyclic garbage, which frozen would never
    be collected. Checked by keeping alive twice the bound's worth of objects while the
    collector runs as the lead runs it."""
    from qonnect_gitops.lead.raft.collector import FREEZE_YOUNG_ABOVE

    young, middle, _ = GC_THRESHOLDS
    assert young * (middle + 1) < FREEZE_YOUNG_ABOVE
    recorder = GcPauses.install()
    try:
        assert gc.get_threshold() == GC_THRESHOLDS
        gc.collect()
        frozen = recorder.young_frozen
        alive = [[] for _ in range(2 * FREEZE_YOUNG_ABOVE)]  # each survives its young collections
        assert recorder.young_frozen == frozen
        del alive
    finally:
        recorder.release()
