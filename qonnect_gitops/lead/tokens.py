"""Bearer tokens for agents and operators, stored only as SHA-256 hashes.

The tokens file has one token per line: ``sha256:<64 hex> <subject>``, where
the subject is a cluster name (that cluster's agent may report for it and
for nothing else), ``*admin`` (operators: membership changes, plan writes) or
``*read:<name>`` (a read-only token, e.g. for a dashboard: the read endpoints and
nothing else). Every kind may read. Blank lines and ``#`` comments are ignored.
The leads re-read the file when its modification time or size changes, so adding
a token needs no restart.

Every report carries its cluster's token, so a lead remembers the digest of each
token it found valid (``TokenStore``): a known token is looked up without hashing
it again. The answer still comes from the tokens as last read: a token removed from
the file stops working at the same moment as without the memory.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import secrets
import threading
import time
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

ADMIN = "*admin"
READ_PREFIX = "*read:"
TOKEN_PREFIX = "qnt_"
RECHECK_SECONDS = 1.0


class TokenKind(Enum):
    """What a token may do: every kind reads; a cluster reports for itself; admin writes."""

    CLUSTER = "cluster"
    ADMIN = "admin"
    READ = "read"


@dataclass(frozen=True)
class Principal:
    """Who a valid token belongs to."""

    kind: TokenKind
    name: str  # the cluster, "admin", or the read-only token's label

    @classmethod
    def of(cls, subject: str) -> Principal:
        """The principal a tokens-file subject names."""
        if subject == ADMIN:
            return cls(TokenKind.ADMIN, "admin")
        if subject.startswith(READ_PREFIX):
            return cls(TokenKind.READ, subject[len(READ_PREFIX):])
        return cls(TokenKind.CLUSTER, subject)


def read_only_subject(name: str) -> str:
    """The tokens-file subject of a read-only token labelled ``name``."""
    return READ_PREFIX + name


def hash_token(token: str) -> str:
    """The hex SHA-256 of a token, as stored in the tokens file."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def parse_tokens(text: str) -> dict[str, str]:
    """``{sha256 hex: subject}`` from the tokens file contents; bad lines raise ValueError."""
    result: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 2 or not parts[0].startswith("sha256:") or len(parts[0]) != 71:
            raise ValueError(f"line {number}: expected 'sha256:<64 hex digits> <subject>'")
        digest = parts[0][7:].lower()
        if any(c not in "0123456789abcdef" for c in digest):
            raise ValueError(f"line {number}: the hash is not hexadecimal")
        result[digest] = parts[1]
    return result


def create_token(tokens_file: str | os.PathLike[str], subject: str) -> str:
    """Create a random token for ``subject``, append its hash to the file, return it.

    The file is created with mode 0600 and locked while appending, so two
    concurrent ``qonnect token create`` runs do not interleave lines.
    """
    return create_tokens(tokens_file, [subject])[0]


def create_tokens(tokens_file: str | os.PathLike[str], subjects: list[str]) -> list[str]:
    """``create_token`` for many subjects in one locked append and one fsync (a fleet of
    thousands of clusters); the tokens in the order of ``subjects``."""
    tokens = [TOKEN_PREFIX + secrets.token_urlsafe(32) for _ in subjects]
    path = Path(tokens_file)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(fd, "a", encoding="utf-8") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        handle.write("".join(f"sha256:{hash_token(token)} {subject}\n"
                             for token, subject in zip(tokens, subjects)))
        handle.flush()
        os.fsync(handle.fileno())
    return tokens


class TokenStore:
    """The tokens the lead accepts, reloaded from the file when it changes.

    A file that fails to parse keeps the previous tokens in force (an operator's
    typo must not lock every agent out) and the error is kept for ``last_error``.
    """

    def __init__(self, path: str | os.PathLike[str] | None) -> None:
        self.path = Path(path) if path else None
        self._lock = threading.Lock()
        self._tokens: dict[str, str] = {}
        # Presented token -> its SHA-256 hex, for tokens found in ``_tokens`` only (a flood
        # of wrong tokens never enters), emptied whenever the file is read again (a revoked
        # token is not kept): at most one entry per token of the file.
        self._digests: dict[str, str] = {}
        # Subject -> its principal (the same few objects for every report).
        self._principals: dict[str, Principal] = {}
        self._stamp: tuple[int, int] | None = None
        self._checked = 0.0
        self.last_error: str | None = None
        self.reloads = 0
        self._reload(force=True)

    def _reload(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._checked < RECHECK_SECONDS:
            return
        self._checked = now
        if self.path is None:
            return
        try:
            st = self.path.stat()
        except FileNotFoundError:
            self._tokens, self._stamp = {}, None
            self._forget()
            return
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp == self._stamp:
            return
        try:
            tokens = parse_tokens(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            self.last_error = f"{self.path}: {exc}"
            self._stamp = stamp
            return
        self._tokens, self._stamp, self.last_error = tokens, stamp, None
        self._forget()
        self.reloads += 1

    def _forget(self) -> None:
        """Drop what was remembered about the tokens of the previous file (under the lock)."""
        self._digests = {}
        self._principals = {}

    @property
    def enabled(self) -> bool:
        """Whether the lead runs with a tokens file (then reads need a token too)."""
        return self.path is not None

    def subject(self, token: str) -> str | None:
        """Who ``token`` belongs to (its tokens-file subject), or None if unknown."""
        with self._lock:
            return self._subject(token)

    def _subject(self, token: str) -> str | None:
        # Under the lock. The file is checked first, as without the memory, so a token
        # removed from it is refused from the same request on. A remembered token is found
        # by a dict lookup of the presented string: its hash is keyed per process and a
        # match is then compared whole, so the time it takes tells nothing about a token
        # that was never presented (as looking up a SHA-256 digest tells nothing).
        self._reload()
        digest = self._digests.get(token)
        if digest is not None:
            return self._tokens.get(digest)
        digest = hash_token(token)
        subject = self._tokens.get(digest)
        if subject is not None and len(self._digests) < len(self._tokens):
            self._digests[token] = digest
        return subject

    def principal(self, token: str) -> Principal | None:
        """The principal of ``token``, or None if unknown."""
        with self._lock:
            subject = self._subject(token)
            if subject is None:
                return None
            principal = self._principals.get(subject)
            if principal is None:
                principal = self._principals[subject] = Principal.of(subject)
            return principal

    def remembered(self) -> int:
        """How many presented tokens have their digest remembered (at most one per token
        of the file)."""
        with self._lock:
            return len(self._digests)

    def __len__(self) -> int:
        with self._lock:
            self._reload()
            return len(self._tokens)
