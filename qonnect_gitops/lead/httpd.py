"""The lead's HTTP/1.1 server: asyncio for connections, a bounded pool for handlers.

Why not ``ThreadingHTTPServer``: it holds a thread per connection (400 idle
keep-alive connections were 400 threads), has no read deadline for a whole
request, and answers malformed requests with HTML or by dropping the connection.
Here:

* connections live on one asyncio loop as protocol objects (an idle one costs a
  socket and a few hundred bytes, no thread and no task); a request is parsed from
  the connection's buffer once it is whole; at most ``max_connections`` are open;
* a connection is *anonymous* until one of its requests carries a valid token (the
  ``authenticate`` hook says so); anonymous connections are held to
  ``anonymous_connections`` in all and ``anonymous_per_client`` per source address, must
  deliver each whole request within ``anonymous_timeout``, and their requests without a
  valid token are rate limited per address. Past those limits the oldest anonymous
  connections that are not being answered are closed (by the sweep, so clients that
  connect together all get the time to show a token), and when a new connection finds
  ``max_connections`` open, the oldest anonymous one is closed for it at once: idle or
  slow connections cannot keep agents out, the room they leave is held for connections
  that authenticated. Only when authenticated connections fill ``max_connections``
  does a new one get ``503`` (``Intake`` counts each refusal by reason, with its time);
* a request must arrive whole (request line, headers and body) within
  ``read_timeout`` of its first byte, and a keep-alive connection may sit idle for
  ``idle_timeout``; a TLS handshake gets ``read_timeout`` too. One timer for the
  whole server checks these deadlines a few times per second (a timer, future or
  task per request cost more CPU than parsing a report);
* handlers are plain blocking functions ``Request -> Response`` (they wait on Raft
  commits) and run on a pool of ``workers`` threads; an optional inline handler runs
  first on the loop thread and may answer at once or with a ``Deferred`` (work
  another thread completes, e.g. a report's Raft commit), so the hottest route holds
  no thread while it waits, and a batch of completions wakes the loop once;
* every malformed request is answered with a 4xx JSON error, never a dropped
  connection: a bad request line or header 400, a header block too large 431, a
  request line too long 414, a body over the limit or chunked 400, an unknown method
  405, a request that does not arrive in time 408; a handler bug is a 500 JSON error.

The loop is uvloop's where it is installed (its transports are C, where asyncio's
read and write in Python), else asyncio's own; ``event_loop="asyncio"`` forces the standard one.

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
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from http import HTTPStatus
from pathlib import Path
from typing import Any, cast

import msgspec

from qonnect_gitops.lead.ratelimit import RateLimiter
from qonnect_gitops.lead.threads import name_os_thread
from qonnect_gitops.logs import get_logger

log = get_logger(__name__)

_METHOD = re.compile(r"^[A-Z]{1,20}$")
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
_BAD_VALUE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
# A header line the careful loop in ``_parse_head`` accepts as it is: a token, a colon, a
# value without control characters (tabs allowed); anything else takes that loop, which
# words the refusal.
_HEADER_LINE = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+:[^\x00-\x08\x0a-\x1f\x7f]*")
_VERSIONS = ("HTTP/1.0", "HTTP/1.1")
MAX_TARGET = 8192
METHODS = ("GET", "HEAD", "POST")
# Remembered request heads (``AsyncHTTPServer._remember_head``): every agent repeats its
# own (path and token), so the bound must exceed the fleet, or a fleet larger than it
# clears the memory before any head is seen twice (at 10,000 clusters, 8,192 heads missed
# nearly always). Only heads up to ``_HEAD_KEPT_BYTES`` are kept (an agent's is about 200
# bytes): at most about 32,768 x 2.5 KB with their parsed headers, whatever a client sends.
_HEADS_KEPT = 32768
_HEAD_KEPT_BYTES = 1024
EVENT_LOOPS = ("auto", "uvloop", "asyncio")


def loop_factory(choice: str = "auto") -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event loop a server runs on: ``"auto"`` is uvloop where it is installed and
    the standard loop elsewhere, ``"asyncio"`` always the standard loop, ``"uvloop"``
    uvloop or ``RuntimeError``. None means asyncio's default."""
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise RuntimeError("event loop uvloop asked for, but uvloop is not installed") from None
        return None
    return uvloop.new_event_loop


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
    # Connections without a valid token yet (a server with an ``authenticate`` hook):
    # at most this many in all (the rest of ``max_connections`` is theirs once they
    # authenticate) and from one address; each request within ``anonymous_timeout`` of
    # the connection or of its previous answer; requests without a valid token at
    # ``anonymous_rate`` per second per address (bursts of ``anonymous_burst``).
    anonymous_connections: int = 250
    anonymous_per_client: int = 16
    anonymous_timeout: float = 5.0
    anonymous_rate: float = 50.0
    anonymous_burst: float = 200.0


