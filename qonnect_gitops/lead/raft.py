"""The lead's Raft node: pysyncobj around the Knowledge Base.

``ReplicatedKB`` is the state machine: each ``@replicated`` method is one log
entry type and only forwards to a ``KnowledgeBase.apply_*`` transition, under
a lock so HTTP threads read a consistent state while the tick thread applies.
``RaftNode`` owns the ``SyncObj`` (timing, files, membership) and turns
pysyncobj's callbacks into blocking ``propose`` calls with a timeout.
"""

from __future__ import annotations

import gc
import gzip
import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, SyncObjConsumer, replicated

from qonnect_gitops.kb import (
    KBReader,
    KnowledgeBase,
    ReportEntry,
    ReportVerdict,
    WorkloadRecord,
)
from qonnect_gitops.kb.records import encode_entry, pack_entries, unpack_entries
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

    def reader(self) -> KBReader:
        """Typed, locked reads of this replica."""
        return KBReader(self.lock, lambda: self.kb)

    # The full dump stores plain dicts, not pickled objects of our classes, so a
    # dump stays loadable across code changes that keep the state format.
    def _serialize(self) -> dict[str, Any]:
        with self.lock:
            return self.kb.to_dict()

    def _deserialize(self, data: dict[str, Any]) -> None:
        with self.lock:
            self.kb = KnowledgeBase.from_dict(data)
        freeze_long_lived()

    @replicated
    def reports(self, batch: bytes | list[ReportEntry]) -> list[ReportVerdict]:
        # ``batch``: the entries packed by ``ReportBatcher`` (MessagePack, decoded here in
        # C on every lead), or a list pickled by a lead from before that encoding.
        entries = unpack_entries(batch) if isinstance(batch, bytes) else batch
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

# zlib level of pysyncobj's messages between leads (pysyncobj hard-codes 3). An entry
# of 30 reports is an 8.6 KB message, compressed once per follower: level 3 took about
# 100 us, level 1 about 60 us for the same 940 bytes (loaded machine, best of 7). Level 0
# (stored) took 6 us but sends 9x the bytes, which matters between hosts more than the
# CPU. Any level decompresses alike, so leads of older and newer versions still talk.
RAFT_MESSAGE_LEVEL = 1


def _fast_message_compression(level: int = RAFT_MESSAGE_LEVEL) -> None:
    """Have pysyncobj compress its messages at ``level`` instead of 3."""
    import zlib

    import pysyncobj.tcp_connection as tcp_connection  # type: ignore[import-untyped]

    class _Zlib:  # the two names pysyncobj's connection uses from the zlib module
        decompress = staticmethod(zlib.decompress)

        @staticmethod
        def compress(data: bytes, _level: int = -1) -> bytes:
            return zlib.compress(data, level)

    tcp_connection.zlib = _Zlib


_fast_message_compression()


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

    def mark(self) -> None:
        """Called at the start of every tick (on the Raft thread)."""
        now = self._clock()
        last, self._last = self._last, now
        if last is None:
            return
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

    def recent(self) -> float:
        """The longest gap within roughly the last one to two minutes."""
        return max(self._minute_max, self._previous_max)


# Full collections only after 100 young-generation collections instead of 10: each
# full collection walks every live container object and holds every thread meanwhile.
GC_THRESHOLDS = (700, 10, 100)


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
# collector was off (``gc.disable()`` around a goals load or a plan: millions of objects);
# a normal one triggers at ``GC_THRESHOLDS[0]``.
FREEZE_YOUNG_ABOVE = 100_000


