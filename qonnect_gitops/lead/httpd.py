"""The lead's HTTP/1.1 server: asyncio for connections, a bounded pool for handlers.

Why not ``ThreadingHTTPServer``: it holds a thread per connection (400 idle
keep-alive connections were 400 threads), has no read deadline for a whole
request, and answers malformed requests with HTML or by dropping the connection.
Here:

* connections live on one asyncio loop (an idle one costs a socket and a few
  hundred bytes, no thread); at most ``max_connections`` are open, the next ones
  get ``503`` and are closed;
* a request must arrive whole (request line, headers and body) within
  ``read_timeout`` of its first byte, and a keep-alive connection may sit idle for
  ``idle_timeout``; a TLS handshake gets ``read_timeout`` too;
* handlers are plain blocking functions ``Request -> Response`` (they wait on Raft
  commits) and run on a pool of ``workers`` threads; an optional inline handler runs
  first on the loop thread and may answer at once or with a ``Deferred`` (a future
  another thread completes, e.g. a report's Raft commit), so the hottest route holds
  no thread while it waits;
* every malformed request is answered with a 4xx JSON error, never a dropped
  connection: a bad request line or header 400, a header block too large 431, a
  request line too long 414, a body over the limit or chunked 400, an unknown method
  405, a request that does not arrive in time 408; a handler bug is a 500 JSON error.

TLS: pass an ``ssl.SSLContext`` (``tls_context`` builds one from PEM files and
reloads it when they change, so a rotated certificate needs no restart).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import re
import resource
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from typing import Any

from qonnect_gitops.lead.threads import name_os_thread
from qonnect_gitops.logs import get_logger

log = get_logger(__name__)

_METHOD = re.compile(r"^[A-Z]{1,20}$")
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
_BAD_VALUE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_VERSIONS = ("HTTP/1.0", "HTTP/1.1")
MAX_TARGET = 8192
METHODS = ("GET", "HEAD", "POST")


@dataclass(frozen=True)
class HTTPLimits:
    """Connection and request limits of one server."""

    max_connections: int = 1000
    workers: int = 64
    read_timeout: float = 10.0
    idle_timeout: float = 60.0
    max_body_bytes: int = 256 * 1024
    max_header_bytes: int = 16 * 1024
    max_headers: int = 100


class Headers:
    """Request headers: case-insensitive lookup, values as the client sent them
    (decoded as ISO-8859-1, so any byte is one character)."""

    def __init__(self, items: list[tuple[str, str]]) -> None:
        self._items = items
        self._map: dict[str, list[str]] = {}
        for name, value in items:
            self._map.setdefault(name.lower(), []).append(value)

    def get(self, name: str, default: str | None = None) -> str | None:
        """The first value of ``name``."""
        values = self._map.get(name.lower())
        return values[0] if values else default

    def all(self, name: str) -> list[str]:
        """Every value of ``name``, in order."""
        return list(self._map.get(name.lower(), ()))

    def items(self) -> Iterator[tuple[str, str]]:
        return iter(self._items)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._map


@dataclass(frozen=True)
class Request:
    """One parsed request with its whole body."""

    method: str
    path: str
    query: str
    version: str
    headers: Headers
    body: bytes
    peer: str


@dataclass
class Response:
    """What a handler answers."""

    status: int
    body: bytes = b""
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    close: bool = False

    @classmethod
    def json(cls, status: int, doc: Any, headers: dict[str, str] | None = None,
             close: bool = False) -> Response:
        return cls(status, (json.dumps(doc) + "\n").encode(), headers=headers or {}, close=close)


class HTTPError(Exception):
    """Raised by a handler: answer ``status`` with a JSON error carrying ``message``."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None,
                 close: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}
        self.close = close

    def response(self) -> Response:
        return error_response(self.status, self.message, self.headers, self.close)


def error_response(status: int, message: str, headers: dict[str, str] | None = None,
                   close: bool = False) -> Response:
    """The JSON error body every failure uses: ``{"error": phrase, "message": why}``."""
    return Response.json(status, {"error": HTTPStatus(status).phrase.lower(), "message": message},
                         headers, close)


