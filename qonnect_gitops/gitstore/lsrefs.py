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

A local remote (a path or a ``file://`` URL) has no server to ask: ``local_refs`` reads
the refs under the prefixes from the repository itself, loose ones first, so the answer
costs the refs asked about rather than the fleet's (``remote_refs`` picks the way by URL).
"""

from __future__ import annotations

import base64
import http.client
import os
import socket
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pygit2

from qonnect_gitops.gitstore import packedrefs
from qonnect_gitops.gitstore.errors import PackedRefsCorrupt

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
    _check_prefixes(prefixes)
    parts = urlsplit(url)
    if parts.scheme == "git":
        return _over_git(parts, prefixes, credentials, timeout)
    if parts.scheme in ("http", "https"):
        return _over_http(parts, prefixes, credentials, timeout)
    raise Unsupported(f"no protocol v2 client for {parts.scheme or 'local'} remotes")


def _check_prefixes(prefixes: Sequence[str]) -> None:
    for prefix in prefixes:
        if not prefix.startswith("refs/") or any(c in prefix for c in "\0\n *?[\\"):
            raise ValueError(f"invalid ref prefix {prefix!r}")


def remote_refs(url: str, prefixes: Sequence[str], credentials: Any = None,
                timeout: float = TIMEOUT_SECONDS) -> LsRefsAnswer:
    """``ls_refs`` for a remote served over ``git://`` or HTTP(S); ``local_refs`` for a local
    one (a path or ``file://``). Raises ``Unsupported`` for other remotes (``ssh://``)."""
    path = local_path(url)
    return ls_refs(url, prefixes, credentials, timeout) if path is None else local_refs(path, prefixes)


def local_path(url: str) -> Path | None:
    """The repository a local remote names (a path, or a ``file://`` URL, percent-decoded
    as git and libgit2 decode it); None for a remote reached over a network.

    A string without ``://`` is a path unless a colon comes before its first slash
    (``host:repo.git`` is an SSH remote to git). Raises ``Unsupported`` for a ``file://``
    URL naming another host and ``LsRefsError`` for one naming no path."""
    if "://" in url:
        parts = urlsplit(url)
        if parts.scheme != "file":
            return None
        if parts.netloc not in ("", "localhost"):
            raise Unsupported(f"a file:// URL naming another host ({parts.netloc})")
        url = unquote(parts.path)
    else:
        colon, slash = url.find(":"), url.find("/")
        if colon >= 0 and not 0 <= slash < colon:
            return None
    if not url:
        raise LsRefsError("no repository path")  # Path("") would be the current directory
    return Path(url)


def local_refs(path: str | Path, prefixes: Sequence[str]) -> LsRefsAnswer:
    """Every ref of the repository at ``path`` whose full name starts with one of
    ``prefixes`` (each ``refs/...``), symbolic refs resolved, read from the repository
    itself: what ``ls_refs`` answers for a served one, with no bytes sent or received.

    Only the names under the prefixes are looked for: loose ref files in the directories
    that can hold them, then ``packed-refs``, searched by halving when git wrote it sorted
    (it always does). Loose first: ``git pack-refs`` writes ``packed-refs`` before it
    removes a loose file, so a ref being packed meanwhile is found one way or the other.
    Each name found is then looked up with libgit2, which reads a loose ref before its
    packed value; a ref deleted meanwhile, or a symbolic one to nothing, is absent.

    Raises ``LsRefsError`` when ``path`` holds no repository, or a ref under the prefixes
    that cannot be read, and ``Unsupported`` when its refs are not stored as loose files
    and ``packed-refs``."""
    _check_prefixes(prefixes)
    try:
        repo = pygit2.Repository(str(path), pygit2.enums.RepositoryOpenFlag.NO_SEARCH)
    except pygit2.GitError as exc:
        raise LsRefsError(f"{path}: {exc}") from exc
    common = _common_dir(Path(repo.path))
    if (common / "reftable").is_dir():
        raise Unsupported(f"{path}: refs stored in a reftable")
    names: set[str] = set()
    for prefix in prefixes:
        names |= _loose_names(common, prefix)
    try:
        names |= packedrefs.names_under(common / "packed-refs", prefixes)
    except (OSError, PackedRefsCorrupt) as exc:
        raise LsRefsError(f"{path}: {exc}") from exc
    refs: dict[str, str] = {}
    for name in sorted(names):
        if not pygit2.reference_is_valid_name(name):
            continue  # a stray file (``*.lock``) in a refs directory
        try:
            ref = repo.references.get(name)
            target = None if ref is None else ref.resolve().target
        except KeyError:
            continue  # deleted meanwhile, or a symbolic ref to nothing: no ref, as git shows it
        except pygit2.GitError as exc:
            # An unreadable ref file, a symbolic loop, a corrupt packed-refs: the caller
            # falls back to a fetch rather than take a ref it could not read for a deleted one.
            raise LsRefsError(f"{path}: {exc}") from exc
        if isinstance(target, pygit2.Oid):
            refs[name] = str(target)
    return LsRefsAnswer(refs, 0, 0)


def _common_dir(git_dir: Path) -> Path:
    """Where a repository keeps its shared refs: a linked work tree's names its main one."""
    try:
        pointer = (git_dir / "commondir").read_text().strip()
    except OSError:
        return git_dir
    return git_dir / pointer


def _loose_names(common: Path, prefix: str) -> set[str]:
    """The loose ref files under ``prefix``, entering only directories that can hold them."""
    out: set[str] = set()

    def walk(directory: str) -> None:
        try:
            entries = list(os.scandir(common / directory))
        except (FileNotFoundError, NotADirectoryError):
            return
        for entry in entries:
            name = f"{directory}/{entry.name}"
            if entry.is_dir(follow_symlinks=False):
                if (name + "/").startswith(prefix) or prefix.startswith(name + "/"):
                    walk(name)
            elif name.startswith(prefix):
                out.add(name)

    walk(prefix.rpartition("/")[0])
    return out


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
