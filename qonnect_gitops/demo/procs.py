"""Child processes in their own process groups, always stopped as whole groups.

A child started with ``restart=True`` is started again when it exits on its own, after
1, 2, 4, 8 s and then every 10 s, as kubelet restarts a crashed agent's pod: a real
fleet's agent that died (a port taken at start, a crash) comes back, and the demo's
should too. ``kill`` and ``stop_all`` stop it for good; each restart is a line in the
child's log.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from qonnect_gitops.logs import event_line

RESTART_BACKOFF_MAX = 10.0


@dataclass
class Child:
    name: str
    argv: list[str]
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    restart: bool = False  # start again when it exits on its own
    restarts: int = 0
    restart_at: float | None = None  # when the next restart is due (monotonic)
    stopped: bool = False  # by ``kill``: exited on purpose, not restarted

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class Processes:
    """Starts children with ``start_new_session`` (so each is the leader of its own process
    group: its own children, e.g. git-daemon's per-connection forks and the hooks they run,
    are in that group) and stops every group it started: SIGTERM, then SIGKILL."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd
        self.children: dict[str, Child] = {}
        self._lock = threading.RLock()  # children are started by callers and the supervisor
        self._stopping = threading.Event()
        self._supervisor: threading.Thread | None = None

    def start(self, name: str, argv: list[str], log_path: Path, env: dict[str, str] | None = None,
              restart: bool | None = None) -> Child:
        """Start ``name`` (again); ``restart``: whether it is started again when it exits on
        its own (None: as it was)."""
        with self._lock:
            child = self.children.get(name) or Child(name, argv, log_path, env or {})
            child.argv, child.env = argv, env or child.env
            if restart is not None:
                child.restart = restart
            child.restart_at, child.stopped = None, False
            self._spawn(child)
            self.children[name] = child
            if child.restart and self._supervisor is None:
                self._supervisor = threading.Thread(target=self._supervise, name="demo-supervisor", daemon=True)
                self._supervisor.start()
            return child

    def _spawn(self, child: Child) -> None:
        with open(child.log_path, "ab") as log:
            child.proc = subprocess.Popen(child.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          env={**os.environ, **child.env}, cwd=str(self.cwd),
                                          start_new_session=True)

    def _supervise(self) -> None:
        while not self._stopping.wait(0.2):
            with self._lock:
                for child in self.children.values():
                    if self._stopping.is_set():
                        return
                    if not child.restart or child.stopped or child.proc is None or child.alive():
                        continue
                    now = time.monotonic()
                    if child.restart_at is None:
                        child.restart_at = now + min(RESTART_BACKOFF_MAX, 2.0 ** child.restarts)
                        _note(child, f"exited with code {child.proc.returncode}; restarting in "
                                     f"{child.restart_at - now:.0f}s")
                    elif now >= child.restart_at:
                        child.restarts += 1
                        child.restart_at = None
                        _note(child, f"restart {child.restarts}")
                        self._spawn(child)

    def restart(self, name: str) -> Child:
        child = self.children[name]
        return self.start(name, child.argv, child.log_path, child.env)

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Signal one child's whole group and wait for the child to exit; it is not
        restarted (``start`` or ``restart`` starts it again)."""
        with self._lock:
            child = self.children[name]
            child.stopped, child.restart_at = True, None
        if child.alive():
            assert child.proc is not None
            _killpg(child.proc.pid, sig)
            child.proc.wait(timeout=10)

    def stop_all(self, grace: float = 5.0) -> None:
        self._stopping.set()
        if self._supervisor is not None:
            self._supervisor.join(timeout=5)
        live = [c for c in self.children.values() if c.proc is not None]
        for child in live:
            assert child.proc is not None
            _killpg(child.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for child in live:
            assert child.proc is not None
            try:
                child.proc.wait(timeout=max(0.05, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            # the group may still hold grandchildren even when the leader exited
            _killpg(child.proc.pid, signal.SIGKILL)
            try:
                child.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _note(child: Child, text: str) -> None:
    """A line in the child's own log, where its crash is."""
    with open(child.log_path, "a") as log:
        log.write(event_line(time.time(), "warning", __name__, "process_restarted",
                             {"process": child.name, "detail": text}) + "\n")
