"""Raft's timing: the settings (``RaftTiming``), each lead's own compaction spread, and
the gaps between the Raft thread's ticks (``TickGaps``: how long Raft was starved)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from qonnect_gitops.logs import get_logger

log = get_logger(__name__)


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


def compaction_spread() -> float:
    """A factor in [0.75, 1.25) for this lead's compaction count and time, drawn once per
    process: leads started together (and all holding the same log) would otherwise write
    their full dumps at the same moment. Compaction timing is no part of the replicated
    state, so it need not be the same on every lead."""
    return 0.75 + random.random() / 2


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
