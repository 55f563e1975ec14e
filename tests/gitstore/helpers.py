"""Helpers of the gitstore tests: plain ``git`` as the independent client, seeded goals repositories."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from qonnect_gitops.gitstore.daemon import GitDaemon

GIT_ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "Operator",
    "GIT_AUTHOR_EMAIL": "op@example.org",
    "GIT_COMMITTER_NAME": "Operator",
    "GIT_COMMITTER_EMAIL": "op@example.org",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_TERMINAL_PROMPT": "0",
}


def git(*args: str | Path, cwd: str | Path | None = None, check: bool = True) -> str:
    """Run plain git and return its stdout."""
    proc = subprocess.run(["git", *map(str, args)], cwd=cwd, env=GIT_ENV, capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"git {' '.join(map(str, args))} failed: {proc.stderr}")
    return proc.stdout


def seed_goals(bare: Path, files: dict[str, str], message: str = "goals") -> str:
    """Commit ``files`` on ``main`` of ``bare`` with plain git (a work tree beside it); returns the commit."""
    work = bare.parent / (bare.name + ".work")
    if not work.exists():
        git("clone", "-q", bare, work)
        git("checkout", "-q", "-B", "main", cwd=work)
    for path, text in files.items():
        target = work / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    git("add", "-A", cwd=work)
    git("commit", "-q", "-m", message, cwd=work)
    git("push", "-q", "origin", "main", cwd=work)
    return git("rev-parse", "HEAD", cwd=work).strip()


@dataclass
class Served:
    """A bare goals repository with a first goals commit on main, served by git daemon."""

    root: Path
    bare: Path
    daemon: GitDaemon
    goals_commit: str

    @property
    def url(self) -> str:
        return self.daemon.url(self.bare.name)

    def force(self, commit: str, ref: str) -> None:
        """Another writer moves ``ref`` on the server to ``commit``, behind every mirror's back."""
        git("push", "-q", "--force", self.url, f"{commit}:{ref}", cwd=self.bare.parent / (self.bare.name + ".work"))


def plan_files(n_clusters: int, manifests: int = 2, tag: str = "v1") -> dict[str, bytes]:
    """A plan: placement.yaml and ``manifests`` files for each of ``n_clusters`` clusters."""
    files = {"placement.yaml": f"tag: {tag}\nclusters: {n_clusters}\n".encode()}
    for c in range(n_clusters):
        for m in range(manifests):
            files[f"clusters/c{c}/shop/m{m}.yaml"] = f"cluster: c{c}\nmanifest: {m}\ntag: {tag}\n".encode()
    return files


def trailers_of(repo: str | Path, rev: str) -> dict[str, list[str]]:
    """Trailers of one commit as plain git parses them."""
    out = git("-C", repo, "log", "-1", "--format=%(trailers:only,unfold)", rev)
    found: dict[str, list[str]] = {}
    for line in out.splitlines():
        if ": " in line:
            key, value = line.split(": ", 1)
            found.setdefault(key, []).append(value)
    return found


class CountingProxy:
    """A TCP relay on loopback that counts the bytes each way: what a client costs the
    server, whatever client library it uses. ``with CountingProxy(port) as proxy``;
    ``proxy.port`` takes the client, ``proxy.total()`` is the sum both ways so far."""

    def __init__(self, target_port: int, host: str = "127.0.0.1") -> None:
        import socket
        import threading

        self.target = (host, target_port)
        self.up = self.down = 0
        self._lock = threading.Lock()
        self._listener = socket.create_server((host, 0))
        self.port = self._listener.getsockname()[1]
        self._threads: list[threading.Thread] = []
        self._accepting = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self) -> Self:
        self._accepting.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._listener.close()

    def total(self) -> int:
        with self._lock:
            return self.up + self.down

    def _accept(self) -> None:
        import socket
        import threading

        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            for src, dst, up in ((client, server, True), (server, client, False)):
                t = threading.Thread(target=self._pump, args=(src, dst, up), daemon=True)
                t.start()

    def _pump(self, src: object, dst: object, up: bool) -> None:
        import socket

        assert isinstance(src, socket.socket) and isinstance(dst, socket.socket)
        try:
            while chunk := src.recv(65536):
                with self._lock:
                    if up:
                        self.up += len(chunk)
                    else:
                        self.down += len(chunk)
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
