"""The lead's Raft node: pysyncobj around the Knowledge Base.

``ReplicatedKB`` is the state machine: each ``@replicated`` method is one log
entry type and only forwards to a ``KnowledgeBase.apply_*`` transition, under
a lock so HTTP threads read a consistent state while the tick thread applies.
``RaftNode`` owns the ``SyncObj`` (timing, files, membership) and turns
pysyncobj's callbacks into blocking ``propose`` calls with a timeout.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import gzip
import io
import os
import pickle
import random
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pysyncobj.serializer as pysyncobj_serializer  # type: ignore[import-untyped]
import pysyncobj.syncobj as pysyncobj_syncobj  # type: ignore[import-untyped]
from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, SyncObjConsumer, replicated
from pysyncobj.atomic_replace import atomicReplace  # type: ignore[import-untyped]
from pysyncobj.config import SERIALIZER_STATE  # type: ignore[import-untyped]
from pysyncobj.monotonic import monotonic as pysyncobj_clock  # type: ignore[import-untyped]
from pysyncobj.utility import UtilityException  # type: ignore[import-untyped]

from qonnect_gitops.kb import (
    KBReader,
    KnowledgeBase,
    ReportEntry,
    ReportVerdict,
    WorkloadRecord,
)
from qonnect_gitops.kb.records import encode_entry, pack_entries, unpack_entries
from qonnect_gitops.lead.raft_transport import (
    FrameGuard,
    GuardedTransport,
    RaftSecret,
    bind_address,
    utility,
)
from qonnect_gitops.lead.threads import name_os_thread
from qonnect_gitops.logs import get_logger

log = get_logger(__name__)

_FAIL_NAMES = {
    value: name for name, value in vars(FAIL_REASON).items() if not name.startswith("_")
}


class ProposalError(Exception):
    """A replicated write was not committed (no leader, leader changed, timeout...)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# The pysyncobj code versions that brought ``ReplicatedKB.plan_changes`` and
# ``ReplicatedKB.branch_heads``; ``CODE_VERSION``: the newest this code has.
PLAN_CHANGES_VERSION = 1
BRANCH_HEADS_VERSION = 2
CODE_VERSION = BRANCH_HEADS_VERSION

# Report batches a lead remembers having proposed until they are applied (a batch commits
# within a few hundred milliseconds; the batcher keeps one or two in flight).
MAX_PROPOSED_BATCHES = 64


