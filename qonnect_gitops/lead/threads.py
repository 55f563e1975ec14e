"""The lead's threads: their operating-system names, and a probe of how long they wait
to run (``StallProbe``)."""

from __future__ import annotations

import ctypes
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType

from qonnect_gitops.logs import get_logger

log = get_logger(__name__)

_PR_SET_NAME = 15


def name_os_thread(name: str) -> None:
    """Give the calling thread ``name`` (15 bytes at most) in the operating system, so
    ``top -H`` and ``/proc/<pid>/task/<tid>/comm`` tell the Raft, HTTP and batcher
    threads apart (how ``benchmarks/lead.py`` splits a lead's CPU). Linux only;
    elsewhere, or if the call fails, nothing happens."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_NAME, name.encode("ascii", "replace")[:15], 0, 0, 0)
    except (OSError, AttributeError):
        pass


# Innermost Python functions of a thread that is waiting, not working: left out of a
# stall's attribution (a thread blocked in a C call shows its caller's frame).
_IDLE_FUNCTIONS = frozenset({
    "wait", "_wait_for_tstate_lock", "select", "poll", "sleep", "accept", "get",
    "readinto", "recv", "recv_into", "_run_probe", "serve_forever", "_worker", "run",
    "handle_request", "_handle_request_noblock",
})
# Functions of a thread whose stack is all dispatch: the first frame of ours below them
# names the work.
_OURS = "qonnect_gitops"


class StallProbe:
    """A thread that sleeps ``period`` seconds again and again and measures how late it
    wakes up: the time any thread of this process (the Raft thread too) waits to run.
    A wake-up later than ``report_above`` is logged as ``stall_probe`` with what explains
    it: the process's CPU seconds in the window (near the window's length: a thread held
    the interpreter; far below it: the process was not scheduled, or a thread blocked
    in a system call without releasing it), how long the probe itself waited for a core
    (``runnable``: near the stall, the machine had no core for this process), the
    garbage collector's pauses in the window (``gc_seconds``), and where every busy
    thread was when the probe ran again.

    Started by ``process.run_lead`` when ``QONNECT_LEAD_STALL_PROBE`` is set (its value
    is ``report_above`` in seconds): a measuring tool for benchmarks, not for production
    (it wakes 200 times a second)."""

    def __init__(self, report_above: float, period: float = 0.005,
                 gc_seconds: Callable[[], float] | None = None) -> None:
        self.report_above = report_above
        self.period = period
        self._gc_seconds = gc_seconds or (lambda: 0.0)
        self.longest = 0.0
        self.stalls = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run_probe, name="stall-probe", daemon=True)

    def start(self) -> StallProbe:
        """Start probing; returns self."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop probing (waits for the thread)."""
        self._stop.set()
        self._thread.join(timeout=1)

    def _run_probe(self) -> None:
        name_os_thread("stall-probe")
        while not self._stop.is_set():
            started, cpu, gc_before = time.perf_counter(), time.process_time(), self._gc_seconds()
            queued = run_queue_seconds()
            time.sleep(self.period)
            late = time.perf_counter() - started - self.period
            self.longest = max(self.longest, late)
            if late <= self.report_above:
                continue
            self.stalls += 1
            # runnable: how long this thread waited for a core (the machine was busy);
            # the rest of the stall it slept or waited for the interpreter lock.
            log.warning("stall_probe", seconds=round(late, 3),
                        cpu=round(time.process_time() - cpu, 3),
                        runnable=round(run_queue_seconds() - queued, 3),
                        gc_seconds=round(self._gc_seconds() - gc_before, 3),
                        where=busy_threads())


def run_queue_seconds() -> float:
    """Seconds the calling thread has spent runnable but waiting for a core
    (``/proc/thread-self/schedstat``, Linux); 0 where that is not available."""
    try:
        with open("/proc/thread-self/schedstat", "rb") as stat:
            return int(stat.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


def busy_threads() -> str:
    """Where every thread of this process that is not waiting is, one
    ``thread@innermost;ours`` per thread (``ours``: the innermost frame in this project,
    where the work comes from), separated by ``|``."""
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    me = threading.get_ident()
    out = []
    for ident, frame in sys._current_frames().items():
        if ident == me or frame.f_code.co_name in _IDLE_FUNCTIONS:
            continue
        inner = f"{Path(frame.f_code.co_filename).name}:{frame.f_code.co_name}:{frame.f_lineno}"
        ours = ""
        walk: FrameType | None = frame
        while walk is not None:
            if _OURS in walk.f_code.co_filename:
                ours = f"{Path(walk.f_code.co_filename).name}:{walk.f_code.co_name}:{walk.f_lineno}"
                break
            walk = walk.f_back
        name = str(names.get(ident, ident)).split(" ")[0]  # "Thread-3 (target)": no spaces in a log value
        out.append(f"{name}@{inner};{ours}")
    return "|".join(out)
