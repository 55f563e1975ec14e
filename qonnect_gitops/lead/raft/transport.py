"""The Raft port: bound where it is told, and nothing decoded before it is authenticated.

pysyncobj's TCP transport as the lead runs it (tests/lead/test_raft_transport.py):

* **Bound to the address given.** pysyncobj listens on ``0.0.0.0`` unless told otherwise;
  a lead binds the host of ``--raft`` (resolved once at start, and refused if it is no
  address of this host), or ``--raft-bind`` where the address the others dial is not one
  of this host's (NAT, a container whose DNS name is published after it starts).
* **Every frame sealed with the group's secret.** A frame is a length and a Fernet token
  (``cryptography``: AES-128-CBC, then HMAC-SHA256 over all of it, encrypt-then-MAC) of the
  zlib-compressed pickle of one message: pysyncobj's ``password`` option, keyed with the
  group's secret (lead/raft/secret.py) instead of its PBKDF2 of a password under a fixed
  salt. ``GuardedConnection`` checks the MAC of a whole frame before one byte of it is
  decrypted, decompressed or unpickled (lead/raft/pickling.py: only the log's data
  types); a frame that fails closes the connection.
* **A connection's frames are its own.** pysyncobj's handshake has each side send a
  random 32-byte key and every later frame carry the key its receiver chose, so a frame
  recorded on another connection is refused; each frame also carries its number on the
  connection, so one recorded on the same connection cannot be played again or out of
  order. Both are checked here in code (pysyncobj's checks were ``assert``s, which
  ``python -O`` removes).
* **Bounded until authenticated.** A connection that has not shown it holds the secret
  (a frame carrying the key this lead chose) may send one handshake frame of at most
  ``FrameLimits.handshake_bytes``, must finish within ``handshake_seconds``, and at most
  ``unauthenticated`` such connections are open at once, ``unauthenticated_per_host`` from
  one address; a member's frames are bounded too (``frame_bytes``, ``message_bytes``).

What is refused is counted by reason (``FrameRefusal``) in ``FrameGuard.snapshot()``,
which ``/v1/status`` shows as ``self.transport``, and logged at most once per reason
every ``LOG_EVERY`` seconds. The secret file is watched for rotation.
"""

from __future__ import annotations

import hmac
import socket
import struct
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import pysyncobj.pickle as pysyncobj_pickle  # type: ignore[import-untyped]
import pysyncobj.tcp_server as pysyncobj_tcp_server  # type: ignore[import-untyped]
import pysyncobj.transport as pysyncobj_transport  # type: ignore[import-untyped]
import pysyncobj.utility as pysyncobj_utility  # type: ignore[import-untyped]
from cryptography.fernet import InvalidToken
from pysyncobj.monotonic import monotonic as pysyncobj_clock  # type: ignore[import-untyped]
from pysyncobj.tcp_connection import CONNECTION_STATE, TcpConnection  # type: ignore[import-untyped]

from qonnect_gitops.lead.raft.pickling import ForbiddenGlobal, restricted_loads
from qonnect_gitops.lead.raft.secret import RaftSecret, RaftSecretError, file_stamp
from qonnect_gitops.logs import get_logger

log = get_logger(__name__)

# zlib level of the messages between leads (pysyncobj hard-codes 3). An entry of 30 reports
# is an 8.6 KB message, compressed once per follower: level 3 took about 100 us, level 1
# about 60 us for the same 940 bytes (loaded machine, best of 7). Level 0 (stored) took
# 6 us but sends 9x the bytes, which matters between hosts more than the CPU.
RAFT_MESSAGE_LEVEL = 1
# pysyncobj's frame length: a native ``int`` (4 bytes, little-endian on every host we run).
_LENGTH = struct.Struct("i")
# How often a lead looks whether its secret file changed (a rotation), at most.
SECRET_RECHECK_SECONDS = 1.0
LOG_EVERY = 10.0


class FrameRefusal(StrEnum):
    """Why the Raft port closed a connection."""

    OVERSIZED = "oversized"  # a frame (or a handshake) over its limit, or a negative length
    BAD_MAC = "bad-mac"  # not sealed with any of the group's secrets: a non-member or garbage
    UNDECODABLE = "undecodable"  # sealed, but not a compressed pickle of a message
    FORBIDDEN_GLOBAL = "forbidden-global"  # sealed, naming a class the log never carries
    WRONG_SESSION = "wrong-session"  # sealed for another connection, or replayed, or reordered
    HANDSHAKE_TIMEOUT = "handshake-timeout"  # did not show the secret within handshake_seconds
    TOO_MANY_UNAUTHENTICATED = "too-many-unauthenticated"  # over the cap of such connections
    NO_KEY = "no-key"  # a connection without the group's keys (never decodes anything)


