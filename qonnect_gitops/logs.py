"""Structured logging: one event per line as ``key=value`` pairs.

Use ``log = get_logger(__name__)`` and ``log.info("sync_done", cluster=name, objects=3)``.
Only the imperative shell logs; pure modules (model, placement, render) never do.

This module is also the one place that decides what of a secret may be shown:
``redact_url`` and ``redact`` hide URL credentials (userinfo, query values) and
bearer tokens. The formatter applies ``redact`` to every line, and the lead, the
agent, gitstore and the CLI apply it to every URL or error text they show in a
status, an answer, a report or a commit.
"""

from __future__ import annotations

import logging
import re
import sys
import time
from typing import Any
from urllib.parse import SplitResult, urlsplit, urlunsplit

REDACTED = "***"
# A URL anywhere in a text: scheme://, then everything up to whitespace or a quote.
_URL_IN_TEXT = re.compile(r"\b[A-Za-z][A-Za-z0-9+.\-]{0,31}://[^\s'\"<>]+")
# Our own bearer tokens (``qnt_...``) and any ``Bearer <token>`` / ``token=...`` outside URLs.
_SECRET_WORDS = re.compile(
    r"(qnt_[A-Za-z0-9_\-]{8,})|((?i:bearer)\s+)[A-Za-z0-9._~+/=\-]{8,}"
    r"|((?i:\b(?:access_?token|private_?token|token|password|passwd|secret|api_?key))=)[^\s&'\"]+"
)


def redact_url(url: str) -> str:
    """``url`` with its credentials hidden: the whole userinfo (``user:token@``) and the
    value of every query parameter become ``***``. Text that is not a URL is returned
    with bearer tokens hidden (see ``redact``)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return _redact_words(url)
    if not parts.scheme or not parts.netloc:
        return _redact_words(url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = REDACTED + "@" + netloc.rpartition("@")[2]
    query = parts.query
    if query:
        query = "&".join(
            (pair.partition("=")[0] + "=" + REDACTED) if "=" in pair else pair
            for pair in query.split("&")
        )
    fragment = REDACTED if parts.fragment else ""
    return urlunsplit(SplitResult(parts.scheme, netloc, parts.path, query, fragment))


def redact(text: str) -> str:
    """``text`` (a log value, an error message) with every URL passed through
    ``redact_url`` and bearer tokens or ``token=...`` words hidden."""
    if not text:
        return text
    return _redact_words(_URL_IN_TEXT.sub(lambda m: redact_url(m.group(0)), text))


def _redact_words(text: str) -> str:
    def hide(match: re.Match[str]) -> str:
        if match.group(1):
            return "qnt_" + REDACTED
        prefix = match.group(2) or match.group(3) or ""
        return prefix + REDACTED

    return _SECRET_WORDS.sub(hide, text)


def _quote(value: Any) -> str:
    text = redact(str(value))
    if text == "" or any(ch in text for ch in ' ="\n\t'):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return text


def event_line(created: float, level: str, logger: str, event: str, fields: dict[str, Any]) -> str:
    """One event as ``ts=... level=... logger=... event=... k=v ...`` (``created``: a Unix
    time): what ``KeyValueFormatter`` writes, for a line written outside ``logging``."""
    ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created))
    parts = [
        f"ts={ts}.{int(created * 1000) % 1000:03d}Z",
        f"level={level}",
        f"logger={logger}",
        f"event={_quote(event)}",
    ]
    parts += [f"{k}={_quote(v)}" for k, v in fields.items()]
    return " ".join(parts)


class KeyValueFormatter(logging.Formatter):
    """Formats a record as ``ts=... level=... logger=... event=... k=v ...``."""

    def format(self, record: logging.LogRecord) -> str:
        fields: dict[str, Any] = dict(getattr(record, "fields", {}))
        if record.exc_info:
            fields["exc"] = self.formatException(record.exc_info)
        return event_line(record.created, record.levelname.lower(), record.name, record.getMessage(), fields)


class EventLogger:
    """A thin wrapper so call sites pass fields as keywords."""

    def __init__(self, logger: logging.Logger) -> None:
        self._logger = logger

    def _log(self, level: int, event: str, exc_info: bool, fields: dict[str, Any]) -> None:
        if self._logger.isEnabledFor(level):
            self._logger.log(level, event, exc_info=exc_info, extra={"fields": fields})

    def debug(self, event: str, **fields: Any) -> None:
        self._log(logging.DEBUG, event, False, fields)

    def info(self, event: str, **fields: Any) -> None:
        self._log(logging.INFO, event, False, fields)

    def warning(self, event: str, **fields: Any) -> None:
        self._log(logging.WARNING, event, False, fields)

    def error(self, event: str, exc_info: bool = False, **fields: Any) -> None:
        self._log(logging.ERROR, event, exc_info, fields)


def get_logger(name: str) -> EventLogger:
    """The structured logger for a module."""
    return EventLogger(logging.getLogger(name))


def configure(level: str = "info", stream: Any = None) -> None:
    """Install the key=value formatter on the root logger (idempotent)."""
    root = logging.getLogger()
    root.setLevel(level.upper())
    for handler in root.handlers:
        if isinstance(handler.formatter, KeyValueFormatter):
            return
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(KeyValueFormatter())
    root.addHandler(handler)
