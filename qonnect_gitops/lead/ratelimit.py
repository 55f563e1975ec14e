"""Per-cluster report rate limits: a token bucket per key, local to each lead.

Limits are not replicated: an agent talks to one lead at a time, and a
limit that needed a Raft round trip would cost what it protects.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable


class RateLimiter:
    """``rate`` requests per second per key, with bursts up to ``burst``."""

    def __init__(
        self, rate: float, burst: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("rate must be > 0 and burst >= 1")
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._lock = threading.Lock()
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, last refill)

    def acquire(self, key: str) -> float:
        """Take one token for ``key``: 0.0 if allowed, else seconds until one is free."""
        now = self._clock()
        with self._lock:
            tokens, last = self._buckets.get(key, (self.burst, now))
            tokens = min(self.burst, tokens + (now - last) * self.rate)
            if tokens >= 1.0:
                self._buckets[key] = (tokens - 1.0, now)
                return 0.0
            self._buckets[key] = (tokens, now)
            return (1.0 - tokens) / self.rate

    @staticmethod
    def retry_after_header(wait: float) -> str:
        """Retry-After takes whole seconds; round up so a client never comes back early."""
        return str(max(1, math.ceil(wait)))
