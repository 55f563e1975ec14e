"""SSH signatures on commits, as Git writes and checks them with ``gpg.format=ssh``.

A signed commit carries a ``gpgsig`` header (after ``committer``, each further line
indented by one space) holding an armored SSHSIG signature (OpenSSH's PROTOCOL.sshsig)
over the commit object without that header, in namespace ``git``, hashed with
sha512: what ``git commit -S`` with ``gpg.format=ssh`` writes, so ``git verify-commit``
with ``gpg.ssh.allowedSignersFile`` checks our commits and we check Git's.

Keys (``cryptography``):

* signing (the leader, ``qonnect approve``, ``qonnect reconcile``): Ed25519 and RSA of at
  least 2048 bits. Both sign deterministically, so the same decision still gives the same
  commit ids; ECDSA signatures are randomised and would not, so an ECDSA key is refused.
* verifying (agents, signed goals): Ed25519, ECDSA on nistp256/384/521 and RSA of at least
  2048 bits (``rsa-sha2-256``/``rsa-sha2-512`` signatures; SHA-1 ``ssh-rsa`` ones are
  refused, as ssh-keygen does). Security-key (``sk-*``) keys, SSH certificates and
  OpenPGP or X.509 signatures are not verified: such a commit counts as not signed by a
  trusted key.

Cost: one Ed25519 signature is about 40 us, 0.4 s of CPU for the 10,001 commits of a
first fan-out of 10,000 clusters (``benchmarks/gitstore.py --signing-only``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import struct
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Protocol

import pygit2
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

from qonnect_gitops.logs import get_logger
from qonnect_gitops.model.signers import (
    ECDSA,
    ED25519,
    RSA,
    AllowedSigner,
    PublicKey,
    SignersError,
    parse_public_key,
)

log = get_logger(__name__)

NAMESPACE = "git"
"""The SSHSIG namespace Git signs commits in."""
HEADER = b"gpgsig"
MIN_RSA_BITS = 2048
_MAGIC = b"SSHSIG"
_VERSION = 1
_HASH = "sha512"
_HASHES = {"sha512": hashlib.sha512, "sha256": hashlib.sha256}
_BEGIN = "-----BEGIN SSH SIGNATURE-----"
_END = "-----END SSH SIGNATURE-----"
_WRAP = 70  # ssh-keygen's line width
_MAX_ARMOR = 64 * 1024
_RECHECK_SECONDS = 1.0
_ECDSA_HASHES: dict[str, type[hashes.SHA256 | hashes.SHA384 | hashes.SHA512]] = {
    "ecdsa-sha2-nistp256": hashes.SHA256, "ecdsa-sha2-nistp384": hashes.SHA384, "ecdsa-sha2-nistp521": hashes.SHA512}
_RSA_HASHES: dict[str, type[hashes.SHA256 | hashes.SHA512]] = {"rsa-sha2-512": hashes.SHA512,
                                                                "rsa-sha2-256": hashes.SHA256}


class SigningError(Exception):
    """A signing key that cannot be used; the message names the file and why."""


class CommitSigner(Protocol):
    """What the commit writers need: the signed form of a commit object's content, and the
    public key that checks it."""

    @property
    def public(self) -> PublicKey: ...

    def sign_commit(self, content: bytes) -> bytes: ...


# ------------------------------------------------------------------ wire format

def _string(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


class _Reader:
    """Reads SSH wire-format fields; any overrun raises ``ValueError``."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def take(self, size: int) -> bytes:
        if self.at + size > len(self.data):
            raise ValueError("truncated")
        chunk = self.data[self.at:self.at + size]
        self.at += size
        return chunk

    def uint32(self) -> int:
        value: int = struct.unpack(">I", self.take(4))[0]
        return value

    def string(self) -> bytes:
        return self.take(self.uint32())

    def done(self) -> bool:
        return self.at == len(self.data)


def _signed_data(namespace: str, hash_name: str, message: bytes) -> bytes:
    """What an SSHSIG signature signs: the preamble, namespace and the message's hash."""
    digest = _HASHES[hash_name](message).digest()
    return _MAGIC + _string(namespace.encode()) + _string(b"") + _string(hash_name.encode()) + _string(digest)


def _armor(blob: bytes) -> str:
    text = base64.b64encode(blob).decode()
    lines = [text[i:i + _WRAP] for i in range(0, len(text), _WRAP)]
    return "\n".join([_BEGIN, *lines, _END]) + "\n"


