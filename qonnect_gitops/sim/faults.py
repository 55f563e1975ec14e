"""Fault injection on a simulated cluster's Kubernetes API: errors and slowness.

``Faults`` is installed as a server hook (it runs before routing, on every
request of the Kubernetes API port; the Prometheus and admin ports are never
affected). Errors are drawn from a seeded random generator, so a test that
sets a rate and a seed sees the same sequence of failures every run. The
whole-cluster outage and node failures live on ``SimCluster`` (``down()``,
``up()``, ``fail_node()``, ``recover_node()``).
"""

from __future__ import annotations

import json
import random
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any

from qonnect_gitops.logs import get_logger

log = get_logger(__name__)

# The Status reason and message the API server uses for each injectable code.
_REASONS = {
    429: ("TooManyRequests", "Too many requests, please try again later."),
    500: ("InternalError", "Internal error occurred: injected by the simulated cluster"),
    502: ("InternalError", "Internal error occurred: bad gateway (injected by the simulated cluster)"),
    503: ("ServiceUnavailable", "The server is currently unable to handle the request"),
    504: ("Timeout", ("The server was unable to return a response in the time allotted, but may still be "
                      "processing the request")),
}


@dataclass
class FaultSettings:
    """What is currently injected (``rate`` 0 and ``latency`` 0: nothing)."""

    rate: float = 0.0  # share of requests answered with ``code``, 0..1
    code: int = 500
    retry_after: int = 1  # seconds, sent with 429 and 503 as the API does
    seed: int = 0
    latency: float = 0.0  # seconds added before every request is handled
    jitter: float = 0.0  # up to this many more seconds, drawn from the seeded generator


class Faults:
    """Injected errors and latency for one cluster's API (thread-safe; change at any time)."""

    def __init__(self, cluster: str) -> None:
        self.cluster = cluster
        self._lock = threading.Lock()
        self.settings = FaultSettings()
        self._rng = random.Random(0)
        self.injected = 0  # errors answered so far

    def set_errors(self, rate: float, code: int = 500, retry_after: int = 1, seed: int = 0) -> None:
        """Answer ``rate`` (0..1) of API requests with ``code`` (429, 500, 502, 503 or 504)."""
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"rate must be between 0 and 1, got {rate}")
        if code not in _REASONS:
            raise ValueError(f"code must be one of {sorted(_REASONS)}, got {code}")
        with self._lock:
            self.settings.rate, self.settings.code = rate, code
            self.settings.retry_after, self.settings.seed = max(0, int(retry_after)), seed
            self._rng = random.Random(seed)  # reseeding restarts the sequence: runs are repeatable
        log.info("sim_fault_errors", cluster=self.cluster, rate=rate, code=code, seed=seed)

    def set_latency(self, seconds: float, jitter: float = 0.0) -> None:
        """Add ``seconds`` (plus up to ``jitter``) before every API request is handled."""
        if seconds < 0 or jitter < 0:
            raise ValueError("latency and jitter must not be negative")
        with self._lock:
            self.settings.latency, self.settings.jitter = seconds, jitter
        log.info("sim_fault_latency", cluster=self.cluster, seconds=seconds, jitter=jitter)

    def clear(self) -> None:
        """No more injected errors or latency."""
        with self._lock:
            seed = self.settings.seed
            self.settings = FaultSettings(seed=seed)
        log.info("sim_faults_cleared", cluster=self.cluster)

    def describe(self) -> dict[str, Any]:
        """The current settings and how many errors were injected (for the admin endpoint)."""
        with self._lock:
            return {**asdict(self.settings), "injected": self.injected}

    def hook(self, handler: Any, method: str, path: str) -> bool:
        """The server hook: sleep for the latency, then maybe answer with an error Status."""
        with self._lock:
            s = self.settings
            delay = s.latency + (self._rng.random() * s.jitter if s.jitter else 0.0)
            fail = s.rate > 0 and self._rng.random() < s.rate
            code, retry_after = s.code, s.retry_after
            if fail:
                self.injected += 1
        if delay:
            time.sleep(delay)
        if not fail:
            return False
        reason, message = _REASONS[code]
        body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                "message": message, "reason": reason, "code": code}
        headers = {}
        if code in (429, 503):
            body["details"] = {"retryAfterSeconds": retry_after}
            headers["Retry-After"] = str(retry_after)
        handler.send_raw(code, json.dumps(body).encode(), "application/json", headers)
        return True
