"""Reporting to the leads: ``POST /v1/clusters/{name}/report`` with a bearer token.

One report is pending at a time: a newer report replaces a queued one (a stale
heartbeat is worth nothing once a fresh one exists). Any lead will do; on failure
the next one is tried; when all fail the sender backs off with jitter and keeps the
newest report for the next attempt. The response says the newest generation
written for this cluster; a callback lets the agent sync at once when it is ahead
of what runs.
"""

from __future__ import annotations

import json
import random
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from qonnect_gitops.logs import get_logger
from qonnect_gitops.model.report import AgentReport

log = get_logger(__name__)


class Reporter:
    def __init__(self, leads: tuple[str, ...], cluster: str, token: str | None, *,
                 on_response: Callable[[dict[str, Any]], None] | None = None,
                 backoff: float = 1.0, backoff_max: float = 30.0, timeout: float = 5.0) -> None:
        self.leads = [u.rstrip("/") for u in leads]
        self.cluster = cluster
        self.token = token
        self.on_response = on_response
        self.backoff, self.backoff_max, self.timeout = backoff, backoff_max, timeout
        self._cond = threading.Condition()
        self._pending: AgentReport | None = None
        self._stop = False
        self._current = 0
        self._thread: threading.Thread | None = None
        self.sent = 0
        self.failures = 0
        self.last_error = ""
        self.last_success: float | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="reporter", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread:
            self._thread.join(timeout=10)

    def submit(self, report: AgentReport) -> None:
        """Queue ``report``, replacing any report not yet sent."""
        with self._cond:
            self._pending = report
            self._cond.notify_all()

    def flush(self, timeout: float) -> bool:
        """Wait until nothing is pending (for ``--once``)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._pending is not None and not self._stop:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def send_now(self, report: AgentReport) -> dict[str, Any]:
        """Send synchronously to any lead; raises ``OSError`` when none accepts it."""
        body = report.model_dump_json(by_alias=True).encode()
        errors = []
        for i in range(len(self.leads)):
            idx = (self._current + i) % len(self.leads)
            url = f"{self.leads[idx]}/v1/clusters/{self.cluster}/report"
            req = urllib.request.Request(url, data=body, method="POST", headers={
                "Content-Type": "application/json", **({"Authorization": f"Bearer {self.token}"} if self.token else {})})
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                    doc = json.loads(resp.read() or b"{}")
                self._current = idx
                return doc if isinstance(doc, dict) else {}
            except urllib.error.HTTPError as exc:
                detail = exc.read()[:300].decode("utf-8", "replace")
                errors.append(f"{self.leads[idx]}: {exc.code} {detail}")
            except (OSError, ValueError) as exc:
                errors.append(f"{self.leads[idx]}: {exc}")
        raise OSError("; ".join(errors) or "no leads configured")

    def _loop(self) -> None:
        attempt = 0
        while True:
            with self._cond:
                while self._pending is None and not self._stop:
                    self._cond.wait()
                if self._stop:
                    return
                report = self._pending
            assert report is not None
            try:
                doc = self.send_now(report)
            except OSError as exc:
                attempt += 1
                self.failures += 1
                self.last_error = str(exc)[:500]
                wait = min(self.backoff_max, self.backoff * 2 ** min(attempt - 1, 10)) * random.uniform(0.5, 1.0)
                log.warning("report_failed", error=self.last_error, retry_in=round(wait, 2))
                with self._cond:
                    if not self._stop:
                        self._cond.wait(wait)
                continue
            attempt = 0
            self.sent += 1
            self.last_success = time.time()
            with self._cond:
                if self._pending is report:
                    self._pending = None
                self._cond.notify_all()
            if self.on_response is not None:
                try:
                    self.on_response(doc)
                except Exception as exc:  # noqa: BLE001 - a bad callback must not kill reporting
                    log.error("report_callback_failed", error=str(exc))
