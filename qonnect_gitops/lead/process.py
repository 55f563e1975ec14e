"""Run one lead until SIGTERM/SIGINT: service, HTTP server, orderly shutdown."""

from __future__ import annotations

import cProfile
import os
import pstats
import signal
import ssl
import sys
import threading
import time
from types import FrameType
from typing import Any

from qonnect_gitops.lead.http import serve
from qonnect_gitops.lead.service import LeadConfig, LeadService
from qonnect_gitops.lead.threads import StallProbe
from qonnect_gitops.logs import get_logger

log = get_logger(__name__)


PROFILE_ENV = "QONNECT_LEAD_PROFILE"
# Seconds: a lead started with it set runs a ``StallProbe`` that logs every wake-up later
# than that (benchmarks attribute Raft stalls with it).
STALL_PROBE_ENV = "QONNECT_LEAD_STALL_PROBE"


def run_lead(config: LeadConfig) -> int:
    """Start the lead and serve until a termination signal; returns the exit code.

    With ``QONNECT_LEAD_PROFILE=<file>`` in the environment every thread of the lead
    runs under cProfile, timed by each thread's own CPU clock (so waiting costs
    nothing), and the merged statistics are written to ``<file>`` (pstats format) at
    exit: how benchmarks find where a lead spends its CPU."""
    profile_path = os.environ.get(PROFILE_ENV)
    profiles = _profile_threads() if profile_path else None
    try:
        return _run(config)
    finally:
        if profiles is not None and profile_path:
            _write_profiles(profiles, profile_path)


def _profile_threads() -> list[cProfile.Profile]:
    """Profile this thread and every thread started from now on (one profiler each:
    cProfile follows one thread)."""
    profiles: list[cProfile.Profile] = []
    lock = threading.Lock()

    def start(frame: FrameType, event: str, arg: Any) -> None:
        profile = cProfile.Profile(time.thread_time)
        with lock:
            profiles.append(profile)
        profile.enable()  # replaces this hook for the calling thread

    threading.setprofile(start)  # type: ignore[arg-type]
    main = cProfile.Profile(time.thread_time)
    profiles.append(main)
    main.enable()
    return profiles


def _write_profiles(profiles: list[cProfile.Profile], path: str) -> None:
    threading.setprofile(None)  # type: ignore[arg-type]
    sys.setprofile(None)
    stats: pstats.Stats | None = None
    for profile in list(profiles):
        profile.disable()  # stops only the calling thread's; the others are ending
        try:
            profile.create_stats()
        except Exception:
            continue
        if not getattr(profile, "stats", None):
            continue
        if stats is None:
            stats = pstats.Stats(profile)
        else:
            stats.add(profile)
    if stats is not None:
        stats.dump_stats(path)
        log.info("profile_written", path=path, threads=len(profiles))


def _run(config: LeadConfig) -> int:
    service = LeadService(config)
    probe = _stall_probe(service)
    try:
        server = serve(service)
    except (OSError, ssl.SSLError) as exc:
        log.error("http_bind_failed", http=config.http, error=exc)
        service.close()
        return 1
    stopping = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if not stopping.is_set():
            stopping.set()
            log.info("lead_stopping", signal=signum)
            # shutdown() blocks until serve_forever returns: call it off this thread.
            threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    log.info("http_listening", http=config.http, url=config.url, tls=config.tls)
    try:
        server.serve_forever()
    finally:
        if probe is not None:
            probe.stop()
        service.close()
    return 0


def _stall_probe(service: LeadService) -> StallProbe | None:
    """The stall probe when ``QONNECT_LEAD_STALL_PROBE`` asks for one (see ``StallProbe``)."""
    value = os.environ.get(STALL_PROBE_ENV)
    if not value:
        return None
    try:
        above = float(value)
    except ValueError:
        log.warning("stall_probe_ignored", value=value, expected="seconds")
        return None
    gc_pauses = service.node.gc_pauses
    return StallProbe(above, gc_seconds=lambda: gc_pauses.total).start()
