"""Rate limits: a token bucket per key, local to each lead (reports per cluster; requests
without a valid token per source address).

Limits are not replicated: an agent talks to one lead at a time, and a
limit that needed a Raft round trip would cost what it protects.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable


class RateLimiter:
    """``rate`` requests per second per key, with bursts up to ``burst``. With ``max_keys``
    (keys a client chooses, like its address) at most that many buckets are kept: past
    it, the buckets that refilled are dropped (one is the same as none), and if all are
    in use, the oldest half."""

    def __init__(
        self, rate: float, burst: float, clock: Callable[[], float] = time.monotonic,
        max_keys: int | None = None,
    ) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("rate must be > 0 and burst >= 1")
        self.rate = rate
        self.burst = burst
        self.max_keys = max_keys
        self._clock = clock
        self._lock = threading.Lock()
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, last refill)

    def acquire(self, key: str) -> float:
        """Take one token for ``key``: 0.0 if allowed, else seconds until one is free."""
        now = self._clock()
        with self._lock:
            if self.max_keys is not None and len(self._buckets) >= self.max_keys and key not in self._buckets:
                self._prune(now)
            tokens, last = self._buckets.get(key, (self.burst, now))
            tokens = min(self.burst, tokens + (now - last) * self.rate)
            if tokens >= 1.0:
                self._buckets[key] = (tokens - 1.0, now)
                return 0.0
            self._buckets[key] = (tokens, now)
            return (1.0 - tokens) / self.rate

    def _prune(self, now: float) -> None:
        full = [key for key, (tokens, last) in self._buckets.items()
                if tokens + (now - last) * self.rate >= self.burst]
        for key in full:
            del self._buckets[key]
        if len(self._buckets) >= (self.max_keys or 0):
            for key in list(self._buckets)[: len(self._buckets) // 2 + 1]:
                del self._buckets[key]

    def __len__(self) -> int:
        """Buckets kept now."""
        with self._lock:
            return len(self._buckets)

    @staticmethod
    def retry_after_header(wait: float) -> str:
        """Retry-After takes whole seconds; round up so a client never comes back early."""
        return str(max(1, math.ceil(wait)))