@dataclass(frozen=True)
class FrameLimits:
    """Bounds of the Raft port (see the module docstring)."""

    # One handshake frame (a random key, about 200 bytes sealed) before authentication.
    handshake_bytes: int = 4096
    # Seconds a connection has to show the secret (a member takes milliseconds).
    handshake_seconds: float = 5.0
    unauthenticated: int = 64
    unauthenticated_per_host: int = 8
    # A member's frame: pysyncobj sends entries in batches of 64 KiB and cuts bigger ones
    # and full dumps into 64 KiB pieces, so this leaves a wide margin.
    frame_bytes: int = 16 * 1024 * 1024
    message_bytes: int = 64 * 1024 * 1024


class FrameRefused(Exception):
    """A frame that must close its connection."""

    def __init__(self, reason: FrameRefusal) -> None:
        super().__init__(reason.value)
        self.reason = reason


@dataclass
class _Refusals:
    """What one reason refused: how many, and when last (``time.time()``)."""

    count: int = 0
    last_at: float = 0.0
    logged_at: float = 0.0
    since_logged: int = 0


class FrameGuard:
    """The keys, limits and refusal counts of one node's Raft port. pysyncobj hands it to
    every connection as the connection's ``encryptor``; ``GuardedConnection`` seals and
    opens frames with it."""

    def __init__(self, secret: RaftSecret, limits: FrameLimits = FrameLimits(),
                 clock: Callable[[], float] = time.time) -> None:
        self.secret = secret
        self.limits = limits
        self._clock = clock
        self._lock = threading.Lock()
        self._refusals: dict[FrameRefusal, _Refusals] = {}
        self._stamp = file_stamp(secret.path)
        self._checked_at = time.monotonic()
        self.reloads = 0

    # ------------------------------------------------------------------ frames

    def encrypt_at_time(self, data: bytes, current_time: int) -> bytes:
        """pysyncobj's name for sealing (it passes its monotonic clock's seconds)."""
        return self.secret.keys[0].encrypt_at_time(data, current_time)

    def seal(self, data: bytes) -> bytes:
        """``data`` as a Fernet token under the first secret."""
        return self.secret.keys[0].encrypt_at_time(data, int(pysyncobj_clock()))

    def open(self, token: bytes) -> Any:
        """The message a frame carries: its MAC checked under each secret first, then
        decrypted, decompressed (bounded) and unpickled (``restricted_loads``). Raises
        ``FrameRefused``."""
        plain = None
        for key in self.secret.keys:
            try:
                plain = key.decrypt(token)  # verifies the HMAC before it decrypts
                break
            except InvalidToken:
                continue
        if plain is None:
            raise FrameRefused(FrameRefusal.BAD_MAC)
        try:
            inflate = zlib.decompressobj()
            data = inflate.decompress(plain, self.limits.message_bytes)
            if inflate.unconsumed_tail:
                raise FrameRefused(FrameRefusal.OVERSIZED)
            if not inflate.eof:
                raise FrameRefused(FrameRefusal.UNDECODABLE)
        except zlib.error:
            raise FrameRefused(FrameRefusal.UNDECODABLE) from None
        try:
            return restricted_loads(data)
        except ForbiddenGlobal:
            raise FrameRefused(FrameRefusal.FORBIDDEN_GLOBAL) from None
        except Exception:
            raise FrameRefused(FrameRefusal.UNDECODABLE) from None

    # ----------------------------------------------------------------- refusals

    def refused(self, reason: FrameRefusal, peer: str) -> None:
        """Count a refusal; log it unless the same reason was logged within ``LOG_EVERY``."""
        now = self._clock()
        with self._lock:
            entry = self._refusals.setdefault(reason, _Refusals())
            entry.count += 1
            entry.last_at = now
            entry.since_logged += 1
            if now - entry.logged_at < LOG_EVERY:
                return
            entry.logged_at, count, entry.since_logged = now, entry.since_logged, 0
        log.warning("raft_connection_refused", reason=reason.value, peer=peer, refused=count)

    def snapshot(self) -> dict[str, Any]:
        """For ``/v1/status``: the sealing secret's fingerprint, how many are accepted,
        and per reason how many connections were refused and when last."""
        with self._lock:
            refused = {reason.value: {"count": entry.count, "lastAt": round(entry.last_at, 3)}
                       for reason, entry in sorted(self._refusals.items())}
        return {"sealing": self.secret.fingerprints[0], "accepted": list(self.secret.fingerprints),
                "refused": refused, "secretReloads": self.reloads}

    def refusals(self, reason: FrameRefusal) -> int:
        """How many connections were refused for ``reason`` so far."""
        with self._lock:
            entry = self._refusals.get(reason)
            return entry.count if entry is not None else 0

    # ------------------------------------------------------------------ rotation

    def reload_if_changed(self) -> bool:
        """Read the secret file again when it changed (at most once per
        ``SECRET_RECHECK_SECONDS``); a file that no longer parses keeps the secrets in use
        and is logged. True when new secrets took effect."""
        path = self.secret.path
        now = time.monotonic()
        if path is None or now - self._checked_at < SECRET_RECHECK_SECONDS:
            return False
        self._checked_at = now
        stamp = file_stamp(path)
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        try:
            fresh = RaftSecret.load(path)
        except RaftSecretError as exc:
            log.error("raft_secret_not_reloaded", error=str(exc), keeping=self.secret.fingerprints[0])
            return False
        if fresh.fingerprints == self.secret.fingerprints:
            return False
        self.secret = fresh  # one assignment: a frame is sealed or opened with old or new
        self.reloads += 1
        log.info("raft_secret_reloaded", sealing=fresh.fingerprints[0],
                 accepted=",".join(fresh.fingerprints))
        return True