class GcPauses:
    """The longest pause of Python's cyclic garbage collector in this process: every
    thread (the Raft thread too) stops while it runs, for a time that grows with the
    number of live container objects. Installed once per process (``gc.callbacks``).

    It also keeps the first collection after a ``gc.disable()`` region short: the goals
    loader and the planner switch the collector off while they build a big graph, and
    everything they allocated then sits in the youngest generation, which the next
    collection walks whole: 0.44 s (generation 0) and then 0.47 s (generation 1) at
    1,000 clusters, with the Raft thread stopped, and the leader lost its term. When a
    collection starts with more than ``FREEZE_YOUNG_ABOVE`` young objects, they are
    moved out of the collector's reach first (``gc.freeze``, what ``freeze_long_lived``
    does once the goals are applied), and the collection finds nothing to walk. Frozen
    objects are still freed by reference counting; only reference cycles among them would
    stay, and the loader and the planner make none (a load of 1,000 clusters leaves no
    cyclic garbage: measured with ``gc.DEBUG_SAVEALL``)."""

    _installed: GcPauses | None = None

    def __init__(self) -> None:
        self.longest = 0.0
        self.longest_generation = -1
        self._started = 0.0
        # A pause this long is logged (a third of the leader fallback's default).
        self.log_above = 0.1
        self.young_frozen = 0  # collections that found a disabled region's graph and froze it

    @classmethod
    def install(cls) -> GcPauses:
        """The process's recorder, registered on first use (which also sets
        ``GC_THRESHOLDS``)."""
        if cls._installed is None:
            cls._installed = cls()
            gc.callbacks.append(cls._installed._on_gc)
            gc.set_threshold(*GC_THRESHOLDS)
        return cls._installed

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            young = gc.get_count()[0]
            if young > FREEZE_YOUNG_ABOVE:
                # Runs before the collection looks at its generations (CPython calls the
                # callbacks first), so it finds them empty.
                gc.freeze()
                self.young_frozen += 1
                log.info("gc_young_frozen", objects=young, thread=threading.current_thread().name)
            self._started = time.perf_counter()
            return
        pause = time.perf_counter() - self._started
        if pause > self.longest:
            self.longest, self.longest_generation = pause, info.get("generation", -1)
        if pause > self.log_above:
            # Which thread's allocations set it off, and how big: what to fix.
            log.warning("gc_pause_long", seconds=round(pause, 3), generation=info.get("generation"),
                        collected=info.get("collected"), thread=threading.current_thread().name)


class _TimedSyncObj(SyncObj):  # type: ignore[misc]
    """``SyncObj`` that measures its tick gaps (``TickGaps``)."""

    def __init__(self, *args: Any, tick_gaps: TickGaps, **kwargs: Any) -> None:
        self.tick_gaps = tick_gaps  # before the tick thread starts in SyncObj.__init__
        self._os_named = False
        super().__init__(*args, **kwargs)

    def _onTick(self, timeToWait: float = 0.0) -> None:
        if not self._os_named:
            self._os_named = True
            name_os_thread("raft")
        self.tick_gaps.mark()
        super()._onTick(timeToWait)


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
    ) -> None:
        self.raft_addr = raft_addr
        self.timing = timing
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
        )
        others = [p for p in peers if p and p != raft_addr]
        # Half the fallback: a stall that long is worth a line in the log.
        self.tick_gaps = TickGaps(warn_above=timing.leader_fallback / 2)
        self.gc_pauses = GcPauses.install()
        self.sync = _TimedSyncObj(raft_addr, others, conf=conf, consumers=[self.state],
                                  tick_gaps=self.tick_gaps)

    # ----------------------------------------------------------- leadership

    def is_leader(self) -> bool:
        """Leadership is a belief: we hold it only while Raft says so AND a majority
        is connected. pysyncobj keeps an isolated leader in state leader until the
        fallback timeout; the quorum check closes most of that window."""
        return bool(self.sync._isLeader() and self.sync.hasQuorum)

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

    def destroy(self) -> None:
        """Stop the Raft node (closes sockets; the files stay)."""
        self.sync.destroy()


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
    ``submit`` on the caller's thread (``kb.records.encode_entry``); every lead decodes
    the same bytes into the same records (``ReplicatedKB.reports``).
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
        self._pending: list[tuple[bytes, _Waiter]] = []  # encoded entries
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
            self._pending.append((encoded, waiter))
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
                    for _, waiter in self._pending:
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

    def _take(self) -> list[tuple[bytes, _Waiter]]:
        """The next batch off the queue (under ``_cond``): at most ``max_batch`` reports
        and ``max_bytes`` of them, and at least one."""
        size, count = 0, 0
        for encoded, _ in self._pending[: self.max_batch]:
            if count and size + len(encoded) > self.max_bytes:
                break
            size += len(encoded)
            count += 1
        batch = self._pending[:count]
        del self._pending[:count]
        self._pending_bytes -= size
        return batch

    def _send(self, batch: list[tuple[bytes, _Waiter]]) -> None:
        packed = pack_entries([encoded for encoded, _ in batch])
        waiters = [waiter for _, waiter in batch]
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
            settled(len(waiters) if err == FAIL_REASON.SUCCESS else 0)
            if err == FAIL_REASON.SUCCESS:
                for verdict, waiter in zip(result, waiters):
                    waiter.finish(verdict, None)
            else:
                for waiter in waiters:
                    waiter.finish(None, fail_name(err))

        try:
            self.node.state.reports(packed, callback=on_commit)
        except Exception as exc:  # the queue refused it: fail the requests, keep running
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