class ReplicatedKB(SyncObjConsumer):
    """The Raft state machine holding a ``KnowledgeBase``."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.RLock()
        self.kb = KnowledgeBase()
        # Called after each applied batch of reports with the verdict of each (on the
        # Raft thread: must be cheap); the leader's loop notices reports that change the
        # picture.
        self.report_listener: Callable[[list[ReportEntry], list[ReportVerdict]], None] | None = None
        # Batches this lead proposed and has not applied yet: their bytes -> the entries they
        # were encoded from (``ReportBatcher``), so this lead applies them without decoding
        # its own bytes again. Bounded: a batch whose callback never came is dropped.
        self._proposed: dict[bytes, list[ReportEntry]] = {}
        self._proposed_lock = threading.Lock()

    def reader(self) -> KBReader:
        """Typed, locked reads of this replica."""
        return KBReader(self.lock, lambda: self.kb)

    # The full dump stores plain dicts, not pickled objects of our classes, so a
    # dump stays loadable across code changes that keep the state format.
    def _serialize(self) -> StateCapture:
        # On the Raft thread, at every compaction: only a copy of the state's containers
        # (``KnowledgeBase.capture``, milliseconds at 10,000 clusters); the plain dict is
        # built and pickled from it on the dump's thread (``_BackgroundDump``). Built here
        # it held the Raft thread about a second at 10,000 clusters.
        with self.lock:
            return StateCapture(self.kb.capture())

    def _deserialize(self, data: dict[str, Any]) -> None:
        with self.lock:
            self.kb = KnowledgeBase.from_dict(data)
        freeze_long_lived()

    def proposing(self, packed: bytes, entries: list[ReportEntry]) -> None:
        """``packed`` (``pack_entries`` of ``entries``) is about to be proposed by this lead:
        when it is applied here, ``entries`` stand for it. Exact, because every entry's
        decoding is the entry itself (``encode_entry``; tests/lead/test_report_fast.py)."""
        with self._proposed_lock:
            while len(self._proposed) >= MAX_PROPOSED_BATCHES:
                del self._proposed[next(iter(self._proposed))]  # the oldest: its answer never came
            self._proposed[packed] = entries

    def settled(self, packed: bytes) -> None:
        """The proposal of ``packed`` was answered (applied or failed): forget it."""
        with self._proposed_lock:
            self._proposed.pop(packed, None)

    @replicated
    def reports(self, batch: bytes | list[ReportEntry]) -> list[ReportVerdict]:
        # ``batch``: the entries packed by ``ReportBatcher`` (MessagePack, decoded here in
        # C on every lead), or a list pickled by a lead from before that encoding. A batch
        # this lead proposed is applied from the entries it encoded (``proposing``).
        if isinstance(batch, bytes):
            with self._proposed_lock:
                entries = self._proposed.pop(batch, None)
            if entries is None:
                entries = unpack_entries(batch)
        else:
            entries = batch
        with self.lock:
            result = self.kb.apply_reports(entries)
        listener = self.report_listener
        if listener is not None:
            try:
                listener(entries, result)
            except Exception as exc:  # a listener bug must never stall the log
                log.error("report_listener_failed", error=exc)
        return result

    @replicated
    def goals(self, commit: str, inventory: dict[str, Any], heartbeat: dict[str, float],
              workloads: dict[str, WorkloadRecord], now: float) -> bool:
        with self.lock:
            changed = self.kb.apply_goals(commit, inventory, heartbeat, workloads, now)
        freeze_long_lived()
        return changed

    @replicated
    def dynamic(self, clusters: dict[str, dict[str, Any]], now: float) -> bool:
        with self.lock:
            return self.kb.apply_dynamic(clusters, now)

    @replicated
    def pool_token(self, cluster: str, digest: str, now: float) -> bool:
        with self.lock:
            return self.kb.apply_pool_token(cluster, digest, now)

    @replicated
    def goals_failure(self, commit: str, errors: list[str], now: float) -> bool:
        with self.lock:
            return self.kb.apply_goals_failure(commit, errors, now)

    @replicated
    def plan(self, placements: dict[str, dict[str, int]], reasons: dict[str, str], reason: str,
             goals_commit: str | None, term: int, now: float,
             unmet: list[dict[str, str]] | None = None) -> int:
        with self.lock:
            return self.kb.apply_plan(placements, reasons, reason, goals_commit, term, now, unmet or ())

    @replicated
    def proposal_rejected(self, key: str, proposal_id: str, goals_commit: str, url: str,
                          now: float) -> bool:
        with self.lock:
            return self.kb.apply_proposal_rejected(key, proposal_id, goals_commit, url, now)

    @replicated
    def leader(self, node_id: str, term: int, now: float) -> bool:
        with self.lock:
            return self.kb.apply_leader(node_id, term, now)

    @replicated
    def member(self, node_id: str, raft: str, http: str, url: str, now: float) -> bool:
        with self.lock:
            return self.kb.apply_member(node_id, raft, http, url, now)

    @replicated
    def member_removed(self, raft: str, now: float) -> bool:
        with self.lock:
            return self.kb.apply_member_removed(raft, now)

    # A method added after the first release takes a new pysyncobj code version: the log
    # stores a method's number, numbered in the order of (version, name), so a new method
    # of version 0 would renumber the others and old journals would replay the wrong one.
    # A lead proposes it only once the group runs that version (``RaftNode.code_version``;
    # the leader raises it with ``RaftNode.enable_code_version``). The numbers are pinned
    # by tests/lead/test_raft_versions.py.
    @replicated(ver=PLAN_CHANGES_VERSION)
    def plan_changes(self, base: int, changed: dict[str, dict[str, int]], removed: list[str],
                     reasons: dict[str, str], reason: str, goals_commit: str | None, term: int,
                     now: float, unmet: list[dict[str, str]] | None = None) -> int:
        with self.lock:
            return self.kb.apply_plan_changes(base, changed, removed, reasons, reason, goals_commit,
                                              term, now, unmet or ())

    @replicated(ver=BRANCH_HEADS_VERSION)
    def branch_heads(self, changes: dict[str, str | None], term: int) -> bool:
        with self.lock:
            return self.kb.apply_branch_heads(changes, term)


def _fast_dump_compression() -> None:
    """Have pysyncobj write its full dump with gzip level 1 instead of 9.

    The dump is written on the Raft thread (``useFork=False``). Measured on a dump of
    3,000 clusters: level 9 took 0.78 s for 2.2 MB, level 1 0.02 s for a file 30 %
    larger; at 10,000 clusters level 9 stalled the tick for seconds and every lead
    lost its leader at once (they compact at the same entry count). The file is gzip
    either way, so dumps written before and after read the same."""
    import pysyncobj.serializer as serializer  # type: ignore[import-untyped]

    class _Gzip:  # the one name pysyncobj's serializer uses from the gzip module
        @staticmethod
        def GzipFile(*args: Any, **kwargs: Any) -> gzip.GzipFile:
            if "w" in str(kwargs.get("mode", args[1] if len(args) > 1 else "rb")):
                kwargs.setdefault("compresslevel", 1)
            return gzip.GzipFile(*args, **kwargs)

    serializer.gzip = _Gzip


_fast_dump_compression()

# The pickle protocol of pysyncobj's messages between leads, of the commands its log
# holds and of its full dumps (it hard-codes 2). Protocol 2 writes ``bytes`` as latin-1
# text, two bytes for each byte over 0x7f, and a report batch (MessagePack) travels as
# bytes pickled twice (the command, then the message carrying it): a 32 KB batch became
# a 55 KB message, and pickling it cost 20 times protocol 4's CPU. Every lead runs
# Python 3, whose unpickler reads any protocol, so leads of older and newer versions
# still read each other's messages, journals and dumps.
RAFT_PICKLE_PROTOCOL = 4


def _pickle_protocol(protocol: int = RAFT_PICKLE_PROTOCOL) -> None:
    """Have pysyncobj pickle with ``protocol`` instead of 2."""
    import pysyncobj.pickle as pysyncobj_pickle  # type: ignore[import-untyped]

    # A module global read at each call (``dumps`` and ``dump``); not a class attribute,
    # so its two underscores are part of the name.
    setattr(pysyncobj_pickle, "__protocol", protocol)


_pickle_protocol()


class StateCapture:
    """A replica's state taken for a full dump (``KnowledgeBase.capture``), to be turned
    into the plain dict the dump stores (``to_dict``) off the Raft thread.

    It stands in pysyncobj's dump data where the consumer's dict goes, and never reaches
    the file: ``_BackgroundDump`` replaces it by ``plain()`` before pickling. It serves one
    dump: that dump empties its containers as it frees the dict (``_drop_gradually``)."""

    __slots__ = ("_kb",)

    def __init__(self, kb: KnowledgeBase) -> None:
        self._kb = kb

    def plain(self) -> dict[str, Any]:
        """The state as the plain dict the dump stores."""
        return self._kb.to_dict()

    def __reduce__(self) -> Any:
        raise TypeError("a StateCapture is turned into plain() before a dump is pickled")


def _detached(data: Any) -> Any:
    """pysyncobj's dump data ``(consumers' data, last entry, entry before, cluster)`` made
    safe to pickle on another thread: deep-copied (the little pysyncobj itself puts
    there may change with the next tick), except the ``StateCapture``s, which nothing
    changes and which are the bulk."""
    parts = data[0] if isinstance(data[0], list) else [data[0]]
    keep = {id(part): part for part in parts if isinstance(part, StateCapture)}
    return copy.deepcopy(data, keep)


def _plain(data: Any) -> Any:
    """``data`` with every ``StateCapture`` among the consumers' data replaced by its plain
    dict: exactly what pysyncobj would have pickled without captures."""
    first = data[0]
    if isinstance(first, list):
        first = [part.plain() if isinstance(part, StateCapture) else part for part in first]
    elif isinstance(first, StateCapture):
        first = first.plain()
    return (first, *data[1:])


class _YieldingPickler(pickle.Pickler):
    """The C pickler, made to let other threads run while it works.

    ``pickle.dumps`` holds the interpreter lock from start to end: 0.11-0.26 s for the
    state of 10,000 clusters, and the Raft thread waits that long on the dump's thread.
    A ``persistent_id`` written in Python is called for every object, and each call is a
    point where the interpreter hands the lock to a thread waiting for it. It names no
    object persistent, so the bytes are those of ``pickle.dumps`` (about 1.5x the CPU)."""

    def persistent_id(self, obj: Any) -> None:
        return None


def _pickled(data: Any) -> bytes:
    """``_plain(data)`` pickled as pysyncobj pickles its dumps (the same bytes), with the
    collector off and other threads let run.

    The plain dict is a large acyclic structure of every report, and the collections its
    allocations set off walked everything alive (a 0.47 s full collection at 10,000
    clusters, every thread stopped). It is dropped before the collector is back, so what
    it allocated is freed, not left for the next collection to walk."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        plain = _plain(data)
        try:
            out = io.BytesIO()
            _YieldingPickler(out, RAFT_PICKLE_PROTOCOL).dump(plain)
            return out.getvalue()
        finally:
            _drop_gradually(plain[0])
    finally:
        if was_enabled:
            gc.enable()


