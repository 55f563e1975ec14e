"""Timeouts that stretch with the machine's load, for waits on other processes.

A multi-process test waits on a condition (a leader elected, a branch written) with a
deadline sized for an idle machine. On a shared or busy one (parallel workers, other
jobs) the same work takes longer, and a fixed deadline fails a correct system. The
deadline is only an upper bound: a wait still returns as soon as its condition holds.
"""

from __future__ import annotations

import os

# QONNECT_TEST_TIMEOUT_SCALE multiplies every scaled timeout (for very slow machines).
_FACTOR = float(os.environ.get("QONNECT_TEST_TIMEOUT_SCALE", "1") or 1)
_MAX_LOAD_FACTOR = 4.0


def scaled(seconds: float) -> float:
    """``seconds`` stretched by how oversubscribed the CPUs are now (1x to 4x), times
    ``QONNECT_TEST_TIMEOUT_SCALE``."""
    try:
        load = os.getloadavg()[0]
    except OSError:  # not available on this platform
        load = 0.0
    per_cpu = load / (os.cpu_count() or 1)
    return seconds * _FACTOR * min(_MAX_LOAD_FACTOR, max(1.0, per_cpu))
