"""The lead's HTTP server in one process (``lead.httpd``): requests are read whole from
the connection's buffer, answered in order, ``Deferred`` answers complete from another
thread or time out, and deadlines hold without a timer per request."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qonnect_gitops.lead import httpd
from qonnect_gitops.lead.httpd import (
    AsyncHTTPServer,
    Deferred,
    Headers,
    HTTPLimits,
    Request,
    Response,
)


def _handler(request: Request) -> Response:
    return Response.json(200, {"path": request.path, "body": request.body.decode()})


def _inline(request: Request) -> Response | Deferred | None:
    if request.path == "/later":
        def start(done: Any) -> None:
            # Completed from another thread, as the Raft thread completes a report.
            threading.Timer(0.05, done, args=(request.body.decode(),)).start()
        return Deferred(start, lambda result: Response.json(200, {"later": result}), timeout=5)
    if request.path == "/never":
        return Deferred(lambda done: None, lambda result: Response.json(503, {"later": result}),
                        timeout=0.3)
    return None


def _loops() -> list[str]:
    """Both loops the server may run on (uvloop where installed; asyncio's everywhere)."""
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return ["asyncio"]
    return ["asyncio", "uvloop"]


@pytest.fixture(params=_loops())
def server(request: pytest.FixtureRequest) -> Iterator[AsyncHTTPServer]:
    srv = AsyncHTTPServer("127.0.0.1", 0, _handler,
                          HTTPLimits(read_timeout=0.5, idle_timeout=2.0, max_connections=5),
                          inline=_inline, event_loop=request.param)
    srv.start()
    try:
        yield srv
    finally:
        srv.shutdown()


def _read_answers(sock: socket.socket, count: int) -> list[tuple[int, dict[str, Any]]]:
    """``count`` responses off one connection."""
    buf = b""
    out = []
    while len(out) < count:
        while b"\r\n\r\n" not in buf:
            chunk = sock.recv(65536)
            if not chunk:
                return out
            buf += chunk
        head, _, rest = buf.partition(b"\r\n\r\n")
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:"))
        while len(rest) < length:
            rest += sock.recv(65536)
        out.append((int(head[9:12]), json.loads(rest[:length])))
        buf = rest[length:]
    return out


def _post(path: str, body: bytes) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body


def test_pipelined_requests_are_answered_in_order(server: AsyncHTTPServer) -> None:
    with socket.create_connection(server.server_address, timeout=5) as sock:
        # A deferred answer first: the next two wait in the buffer behind it.
        sock.sendall(_post("/later", b"one") + _post("/pool", b"two") + _post("/later", b"three"))
        answers = _read_answers(sock, 3)
    assert answers == [(200, {"later": "one"}), (200, {"path": "/pool", "body": "two"}),
                       (200, {"later": "three"})]


def test_a_remembered_head_serves_each_request_its_own_body(server: AsyncHTTPServer,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Heads that passed are remembered by their bytes (agents repeat theirs): requests
    with the same head still get their own bodies, a refused head is refused every time
    and never remembered, and the memory stays within its bound."""
    monkeypatch.setattr(httpd, "_HEADS_KEPT", 3)
    with socket.create_connection(server.server_address, timeout=5) as sock:
        sock.sendall(_post("/pool", b"one") + _post("/pool", b"two") + _post("/pool", b"six"))
        assert _read_answers(sock, 3) == [(200, {"path": "/pool", "body": body})
                                          for body in ("one", "two", "six")]
        for i in range(10):  # more distinct heads than the bound
            sock.sendall(_post(f"/p{i}", b"x"))
            assert _read_answers(sock, 1) == [(200, {"path": f"/p{i}", "body": "x"})]
        assert len(server._heads) <= 3
    for _ in range(2):
        with socket.create_connection(server.server_address, timeout=5) as sock:
            sock.sendall(b"PUT /pool HTTP/1.1\r\nContent-Length: 1\r\n\r\nx")
            assert _read_answers(sock, 1)[0][0] == 405
    assert not any(raw.startswith(b"PUT") for raw in server._heads)
    # A long head (here a long header value) is answered but never kept: the memory's
    # bound in bytes holds whatever heads a client sends.
    with socket.create_connection(server.server_address, timeout=5) as sock:
        padding = "x" * httpd._HEAD_KEPT_BYTES
        for _ in range(2):
            sock.sendall(f"POST /pool HTTP/1.1\r\nX-Pad: {padding}\r\nContent-Length: 1\r\n\r\nx"
                         .encode())
            assert _read_answers(sock, 1) == [(200, {"path": "/pool", "body": "x"})]
    assert not any(len(raw) > httpd._HEAD_KEPT_BYTES for raw in server._heads)


def test_a_request_split_across_packets_is_read_whole(server: AsyncHTTPServer) -> None:
    raw = _post("/pool", b'{"a": 1}')
    with socket.create_connection(server.server_address, timeout=5) as sock:
        for i in range(0, len(raw), 7):
            sock.sendall(raw[i:i + 7])
            time.sleep(0.005)
        assert _read_answers(sock, 1) == [(200, {"path": "/pool", "body": '{"a": 1}'})]


def test_a_deferred_answer_that_never_completes_times_out(server: AsyncHTTPServer) -> None:
    with socket.create_connection(server.server_address, timeout=5) as sock:
        sock.sendall(_post("/never", b""))
        assert _read_answers(sock, 1) == [(503, {"later": None})]
        # The connection serves the next request.
        sock.sendall(_post("/later", b"next"))
        assert _read_answers(sock, 1) == [(200, {"later": "next"})]


def test_a_request_cut_short_is_408_and_closed(server: AsyncHTTPServer) -> None:
    with socket.create_connection(server.server_address, timeout=5) as sock:
        sock.sendall(b"POST /pool HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc")
        answers = _read_answers(sock, 1)
        assert answers[0][0] == 408 and "body of 10 bytes" in answers[0][1]["message"]
        assert sock.recv(10) == b""


def test_a_half_closed_connection_still_gets_its_answer(server: AsyncHTTPServer) -> None:
    with socket.create_connection(server.server_address, timeout=5) as sock:
        sock.sendall(_post("/later", b"bye"))
        sock.shutdown(socket.SHUT_WR)
        assert _read_answers(sock, 1) == [(200, {"later": "bye"})]
        assert sock.recv(10) == b""


def test_idle_connections_are_closed_and_counted_out(server: AsyncHTTPServer) -> None:
    socks = [socket.create_connection(server.server_address, timeout=5) for _ in range(3)]
    try:
        time.sleep(0.2)
        assert server.open_connections == 3
        deadline = time.monotonic() + 5
        while server.open_connections and time.monotonic() < deadline:
            time.sleep(0.1)
        assert server.open_connections == 0  # idle_timeout (2 s) passed: closed
        assert socks[0].recv(10) == b""
    finally:
        for sock in socks:
            sock.close()


_HEADER_CHARS = st.sampled_from(list("aZ-_:; \t\x00\x01\x0b\x7f\r\nxé~!"))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(_HEADER_CHARS, max_size=12), max_size=6))
def test_the_fast_header_parse_accepts_only_what_the_careful_one_accepts(lines: list[str]) -> None:
    """``_parse_headers`` skips the line-by-line checks when every line is well formed; on
    any input it gives what the careful loop gives, or the careful loop's refusal."""
    srv = AsyncHTTPServer("127.0.0.1", 0, _handler, HTTPLimits(max_headers=4))
    try:
        def outcome(parse: Callable[[list[str]], Headers]) -> object:
            try:
                return list(parse(lines).items())
            except Exception as exc:  # _Refuse: compare the answer it carries
                return (type(exc).__name__, getattr(exc, "response", None))
        assert outcome(srv._parse_headers) == outcome(srv._parse_headers_carefully)
    finally:
        srv._sock.close()


def test_the_loop_asked_for_is_the_loop_served_on() -> None:
    """``auto`` serves on uvloop where it is installed, ``asyncio`` on the standard loop;
    an unknown choice is refused before anything binds."""
    seen: dict[str, str] = {}

    def handler(request: Request) -> Response:
        return Response.json(200, {})

    def inline(request: Request) -> Response | None:
        seen[request.path] = type(asyncio.get_running_loop()).__module__
        return Response.json(200, {})

    for choice in ("asyncio", "auto"):
        srv = AsyncHTTPServer("127.0.0.1", 0, handler, inline=inline, event_loop=choice)
        srv.start()
        try:
            with socket.create_connection(srv.server_address, timeout=5) as sock:
                sock.sendall(f"GET /{choice} HTTP/1.1\r\n\r\n".encode())
                assert _read_answers(sock, 1)[0][0] == 200
        finally:
            srv.shutdown()
    assert seen["/asyncio"].startswith("asyncio")
    assert seen["/auto"].startswith("uvloop" if "uvloop" in _loops() else "asyncio")
    with pytest.raises(ValueError, match="event_loop must be one of"):
        AsyncHTTPServer("127.0.0.1", 0, handler, event_loop="trio")