@dataclass(frozen=True)
class Deferred:
    """An answer that waits for work another thread finishes (a Raft commit) without
    holding a worker thread: ``future`` completes off the loop, then ``finish(result)``
    builds the response on the loop thread; ``finish(None)`` when ``timeout`` seconds
    passed first."""

    future: concurrent.futures.Future[Any]
    finish: Callable[[Any], Response]
    timeout: float


Handler = Callable[[Request], Response]
InlineHandler = Callable[[Request], "Response | Deferred | None"]
"""Called on the event loop thread before ``Handler``: a ``Response`` or a ``Deferred``
answers the request, ``None`` passes it to the worker pool. Must not block."""


class _Refuse(Exception):
    """Answer this and close the connection (the request could not be read)."""

    def __init__(self, response: Response) -> None:
        super().__init__(response.status)
        self.response = response


class AsyncHTTPServer:
    """Serves ``handler`` on ``host:port`` until ``shutdown()``; see the module docstring."""

    def __init__(self, host: str, port: int, handler: Handler, limits: HTTPLimits = HTTPLimits(),
                 ssl_context: ssl.SSLContext | None = None,
                 name: str = "http", inline: InlineHandler | None = None) -> None:
        self.handler = handler
        self.inline = inline
        self.limits = limits
        self.name = name
        self._ssl = ssl_context
        self._sock = socket.create_server((host, port), family=_family(host), backlog=1024,
                                          reuse_port=False)
        self.server_address = self._sock.getsockname()[:2]
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=limits.workers,
                                                           thread_name_prefix=f"{name}-worker")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._started = threading.Event()
        self.open_connections = 0
        self.refused_connections = 0
        self.requests = 0
        _raise_fd_limit(limits.max_connections + 256)

    # ------------------------------------------------------------------ running

    def serve_forever(self) -> None:
        """Serve in the calling thread until ``shutdown()``."""
        asyncio.run(self._main())

    def start(self) -> threading.Thread:
        """Serve on a daemon thread; returns once the server accepts connections."""
        thread = threading.Thread(target=self.serve_forever, name=self.name, daemon=True)
        thread.start()
        self._started.wait(10)
        return thread

    def shutdown(self) -> None:
        """Stop accepting and close every connection (callable from any thread)."""
        loop, stopping = self._loop, self._stopping
        if loop is not None and stopping is not None:
            with contextlib.suppress(RuntimeError):  # the loop already ended
                loop.call_soon_threadsafe(stopping.set)

    async def _main(self) -> None:
        name_os_thread(self.name)
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        tasks: set[asyncio.Task[None]] = set()

        async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            if task is not None:
                tasks.add(task)
            try:
                await self._connection(reader, writer)
            finally:
                if task is not None:
                    tasks.discard(task)

        server = await asyncio.start_server(
            on_connection, sock=self._sock, limit=self.limits.max_header_bytes,
            ssl=self._ssl, ssl_handshake_timeout=self.limits.read_timeout if self._ssl else None,
            ssl_shutdown_timeout=2.0 if self._ssl else None)
        self._started.set()
        try:
            await self._stopping.wait()
        finally:
            server.close()
            for task in list(tasks):
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._pool.shutdown(wait=False, cancel_futures=True)

    # -------------------------------------------------------------- connections

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = _peer(writer)
        if self.open_connections >= self.limits.max_connections:
            self.refused_connections += 1
            with contextlib.suppress(Exception):
                await self._write(writer, error_response(
                    503, f"too many connections (limit {self.limits.max_connections}); retry",
                    {"Retry-After": "1"}, close=True), head_only=False, keep_alive=False)
            await _close(writer)
            return
        self.open_connections += 1
        try:
            while True:
                try:
                    request = await self._read_request(reader, writer, peer)
                except _Refuse as refuse:
                    with contextlib.suppress(Exception):
                        await self._write(writer, refuse.response, head_only=False, keep_alive=False)
                    return
                if request is None:
                    return
                self.requests += 1
                response = await self._respond(request)
                keep = _keep_alive(request) and not response.close
                try:
                    await self._write(writer, response, request.method == "HEAD", keep)
                except (TimeoutError, OSError, ConnectionError):
                    return
                if not keep:
                    return
        except (OSError, ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            return  # the client went away
        finally:
            self.open_connections -= 1
            await _close(writer)

    async def _respond(self, request: Request) -> Response:
        """The inline handler's answer if it has one, else the pool's. A thread handoff
        per request cost more CPU than a report's parsing; answers that only wait (for a
        Raft commit) wait on the loop instead."""
        if self.inline is not None:
            early = self._guarded(self.inline, request)
            if isinstance(early, Deferred):
                try:
                    async with asyncio.timeout(early.timeout):
                        result = await asyncio.wrap_future(early.future)
                except TimeoutError:
                    result = None
                return self._guarded(lambda _: early.finish(result), request)
            if early is not None:
                return early
        return await asyncio.get_running_loop().run_in_executor(self._pool, self._call, request)

    def _call(self, request: Request) -> Response:
        return self._guarded(self.handler, request)

    def _guarded(self, handler: Callable[[Request], Any], request: Request) -> Any:
        try:
            return handler(request)
        except HTTPError as exc:
            return exc.response()
        except Exception as exc:  # a bug in a handler: answer, log one line, keep serving
            log.error("http_handler_failed", method=request.method, path=request.path,
                      error=f"{type(exc).__name__}: {exc}", exc_info=True)
            return error_response(500, "internal error; see the lead's log")

    async def _read_request(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                            peer: str) -> Request | None:
        """The next request, None at a clean end (EOF or idle timeout); ``_Refuse`` for a
        request that must be answered with an error and the connection closed."""
        limits = self.limits
        # asyncio.timeout, not wait_for: wait_for wraps each read in a new task, which
        # cost more CPU per request than parsing it.
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(limits.idle_timeout):
                first = await reader.read(1)
        except TimeoutError:
            return None
        if not first:
            return None
        deadline = loop.time() + limits.read_timeout
        try:
            async with asyncio.timeout_at(deadline):
                rest = await reader.readuntil(b"\r\n\r\n")
        except TimeoutError:
            raise _Refuse(error_response(408, f"request not received within {limits.read_timeout:g} s",
                                         close=True)) from None
        except asyncio.LimitOverrunError:
            raise _Refuse(error_response(431, f"request head exceeds {limits.max_header_bytes} bytes",
                                         close=True)) from None
        except asyncio.IncompleteReadError:
            return None  # the client closed mid-request: nobody to answer
        head = (first + rest)[:-4].lstrip(b"\r\n")
        method, target, version, headers = self._parse_head(head)
        path, _, query = target.partition("?")
        if method not in METHODS:
            raise _Refuse(error_response(405, f"method {method} is not allowed",
                                         {"Allow": ", ".join(METHODS)}, close=True))
        length = self._content_length(method, headers)
        if length and (headers.get("Expect") or "").lower() == "100-continue":
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        body = b""
        if length:
            try:
                async with asyncio.timeout_at(deadline):
                    body = await reader.readexactly(length)
            except TimeoutError:
                raise _Refuse(error_response(
                    408, f"body of {length} bytes not received within {limits.read_timeout:g} s",
                    close=True)) from None
        return Request(method, path, query, version, headers, body, peer)

    def _parse_head(self, head: bytes) -> tuple[str, str, str, Headers]:
        text = head.decode("iso-8859-1")
        lines = text.split("\r\n")
        request_line = lines[0]
        if len(request_line) > MAX_TARGET + 32:
            raise _Refuse(error_response(414, f"request line longer than {MAX_TARGET} bytes", close=True))
        parts = request_line.split(" ")
        if len(parts) != 3 or not _METHOD.match(parts[0]) or parts[2] not in _VERSIONS:
            raise _Refuse(error_response(400, "malformed request line; expected 'METHOD /path HTTP/1.1'",
                                         close=True))
        method, target, version = parts
        if target.startswith(("http://", "https://")):  # absolute form: keep the path
            target = "/" + target.split("/", 3)[3] if target.count("/") >= 3 else "/"
        if not target.startswith("/") or _BAD_VALUE.search(target):
            raise _Refuse(error_response(400, "the request target must be a path starting with '/'",
                                         close=True))
        items: list[tuple[str, str]] = []
        for line in lines[1:]:
            if line[:1] in (" ", "\t"):
                raise _Refuse(error_response(400, "folded header lines are not accepted", close=True))
            name, sep, value = line.partition(":")
            if not sep or not _TOKEN.match(name):
                raise _Refuse(error_response(400, f"malformed header line {line[:40]!r}", close=True))
            value = value.strip(" \t")
            if _BAD_VALUE.search(value):
                raise _Refuse(error_response(400, f"header {name} holds control characters", close=True))
            items.append((name, value))
            if len(items) > self.limits.max_headers:
                raise _Refuse(error_response(431, f"more than {self.limits.max_headers} headers",
                                             close=True))
        return method, target, version, Headers(items)

    def _content_length(self, method: str, headers: Headers) -> int:
        """The body length from the headers; refuses what we will not read."""
        if "Transfer-Encoding" in headers:
            raise _Refuse(error_response(400, "chunked bodies are not accepted; send Content-Length",
                                         close=True))
        values = {v.strip() for v in headers.all("Content-Length")}
        if not values:
            if method == "POST":
                raise _Refuse(error_response(400, "Content-Length is required", close=True))
            return 0
        if len(values) > 1:
            raise _Refuse(error_response(400, "conflicting Content-Length headers", close=True))
        raw = values.pop()
        if raw.startswith("-") and raw[1:].isdigit():
            raise _Refuse(error_response(400, "Content-Length is negative", close=True))
        if not raw.isascii() or not raw.isdigit() or len(raw) > 15:
            raise _Refuse(error_response(400, f"Content-Length {raw[:20]!r} is not a number", close=True))
        length = int(raw)
        if length > self.limits.max_body_bytes:
            raise _Refuse(error_response(
                400, f"body of {length} bytes exceeds the limit of {self.limits.max_body_bytes} bytes",
                close=True))
        return length

    async def _write(self, writer: asyncio.StreamWriter, response: Response, head_only: bool,
                     keep_alive: bool) -> None:
        phrase = _phrase(response.status)
        lines = [f"HTTP/1.1 {response.status} {phrase}",
                 f"Content-Type: {response.content_type}",
                 f"Content-Length: {len(response.body)}",
                 f"Connection: {'keep-alive' if keep_alive else 'close'}"]
        for name, value in response.headers.items():
            lines.append(f"{name}: {_BAD_VALUE.sub(' ', str(value))}")
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("iso-8859-1", "replace"))
        if not head_only:
            writer.write(response.body)
        async with asyncio.timeout(self.limits.read_timeout):
            await writer.drain()