# ---------------------------------------------------------------------- connections

class GuardedConnection(TcpConnection):  # type: ignore[misc]
    """pysyncobj's connection with frames sealed and opened by its ``FrameGuard`` (its
    ``encryptor``), bounded, numbered and bound to the connection. Without a guard it
    decodes nothing."""

    _TcpConnection__readBuffer: bytes  # pysyncobj's: what was read and not yet parsed

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.peer = "?"
        self.opened_at = time.monotonic()
        self.authenticated = False
        self._sent = 0
        self._received = 0
        super().__init__(*args, **kwargs)
        sock = kwargs.get("socket")
        if sock is not None:
            try:
                host, port = sock.getpeername()[:2]
                self.peer = f"{host}:{port}"
            except OSError:
                pass

    @property
    def peer_host(self) -> str:
        return self.peer.rpartition(":")[0]

    def connect(self, host: str, port: int) -> bool:
        self._reset(f"{host}:{port}")
        return bool(super().connect(host, port))

    def disconnect(self) -> None:
        super().disconnect()
        self._reset(self.peer)

    def _reset(self, peer: str) -> None:
        self.peer = peer
        self.opened_at = time.monotonic()
        self.authenticated = False
        self._sent = self._received = 0

    def send(self, message: Any) -> None:
        guard = self.encryptor
        if not isinstance(guard, FrameGuard):
            self._refuse(FrameRefusal.NO_KEY)
            return
        if self.sendRandKey:
            message = (self.sendRandKey, self._sent, message)
            self._sent += 1
        data = guard.seal(zlib.compress(pysyncobj_pickle.dumps(message), RAFT_MESSAGE_LEVEL))
        self._TcpConnection__writeBuffer += _LENGTH.pack(len(data)) + data
        self._TcpConnection__trySendBuffer()

    def _frame_limit(self, guard: FrameGuard) -> int:
        return guard.limits.frame_bytes if self.authenticated else guard.limits.handshake_bytes

    def _TcpConnection__processRead(self) -> bool:
        # pysyncobj reads all a socket holds before it parses: bound what it buffers.
        more = bool(super()._TcpConnection__processRead())
        guard = self.encryptor
        if more and isinstance(guard, FrameGuard):
            buffered = self._TcpConnection__readBuffer
            head = _LENGTH.unpack_from(buffered)[0] if len(buffered) >= 4 else 0
            if head < 0 or head > self._frame_limit(guard) or (
                    not self.authenticated and len(buffered) > guard.limits.handshake_bytes + 4):
                self._refuse(FrameRefusal.OVERSIZED)
                return False
        return more

    def _TcpConnection__processParseMessage(self) -> Any:
        buffered = self._TcpConnection__readBuffer
        if len(buffered) < 4:
            return None
        guard = self.encryptor
        if not isinstance(guard, FrameGuard):
            self._refuse(FrameRefusal.NO_KEY)
            return None
        length = _LENGTH.unpack_from(buffered)[0]
        if length <= 0 or length > self._frame_limit(guard):
            self._refuse(FrameRefusal.OVERSIZED)
            return None
        if len(buffered) - 4 < length:
            return None
        try:
            message = guard.open(buffered[4:4 + length])
        except FrameRefused as exc:
            self._refuse(exc.reason)
            return None
        if self.recvRandKey:
            # After the handshake every frame is (the key this side chose, its number, message).
            if not (isinstance(message, tuple) and len(message) == 3 and isinstance(message[0], bytes)
                    and hmac.compare_digest(message[0], self.recvRandKey)
                    and message[1] == self._received):
                self._refuse(FrameRefusal.WRONG_SESSION)
                return None
            message = message[2]
            self._received += 1
            self.authenticated = True
        self._TcpConnection__readBuffer = buffered[4 + length:]
        return message

    def _refuse(self, reason: FrameRefusal) -> None:
        guard = self.encryptor
        if isinstance(guard, FrameGuard):
            guard.refused(reason, self.peer)
        self.disconnect()


