"""The Raft group's shared secret: read from a file, one secret per line; the first seals
what this lead sends, every one opens what it receives (rotation without a gap, see
docs/operations-leads.md). The keys are derived with HKDF-SHA256: the secret must be
random (``new_secret``), not a password a person chose."""

from __future__ import annotations

import base64
import os
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography.fernet import Fernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

SECRET_FILE_ENV = "QONNECT_RAFT_SECRET_FILE"
# A secret is a line of at least this many characters (``new_secret`` makes 64): the keys
# are derived from it with HKDF, which adds no work factor, so it must be random.
MIN_SECRET_CHARS = 32
MAX_SECRETS = 8
_HKDF_INFO = b"qonnect-gitops raft frames v1"
_FINGERPRINT_INFO = b"qonnect-gitops raft key fingerprint v1"


class RaftSecretError(ValueError):
    """The Raft secret file is missing, unreadable or holds no usable secret."""


def new_secret() -> str:
    """A fresh random secret: 64 URL-safe characters (384 bits). For the demo, the tests
    and ``docs/operations-leads.md``'s ``python -c`` line."""
    return secrets.token_urlsafe(48)


def _derive(secret: bytes, info: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(secret)


@dataclass(frozen=True)
class RaftSecret:
    """The group's secrets: the first seals what this lead sends, every one opens what it
    receives. ``fingerprints`` name them without revealing them (the same secret has the
    same fingerprint on every lead: compare them during a rotation)."""

    keys: tuple[Fernet, ...]
    fingerprints: tuple[str, ...]
    path: Path | None = None

    @classmethod
    def from_lines(cls, lines: Iterable[str], origin: str = "<secret>",
                   path: Path | None = None) -> RaftSecret:
        """Secrets from lines of text: one per line, blank lines and ``#`` comments skipped.
        Raises ``RaftSecretError`` naming ``origin:line`` and what is expected."""
        found: list[bytes] = []
        for number, raw in enumerate(lines, start=1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            if len(line) < MIN_SECRET_CHARS:
                raise RaftSecretError(
                    f"{origin}:{number}: a secret of {len(line)} characters; expected at least "
                    f"{MIN_SECRET_CHARS} random characters (make one with: python3 -c "
                    "'import secrets; print(secrets.token_urlsafe(48))')")
            if any(ord(c) < 0x21 or ord(c) == 0x7F for c in line):
                raise RaftSecretError(f"{origin}:{number}: a secret holds spaces or control "
                                      "characters; expected one secret per line")
            found.append(line.encode())
        if not found:
            raise RaftSecretError(f"{origin}: no secret; expected one secret per line (the first "
                                  "seals, every one is accepted)")
        if len(found) > MAX_SECRETS:
            raise RaftSecretError(f"{origin}: {len(found)} secrets; at most {MAX_SECRETS}")
        keys = tuple(Fernet(base64.urlsafe_b64encode(_derive(s, _HKDF_INFO))) for s in found)
        prints = tuple(_derive(s, _FINGERPRINT_INFO).hex()[:12] for s in found)
        return cls(keys, prints, path)

    @classmethod
    def load(cls, path: Path) -> RaftSecret:
        """The secrets of a file; ``RaftSecretError`` if it cannot be read or holds none."""
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
            raise RaftSecretError(f"{path}: cannot read the Raft secret file: {reason}") from None
        return cls.from_lines(text.splitlines(), str(path), path)

    @classmethod
    def generate(cls) -> RaftSecret:
        """A one-off secret held only in memory (a group of nodes in one process)."""
        return cls.from_lines([new_secret()])


def file_stamp(path: Path | None) -> tuple[int, int, int] | None:
    """When, how big and which file ``path`` is now (None: unreadable): a change means the
    secret may have been rotated."""
    if path is None:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)
