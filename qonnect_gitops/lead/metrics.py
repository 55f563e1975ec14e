"""A small Prometheus registry: counters and gauges in the text exposition format."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    body = ",".join(
        f'{k}="{str(v).replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"'
        for k, v in sorted(labels.items())
    )
    return "{" + body + "}"


class Metrics:
    """Counters the request path increments, plus gauges computed at scrape time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counters: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        self._help: dict[str, tuple[str, str]] = {}
        self._gauges: list[Callable[[], Iterable[tuple[str, dict[str, str], float]]]] = []

    def describe(self, name: str, kind: str, text: str) -> None:
        """Declare a metric's type (``counter``/``gauge``) and help text."""
        self._help[name] = (kind, text)

    def inc(self, name: str, value: float = 1.0, **labels: str) -> None:
        """Add ``value`` to a counter."""
        key = (name, tuple(sorted(labels.items())))
        with self._lock:
            self._counters[key] = self._counters.get(key, 0.0) + value

    def gauges(self, source: Callable[[], Iterable[tuple[str, dict[str, str], float]]]) -> None:
        """Register a function yielding ``(name, labels, value)`` at each scrape."""
        self._gauges.append(source)

    def render(self) -> str:
        """The Prometheus text format (version 0.0.4)."""
        samples: dict[str, list[str]] = {}
        with self._lock:
            items = list(self._counters.items())
        for (name, label_pairs), value in items:
            samples.setdefault(name, []).append(f"{name}{_labels(dict(label_pairs))} {value:g}")
        for source in self._gauges:
            for name, labels, value in source():
                samples.setdefault(name, []).append(f"{name}{_labels(labels)} {value:g}")
        lines: list[str] = []
        for name in sorted(samples):
            if name in self._help:
                kind, text = self._help[name]
                lines.append(f"# HELP {name} {text}")
                lines.append(f"# TYPE {name} {kind}")
            lines.extend(sorted(samples[name]))
        return "\n".join(lines) + "\n"
