"""What the demo shows while it runs.

On a terminal: a plain-text screen redrawn every second (ANSI clear and home, nothing
else; no curses): the leader, each cluster's health at the leads, what each cluster runs
(read from its API), and the latest events. Otherwise (a pipe, a log file): one line per
event, with the time since the start.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, TextIO

from qonnect_gitops.demo.observe import by_component


class View:
    def __init__(self, out: TextIO = sys.stdout, live: bool | None = None) -> None:
        self.out = out
        self.live = out.isatty() if live is None else live
        self.t0 = time.monotonic()
        self.events: list[str] = []
        self.lock = threading.Lock()
        self.demo: Any = None
        self.scenario = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def event(self, message: str) -> None:
        line = f"[{time.monotonic() - self.t0:7.2f}s] {message}"
        with self.lock:
            self.events.append(line)
        if not self.live:
            print(line, file=self.out, flush=True)

    def attach(self, demo: Any) -> None:
        self.demo = demo
        if self.live and self._thread is None:
            self._thread = threading.Thread(target=self._loop, daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._render()

    def _loop(self) -> None:
        while not self._stop.wait(1.0):
            try:
                self._render()
            except Exception as exc:  # noqa: BLE001 - the view never stops the demo
                self.event(f"(view: {exc})")

    def screen(self) -> str:
        demo = self.demo
        lines = [f"qonnect demo  {time.monotonic() - self.t0:6.1f}s  scenario: {self.scenario or '-'}"]
        if demo is not None:
            stack = demo.stack
            status = stack.any_status() or {}
            leader = (status.get("leader") or {}).get("id")
            lines.append(f"leader: {leader or '(none)'}   term {status.get('term', '?')}   "
                         f"generation {status.get('generation', '?')}   repo {stack.repo_url}")
            health = {row["name"]: row for row in status.get("clusters", [])}
            observed = demo.snapshot()
            comps = by_component(observed)
            lines.append("")
            lines.append(f"{'CLUSTER':8}  {'HEALTH':9}  {'HB AGE':6}  RUNNING (ready replicas)")
            for cluster in stack.clusters:
                row = health.get(cluster) or {}
                state = "down" if observed.get(cluster) is None else ("healthy" if row.get("healthy") else "unhealthy")
                age = row.get("heartbeatAgeSeconds")
                running = ", ".join(f"{k.split('/', 1)[1]}={v[cluster]}" for k, v in comps.items() if cluster in v)
                lines.append(f"{cluster:8}  {state:9}  {'' if age is None else f'{age:5.1f}s':6}  {running}")
        lines.append("")
        lines.append("events:")
        with self.lock:
            lines.extend("  " + e for e in self.events[-14:])
        return "\n".join(lines)

    def _render(self) -> None:
        self.out.write("\x1b[H\x1b[2J" + self.screen() + "\n")
        self.out.flush()