class IntakeRefusal(StrEnum):
    """Why the server closed or refused a connection (``Intake``)."""

    # No room: connections that presented a valid token fill max_connections. The one
    # reason that means the server cannot take more agents.
    FULL = "full"
    # An anonymous connection closed to make room for a newer one: the anonymous pool
    # was full (``EVICTED``), or its own address held anonymous_per_client (``EVICTED_CLIENT``).
    EVICTED = "evicted"
    EVICTED_CLIENT = "evicted-client"
    # An anonymous connection that did not deliver a whole request within anonymous_timeout.
    ANONYMOUS_TIMEOUT = "anonymous-timeout"
    # A request without a valid token over its address's rate (429).
    ANONYMOUS_RATE = "anonymous-rate"


@dataclass(frozen=True)
class RefusalCount:
    """How often one ``IntakeRefusal`` happened, and when last (``time.time()``, 0: never)."""

    count: int = 0
    last_at: float = 0.0


@dataclass(frozen=True)
class Intake:
    """What the server's connections are and what it turned away: the typed signal that
    it is saturated (``refused[IntakeRefusal.FULL]`` moving: agents cannot get in)."""

    open: int
    anonymous: int
    max_connections: int
    anonymous_limit: int
    refused: dict[IntakeRefusal, RefusalCount]

    def saturated_since(self, seconds: float, now: float | None = None) -> bool:
        """Whether a connection was refused for want of room within the last ``seconds``."""
        last = self.refused.get(IntakeRefusal.FULL, RefusalCount()).last_at
        return last > 0 and (now if now is not None else time.time()) - last <= seconds

    def to_json(self) -> dict[str, Any]:
        """For ``/v1/status``."""
        return {"open": self.open, "anonymous": self.anonymous, "maxConnections": self.max_connections,
                "anonymousLimit": self.anonymous_limit,
                "refused": {reason.value: {"count": c.count, "lastAt": round(c.last_at, 3)}
                            for reason, c in sorted(self.refused.items())}}


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
        """``doc`` as a JSON body (UTF-8, one line and a newline)."""
        return cls(status, _json_line(doc), headers=headers or {}, close=close)


_JSON_ENCODER = msgspec.json.Encoder()