def _dearmor(armored: str) -> bytes:
    lines = [line.strip() for line in armored.strip().splitlines()]
    if len(lines) < 2 or lines[0] != _BEGIN or lines[-1] != _END:
        raise ValueError("not an armored SSH signature")
    return base64.b64decode("".join(lines[1:-1]), validate=True)


# ------------------------------------------------------------------ signing

class SigningKey:
    """A private key that signs commits (Ed25519, or RSA of at least 2048 bits)."""

    def __init__(self, private: ed25519.Ed25519PrivateKey | rsa.RSAPrivateKey, comment: str = "") -> None:
        self._private = private
        line = private.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                                 serialization.PublicFormat.OpenSSH).decode()
        self.public = parse_public_key(f"{line} {comment}".strip())

    @classmethod
    def load(cls, path: Path) -> SigningKey:
        """The key in ``path`` (OpenSSH ``ssh-keygen`` format or PEM, not passphrase-protected)."""
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise SigningError(f"{path}: cannot read the signing key: {exc.strerror}") from None
        return cls.parse(data, str(path))

    @classmethod
    def parse(cls, data: bytes, source: str = "signing key") -> SigningKey:
        """A key from its file's bytes; raises ``SigningError`` naming ``source``."""
        try:
            if b"BEGIN OPENSSH PRIVATE KEY" in data:
                private = serialization.load_ssh_private_key(data, password=None)
            else:
                private = serialization.load_pem_private_key(data, password=None)  # type: ignore[assignment]
        except TypeError:
            raise SigningError(f"{source}: the key is passphrase-protected; give the lead an unencrypted key "
                               "(a file only it can read, e.g. a mounted Secret)") from None
        except (ValueError, UnsupportedAlgorithm) as exc:
            raise SigningError(f"{source}: not a private key qonnect can read ({exc})") from None
        if isinstance(private, ec.EllipticCurvePrivateKey):
            raise SigningError(f"{source}: ECDSA keys sign with a random nonce, so the same decision would get "
                               "another commit id each time; use an Ed25519 key (ssh-keygen -t ed25519)")
        if isinstance(private, rsa.RSAPrivateKey):
            if private.key_size < MIN_RSA_BITS:
                raise SigningError(f"{source}: RSA key of {private.key_size} bits; at least {MIN_RSA_BITS} needed")
            return cls(private)
        if isinstance(private, ed25519.Ed25519PrivateKey):
            return cls(private)
        raise SigningError(f"{source}: {type(private).__name__} keys are not supported; use an Ed25519 key")

    def sign(self, message: bytes, namespace: str = NAMESPACE) -> str:
        """The armored SSHSIG signature of ``message`` (what ``ssh-keygen -Y sign -n namespace`` prints)."""
        data = _signed_data(namespace, _HASH, message)
        if isinstance(self._private, ed25519.Ed25519PrivateKey):
            signature = _string(ED25519.encode()) + _string(self._private.sign(data))
        else:
            raw = self._private.sign(data, padding.PKCS1v15(), hashes.SHA512())
            signature = _string(b"rsa-sha2-512") + _string(raw)
        blob = (_MAGIC + struct.pack(">I", _VERSION) + _string(self.public.blob) + _string(namespace.encode())
                + _string(b"") + _string(_HASH.encode()) + _string(signature))
        return _armor(blob)

    def sign_commit(self, content: bytes) -> bytes:
        """A commit object's content with its ``gpgsig`` header, as ``git commit -S`` writes it."""
        return add_signature(content, self.sign(content))


def new_key_file(path: Path, comment: str = "qonnect") -> SigningKey:
    """Write a new Ed25519 key to ``path`` (OpenSSH format, mode 0600) and its public key line
    to ``path.pub``, as ``ssh-keygen -t ed25519 -N ''`` would (for the demo and benchmarks;
    operators make theirs with ssh-keygen)."""
    private = ed25519.Ed25519PrivateKey.generate()
    data = private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                 serialization.NoEncryption())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    key = SigningKey(private, comment)
    Path(f"{path}.pub").write_text(f"{key.public.openssh} {comment}\n")
    return key


def add_signature(content: bytes, armored: str) -> bytes:
    """``content`` (an unsigned commit object) with ``armored`` as its ``gpgsig`` header,
    placed at the end of the header block, further lines indented by one space."""
    end = content.find(b"\n\n")
    at = len(content) if end < 0 else end + 1
    lines = armored.encode().splitlines(keepends=True)
    header = HEADER + b"".join(b" " + line for line in lines)
    if not header.endswith(b"\n"):
        header += b"\n"
    return content[:at] + header + content[at:]


