"""Structured logging: one event per line as ``key=value`` pairs.

Use ``log = get_logger(__name__)`` and ``log.info("sync_done", cluster=name, objects=3)``.
Only the imperative shell logs; pure modules (model, placement, render) never do.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any


def _quote(value: Any) -> str:
    text = str(value)
    if text == "" or any(ch in text for ch in ' ="\n\t'):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return text


class KeyValueFormatter(logging.Formatter):
    """Formats a record as ``ts=... level=... logger=... event=... k=v ...``."""

    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        fields: dict[str, Any] = getattr(record, "fields", {})
        parts = [
            f"ts={ts}.{int(record.msecs):03d}Z",
            f"level={record.levelname.lower()}",
            f"logger={record.name}",
            f"event={_quote(record.getMessage())}",
        ]
        parts += [f"{k}={_quote(v)}" for k, v in fields.items()]
        if record.exc_info:
            parts.append(f"exc={_quote(self.formatException(record.exc_info))}")
        return " ".join(parts)


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
