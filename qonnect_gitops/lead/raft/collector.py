"""Python's garbage collector in a lead: its thresholds, what is moved out of its reach,
and the pauses it causes (every thread, the Raft thread too, stops while it runs).
Measured in docs/operations-leads.md (*Is Raft starved?*), tests/lead/test_gc_pauses.py."""

from __future__ import annotations

import gc
import threading
import time

from qonnect_gitops.logs import get_logger

log = get_logger(__name__)


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