def file_stamp(path: Path) -> tuple[int, int, int] | None:
    """What tells a replaced file from the one read (inode, mtime, size; a Secret or
    ConfigMap volume swaps the file); None when it cannot be read."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


class KeyFile:
    """A signing key read from a file and read again when the file changes (checked at most
    once a second): a rotated Secret reaches a running lead without a restart. A file that
    cannot be read or holds no usable key keeps the key in use, with an error logged."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._stamp = file_stamp(self.path)
        self._key = SigningKey.load(self.path)  # at start an unusable key is an error
        self._checked = time.monotonic()

    def current(self) -> SigningKey:
        """The key, re-read first when the file changed."""
        with self._lock:
            if time.monotonic() - self._checked < _RECHECK_SECONDS:
                return self._key
            self._checked = time.monotonic()
            stamp = file_stamp(self.path)
            if stamp is None or stamp == self._stamp:
                return self._key
            try:
                key = SigningKey.load(self.path)
            except SigningError as exc:
                log.error("signing_key_unusable", path=str(self.path), error=str(exc),
                          keeps=self._key.public.fingerprint)
                return self._key
            self._stamp = stamp
            if key.public != self._key.public:
                log.info("signing_key_reloaded", path=str(self.path), old=self._key.public.fingerprint,
                         new=key.public.fingerprint)
            self._key = key
            return key

    @property
    def public(self) -> PublicKey:
        return self.current().public

    def sign_commit(self, content: bytes) -> bytes:
        return self.current().sign_commit(content)


# ------------------------------------------------------------------ verifying

class SignatureStatus(StrEnum):
    """What a commit's signature says about it against a set of allowed signers."""

    TRUSTED = "trusted"  # a valid signature by an allowed key
    UNSIGNED = "unsigned"  # no signature at all
    UNTRUSTED = "untrusted"  # signed, but not validly by an allowed key (or in a form we do not check)


@dataclass(frozen=True)
class SignatureCheck:
    """The verdict on one commit, with who signed it where that is known."""

    status: SignatureStatus
    message: str
    signer: AllowedSigner | None = None  # the allowed line that vouched (TRUSTED only)
    key: PublicKey | None = None  # the key the signature names, when it could be read

    @property
    def trusted(self) -> bool:
        return self.status is SignatureStatus.TRUSTED


class BadSignature(Exception):
    """A signature that does not verify, or that we cannot read."""


def verify_signature(armored: str, message: bytes, namespace: str = NAMESPACE) -> PublicKey:
    """The key that made the SSHSIG signature ``armored`` of ``message`` in ``namespace``;
    raises ``BadSignature`` when it is malformed, in another namespace, or does not verify.
    Says nothing about whether the key is trusted."""
    key, data, signature = _parse(armored, namespace, message)
    _verify(key, data, signature)
    return key


def _parse(armored: str, namespace: str, message: bytes) -> tuple[PublicKey, bytes, bytes]:
    if len(armored) > _MAX_ARMOR:
        raise BadSignature("signature too large")
    try:
        reader = _Reader(_dearmor(armored))
        if reader.take(6) != _MAGIC or reader.uint32() != _VERSION:
            raise BadSignature("not an SSHSIG signature of version 1")
        blob = reader.string()
        signed_namespace = reader.string().decode()
        reserved = reader.string()
        hash_name = reader.string().decode()
        signature = reader.string()
        if not reader.done():
            raise BadSignature("trailing bytes after the signature")
    except (ValueError, binascii.Error, UnicodeDecodeError) as exc:
        raise BadSignature(f"unreadable signature ({exc})") from None
    try:
        algorithm = _Reader(blob).string().decode()
        key = parse_public_key(f"{algorithm} {base64.b64encode(blob).decode()}")
    except (ValueError, UnicodeDecodeError, SignersError) as exc:
        raise BadSignature(f"the signing key is not one qonnect verifies ({exc})") from None
    if signed_namespace != namespace:
        raise BadSignature(f"signed in namespace {signed_namespace!r}, not {namespace!r}")
    if hash_name not in _HASHES:
        raise BadSignature(f"hash {hash_name!r} is not sha256 or sha512")
    data = _MAGIC + _string(signed_namespace.encode()) + _string(reserved) + _string(hash_name.encode()) \
        + _string(_HASHES[hash_name](message).digest())
    return key, data, signature