def tls_context(cert: Path, key: Path) -> ssl.SSLContext:
    """A server TLS context from PEM files (TLS 1.2 or newer). Raises ``ssl.SSLError`` or
    ``OSError`` at once if they do not load. When either file changes (a rotated
    certificate), new handshakes use the new pair: no restart needed."""
    state: dict[str, Any] = {}

    def current() -> ssl.SSLContext:
        stamp = tuple(os.stat(p).st_mtime_ns for p in (cert, key))
        if state.get("stamp") != stamp:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.minimum_version = ssl.TLSVersion.TLSv1_2
            context.load_cert_chain(str(cert), str(key))
            state["context"], state["stamp"] = context, stamp
        return state["context"]  # type: ignore[no-any-return]

    def on_hello(sslobj: ssl.SSLObject, server_name: str | None, outer: ssl.SSLContext) -> None:
        # Called for every ClientHello: switch the connection to the newest pair.
        with contextlib.suppress(OSError, ssl.SSLError):
            fresh = current()
            if fresh is not outer:
                sslobj.context = fresh

    outer = current()
    outer.sni_callback = on_hello
    return outer


def _keep_alive(request: Request) -> bool:
    connection = (request.headers.get("Connection") or "").lower()
    if request.version == "HTTP/1.0":
        return "keep-alive" in connection
    return "close" not in connection


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Status"


def _peer(writer: asyncio.StreamWriter) -> str:
    info = writer.get_extra_info("peername")
    return f"{info[0]}:{info[1]}" if isinstance(info, tuple) and len(info) >= 2 else "?"


async def _close(writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(Exception):
        writer.close()
        await asyncio.wait_for(writer.wait_closed(), 2.0)


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def _raise_fd_limit(wanted: int) -> None:
    """Let the process hold ``wanted`` descriptors if the hard limit allows it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
