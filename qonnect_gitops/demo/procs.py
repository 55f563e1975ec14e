"""Child processes in their own process groups, always stopped as whole groups."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Child:
    name: str
    argv: list[str]
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None

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

    def start(self, name: str, argv: list[str], log_path: Path, env: dict[str, str] | None = None) -> Child:
        child = self.children.get(name) or Child(name, argv, log_path, env or {})
        child.argv, child.env = argv, env or child.env
        with open(log_path, "ab") as log:
            child.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          env={**os.environ, **child.env}, cwd=str(self.cwd),
                                          start_new_session=True)
        self.children[name] = child
        return child

    def restart(self, name: str) -> Child:
        child = self.children[name]
        return self.start(name, child.argv, child.log_path, child.env)

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Signal one child's whole group and wait for the child to exit."""
        child = self.children[name]
        if child.alive():
            assert child.proc is not None
            _killpg(child.proc.pid, sig)
            child.proc.wait(timeout=10)

    def stop_all(self, grace: float = 5.0) -> None:
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