def _verify(key: PublicKey, data: bytes, signature: bytes) -> None:
    try:
        reader = _Reader(signature)
        kind = reader.string().decode()
        raw = reader.string()
        public = serialization.load_ssh_public_key(key.openssh.encode())
        if key.algorithm == ED25519 and kind == ED25519:
            assert isinstance(public, ed25519.Ed25519PublicKey)
            public.verify(raw, data)
        elif key.algorithm == RSA and kind in _RSA_HASHES:
            assert isinstance(public, rsa.RSAPublicKey)
            if public.key_size < MIN_RSA_BITS:
                raise BadSignature(f"RSA key of {public.key_size} bits; at least {MIN_RSA_BITS} needed")
            public.verify(raw, data, padding.PKCS1v15(), _RSA_HASHES[kind]())
        elif key.algorithm in ECDSA and kind == key.algorithm:
            assert isinstance(public, ec.EllipticCurvePublicKey)
            parts = _Reader(raw)
            r = int.from_bytes(parts.string(), "big", signed=True)
            s = int.from_bytes(parts.string(), "big", signed=True)
            if not parts.done() or r <= 0 or s <= 0:
                raise BadSignature("malformed ECDSA signature")
            public.verify(encode_dss_signature(r, s), data, ec.ECDSA(_ECDSA_HASHES[kind]()))
        else:
            raise BadSignature(f"a {kind} signature from a {key.algorithm} key is not accepted")
    except InvalidSignature:
        raise BadSignature("the signature does not match the commit (altered after signing?)") from None
    except (ValueError, UnicodeDecodeError, UnsupportedAlgorithm) as exc:
        raise BadSignature(f"unreadable signature ({exc})") from None


def commit_signature(commit: pygit2.Commit) -> tuple[bytes | None, bytes]:
    """A commit's ``gpgsig`` and the bytes it signs (the commit without that header)."""
    signature, payload = commit.gpg_signature
    if signature is None or payload is None:
        return None, b""
    return signature, payload


def check_commit(commit: pygit2.Commit, signers: Sequence[AllowedSigner]) -> SignatureCheck:
    """Whether ``commit`` is validly signed by one of ``signers`` (namespace ``git``, and
    within each line's namespaces and validity times, judged at the committer time as Git
    judges it). Never raises for what a commit holds."""
    short = str(commit.id)[:12]
    signature, payload = commit_signature(commit)
    if signature is None:
        return SignatureCheck(SignatureStatus.UNSIGNED, f"commit {short} is not signed")
    try:
        armored = signature.decode("ascii")
    except UnicodeDecodeError:
        return SignatureCheck(SignatureStatus.UNTRUSTED, f"commit {short} carries an unreadable signature")
    if "BEGIN SSH SIGNATURE" not in armored:
        form = "an OpenPGP" if "PGP SIGNATURE" in armored else "an X.509" if "SIGNED MESSAGE" in armored \
            else "a non-SSH"
        return SignatureCheck(SignatureStatus.UNTRUSTED,
                              f"commit {short} carries {form} signature; only SSH signatures are verified")
    try:
        key, data, raw = _parse(armored, NAMESPACE, payload)
    except BadSignature as exc:
        return SignatureCheck(SignatureStatus.UNTRUSTED, f"commit {short}: {exc}")
    lines = [s for s in signers if s.key.blob == key.blob]
    if not lines:
        return SignatureCheck(SignatureStatus.UNTRUSTED,
                              f"commit {short} is signed by {key.algorithm} key {key.fingerprint}, "
                              "which is not a trusted key", key=key)
    try:
        _verify(key, data, raw)
    except BadSignature as exc:
        return SignatureCheck(SignatureStatus.UNTRUSTED, f"commit {short}: {exc}", key=key)
    when = commit.committer.time
    refusals = [why for why in (line.refuses(NAMESPACE, when) for line in lines) if why is not None]
    if len(refusals) == len(lines):
        return SignatureCheck(SignatureStatus.UNTRUSTED, f"commit {short} is signed by {key.fingerprint} "
                              f"outside what its allowed-signers line permits: {refusals[0]}", key=key)
    signer = next(line for line in lines if line.refuses(NAMESPACE, when) is None)
    return SignatureCheck(SignatureStatus.TRUSTED, f"commit {short} is signed by {signer.name} "
                          f"({key.fingerprint})", signer=signer, key=key)
