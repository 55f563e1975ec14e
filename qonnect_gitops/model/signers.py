"""Who may sign: OpenSSH public keys and lines of Git's ``gpg.ssh.allowedSignersFile``.

Text only (pure): what a key line and an allowed-signers line say, checked for shape.
The signatures themselves are made and checked in ``gitstore.signing``.

An allowed-signers line is ``principals [options] keytype base64 [comment]`` as
``ssh-keygen(1)`` reads it (ALLOWED SIGNERS); a plain public key line
``keytype base64 [comment]`` (an ``id_ed25519.pub``) is taken too, trusted for every
principal. Options: ``namespaces="git,..."``, ``valid-after="YYYYMMDD[HHMM[SS]]Z"`` and
``valid-before=...``. ssh-keygen reads a time without the trailing ``Z`` in the host's
local time zone; we refuse it rather than guess. ``cert-authority`` (SSH certificates)
and any other option are refused.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import struct
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

ED25519 = "ssh-ed25519"
RSA = "ssh-rsa"
ECDSA = ("ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521")
KEY_TYPES: tuple[str, ...] = (ED25519, *ECDSA, RSA)
"""Key types whose signatures qonnect verifies."""

MAX_SIGNERS = 256
"""Most keys one allowed-signers file or goals list may hold."""
_MAX_LINE = 16384  # an RSA 16384-bit key line is about 2.8 KB
_OPTIONS = ("namespaces", "valid-after", "valid-before")


class SignersError(ValueError):
    """A key or allowed-signers line that cannot be used; the message names where and why."""


@dataclass(frozen=True)
class PublicKey:
    """An SSH public key: its algorithm name and wire-format blob."""

    algorithm: str
    blob: bytes
    comment: str = ""

    @property
    def fingerprint(self) -> str:
        """``SHA256:...`` as ``ssh-keygen -l`` prints it."""
        return "SHA256:" + base64.b64encode(hashlib.sha256(self.blob).digest()).decode().rstrip("=")

    @property
    def openssh(self) -> str:
        """``keytype base64`` (no comment): the form an ``authorized_keys`` line starts with."""
        return f"{self.algorithm} {base64.b64encode(self.blob).decode()}"

    def __str__(self) -> str:
        return f"{self.algorithm} {self.fingerprint}" + (f" ({self.comment})" if self.comment else "")


@dataclass(frozen=True)
class AllowedSigner:
    """One trusted key, with the limits its line sets."""

    key: PublicKey
    principals: tuple[str, ...] = ()  # empty for a plain key line: any principal
    namespaces: tuple[str, ...] | None = None  # None: every namespace
    valid_after: int | None = None  # seconds since the epoch, UTC
    valid_before: int | None = None
    where: str = ""  # file:line (or list entry) it came from, for messages

    @property
    def name(self) -> str:
        """Who this is in messages: the principals, else the key's comment, else its fingerprint."""
        return ",".join(self.principals) or self.key.comment or self.key.fingerprint

    def refuses(self, namespace: str, when: int) -> str | None:
        """Why this line does not vouch for a signature in ``namespace`` made at ``when``
        (seconds since the epoch, the commit's committer time as Git uses it), or None."""
        if self.namespaces is not None and namespace not in self.namespaces:
            return f"{self.where}: the key is allowed for namespaces {','.join(self.namespaces)}, not {namespace}"
        if self.valid_after is not None and when < self.valid_after:
            return f"{self.where}: the key is valid only after {_stamp(self.valid_after)}"
        if self.valid_before is not None and when > self.valid_before:
            return f"{self.where}: the key was valid only before {_stamp(self.valid_before)}"
        return None


def parse_public_key(text: str, where: str = "") -> PublicKey:
    """``keytype base64 [comment]`` as in an ``id_ed25519.pub`` file; raises ``SignersError``."""
    parts = text.strip().split(None, 2)
    if len(parts) < 2:
        raise SignersError(f"{_at(where)}expected 'keytype base64 [comment]', e.g. 'ssh-ed25519 AAAAC3Nz... "
                           "lead@example.org'")
    return _key(parts[0], parts[1], parts[2].strip() if len(parts) > 2 else "", where)


def parse_allowed_signers(text: str, source: str = "allowed signers") -> tuple[AllowedSigner, ...]:
    """Every signer of an allowed-signers text (``#`` comments and blank lines skipped).
    Raises ``SignersError`` naming ``source:line`` for the first line that cannot be used."""
    out: list[AllowedSigner] = []
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        out.append(parse_signer_line(stripped, f"{source}:{number}"))
        if len(out) > MAX_SIGNERS:
            raise SignersError(f"{source}: more than {MAX_SIGNERS} keys")
    return tuple(out)


