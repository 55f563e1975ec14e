"""Reporting to the leads: ``POST /v1/clusters/{name}/report`` with a bearer token.

One report is pending at a time: a newer report replaces a queued one (a stale
heartbeat is worth nothing once a fresh one exists). Any lead will do; on failure
the next one is tried; when all fail the sender backs off with jitter and keeps the
newest report for the next attempt. The response says the newest generation
written for this cluster and, from the leader, the head of its branch (``commit``); a
callback lets the agent sync at once when it is ahead of what runs, or skip asking Git
while it names the commit the agent has (``Agent._on_lead_response``).

The token comes from a file that is re-read when it changes (and at once after a
``401``), so rotating it needs no restart. ``https://`` leads are verified against
``--lead-ca`` (or the system store). What the lead warns about (a clock far from
its own, claims it ignored) is logged; URLs in errors are shown without credentials.
"""

from __future__ import annotations

import json
import os
import random
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qonnect_gitops.logs import get_logger, redact, redact_url
from qonnect_gitops.model.report import AgentReport

if TYPE_CHECKING:
    from qonnect_gitops.agent.config import AgentConfig

log = get_logger(__name__)

RECHECK_SECONDS = 1.0
WARNING_REPEAT_SECONDS = 300.0


class TokenFile:
    """A bearer token read from a file, re-read when the file changes (at most once a
    second, or at once with ``refresh()``). A file that vanishes or empties keeps the
    last token: a Secret being swapped must not silence reporting."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._token: str | None = None
        self._stamp: tuple[int, int, int] | None = None
        self._checked = -1e9
        self.reloads = 0
        self.refresh()

    def value(self) -> str | None:
        """The current token."""
        if time.monotonic() - self._checked >= RECHECK_SECONDS:
            self.refresh()
        return self._token

    def refresh(self) -> None:
        """Re-read the file if it changed."""
        with self._lock:
            self._checked = time.monotonic()
            try:
                st = os.stat(self.path)
                stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
                if stamp == self._stamp:
                    return
                lines = self.path.read_text(encoding="utf-8").strip().splitlines()
            except OSError as exc:
                log.warning("token_file_unreadable", path=self.path, error=exc.strerror)
                return
            token = lines[0].strip() if lines else ""
            if not token:
                return
            if self._token is not None and token != self._token:
                log.info("token_reloaded", path=self.path)
            self._token, self._stamp = token, stamp
            self.reloads += 1


def lead_context(ca: Path | None) -> ssl.SSLContext | None:
    """How https:// leads are verified: ``ca`` if given, else the system store."""
    return ssl.create_default_context(cafile=str(ca)) if ca else None


class Reporter:
    def __init__(self, leads: tuple[str, ...], cluster: str, token: str | TokenFile | None, *,
                 on_response: Callable[[dict[str, Any]], None] | None = None,
                 backoff: float = 1.0, backoff_max: float = 30.0, timeout: float = 5.0,
                 context: ssl.SSLContext | None = None) -> None:
        self.leads = [u.rstrip("/") for u in leads]
        self.cluster = cluster
        self.token = token
        self.context = context
        self._warned: dict[str, float] = {}
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

    @classmethod
    def from_config(cls, cfg: AgentConfig,
                    on_response: Callable[[dict[str, Any]], None] | None = None) -> Reporter:
        """The reporter of an agent's settings (token file, lead CA)."""
        token: str | TokenFile | None = TokenFile(cfg.token_file) if cfg.token_file else cfg.token
        return cls(cfg.leads, cfg.cluster, token, on_response=on_response,
                   context=lead_context(cfg.lead_ca))

    def _bearer(self, refresh: bool = False) -> str | None:
        if isinstance(self.token, TokenFile):
            if refresh:
                self.token.refresh()
            return self.token.value()
        return self.token

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
            try:
                doc = self._post(self.leads[idx], body)
            except urllib.error.HTTPError as exc:
                detail = exc.read()[:300].decode("utf-8", "replace")
                if exc.code == 401 and isinstance(self.token, TokenFile):
                    # The token may have been rotated: read the file again and retry once.
                    self._bearer(refresh=True)
                    try:
                        doc = self._post(self.leads[idx], body)
                    except urllib.error.HTTPError as again:
                        detail = again.read()[:300].decode("utf-8", "replace")
                        errors.append(f"{redact_url(self.leads[idx])}: {again.code} {redact(detail)}")
                        continue
                    except (OSError, ValueError) as again:
                        errors.append(f"{redact_url(self.leads[idx])}: {redact(str(again))}")
                        continue
                else:
                    errors.append(f"{redact_url(self.leads[idx])}: {exc.code} {redact(detail)}")
                    continue
            except (OSError, ValueError) as exc:
                errors.append(f"{redact_url(self.leads[idx])}: {redact(str(exc))}")
                continue
            self._current = idx
            self._log_warnings(doc)
            return doc
        raise OSError("; ".join(errors) or "no leads configured")

    def _post(self, lead: str, body: bytes) -> dict[str, Any]:
        token = self._bearer()
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        req = urllib.request.Request(f"{lead}/v1/clusters/{self.cluster}/report", data=body,
                                     method="POST", headers=headers)
        with urllib.request.urlopen(req, timeout=self.timeout, context=self.context) as resp:
            doc = json.loads(resp.read() or b"{}")
        return doc if isinstance(doc, dict) else {}

    def _log_warnings(self, doc: dict[str, Any]) -> None:
        """Log what the lead warned about, each distinct warning at most every 5 minutes."""
        now = time.monotonic()
        for warning in doc.get("warnings") or ():
            text = str(warning)[:300]
            if now - self._warned.get(text, -1e9) >= WARNING_REPEAT_SECONDS:
                self._warned[text] = now
                log.warning("lead_warning", warning=text)

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