def _drop_gradually(consumers: Any) -> None:
    """Empty the consumers' plain dicts of a dump a section entry at a time (one cluster's
    report, say). Dropped at once, the state of 10,000 clusters was freed in one C call
    of 36-200 ms with the interpreter lock held, and the Raft thread waited; between two
    entries other threads get their turn. Only for what the dump's thread owns: the
    dicts ``to_dict`` built from a capture (whose containers are the capture's own) and
    the deep copy ``_detached`` made of the rest."""
    for part in consumers if isinstance(consumers, list) else [consumers]:
        if not isinstance(part, dict):
            continue
        for section in part.values():
            if isinstance(section, dict):
                while section:
                    section.popitem()


class _BackgroundDump(pysyncobj_serializer.Serializer):  # type: ignore[misc]
    """pysyncobj's full dump with the compression and the file written off the Raft thread.

    Without fork (``useFork=False``, see ``RaftNode``) pysyncobj pickled, compressed and
    wrote the dump inside a tick: at 10,000 clusters every lead's Raft thread was held
    4-12 s at a time on a busy machine (``stall_probe`` saw it in ``gzip.write``) and
    the term moved each time. The Raft thread now only captures the state (``ReplicatedKB``
    gives a ``StateCapture``: copies of the containers, whose values no later entry
    changes) and copies pysyncobj's own few values; a thread builds the plain dict,
    pickles, compresses and writes it, and replaces the file the same way (zlib and file
    writes release the interpreter lock). The file is the same gzip of the same pickle, so
    dumps written before and after read the same. Until the thread is done pysyncobj
    sees ``SERIALIZING``: it keeps its log, starts no other dump and sends no dump to a
    follower; a failed write is reported as ``FAILED`` and the log kept, as before; a
    dump arriving from the leader meanwhile cancels it (``setTransmissionData``).
    Anything but a plain file dump (no file, fork, a custom serializer) is pysyncobj's."""

    def __init__(self, fileName: str | None, transmissionBatchSize: int, tryUseFork: bool,
                 serializer: Any, deserializer: Any, serializeChecker: Any) -> None:
        super().__init__(fileName, transmissionBatchSize, tryUseFork, serializer, deserializer,
                         serializeChecker)
        self._file = fileName
        self._background = (fileName is not None and serializer is None and serializeChecker is None
                            and not (tryUseFork and hasattr(os, "fork")))
        self._writer: threading.Thread | None = None
        self._written = False
        self._id: Any = None
        # Set when the leader's dump supersedes the one being written; checked, under
        # ``_replacing``, before that one replaces the file.
        self._cancelled = threading.Event()
        self._replacing = threading.Lock()
        self._count = 0  # dumps started: each writes its own temporary file

    def serialize(self, data: Any, id: Any) -> None:
        if not self._background:
            super().serialize(_plain(data), id)
            return
        if self._writer is not None:
            return
        detached = _detached(data)  # the state as of ``id``: all the Raft thread does
        self._id, self._written = id, False
        self._cancelled = threading.Event()
        self._count += 1
        # pysyncobj's own flag for "a dump is being written": no dump is sent meanwhile.
        self._Serializer__pid = -3
        self._writer = threading.Thread(
            target=self._write, args=(detached, self._cancelled, f"{self._file}.{self._count}.writing"),
            name="raft-dump", daemon=True)
        self._writer.start()

    def _write(self, data: Any, cancelled: threading.Event, temporary: str) -> None:
        assert self._file is not None
        started = time.perf_counter()
        try:
            payload = _pickled(data)
            with open(temporary, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb",
                                                             compresslevel=1) as packed:
                packed.write(payload)
            with self._replacing:
                superseded = cancelled.is_set()
                if not superseded:
                    atomicReplace(temporary, self._file)
                    self._written = True
            if superseded:
                os.remove(temporary)
                log.info("raft_dump_superseded", seconds=round(time.perf_counter() - started, 3))
            else:
                log.info("raft_dump_written", bytes=len(payload),
                         seconds=round(time.perf_counter() - started, 3))
        except Exception as exc:
            log.error("raft_dump_failed", error=exc)
            with contextlib.suppress(OSError):
                os.remove(temporary)

    def setTransmissionData(self, data: Any) -> bool:
        """A follower receiving the leader's dump: a dump of its own still being made
        would replace the newer file with an older state once done, so it is cancelled
        and forgotten (pysyncobj never hears of it, and keeps its log for it). Cancelled,
        not waited for: building and pickling it takes about a second at 10,000 clusters,
        and this runs on the Raft thread. Under ``_replacing``: either it replaced the file
        already (the leader's replaces it next) or it never will."""
        if self._writer is not None:
            with self._replacing:
                self._cancelled.set()
            self._writer = None
            self._Serializer__pid = 0
        return bool(super().setTransmissionData(data))

    def checkSerializing(self) -> tuple[int, Any]:
        if not self._background:
            return super().checkSerializing()  # type: ignore[no-any-return]
        writer = self._writer
        if writer is None:
            return SERIALIZER_STATE.NOT_SERIALIZING, None
        if writer.is_alive():
            return SERIALIZER_STATE.SERIALIZING, self._id
        self._writer = None
        self._Serializer__pid = 0
        if not self._written:
            return SERIALIZER_STATE.FAILED, self._id
        self._Serializer__transmissions: dict[Any, Any] = {}  # what pysyncobj drops after a new dump
        return SERIALIZER_STATE.SUCCESS, self._id


# pysyncobj builds its serializer by this module-level name (pysyncobj 0.3).
pysyncobj_syncobj.Serializer = _BackgroundDump


