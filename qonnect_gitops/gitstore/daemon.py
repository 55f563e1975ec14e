"""A ``git daemon`` on loopback serving (and accepting pushes to) the bare repositories under a directory.

Used by the tests and the demo: ``git://`` is the cheapest real network transport,
and unlike ``file://`` it negotiates, so a narrow fetch really transfers less.
"""

from __future__ import annotations

import random
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Self

from qonnect_gitops.logs import get_logger

log = get_logger(__name__)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (the caller races other processes for it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports free now, for servers a child process binds later.

    They are drawn below the kernel's ephemeral range where there is room: a port the
    kernel hands out for ``bind(0)`` is one it also hands to outgoing connections, and
    one of those (any process's) could take it before the child binds it (the demo lost
    an agent that way: "Address already in use"). Each is test-bound, all held open
    together so they differ."""
    socks: list[socket.socket] = []
    low = _ephemeral_low()
    candidates = list(range(max(1024, low - _LISTEN_SPAN), low)) if low > 1024 + count else []
    random.shuffle(candidates)
    try:
        while len(socks) < count:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.bind((host, candidates.pop() if candidates else 0))
            except OSError:
                sock.close()
                continue
            socks.append(sock)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for sock in socks:
            sock.close()


_LISTEN_SPAN = 12_000  # how far below the ephemeral range ports are drawn


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux), else 0."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


class GitDaemon:
    """``git daemon --export-all --enable=receive-pack`` for ``base_path`` on ``host:port``.

    Use as a context manager or call ``start()``/``stop()``. ``port=None`` picks a free
    port (retrying if another process grabs it first).
    """

    def __init__(self, base_path: str | Path, *, host: str = "127.0.0.1", port: int | None = None) -> None:
        self.base_path = Path(base_path).resolve()
        self.host = host
        self.port = port or 0
        self._fixed_port = port is not None
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None

    def url(self, repo: str) -> str:
        """The ``git://`` URL of a repository path relative to ``base_path``."""
        return f"git://{self.host}:{self.port}/{repo.lstrip('/')}"

    @property
    def running(self) -> bool:
        """True while the daemon process is alive."""
        return self._proc is not None and self._proc.poll() is None

    def start(self, timeout: float = 10.0) -> Self:
        """Start the daemon and return once it accepts connections; raises ``RuntimeError`` otherwise."""
        if self.running:
            return self
        for _attempt in range(5):
            if not self._fixed_port:
                self.port = free_port(self.host)
            # A file, not a pipe: nobody reads stderr while the daemon runs, and a full pipe would block it.
            self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed in _reap()
            self._proc = subprocess.Popen(
                [
                    "git", "daemon", "--export-all", "--enable=receive-pack", "--reuseaddr",
                    "--informative-errors", f"--base-path={self.base_path}",
                    f"--listen={self.host}", f"--port={self.port}", str(self.base_path),
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=self._stderr,
            )
            if self._wait_ready(timeout):
                log.info("git_daemon_started", port=self.port, base=str(self.base_path), pid=self._proc.pid)
                return self
            err = self._reap()
            if self._fixed_port:
                break
            log.warning("git_daemon_retry", port=self.port, stderr=err)
        raise RuntimeError(f"git daemon did not start on {self.host}:{self.port}")

    def _wait_ready(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc is None or self._proc.poll() is not None:
                return False
            try:
                with socket.create_connection((self.host, self.port), timeout=0.2):
                    return True
            except OSError:
                time.sleep(0.02)
        return False

    def _reap(self) -> str:
        proc, self._proc = self._proc, None
        if proc is None:
            return ""
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        err = ""
        if self._stderr is not None:
            self._stderr.seek(0)
            err = self._stderr.read().decode(errors="replace")
            self._stderr.close()
            self._stderr = None
        return err.strip()

    def stop(self) -> None:
        """Stop the daemon (connections being served finish in their own child processes)."""
        if self._proc is not None:
            pid = self._proc.pid
            self._reap()
            log.info("git_daemon_stopped", port=self.port, pid=pid)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