def parse_signer_line(line: str, where: str = "") -> AllowedSigner:
    """One allowed-signers line, or a plain public key line; raises ``SignersError``."""
    if len(line) > _MAX_LINE:
        raise SignersError(f"{_at(where)}line longer than {_MAX_LINE} characters")
    tokens = _split(line, str.isspace, where)
    if not tokens:
        raise SignersError(f"{_at(where)}empty line")
    if _looks_like_key_type(tokens[0]):
        key = _key(tokens[0], tokens[1] if len(tokens) > 1 else "", " ".join(tokens[2:]), where)
        return AllowedSigner(key=key, where=where)
    principals = tuple(p for p in _unquote(tokens[0]).split(",") if p)
    if not principals:
        raise SignersError(f"{_at(where)}no principal before the key")
    rest = tokens[1:]
    options: dict[str, str] = {}
    if rest and not _looks_like_key_type(rest[0]):
        options = _options(rest[0], where)
        rest = rest[1:]
    if len(rest) < 2:
        raise SignersError(f"{_at(where)}expected 'principals [options] keytype base64 [comment]'")
    key = _key(rest[0], rest[1], " ".join(rest[2:]), where)
    namespaces = None
    if "namespaces" in options:
        namespaces = tuple(n for n in options["namespaces"].split(",") if n)
    return AllowedSigner(key=key, principals=principals, namespaces=namespaces,
                         valid_after=_time(options.get("valid-after"), where),
                         valid_before=_time(options.get("valid-before"), where), where=where)


def _at(where: str) -> str:
    return f"{where}: " if where else ""


def _looks_like_key_type(token: str) -> bool:
    return token.startswith(("ssh-", "ecdsa-", "sk-")) or "-cert-v01@" in token


def _key(algorithm: str, data: str, comment: str, where: str) -> PublicKey:
    if algorithm not in KEY_TYPES:
        raise SignersError(f"{_at(where)}key type {algorithm!r} is not supported (use {ED25519}; "
                           f"verified: {', '.join(KEY_TYPES)})")
    try:
        blob = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise SignersError(f"{_at(where)}the {algorithm} key is not valid base64") from None
    try:
        fields = _wire_strings(blob)
    except ValueError as exc:
        raise SignersError(f"{_at(where)}the {algorithm} key is malformed ({exc})") from None
    if not fields or fields[0] != algorithm.encode():
        raise SignersError(f"{_at(where)}the key data is not an {algorithm} key")
    expected = 2 if algorithm == ED25519 else 3
    if len(fields) != expected or (algorithm == ED25519 and len(fields[1]) != 32):
        raise SignersError(f"{_at(where)}the {algorithm} key is malformed")
    if algorithm in ECDSA and fields[1] != algorithm.rsplit("-", 1)[1].encode():
        raise SignersError(f"{_at(where)}the {algorithm} key names curve {fields[1]!r}")
    return PublicKey(algorithm, blob, comment.strip())


def _wire_strings(blob: bytes) -> list[bytes]:
    """The ``string`` fields (uint32 length, bytes) that make up an SSH key blob."""
    out: list[bytes] = []
    at = 0
    while at < len(blob):
        if at + 4 > len(blob):
            raise ValueError("truncated length")
        (size,) = struct.unpack(">I", blob[at:at + 4])
        at += 4
        if at + size > len(blob):
            raise ValueError("truncated field")
        out.append(blob[at:at + size])
        at += size
    return out


def _split(text: str, is_separator: Callable[[str], bool], where: str) -> list[str]:
    """``text`` cut at every separator outside double quotes (the quotes are kept), empty
    pieces dropped: the tokens of a line (whitespace) and the items of its options (commas)."""
    pieces: list[str] = []
    current: list[str] = []
    quoted = False
    for char in text:
        if char == '"':
            quoted = not quoted
        if is_separator(char) and not quoted:
            pieces.append("".join(current))
            current = []
        else:
            current.append(char)
    if quoted:
        raise SignersError(f"{_at(where)}unterminated quote")
    pieces.append("".join(current))
    return [p for p in pieces if p]


def _unquote(value: str) -> str:
    return value[1:-1] if len(value) >= 2 and value[0] == value[-1] == '"' else value


def _options(token: str, where: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in _split(token, lambda char: char == ",", where):
        name, eq, value = item.partition("=")
        name = name.lower()
        if name == "cert-authority":
            raise SignersError(f"{_at(where)}cert-authority (SSH certificates) is not supported; list the "
                               "signing keys themselves")
        if name not in _OPTIONS or not eq:
            raise SignersError(f"{_at(where)}unknown option {item!r} (known: "
                               f"{', '.join(o + '=...' for o in _OPTIONS)})")
        if name in out:
            raise SignersError(f"{_at(where)}option {name} given twice")
        out[name] = _unquote(value)
    return out


def _time(value: str | None, where: str) -> int | None:
    """``YYYYMMDD[HHMM[SS]]Z`` as seconds since the epoch (UTC)."""
    if value is None:
        return None
    digits = value[:-1] if value.endswith(("Z", "z")) else None
    if digits is None or not digits.isdigit() or len(digits) not in (8, 12, 14):
        raise SignersError(f"{_at(where)}time {value!r}: expected YYYYMMDD[HHMM[SS]]Z (UTC; a time without "
                           "the Z would be read in the host's own time zone)")
    padded = digits.ljust(14, "0")
    try:
        moment = datetime(int(padded[0:4]), int(padded[4:6]), int(padded[6:8]), int(padded[8:10]),
                          int(padded[10:12]), int(padded[12:14]), tzinfo=UTC)
    except ValueError:
        raise SignersError(f"{_at(where)}time {value!r} is not a date") from None
    return int(moment.timestamp())


def _stamp(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