class TickGaps:
    """The longest gaps between two starts of the Raft thread's tick: how long Raft was
    starved (a long entry applied, a full dump written, another thread holding the GIL
    through a garbage collection). A gap near the leader fallback costs leadership."""

    def __init__(self, warn_above: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.warn_above = warn_above
        self._clock = clock
        self._last: float | None = None
        self.longest = 0.0
        self.stalls = 0  # gaps above warn_above
        # The longest gap of the current and of the previous minute: "recent".
        self._minute = 0
        self._minute_max = 0.0
        self._previous_max = 0.0

    def mark(self) -> float:
        """Called at the start of every tick (on the Raft thread); returns the gap since
        the previous start (0 for the first)."""
        now = self._clock()
        last, self._last = self._last, now
        if last is None:
            return 0.0
        gap = now - last
        minute = int(now // 60)
        if minute != self._minute:
            self._previous_max = self._minute_max if minute == self._minute + 1 else 0.0
            self._minute, self._minute_max = minute, 0.0
        self._minute_max = max(self._minute_max, gap)
        if gap > self.longest:
            self.longest = gap
        if gap > self.warn_above:
            self.stalls += 1
            log.warning("raft_tick_stalled", seconds=round(gap, 3), limit=self.warn_above)
        return gap

    def recent(self) -> float:
        """The longest gap within roughly the last one to two minutes."""
        return max(self._minute_max, self._previous_max)


# The collector's thresholds in the lead. Generation 0 is collected after 7,000 new
# objects instead of 700: nearly everything a report allocates (its record, entry and
# answer) is freed within a batch's commit, so at 700 the collector ran 35-60 times a
# second on each lead walking objects about to be freed anyway, and at 7,000 it runs 1-3
# times (10,000 tokens, 1,000 connections: the collector's CPU per committed report went
# from 7-11 us to 1-2 us on each lead, and the three leads' CPU per report from 395-415 us
# to 353). Generation 1 after 5 of those instead of 10, so the two young generations
# together stay under ``FREEZE_YOUNG_ABOVE`` (which only a ``gc.disable()`` region may
# reach); full collections after 100 of those instead of 10: each walks every live
# container object and holds every thread meanwhile.
GC_THRESHOLDS = (7000, 5, 100)


def freeze_long_lived() -> None:
    """Move every object alive now out of the garbage collector's reach (``gc.freeze``).

    Called when a big long-lived structure was just built: goals accepted (on the
    leader the parsed goals of the whole fleet are alive then) or a full dump loaded.
    Later full collections walk only what was allocated since, so their pause no longer
    grows with the fleet (at 1,000 clusters a full collection held the Raft thread up
    to 4.3 s on a busy machine and the leader lost its term). Frozen objects are still
    freed by reference counting when dropped; the goals and the KB hold no reference
    cycles (measured: nothing unreachable after dropping loaded goals), so nothing
    leaks. Young cyclic garbage is collected first (cheap) so it is not frozen."""
    gc.collect(1)
    gc.freeze()


# A young generation this large at the start of a collection was built while the
# collector was off (``gc.disable()`` around a goals load or a plan: hundreds of
# thousands of objects); a normal one holds at most ``GC_THRESHOLDS[0]`` (generation 0)
# and ``GC_THRESHOLDS[1]`` times that more (generation 1). Walking 99,000 young objects took
# 0.11-0.13 s at 3,000 clusters, a third of the leader fallback.
FREEZE_YOUNG_ABOVE = 50_000


def young_objects(generation: int) -> int:
    """How many objects a collection of ``generation`` would walk outside generation 2:
    those of generation 0 (and 1, for an older collection), counted, not taken from
    ``gc.get_count()``. The count is the allocations minus the deallocations of any
    generation: the goals or the plan of the last cycle freed inside a ``gc.disable()``
    region took it down, and a plan that left 152,000 young objects showed 81,000
    (a goals reload: 49,000 for 16,000). Counting generation 0 costs a few microseconds
    at its normal size (700 objects), a fraction of collecting it."""
    return sum(len(gc.get_objects(g)) for g in range(min(generation, 1) + 1))


class GcPauses:
    """The longest pause of Python's cyclic garbage collector in this process: every
    thread (the Raft thread too) stops while it runs, for a time that grows with the
    number of live container objects. One recorder per process (``gc.callbacks``), held
    by the Raft nodes that use it: ``install`` when a node starts, ``release`` when it
    stops; the last release unregisters it, so it never logs after its node is gone
    (at the end of a test run its log lines went into pytest's closed streams).

    It also keeps the first collection after a ``gc.disable()`` region short: the goals
    loader and the planner switch the collector off while they build a big graph, and
    everything they allocated then sits in the youngest generation, which the next
    collection walks whole: 0.44 s (generation 0) and then 0.47 s (generation 1) at
    1,000 clusters, with the Raft thread stopped, and the leader lost its term. When a
    collection starts with more than ``FREEZE_YOUNG_ABOVE`` young objects (counted:
    ``young_objects``), they are
    moved out of the collector's reach first (``gc.freeze``, what ``freeze_long_lived``
    does once the goals are applied), and the collection finds nothing to walk. Frozen
    objects are still freed by reference counting; only reference cycles among them would
    stay, and the loader, the KB's snapshot, the planner and the renderer make none
    (tests/lead/test_gc_pauses.py, with ``gc.DEBUG_SAVEALL``)."""

    _installed: GcPauses | None = None
    _lock = threading.Lock()

    def __init__(self) -> None:
        self.longest = 0.0
        self.longest_generation = -1
        self.total = 0.0  # seconds of all collections so far (the stall probe's attribution)
        self.collections = 0  # collections so far, and the CPU they took on their threads
        self.total_cpu = 0.0
        self._started = 0.0
        self._started_cpu = 0.0
        # The most CPU one collection took on its thread (``longest`` is wall-clock time,
        # which a busy machine stretches).
        self.longest_cpu = 0.0
        # A pause this long is logged (a third of the leader fallback's default).
        self.log_above = 0.1
        self.young_frozen = 0  # collections that found a disabled region's graph and froze it
        self.freeze_young_above = FREEZE_YOUNG_ABOVE
        self._users = 0
        self._thresholds = gc.get_threshold()  # restored when the last user releases it

    @classmethod
    def install(cls) -> GcPauses:
        """The process's recorder for one more user (a Raft node), registered on first
        use (which also sets ``GC_THRESHOLDS``). Pair with ``release``."""
        with cls._lock:
            if cls._installed is None:
                cls._installed = cls()
                gc.callbacks.append(cls._installed._on_gc)
                gc.set_threshold(*GC_THRESHOLDS)
            cls._installed._users += 1
            return cls._installed

    def release(self) -> None:
        """One user is done with the recorder; the last one unregisters it and restores
        the collector's thresholds. Each ``install`` is released once (a node does it
        through a ``weakref.finalize``)."""
        with self._lock:
            self._users -= 1
            if self._users > 0 or GcPauses._installed is not self:
                return
            GcPauses._installed = None
            if self._on_gc in gc.callbacks:
                gc.callbacks.remove(self._on_gc)
            gc.set_threshold(*self._thresholds)

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            young = young_objects(info.get("generation", 0))
            if young > self.freeze_young_above:
                # Runs before the collection looks at its generations (CPython calls the
                # callbacks first), so it finds them empty.
                gc.freeze()
                self.young_frozen += 1
                log.info("gc_young_frozen", objects=young, thread=threading.current_thread().name)
            self._started_cpu = time.thread_time()
            self._started = time.perf_counter()
            return
        pause = time.perf_counter() - self._started
        cpu = time.thread_time() - self._started_cpu
        self.total += pause
        self.collections += 1
        self.total_cpu += cpu
        if pause > self.longest:
            self.longest, self.longest_generation = pause, info.get("generation", -1)
        self.longest_cpu = max(self.longest_cpu, cpu)
        if pause > self.log_above:
            # Which thread's allocations set it off, and how big: what to fix. ``cpu``: the
            # collector's own work; the rest of ``seconds`` the collecting thread waited for
            # a core or, entering these callbacks (Python code), for the interpreter lock.
            log.warning("gc_pause_long", seconds=round(pause, 3), cpu=round(cpu, 3),
                        generation=info.get("generation"), collected=info.get("collected"),
                        thread=threading.current_thread().name)


class _TimedSyncObj(SyncObj):  # type: ignore[misc]
    """``SyncObj`` that measures its tick gaps (``TickGaps``) and, after a gap longer than
    ``catch_up_after``, reads what its peers sent meanwhile before judging them.

    pysyncobj's tick checks its deadlines (a follower's election timeout, a leader's
    fallback) first and reads its sockets last. After a stall of its own thread (a
    garbage collection, the process not scheduled on a busy machine, another thread
    holding the interpreter) it judged the leader or the majority from before the stall:
    a follower whose thread stalled past its election timeout started an election
    although the leader's heartbeats were waiting in its socket, and a leader stalled
    past its fallback stepped down although its followers' answers were waiting in its
    own. Reading them first (a poll that does not wait) judges peers by what they did
    during the stall, as an unstalled node would have. A leader also adds its stall to
    its followers' last answer times: it sent them nothing meanwhile, so they had
    nothing to answer. Only this node's own stall is forgiven: a follower still starts
    an election when the leader's socket stayed silent through the stall (a leader
    starved that long looks dead to its followers, wherever they run).

    Its ``encryptor`` is the node's ``FrameGuard`` and its transport ``GuardedTransport``
    (lead/raft_transport.py): every frame between leads is sealed with the group's secret."""

    def __init__(self, *args: Any, tick_gaps: TickGaps, catch_up_after: float,
                 guard: FrameGuard, **kwargs: Any) -> None:
        self.tick_gaps = tick_gaps  # before the tick thread starts in SyncObj.__init__
        self._guard = guard  # before the transport is built in SyncObj.__init__
        self.catch_up_after = catch_up_after
        self.caught_up = 0  # ticks that read their sockets first after a stall
        # Per follower, the answer time a stall last moved: moved again only after a real
        # answer, so a leader that keeps stalling without hearing anyone still steps down.
        self._forgiven: dict[Any, float] = {}
        self._os_named = False
        super().__init__(*args, transportClass=GuardedTransport, **kwargs)

    @property
    def encryptor(self) -> FrameGuard:
        """What pysyncobj seals and opens every frame with (its ``password`` option's place)."""
        return self._guard

    def _onTick(self, timeToWait: float = 0.0) -> None:
        if not self._os_named:
            self._os_named = True
            name_os_thread("raft")
        gap = self.tick_gaps.mark()
        if gap > self.catch_up_after:
            self.caught_up += 1
            self._poller.poll(0)
            self._forgive_own_silence(gap)
        super()._onTick(timeToWait)

    # pysyncobj's ``SyncObj.__onMessageReceived`` as Python names it: SyncObj registers
    # ``self.__onMessageReceived`` with its transport, which finds this override.
    def _SyncObj__onMessageReceived(self, node: Any, message: Any) -> None:
        """pysyncobj's message handler, except that an acknowledgement never moves a
        follower's next index back on the leader.

        The leader advances a follower's next index as it sends (the appends are
        pipelined on one ordered connection), and pysyncobj set it to whatever each
        successful acknowledgement names: one for an earlier append, arriving after later
        ones went out, made the leader send those again. The follower then deleted them
        from its journal and appended them anew (``truncating already-applied log
        entries`` when it had applied them). A refusal (``reset``) still sets the index
        wherever the follower says, as Raft wants after a lost or mismatched append."""
        next_index = getattr(self, "_SyncObj__raftNextIndex", None)  # pysyncobj 0.3's name
        ahead = None
        if (isinstance(next_index, dict) and isinstance(message, dict)
                and message.get("type") == "next_node_idx"
                and message.get("success") and not message.get("reset")):
            ahead = next_index.get(node)
        SyncObj._SyncObj__onMessageReceived(self, node, message)
        if ahead is not None and self._isLeader() and next_index is not None:
            if node in next_index and next_index[node] < ahead:
                next_index[node] = ahead

    def _forgive_own_silence(self, gap: float) -> None:
        """On the leader: followers answer only what it sends, and it sent nothing while it
        stalled; give each the stall on top of the fallback before judging (a follower
        silent for a whole fallback of the leader's activity still counts as gone). Once
        per answer: without one since the last stall forgiven, the silence is the
        follower's (or the network's), and a leader whose every tick is late (a starved,
        isolated one) must step down as it would without stalls."""
        if not self._isLeader():
            return
        answered = getattr(self, "_SyncObj__lastResponseTime", None)  # pysyncobj 0.3's name
        if not isinstance(answered, dict):
            return
        now = pysyncobj_clock()  # the clock pysyncobj keeps these times in
        for node, at in answered.items():
            if self._forgiven.get(node) == at:
                continue
            answered[node] = self._forgiven[node] = min(now, at + gap)


@dataclass(frozen=True)
class RaftTiming:
    """Raft timing. The pysyncobj defaults (0.4-1.4 s elections, a 30 s leader
    fallback, 5 s reconnects) are too slow for seconds-level failover."""

    election_min: float = 0.4
    election_max: float = 1.0
    heartbeat: float = 0.05
    # An isolated leader steps down after this long without a majority of replies.
    # Below election_min, so it gives up before the majority can elect a successor.
    leader_fallback: float = 0.35
    reconnect: float = 0.5
    compaction_entries: int = 5000
    compaction_seconds: float = 60.0


def _compaction_spread() -> float:
    """A factor in [0.75, 1.25) for this lead's compaction count and time, drawn once per
    process: leads started together (and all holding the same log) would otherwise write
    their full dumps at the same moment. Compaction timing is no part of the replicated
    state, so it need not be the same on every lead."""
    return 0.75 + random.random() / 2


class RaftNode:
    """One member of the lead group."""

    def __init__(
        self,
        raft_addr: str,
        peers: list[str],
        data_dir: str | os.PathLike[str],
        timing: RaftTiming = RaftTiming(),
        *,
        secret: RaftSecret,
        bind: str | None = None,
    ) -> None:
        self.raft_addr = raft_addr
        self.timing = timing
        # The Raft port: bound to ``bind`` or this lead's own address, never all of them,
        # and every frame sealed with the group's secret (lead/raft_transport.py).
        self.guard = FrameGuard(secret)
        listen = bind_address(raft_addr, bind)
        data = Path(data_dir)
        data.mkdir(parents=True, exist_ok=True)
        self.state = ReplicatedKB()
        spread = _compaction_spread()
        conf = SyncObjConf(
            dynamicMembershipChange=True,
            # Both files: the journal holds every entry and the commit index, the dump
            # lets the journal be compacted. A dump alone loses the tail on kill -9.
            journalFile=str(data / "raft.journal"),
            fullDumpFile=str(data / "raft.dump"),
            raftMinTimeout=timing.election_min,
            raftMaxTimeout=timing.election_max,
            appendEntriesPeriod=timing.heartbeat,
            leaderFallbackTimeout=timing.leader_fallback,
            connectionRetryTime=timing.reconnect,
            connectionTimeout=max(1.0, timing.election_max * 2),
            # We batch reports ourselves; sending each of our batches at once (instead
            # of waiting for the next heartbeat period) cuts commit latency.
            appendEntriesUseBatch=False,
            # Dumps are written in-process: forking a threaded process is unsafe.
            useFork=False,
            # Each lead compacts at its own count and time (_compaction_spread): the full dump
            # holds the Raft thread, and with one setting for all three every lead paused
            # at once (at 3,000 clusters 0.5-1.1 s, each time the leader lost its term).
            logCompactionMinEntries=max(1, round(timing.compaction_entries * spread)),
            logCompactionMinTime=timing.compaction_seconds * spread,
            commandsWaitLeader=True,
            # Peers are often DNS names whose address changes when a lead restarts
            # (a StatefulSet pod gets a new IP). pysyncobj caches lookups for 600 s by
            # default, so the others kept dialling the old address for minutes.
            dnsCacheTime=5.0,
            dnsFailCacheTime=1.0,
            bindAddress=listen,
        )
        others = [p for p in peers if p and p != raft_addr]
        # Half the fallback: a stall that long is worth a line in the log.
        self.tick_gaps = TickGaps(warn_above=timing.leader_fallback / 2)
        self.gc_pauses = GcPauses.install()
        # Released by destroy, or when this node is dropped without it: the recorder
        # never outlives its node (finalize runs its function once).
        self._release_gc_pauses = weakref.finalize(self, self.gc_pauses.release)
        try:
            # A tick waits up to pysyncobj's tick period (0.05 s) for its sockets: a gap
            # of twice that is a stall worth reading the sockets first for.
            self.sync = _TimedSyncObj(raft_addr, others, conf=conf, consumers=[self.state],
                                      tick_gaps=self.tick_gaps,
                                      catch_up_after=2 * conf.autoTickPeriod, guard=self.guard)
        except BaseException:
            self._release_gc_pauses()
            raise

    # ----------------------------------------------------------- leadership

    def is_leader(self) -> bool:
        """Leadership is a belief: we hold it only while Raft says so AND a majority
        is connected. pysyncobj keeps an isolated leader in state leader until the
        fallback timeout; the quorum check closes most of that window."""
        return bool(self.sync._isLeader() and self.sync.hasQuorum)

    def code_version(self) -> int:
        """The pysyncobj code version the group runs (``setCodeVersion``): a replicated
        method of a higher version must not be proposed yet (older leads cannot apply it)."""
        return int(self.sync.getCodeVersion())

    def term(self) -> int:
        """The current Raft term of this node."""
        return int(self.sync.raftCurrentTerm)

    def leader_addr(self) -> str | None:
        """The leader as this node knows it, or None.

        ``getStatus()['leader']`` may still name a dead node; we only name a leader
        we are connected to (or ourselves when we hold a quorum)."""
        if self.is_leader():
            return self.raft_addr
        node = self.sync._getLeader()
        if node is None or node.address == self.raft_addr:
            return None
        return node.address if self.sync.isNodeConnected(node) else None

    def raft_state(self) -> str:
        """``leader``, ``candidate`` or ``follower`` as Raft says (not the belief above)."""
        return {0: "follower", 1: "candidate", 2: "leader"}.get(
            int(self.sync.getStatus()["state"]), "unknown"
        )

    def members(self) -> list[dict[str, Any]]:
        """Every member's Raft address, whether we are connected to it, and who is us."""
        result = [{"raft": self.raft_addr, "connected": True, "self": True}]
        for node in sorted(self.sync.otherNodes, key=lambda n: n.address):
            result.append(
                {"raft": node.address, "connected": bool(self.sync.isNodeConnected(node)),
                 "self": False}
            )
        return result

    def raft_status(self) -> dict[str, Any]:
        """The numbers an operator needs from Raft."""
        st = self.sync.getStatus()
        return {
            "state": self.raft_state(),
            "term": int(st["raft_term"]),
            "commitIndex": int(st["commit_idx"]),
            "lastApplied": int(st["last_applied"]),
            "logLength": int(st["log_len"]),
            "hasQuorum": bool(st["has_quorum"]),
            "ready": bool(self.sync.isReady()),
            # How long the Raft thread went without a tick: since start, lately, and how
            # often it exceeded half the leader fallback.
            "longestTickGapSeconds": round(self.tick_gaps.longest, 3),
            "recentTickGapSeconds": round(self.tick_gaps.recent(), 3),
            "tickStalls": self.tick_gaps.stalls,
            "longestGcPauseSeconds": round(self.gc_pauses.longest, 3),
            "longestGcPauseGeneration": self.gc_pauses.longest_generation,
            # What the collector cost this process so far: its share of the CPU.
            "gcCollections": self.gc_pauses.collections,
            "gcCpuSeconds": round(self.gc_pauses.total_cpu, 3),
            # The Raft port: which secret seals, which are accepted, what was refused.
            "transport": self.guard.snapshot(),
        }

    # ---------------------------------------------------------------- writes

    def propose(self, method: Callable[..., Any], *args: Any, timeout: float = 5.0) -> Any:
        """Run a replicated call and wait until this node applied it; returns its result.

        Raises ProposalError when it was not committed within ``timeout``. Note that a
        timed-out proposal may still commit later: callers must be idempotent.
        """
        done = threading.Event()
        box: dict[str, Any] = {}

        def on_result(result: Any, err: int) -> None:
            box["result"], box["err"] = result, err
            done.set()

        method(*args, callback=on_result)
        if not done.wait(timeout):
            raise ProposalError("timeout")
        if box["err"] != FAIL_REASON.SUCCESS:
            raise ProposalError(fail_name(box["err"]))
        return box["result"]

    def change_membership(self, action: str, raft_addr: str, timeout: float = 10.0) -> None:
        """Add or remove one lead. One change at a time; wait for it before the next."""
        done = threading.Event()
        box: dict[str, Any] = {}

        def on_result(result: Any, err: int) -> None:
            box["err"] = err
            done.set()

        if action == "add":
            self.sync.addNodeToCluster(raft_addr, callback=on_result)
        elif action == "remove":
            self.sync.removeNodeFromCluster(raft_addr, callback=on_result)
        else:
            raise ValueError(f"unknown membership action {action!r}")
        if not done.wait(timeout):
            raise ProposalError("timeout")
        if box["err"] != FAIL_REASON.SUCCESS:
            raise ProposalError(fail_name(box["err"]))

    # ---------------------------------------------------------- code version

    def enable_code_version(self, timeout: float = 2.0) -> int:
        """On the leader: raise the group's code version to the newest that every member
        runs (at most ``CODE_VERSION``), as each says over pysyncobj's admin protocol
        (``status``: ``self_code_version``, what ``syncobj_admin -status`` shows). A member
        that does not answer holds it where it is: during a rolling upgrade an older lead
        would fail on entries it does not know. Returns the version the group runs."""
        current = self.code_version()
        if current >= CODE_VERSION or not self.is_leader():
            return current
        target = CODE_VERSION
        for node in sorted(self.sync.otherNodes, key=lambda n: n.address):
            try:
                status = utility(self.guard, timeout).executeCommand(node.address, ["status"])
            except UtilityException as exc:
                log.info("raft_code_version_unknown", member=node.address, error=str(exc))
                return current
            version = status.get("self_code_version", 0) if isinstance(status, dict) else None
            if not isinstance(version, int):
                log.info("raft_code_version_unknown", member=node.address, error="no status")
                return current
            if version < target:
                log.info("raft_code_version_behind", member=node.address, version=version)
                target = version
        if target <= current:
            return current
        done = threading.Event()
        box: dict[str, Any] = {}

        def on_result(result: Any, err: int) -> None:
            box["err"] = err
            done.set()

        self.sync.setCodeVersion(target, callback=on_result)
        if not done.wait(timeout) or box["err"] != FAIL_REASON.SUCCESS:
            log.warning("raft_code_version_not_enabled", version=target,
                        error=fail_name(box.get("err", -1)) if done.is_set() else "timeout")
            return self.code_version()
        log.info("raft_code_version_enabled", version=target, was=current)
        return target

    def destroy(self) -> None:
        """Stop the Raft node (closes sockets; the files stay) and release its garbage
        collector recorder. Safe to call twice."""
        self.sync.destroy()
        self._release_gc_pauses()


def fail_name(code: int) -> str:
    """pysyncobj's FAIL_REASON number as a readable name."""
    return _FAIL_NAMES.get(code, f"code-{code}").lower().replace("_", "-")


class ReportBatcher:
    """Folds reports arriving within a few milliseconds into one replicated call.

    One Raft entry per report would cap ingest at a few hundred per second; one
    entry per batch lets each HTTP request wait for its batch's commit (so a 2xx
    still means committed) while the log carries far fewer entries.

    Group commit: a batch leaves ``window`` seconds after its first report, unless
    ``max_in_flight`` batches of this lead are still uncommitted; then it keeps
    filling until one commits (or ``max_hold`` passed, or it is full). Under load
    batches grow instead of multiplying: each Raft entry costs every lead a message,
    a journal write and a commit round whatever it carries (at 1,100 reports/s a 5 ms
    window alone made batches of two or three reports), while at low load a report
    still leaves within ``window``. Under load a lead also proposes no more than one
    batch per ``min_gap`` (pacing). Measured with 128 connections that each wait for
    their answer: 40 ms made entries of 35 reports instead of 19 and cost each lead's
    Raft thread 10-15 % less, but capped the run near 128 / 40 ms; 15 ms keeps 22-26
    reports per entry and the run reached 3,350 reports/s.

    A batch travels as one MessagePack array of the entries, each encoded once by
    ``submit`` on the caller's thread (``kb.records.encode_entry``); the other leads decode
    the bytes into the same records, and this lead applies the entries it encoded
    (``ReplicatedKB.proposing``) instead of decoding its own bytes again.
    """

    def __init__(
        self,
        node: RaftNode,
        window: float = 0.005,
        max_batch: int = 200,
        # pysyncobj's append size is 64 KiB: past it, it sends an entry in chunks and
        # its followers log errors (see tests/lead/test_ingest.py). A batch stops at
        # ``max_bytes`` of encoded reports (about 280 bytes each for a small cluster), or
        # holds one report alone when that one is larger.
        max_bytes: int = 56 * 1024,
        max_in_flight: int = 1,
        max_hold: float = 0.25,
        # Under load a lead proposes at most one batch per ``min_gap``: every Raft entry
        # costs each lead pysyncobj's messages, journal and commit round (about half a
        # millisecond of Python), so fewer, fuller entries leave more CPU for reports.
        # A report arriving after a quiet spell still leaves within ``window``.
        min_gap: float = 0.015,
    ) -> None:
        self.node = node
        self.window = window
        self.min_gap = min_gap
        self._last_sent = float("-inf")
        self.max_batch = max_batch
        self.max_bytes = max_bytes
        self.max_in_flight = max_in_flight
        self.max_hold = max_hold
        self._cond = threading.Condition()
        self._pending: list[tuple[bytes, ReportEntry, _Waiter]] = []  # encoded entries
        self._pending_bytes = 0
        self._stopped = False
        self.in_flight_batches = 0
        self._sent_at: dict[int, float] = {}  # batch number -> when it was proposed
        self.batches_sent = 0
        self.reports_committed = 0
        self._thread = threading.Thread(target=self._run, name="report-batcher", daemon=True)
        self._thread.start()

    def submit(self, entry: ReportEntry,
               on_done: Callable[[ReportVerdict | None, str | None], None] | None = None) -> _Waiter:
        """Queue one report; wait on the returned waiter for its commit, or pass
        ``on_done(verdict, error)``, called once on the thread that finishes it."""
        waiter = _Waiter(on_done)
        encoded = encode_entry(entry)  # here, on the caller's thread: the batcher only joins
        with self._cond:
            self._pending.append((encoded, entry, waiter))
            self._pending_bytes += len(encoded)
            # Wake the batcher only when it has something to do: the first report (it
            # waits for one) or a full batch (it stops holding). A wake-up per report
            # cost a thread switch per report on both threads.
            if (len(self._pending) == 1 or len(self._pending) >= self.max_batch
                    or self._pending_bytes >= self.max_bytes):
                self._cond.notify()
        return waiter

    def pending(self) -> int:
        """Reports queued here and not yet proposed."""
        with self._cond:
            return len(self._pending)

    def stop(self) -> None:
        """Stop the flusher; queued reports fail with ``shutdown``."""
        with self._cond:
            self._stopped = True
            self._cond.notify()
        self._thread.join(timeout=2)

    def _run(self) -> None:
        name_os_thread("report-batcher")
        while True:
            with self._cond:
                while not self._pending and not self._stopped:
                    self._cond.wait()
                if self._stopped:
                    for _, _, waiter in self._pending:
                        waiter.finish(None, "shutdown")
                    self._pending.clear()
                    self._pending_bytes = 0
                    return
            # Let the batch fill for one window; the lock is free meanwhile.
            time.sleep(self.window)
            with self._cond:
                # Group commit: hold the batch while earlier ones are uncommitted (the
                # commit callback notifies), so it grows instead of adding entries.
                hold_until = time.monotonic() + self.max_hold
                # Pacing: and no sooner than ``min_gap`` after the previous batch.
                while (not self._stopped and len(self._pending) < self.max_batch
                       and self._pending_bytes < self.max_bytes):
                    now = time.monotonic()
                    if self._held_back():
                        left = hold_until - now
                    else:
                        left = self._last_sent + self.min_gap - now
                    if left <= 0:
                        break
                    self._cond.wait(left)
                batch = self._take()
            if batch:
                self._send(batch)

    def _take(self) -> list[tuple[bytes, ReportEntry, _Waiter]]:
        """The next batch off the queue (under ``_cond``): at most ``max_batch`` reports
        and ``max_bytes`` of them, and at least one."""
        size, count = 0, 0
        for encoded, _, _ in self._pending[: self.max_batch]:
            if count and size + len(encoded) > self.max_bytes:
                break
            size += len(encoded)
            count += 1
        batch = self._pending[:count]
        del self._pending[:count]
        self._pending_bytes -= size
        return batch

    def _send(self, batch: list[tuple[bytes, ReportEntry, _Waiter]]) -> None:
        packed = pack_entries([encoded for encoded, _, _ in batch])
        waiters = [waiter for _, _, waiter in batch]
        state = self.node.state
        with self._cond:
            self.in_flight_batches += 1
            self.batches_sent += 1
            seq = self.batches_sent
            self._sent_at[seq] = self._last_sent = time.monotonic()

        def settled(committed: int) -> None:
            with self._cond:
                self.in_flight_batches -= 1
                self.reports_committed += committed
                self._sent_at.pop(seq, None)
                self._cond.notify()

        def on_commit(result: Any, err: int) -> None:
            state.settled(packed)
            settled(len(waiters) if err == FAIL_REASON.SUCCESS else 0)
            if err == FAIL_REASON.SUCCESS:
                for verdict, waiter in zip(result, waiters):
                    waiter.finish(verdict, None)
            else:
                for waiter in waiters:
                    waiter.finish(None, fail_name(err))

        state.proposing(packed, [entry for _, entry, _ in batch])
        try:
            state.reports(packed, callback=on_commit)
        except Exception as exc:  # the queue refused it: fail the requests, keep running
            state.settled(packed)
            settled(0)
            log.error("report_batch_failed", error=exc)
            for waiter in waiters:
                waiter.finish(None, "queue-error")

    def _held_back(self) -> bool:
        """Whether ``max_in_flight`` recent batches are uncommitted (under ``_cond``). A
        batch whose answer never came (a lost leader) stops counting after ``max_hold``."""
        recent = time.monotonic() - self.max_hold
        return sum(1 for at in self._sent_at.values() if at > recent) >= self.max_in_flight


class _Waiter:
    """One HTTP request waiting for its batch to commit: ``on_done`` is called, or
    (without one) ``wait`` blocks."""

    __slots__ = ("_event", "_on_done", "error", "verdict")

    def __init__(self, on_done: Callable[[ReportVerdict | None, str | None], None] | None = None) -> None:
        # An Event costs a lock and a condition: only a waiter without a callback needs it.
        self._event = threading.Event() if on_done is None else None
        self._on_done = on_done
        self.verdict: ReportVerdict | None = None
        self.error: str | None = None

    def finish(self, verdict: ReportVerdict | None, error: str | None) -> None:
        self.verdict, self.error = verdict, error
        if self._event is not None:
            self._event.set()
        if self._on_done is not None:
            try:
                self._on_done(verdict, error)
            except Exception as exc:  # runs on the Raft thread: never let it escape
                log.error("report_waiter_callback_failed", error=exc)

    def wait(self, timeout: float) -> bool:
        """True when the batch finished (committed or failed) within ``timeout``; only for
        a waiter submitted without ``on_done``."""
        if self._event is None:
            raise RuntimeError("this waiter reports through its callback")
        return self._event.wait(timeout)