def _json_line(doc: Any) -> bytes:
    """msgspec writes a report's answer in a tenth of ``json.dumps``'s time (every report
    is answered); what it cannot write (non-string keys, integers beyond 64 bits) goes
    to ``json.dumps`` as before."""
    try:
        return _JSON_ENCODER.encode(doc) + b"\n"
    except (TypeError, OverflowError, ValueError):
        return (json.dumps(doc) + "\n").encode()


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
    holding a worker thread: the server calls ``start(done)`` once on the loop thread,
    where ``done(result)`` may be called from any thread; then ``finish(result)`` builds
    the response on the loop thread, or ``finish(None)`` when ``timeout`` seconds passed
    first. Completions arriving together (a committed batch of reports) wake the loop
    once, not once each."""

    start: Callable[[Callable[[Any], None]], None]
    finish: Callable[[Any], Response]
    timeout: float

    def wait(self) -> Response:
        """Block the calling thread (not the loop) until done or timed out; the response."""
        done = threading.Event()
        box: list[Any] = []

        def complete(result: Any) -> None:
            box.append(result)
            done.set()

        self.start(complete)
        return self.finish(box[0] if done.wait(self.timeout) else None)


Handler = Callable[[Request], Response]
Authenticate = Callable[[Request], bool]
"""Called on the loop thread for each request of an anonymous connection: whether it
carries a valid token (the connection is then no longer anonymous). Must not block."""
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
                 name: str = "http", inline: InlineHandler | None = None,
                 event_loop: str = "auto", authenticate: Authenticate | None = None) -> None:
        if event_loop not in EVENT_LOOPS:
            raise ValueError(f"event_loop must be one of {', '.join(EVENT_LOOPS)}, not {event_loop!r}")
        self.event_loop = event_loop
        self.handler = handler
        self.inline = inline
        # Without it no connection is anonymous: every one is served as before the
        # anonymous limits (the lead always passes one).
        self.authenticate = authenticate
        self.limits = limits
        self.anonymous_limit = min(limits.anonymous_connections, limits.max_connections)
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
        self._completions: _Completions | None = None
        self._sweeper: asyncio.TimerHandle | None = None
        self._connections: set[_Connection] = set()
        self.open_connections = 0
        self.requests = 0
        # Anonymous connections in the order they connected, all and per address: the
        # oldest is the one closed to make room.
        self._anonymous: OrderedDict[_Connection, None] = OrderedDict()
        self._anonymous_of: dict[str, OrderedDict[_Connection, None]] = {}
        self._anonymous_requests = RateLimiter(limits.anonymous_rate, limits.anonymous_burst,
                                               max_keys=4 * limits.max_connections)
        self._refusals: dict[IntakeRefusal, RefusalCount] = {}
        self._crowded: set[str] = set()  # addresses over anonymous_per_client since the last sweep
        # Heads that parsed and passed, by their bytes: an agent sends the same head (path,
        # token, length) with every report, and parsing it cost as much as a report's
        # decoding. Bounded (``_HEADS_KEPT``); a refused head is never kept.
        self._heads: dict[bytes, tuple[str, str, str, str, Headers, int]] = {}
        _raise_fd_limit(limits.max_connections + 256)

    # ------------------------------------------------------------------ running

    def serve_forever(self) -> None:
        """Serve in the calling thread until ``shutdown()``."""
        with asyncio.Runner(loop_factory=loop_factory(self.event_loop)) as runner:
            runner.run(self._main())

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
        loop = self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        self._completions = _Completions(loop)
        server = await loop.create_server(
            lambda: _Connection(self), sock=self._sock,
            ssl=self._ssl, ssl_handshake_timeout=self._handshake_timeout if self._ssl else None,
            ssl_shutdown_timeout=2.0 if self._ssl else None)
        self._sweeper = loop.call_later(self._sweep_every, self._sweep)
        self._started.set()
        try:
            await self._stopping.wait()
        finally:
            if self._sweeper is not None:
                self._sweeper.cancel()
            server.close()
            for conn in list(self._connections):
                conn.close()
            self._pool.shutdown(wait=False, cancel_futures=True)

    @property
    def _sweep_every(self) -> float:
        """How often deadlines are checked: often enough that a timeout fires within a
        quarter of the shortest limit (one timer for the server, none per request)."""
        return min(0.25, self.limits.read_timeout / 4, self.limits.idle_timeout / 4,
                   self.limits.anonymous_timeout / 4)

    @property
    def _handshake_timeout(self) -> float:
        """A TLS handshake comes before any token: it gets the anonymous timeout too."""
        if self.authenticate is None:
            return self.limits.read_timeout
        return min(self.limits.read_timeout, self.limits.anonymous_timeout)

    # -------------------------------------------------------------- intake

    @property
    def refused_connections(self) -> int:
        """Connections refused with 503 for want of room (``IntakeRefusal.FULL``)."""
        return self._refusals.get(IntakeRefusal.FULL, RefusalCount()).count

    def intake(self) -> Intake:
        """The connections and refusals as of now (any thread: a copy of a few numbers)."""
        return Intake(self.open_connections, len(self._anonymous), self.limits.max_connections,
                      self.anonymous_limit, dict(self._refusals))

    def _refused(self, reason: IntakeRefusal) -> None:
        before = self._refusals.get(reason, RefusalCount())
        self._refusals[reason] = RefusalCount(before.count + 1, time.time())

    def _admit(self, conn: _Connection) -> bool:
        """Room for a new connection (loop thread): when ``max_connections`` are open, the
        oldest anonymous connection not being answered is closed for it; False when there
        is none (connections that presented a token fill the server). The anonymous pool
        and each address's share are trimmed by the sweep instead (``_trim``): a burst of
        clients connecting at once (agents behind one NAT after a restart) is accepted
        before any of them was read, and each gets the time to a sweep to show its token."""
        if self.authenticate is None:
            return self.open_connections < self.limits.max_connections
        while self.open_connections >= self.limits.max_connections:
            victim = _oldest_idle(self._anonymous)
            if victim is None:
                return False
            self._evict(victim, IntakeRefusal.EVICTED)
        return True

    def _trim(self) -> None:
        """Close the oldest anonymous connections (not being answered) of every address
        over ``anonymous_per_client``, then of all while over ``anonymous_connections``
        (the sweep, on the loop thread)."""
        limit = self.limits.anonymous_per_client
        for client in list(self._crowded):
            own = self._anonymous_of.get(client)
            while own and len(own) > limit:
                victim = _oldest_idle(own)
                if victim is None:
                    break
                self._evict(victim, IntakeRefusal.EVICTED_CLIENT)
        self._crowded.clear()
        while len(self._anonymous) > self.anonymous_limit:
            victim = _oldest_idle(self._anonymous)
            if victim is None:
                break
            self._evict(victim, IntakeRefusal.EVICTED)

    def _evict(self, victim: _Connection, reason: IntakeRefusal) -> None:
        self._refused(reason)
        victim.evicted()

    def _count_in(self, conn: _Connection) -> None:
        self.open_connections += 1
        self._connections.add(conn)
        if conn.anonymous:
            self._anonymous[conn] = None
            own = self._anonymous_of.setdefault(conn.client, OrderedDict())
            own[conn] = None
            if len(own) > self.limits.anonymous_per_client:
                self._crowded.add(conn.client)

    def _count_out(self, conn: _Connection) -> None:
        self.open_connections -= 1
        self._connections.discard(conn)
        self._forget_anonymous(conn)

    def _forget_anonymous(self, conn: _Connection) -> None:
        if self._anonymous.pop(conn, False) is None:
            own = self._anonymous_of.get(conn.client)
            if own is not None:
                own.pop(conn, None)
                if not own:
                    del self._anonymous_of[conn.client]

    def _anonymous_request(self, conn: _Connection, request: Request) -> Response | None:
        """A request on an anonymous connection (loop thread): a valid token makes the
        connection authenticated; without one, the request spends from its address's
        bucket, and past it is answered 429 (and the connection closed)."""
        assert self.authenticate is not None
        try:
            valid = self.authenticate(request)
        except Exception as exc:  # a bug in the hook: treat as no token, keep serving
            log.error("http_authenticate_failed", error=f"{type(exc).__name__}: {exc}")
            valid = False
        if valid:
            conn.anonymous = False
            self._forget_anonymous(conn)
            return None
        wait = self._anonymous_requests.acquire(conn.client)
        if wait <= 0:
            return None
        self._refused(IntakeRefusal.ANONYMOUS_RATE)
        return error_response(429, "too many requests without a valid token from this address; retry later",
                               {"Retry-After": RateLimiter.retry_after_header(wait)}, close=True)

    def _sweep(self) -> None:
        """Act on every connection whose deadline passed (on the loop thread)."""
        loop = self._loop
        assert loop is not None
        now = loop.time()
        for conn in list(self._connections):
            if conn.deadline <= now:
                conn.expired()
        if self.authenticate is not None:
            self._trim()
        self._sweeper = loop.call_later(self._sweep_every, self._sweep)

    # -------------------------------------------------------------- handlers

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

    def _remember_head(self, raw: bytes, parsed: tuple[str, str, str, str, Headers, int]) -> None:
        """Keep a head that parsed and passed (loop thread only)."""
        if len(raw) > _HEAD_KEPT_BYTES:
            return
        if len(self._heads) >= _HEADS_KEPT:
            self._heads.clear()  # a flood of distinct heads only misses
        self._heads[raw] = parsed

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
        return method, target, version, self._parse_headers(lines[1:])

    def _parse_headers(self, lines: list[str]) -> Headers:
        if len(lines) <= self.limits.max_headers and all(map(_HEADER_LINE.fullmatch, lines)):
            # Every line is a well-formed header (what agents send): no check per line.
            return Headers([(name, value.strip(" \t"))
                            for name, _, value in (line.partition(":") for line in lines)])
        return self._parse_headers_carefully(lines)

    def _parse_headers_carefully(self, lines: list[str]) -> Headers:
        """Header lines checked one by one; the refusal names what is wrong."""
        items: list[tuple[str, str]] = []
        for line in lines:
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
        return Headers(items)

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



def _encode(response: Response, head_only: bool, keep_alive: bool) -> bytes:
    """The response as bytes on the wire (one write: one send on the socket). The head
    but for its length and extra headers is built once per status, type and connection:
    every report's answer has the same."""
    key = (response.status, response.content_type, keep_alive)
    parts = _HEAD_PARTS.get(key)
    if parts is None:
        parts = _head_parts(response.status, response.content_type, keep_alive)
        if len(_HEAD_PARTS) < 64:
            _HEAD_PARTS[key] = parts
    extra = "".join(f"{name}: {_BAD_VALUE.sub(' ', str(value))}\r\n"
                    for name, value in response.headers.items()).encode("iso-8859-1", "replace") \
        if response.headers else b""
    head = b"%s%d%s%s\r\n" % (parts[0], len(response.body), parts[1], extra)
    return head if head_only else head + response.body