class GuardedTransport(pysyncobj_transport.TCPTransport):  # type: ignore[misc]
    """pysyncobj's TCP transport with a cap on connections that have not identified as a
    member yet, a deadline for them to do so, and the secret file watched for rotation."""

    def _onNewIncomingConnection(self, conn: GuardedConnection) -> None:
        guard = self._syncObj.encryptor
        if isinstance(guard, FrameGuard):
            waiting = self._unknownConnections
            same_host = sum(1 for other in waiting if getattr(other, "peer_host", None) == conn.peer_host)
            if (len(waiting) >= guard.limits.unauthenticated
                    or same_host >= guard.limits.unauthenticated_per_host):
                guard.refused(FrameRefusal.TOO_MANY_UNAUTHENTICATED, conn.peer)
                conn.disconnect()
                return
        super()._onNewIncomingConnection(conn)

    def _onTick(self) -> None:
        super()._onTick()
        guard = self._syncObj.encryptor
        if not isinstance(guard, FrameGuard):
            return
        guard.reload_if_changed()
        if not self._unknownConnections:
            return
        too_old = time.monotonic() - guard.limits.handshake_seconds
        for conn in list(self._unknownConnections):
            if getattr(conn, "opened_at", too_old) < too_old and conn.state != CONNECTION_STATE.DISCONNECTED:
                guard.refused(FrameRefusal.HANDSHAKE_TIMEOUT, getattr(conn, "peer", "?"))
                conn.disconnect()


def utility(guard: FrameGuard, timeout: float) -> Any:
    """pysyncobj's ``TcpUtility`` (its admin commands, e.g. ``status``) speaking through
    ``guard``."""
    tool = pysyncobj_utility.TcpUtility(timeout=timeout)
    tool._TcpUtility__connection.encryptor = guard
    return tool


# ---------------------------------------------------------------------- addresses

def split_address(address: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` too) as ``(host, port)``; ValueError otherwise."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"'{address}' is not host:port")
    return host.strip("[]"), int(port)


def bind_address(raft: str, bind: str | None = None) -> str:
    """The ``ip:port`` the Raft port listens on: ``bind`` if given, else ``raft``'s host,
    resolved now. ValueError (saying what to do) when the host does not resolve or is no
    address of this host; ``0.0.0.0`` or ``::`` only when ``bind`` says so."""
    host, port = split_address(bind or raft)
    what = "--raft-bind" if bind else "--raft"
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise ValueError(f"{what} {host}: does not resolve ({exc.strerror}); where the address the "
                         "other leads dial is not resolvable here yet, bind with --raft-bind") from None
    family, _, _, _, sockaddr = infos[0]
    ip = str(sockaddr[0])
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((ip, 0))
        except OSError as exc:
            raise ValueError(f"{what} {host} ({ip}) is no address of this host ({exc.strerror}); "
                             "behind NAT or in a container, bind a local address with --raft-bind") from None
    return f"{ip}:{port}"


def install() -> None:
    """Make pysyncobj use the guarded connection everywhere it opens one. Idempotent;
    done at import."""
    for module in (pysyncobj_tcp_server, pysyncobj_transport, pysyncobj_utility):
        module.TcpConnection = GuardedConnection


install()
