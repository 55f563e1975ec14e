"""Run one lead until SIGTERM/SIGINT: service, HTTP server, orderly shutdown."""

from __future__ import annotations

import signal
import ssl
import threading
from types import FrameType

from qonnect_gitops.lead.http import serve
from qonnect_gitops.lead.service import LeadConfig, LeadService
from qonnect_gitops.logs import get_logger

log = get_logger(__name__)


def run_lead(config: LeadConfig) -> int:
    """Start the lead and serve until a termination signal; returns the exit code."""
    service = LeadService(config)
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
        service.close()
    return 0