_HEAD_PARTS: dict[tuple[int, str, bool], tuple[bytes, bytes]] = {}


def _head_parts(status: int, content_type: str, keep_alive: bool) -> tuple[bytes, bytes]:
    """The head's first lines in two parts around the Content-Length value; the second
    ends with the Connection line (extra headers and the blank line follow)."""
    before = f"HTTP/1.1 {status} {_phrase(status)}\r\nContent-Type: {content_type}\r\nContent-Length: "
    after = f"\r\nConnection: {'keep-alive' if keep_alive else 'close'}\r\n"
    return before.encode("iso-8859-1", "replace"), after.encode("iso-8859-1", "replace")


class _Completions:
    """Hands results computed on other threads to connections on the loop thread, waking
    the loop once per burst (a committed batch completes hundreds of reports)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._lock = threading.Lock()
        self._items: list[tuple[_Connection, int, Any]] = []

    def complete(self, conn: _Connection, seq: int, result: Any) -> None:
        """Deliver ``result`` to request ``seq`` of ``conn`` (any thread)."""
        with self._lock:
            self._items.append((conn, seq, result))
            wake = len(self._items) == 1
        if wake:
            with contextlib.suppress(RuntimeError):  # the loop already ended
                self._loop.call_soon_threadsafe(self._flush)

    def _flush(self) -> None:
        with self._lock:
            items, self._items = self._items, []
        for conn, seq, result in items:
            conn.completed(seq, result)


_IDLE, _READING, _BUSY, _CLOSED = range(4)


class _Connection(asyncio.Protocol):
    """One client connection: reads a whole request from the buffer, answers it, then
    the next (in order; pipelined requests wait in the buffer). No task, future or
    timer per request: deadlines are checked by the server's sweep (``expired``)."""

    def __init__(self, server: AsyncHTTPServer) -> None:
        assert server._loop is not None
        self.server = server
        self.limits = server.limits
        self.loop = server._loop
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.state = _IDLE
        self.deadline = float("inf")
        self.peer = "?"
        self.seq = 0  # of the request in flight: late completions of earlier ones are dropped
        self.pending: tuple[Request, Deferred] | None = None
        self.body_length: int | None = None  # of the request being read, once its head parsed
        self.continued = False
        self.counted = False
        self.eof = False
        self.write_paused = False
        self.advancing = False
        self.tls = False
        self.client = "?"  # the peer's address without its port: what per-client limits count
        # Until a request carries a valid token (``AsyncHTTPServer.authenticate``).
        self.anonymous = server.authenticate is not None

    # ------------------------------------------------------------ transport events

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport, but have its methods.
        self.transport = cast(asyncio.Transport, transport)
        server = self.server
        self.peer = _peer(transport)
        self.client = self.peer.rpartition(":")[0] or self.peer
        if not server._admit(self):
            server._refused(IntakeRefusal.FULL)
            self.transport.write(_encode(error_response(
                503, f"too many connections (limit {self.limits.max_connections}); retry",
                {"Retry-After": "1"}, close=True), head_only=False, keep_alive=False))
            self.state = _CLOSED
            self.transport.close()
            return
        server._count_in(self)
        self.counted = True
        self.tls = transport.get_extra_info("sslcontext") is not None
        self._idle()

    def connection_lost(self, exc: Exception | None) -> None:
        self.state = _CLOSED
        self.pending = None
        self._uncount()

    def _uncount(self) -> None:
        if self.counted:
            self.counted = False
            self.server._count_out(self)

    def data_received(self, data: bytes) -> None:
        if self.state == _CLOSED:
            return
        self.buf += data
        if self.state == _BUSY:
            # Pipelined: keep it for later, but never more than one request's worth.
            if len(self.buf) > self.limits.max_header_bytes + self.limits.max_body_bytes:
                assert self.transport is not None
                self.transport.pause_reading()
            return
        self._advance()

    def eof_received(self) -> bool:
        self.eof = True
        if self.state != _BUSY:
            self._advance()  # a whole request may still be in the buffer
            if self.state != _BUSY:
                self.close()  # a partial request: nobody to answer
        # Half-closed: the answer in progress may still be written (TLS cannot half-close).
        return not self.tls

    def pause_writing(self) -> None:
        self.write_paused = True
        self.deadline = min(self.deadline, self.loop.time() + self.limits.read_timeout)

    def resume_writing(self) -> None:
        self.write_paused = False
        if self.state == _IDLE:
            self._idle()
            self._advance()

    # ------------------------------------------------------------------ requests

    def _idle(self) -> None:
        self.state = _IDLE
        self.body_length = None
        self.continued = False
        limits = self.limits
        self.deadline = self.loop.time() + (limits.anonymous_timeout if self.anonymous else limits.idle_timeout)

    def _advance(self) -> None:
        """Read and dispatch every whole request in the buffer, one at a time."""
        if self.advancing:
            return
        self.advancing = True
        try:
            while self.state in (_IDLE, _READING) and self.buf and not self.write_paused:
                request = self._take_request()
                if request is None:
                    return
                self.server.requests += 1
                self._dispatch(request)
        except _Refuse as refuse:
            self._refuse(refuse.response)
        finally:
            self.advancing = False

    def _take_request(self) -> Request | None:
        """The next whole request out of the buffer, None while it is incomplete;
        ``_Refuse`` for one that must be answered with an error and the connection closed."""
        limits, buf = self.limits, self.buf
        if self.state == _IDLE:
            self.state = _READING
            # An anonymous connection's first byte does not buy it more time.
            reading = self.loop.time() + limits.read_timeout
            self.deadline = min(self.deadline, reading) if self.anonymous else reading
        end = buf.find(b"\r\n\r\n")
        if end < 0 or end > limits.max_header_bytes:
            if end > limits.max_header_bytes or len(buf) > limits.max_header_bytes:
                raise _Refuse(error_response(431, f"request head exceeds {limits.max_header_bytes} bytes",
                                             close=True))
            return None
        raw_head = bytes(buf[:end])
        server = self.server
        known = server._heads.get(raw_head)
        if known is None:
            method, target, version, headers = server._parse_head(raw_head.lstrip(b"\r\n"))
            path, _, query = target.partition("?")
            if method not in METHODS:
                raise _Refuse(error_response(405, f"method {method} is not allowed",
                                             {"Allow": ", ".join(METHODS)}, close=True))
            length = server._content_length(method, headers)
            server._remember_head(raw_head, (method, path, query, version, headers, length))
        else:
            method, path, query, version, headers, length = known
        self.body_length = length
        total = end + 4 + length
        if len(buf) < total:
            if length and not self.continued and (headers.get("Expect") or "").lower() == "100-continue":
                self.continued = True
                assert self.transport is not None
                self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            return None
        body = bytes(buf[end + 4:total])
        del buf[:total]
        return Request(method, path, query, version, headers, body, self.peer)

    def _dispatch(self, request: Request) -> None:
        """Answer at once (inline), wait for a ``Deferred``, or run the handler on the
        pool. A thread handoff per request cost more CPU than a report's parsing;
        answers that only wait (for a Raft commit) wait here instead."""
        server = self.server
        self.state = _BUSY
        self.seq += 1
        seq = self.seq
        if self.anonymous:
            refused = server._anonymous_request(self, request)
            if refused is not None:
                self._answer(request, refused)
                return
        if server.inline is not None:
            early = server._guarded(server.inline, request)
            if isinstance(early, Deferred):
                self.pending = (request, early)
                self.deadline = self.loop.time() + early.timeout
                completions = server._completions
                assert completions is not None
                try:
                    early.start(lambda result: completions.complete(self, seq, result))
                except Exception as exc:  # a bug in the handler: answer 500, keep serving
                    log.error("http_handler_failed", method=request.method, path=request.path,
                              error=f"{type(exc).__name__}: {exc}", exc_info=True)
                    self.pending = None
                    self._answer(request, error_response(500, "internal error; see the lead's log"))
                return
            if early is not None:
                self._answer(request, early)
                return
        self.deadline = float("inf")  # the handler bounds its own waits
        future = self.loop.run_in_executor(server._pool, server._call, request)
        future.add_done_callback(lambda done: self._pooled(seq, request, done))

    def _pooled(self, seq: int, request: Request, done: asyncio.Future[Response]) -> None:
        if seq != self.seq or self.state != _BUSY:
            return
        if done.cancelled() or done.exception() is not None:
            self._answer(request, error_response(503, "shutting down", close=True))
        else:
            self._answer(request, done.result())

    def completed(self, seq: int, result: Any) -> None:
        """A ``Deferred``'s result arrived (loop thread); stale ones are dropped."""
        if seq != self.seq or self.pending is None or self.state != _BUSY:
            return
        request, deferred = self.pending
        self.pending = None
        self._answer(request, self.server._guarded(lambda _: deferred.finish(result), request))

    def expired(self) -> None:
        """The deadline passed (the server's sweep, loop thread)."""
        if self.state == _CLOSED:
            return
        if self.write_paused:  # the client does not read its answers
            assert self.transport is not None
            self.transport.abort()
            return
        if self.state == _IDLE:
            if self.anonymous:
                self.server._refused(IntakeRefusal.ANONYMOUS_TIMEOUT)
            self.close()
        elif self.state == _READING:
            limit = self.limits.read_timeout
            if self.anonymous:
                limit = min(limit, self.limits.anonymous_timeout)
                self.server._refused(IntakeRefusal.ANONYMOUS_TIMEOUT)
            message = (f"body of {self.body_length} bytes not received within {limit:g} s"
                       if self.body_length else f"request not received within {limit:g} s")
            self._refuse(error_response(408, message, close=True))
        elif self.pending is not None:
            self.completed(self.seq, None)

    def _answer(self, request: Request, response: Response) -> None:
        if self.state == _CLOSED or self.transport is None:
            return
        keep = _keep_alive(request) and not response.close and not self.eof
        self.transport.write(_encode(response, request.method == "HEAD", keep))
        if not keep:
            self.close()
            return
        self._idle()
        if self.buf:
            self.transport.resume_reading()
            self._advance()

    def _refuse(self, response: Response) -> None:
        if self.state != _CLOSED and self.transport is not None:
            self.transport.write(_encode(response, head_only=False, keep_alive=False))
        self.close()

    def close(self) -> None:
        """Close after what was written is sent."""
        self.state = _CLOSED
        self.pending = None
        if self.transport is not None:
            self.transport.close()

    def evicted(self) -> None:
        """Closed to make room for a newer connection (loop thread): uncounted now, not when
        the transport reports it lost. A request half read is told why."""
        if self.state == _READING and self.transport is not None:
            self.transport.write(_encode(error_response(
                503, "closed to make room: too many connections without a valid token; retry",
                {"Retry-After": "1"}, close=True), head_only=False, keep_alive=False))
        self._uncount()
        self.close()


def _oldest_idle(connections: OrderedDict[_Connection, None]) -> _Connection | None:
    """The oldest of ``connections`` not being answered (busy ones are about to finish)."""
    for conn in connections:
        if conn.state != _BUSY:
            return conn
    return None


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


def _peer(transport: asyncio.BaseTransport) -> str:
    info = transport.get_extra_info("peername")
    return f"{info[0]}:{info[1]}" if isinstance(info, tuple) and len(info) >= 2 else "?"


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def _raise_fd_limit(wanted: int) -> None:
    """Let the process hold ``wanted`` descriptors if the hard limit allows it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
