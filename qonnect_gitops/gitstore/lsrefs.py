"""Where one branch points on a remote, asked with Git protocol v2 ``ls-refs``.

libgit2 (under pygit2) speaks only protocol v0, in which the server advertises every
ref before anything else: with one branch per cluster an agent's poll of its own branch
costs the whole fleet's ref list (70 KB at 1,000 clusters, 700 KB at 10,000). In
protocol v2 the client names a ref prefix and the server answers with the refs under
it, so a poll costs well under 1 KB whatever the fleet size. The agent asks this way
first and fetches only when the branch moved.

Spoken here: ``git://`` (git daemon passes ``version=2`` on to upload-pack) and smart
HTTP(S) (the ``Git-Protocol`` header; ``UserPass`` credentials as basic auth). A server
that answers in v0, another scheme (``ssh://``, a local path) or credentials other than
a user and password raise ``Unsupported``: the caller falls back to a fetch.
"""

from __future__ import annotations

import base64
import http.client
import socket
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import pygit2

TIMEOUT_SECONDS = 30.0
MAX_REPLY_BYTES = 1 << 20  # a prefix names one branch: far more than any honest answer


class LsRefsError(Exception):
    """The server could not be asked (connection, HTTP status, malformed reply)."""


class Unsupported(LsRefsError):
    """The remote or the credentials are not ones this client speaks v2 to."""


@dataclass(frozen=True)
class LsRefsResult:
    """The commit the ref points at (None: no such ref) and the bytes both ways."""

    commit: str | None
    sent_bytes: int
    received_bytes: int


@dataclass(frozen=True)
class LsRefsAnswer:
    """The refs under the prefixes asked for (full name -> commit) and the bytes both ways."""

    refs: dict[str, str]
    sent_bytes: int
    received_bytes: int


def pkt(line: bytes) -> bytes:
    """One pkt-line: four hex digits of length (itself included), then the data."""
    return b"%04x" % (len(line) + 4) + line


FLUSH, DELIM = b"0000", b"0001"


def _request(prefixes: Sequence[str]) -> bytes:
    return (pkt(b"command=ls-refs\n") + pkt(b"object-format=sha1\n") + DELIM
            + b"".join(pkt(b"ref-prefix " + prefix.encode() + b"\n") for prefix in prefixes) + FLUSH)


class _Reader:
    """pkt-lines from a byte stream; ``None`` stands for a flush or delimiter packet."""

    def __init__(self, read: Any) -> None:
        self._read = read
        self.received = 0

    def _exactly(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self._read(n - len(out))
            if not chunk:
                raise LsRefsError("the server closed the connection mid-reply")
            out += chunk
        self.received += n
        if self.received > MAX_REPLY_BYTES:
            raise LsRefsError(f"the server's reply passed {MAX_REPLY_BYTES} bytes")
        return out

    def line(self) -> bytes | None:
        head = self._exactly(4)
        try:
            size = int(head, 16)
        except ValueError:
            raise LsRefsError(f"malformed pkt-line length {head!r}") from None
        if size in (0, 1, 2):
            return None
        if size < 4:
            raise LsRefsError(f"malformed pkt-line length {head!r}")
        return self._exactly(size - 4)

    def section(self) -> list[bytes]:
        """Lines up to the next flush packet."""
        out = []
        while (line := self.line()) is not None:
            out.append(line)
        return out


def _check_v2(capabilities: list[bytes]) -> None:
    if not capabilities or capabilities[0].rstrip(b"\n") != b"version 2":
        raise Unsupported("the server answered in protocol v0/v1")
    if not any(c.startswith(b"ls-refs") for c in capabilities):
        raise Unsupported("the server does not offer ls-refs")


def _refs(lines: list[bytes]) -> dict[str, str]:
    """The answer's refs and the commits they point at."""
    out: dict[str, str] = {}
    for line in lines:
        oid, _, rest = line.rstrip(b"\n").partition(b" ")
        name = rest.split(b" ", 1)[0].decode(errors="replace")
        if len(oid) != 40 or not all(c in b"0123456789abcdef" for c in oid):
            raise LsRefsError(f"malformed object id in the reply for {name}")
        out[name] = oid.decode()
    return out


def ls_ref(url: str, ref: str, credentials: Any = None, timeout: float = TIMEOUT_SECONDS) -> LsRefsResult:
    """Where ``ref`` (a full name, ``refs/heads/...``) points on the remote at ``url``."""
    if not ref.startswith("refs/") or not pygit2.reference_is_valid_name(ref):
        raise ValueError(f"invalid ref name {ref!r}")
    answer = ls_refs(url, [ref], credentials, timeout)
    # A prefix also matches ``cluster/ab`` when asking for ``cluster/a``: pick the exact name.
    return LsRefsResult(answer.refs.get(ref), answer.sent_bytes, answer.received_bytes)


def ls_refs(url: str, prefixes: Sequence[str], credentials: Any = None,
            timeout: float = TIMEOUT_SECONDS) -> LsRefsAnswer:
    """Every ref on the remote at ``url`` whose full name starts with one of ``prefixes``
    (each ``refs/...``), in one request."""
    for prefix in prefixes:
        if not prefix.startswith("refs/") or any(c in prefix for c in "\0\n *?[\\"):
            raise ValueError(f"invalid ref prefix {prefix!r}")
    parts = urlsplit(url)
    if parts.scheme == "git":
        return _over_git(parts, prefixes, credentials, timeout)
    if parts.scheme in ("http", "https"):
        return _over_http(parts, prefixes, credentials, timeout)
    raise Unsupported(f"no protocol v2 client for {parts.scheme or 'local'} remotes")


def _over_git(parts: Any, prefixes: Sequence[str], credentials: Any, timeout: float) -> LsRefsAnswer:
    if credentials is not None:
        raise Unsupported("git:// has no credentials")
    host, port = parts.hostname or "localhost", parts.port or 9418
    hello = pkt(b"git-upload-pack " + (parts.path or "/").encode() + b"\0host=" + parts.netloc.encode()
                + b"\0\0version=2\0")
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(hello)
            reader = _Reader(sock.recv)
            _check_v2(reader.section())
            request = _request(prefixes)
            sock.sendall(request + FLUSH)  # the second flush ends the session
            refs = _refs(reader.section())
    except OSError as exc:
        raise LsRefsError(f"{host}:{port}: {exc}") from exc
    return LsRefsAnswer(refs, len(hello) + len(request) + len(FLUSH), reader.received)


def _over_http(parts: Any, prefixes: Sequence[str], credentials: Any, timeout: float) -> LsRefsAnswer:
    headers = {"Git-Protocol": "version=2", "User-Agent": "git/qonnect"}
    if credentials is not None:
        if not isinstance(credentials, pygit2.UserPass):
            raise Unsupported("only user and password credentials are sent over HTTP by this client")
        user, password = credentials.credential_tuple
        headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    elif parts.username:
        user_info = parts.netloc.rsplit("@", 1)[0]
        headers["Authorization"] = "Basic " + base64.b64encode(user_info.encode()).decode()
    host = parts.hostname or "localhost"
    conn: http.client.HTTPConnection
    if parts.scheme == "https":
        conn = http.client.HTTPSConnection(host, parts.port, timeout=timeout, context=ssl.create_default_context())
    else:
        conn = http.client.HTTPConnection(host, parts.port, timeout=timeout)
    path = parts.path.rstrip("/")
    sent = received = 0
    try:
        conn.request("GET", f"{path}/info/refs?service=git-upload-pack", headers=headers)
        reply = conn.getresponse()
        body = reply.read(MAX_REPLY_BYTES + 1)
        received += len(body)
        if reply.status != 200:
            raise LsRefsError(f"HTTP {reply.status} for info/refs")
        lines = _Reader(_BytesReader(body).read)
        first = lines.line()
        if first is not None and first.startswith(b"# service="):
            lines.section()  # smart HTTP's service banner and its flush
            first = None
        capabilities = ([first] if first is not None else []) + lines.section()
        _check_v2(capabilities)
        request = _request(prefixes)
        conn.request("POST", f"{path}/git-upload-pack", body=request, headers={
            **headers, "Content-Type": "application/x-git-upload-pack-request",
            "Accept": "application/x-git-upload-pack-result"})
        reply = conn.getresponse()
        body = reply.read(MAX_REPLY_BYTES + 1)
        received += len(body)
        sent += len(request)
        if reply.status != 200:
            raise LsRefsError(f"HTTP {reply.status} for git-upload-pack")
        refs = _refs(_Reader(_BytesReader(body).read).section())
    except (OSError, http.client.HTTPException) as exc:
        raise LsRefsError(f"{host}: {exc}") from exc
    finally:
        conn.close()
    return LsRefsAnswer(refs, sent, received)


class _BytesReader:
    def __init__(self, data: bytes) -> None:
        self._data = data
        self._at = 0

    def read(self, n: int) -> bytes:
        out = self._data[self._at:self._at + n]
        self._at += len(out)
        return out
