"""Connections that never present a token cannot keep agents out (issue 30, 2): a lead
under a flood of idle connections from many addresses and from the agents' own, and of
slow requests trickling in byte by byte, keeps answering reports and ``/healthz`` with
200, and says what it turned away (``/v1/status`` ``http``)."""

from __future__ import annotations

import json
import selectors
import socket
import threading
import time
from collections.abc import Callable
from http.client import HTTPConnection
from typing import Any

from tests.lead.harness import LeadGroup, http, report
from tests.load import scaled

REQUEST_HEAD = b"POST /v1/clusters/edge-1/report HTTP/1.1\r\nHost: lead\r\nContent-Length: 2000\r\n"


class Flood:
    """``per_source`` connections from each of ``sources`` (loopback addresses: the lead
    sees each as another client), reopened whenever the lead closes one (at most
    ``reopen_per_second``), each sending nothing (``trickle`` empty) or one byte of
    ``trickle`` every ``every`` seconds: a slow request that never ends."""

    def __init__(self, target: tuple[str, int], sources: list[str], per_source: int,
                 trickle: bytes = b"", every: float = 0.3, reopen_per_second: float = 300) -> None:
        self.target = target
        self.sources = sources
        self.per_source = per_source
        self.trickle = trickle
        self.every = every
        self.reopen_per_second = reopen_per_second
        self.opened = 0
        self.closed_by_lead = 0
        self.stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Flood:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self._thread.join(timeout=10)

    def _open(self, selector: selectors.BaseSelector, source: str) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind((source, 0))
        sock.setblocking(False)
        sock.connect_ex(self.target)
        selector.register(sock, selectors.EVENT_READ, [source, 0])
        self.opened += 1

    def _run(self) -> None:
        selector = selectors.DefaultSelector()
        for source in self.sources:
            for _ in range(self.per_source):
                self._open(selector, source)
        waiting: list[str] = []  # sources of connections the lead closed, to reopen
        next_trickle = time.monotonic() + self.every
        budget, refilled = 0.0, time.monotonic()
        try:
            while not self.stop.is_set():
                for key, _ in selector.select(timeout=0.05):
                    sock = key.fileobj
                    assert isinstance(sock, socket.socket)
                    try:
                        data = sock.recv(65536)
                    except BlockingIOError:
                        continue
                    except OSError:
                        data = b""
                    if not data:
                        selector.unregister(sock)
                        sock.close()
                        self.closed_by_lead += 1
                        waiting.append(key.data[0])
                now = time.monotonic()
                budget = min(self.reopen_per_second, budget + (now - refilled) * self.reopen_per_second)
                refilled = now
                while waiting and budget >= 1 and self.reopen_per_second > 0:
                    self._open(selector, waiting.pop(0))
                    budget -= 1
                if self.trickle and now >= next_trickle:
                    next_trickle = now + self.every
                    for key in list(selector.get_map().values()):
                        state = key.data
                        if state[1] < len(self.trickle):
                            try:
                                key.fileobj.send(self.trickle[state[1]:state[1] + 1])  # type: ignore[union-attr]
                                state[1] += 1
                            except OSError:
                                pass
        finally:
            for key in list(selector.get_map().values()):
                key.fileobj.close()  # type: ignore[union-attr]
            selector.close()


class Agent:
    """Reports and probes while the flood runs, recording every answer: edge-1 over a new
    connection each time (an agent without keep-alive, anonymous until its request
    arrives), edge-2 over one kept-alive connection, and ``/healthz`` without a token
    (a kubelet's probe), all from 127.0.0.1."""

    def __init__(self, group: LeadGroup, url: str) -> None:
        self.group = group
        self.url = url
        self.answers: list[tuple[str, Any]] = []
        self.stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Agent:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self._thread.join(timeout=30)

    def _try(self, what: str, call: Callable[[], int]) -> None:
        try:
            self.answers.append((what, call()))
        except Exception as exc:  # a refused or reset connection is an answer too: a failure
            self.answers.append((what, f"{type(exc).__name__}: {exc}"))

    def _run(self) -> None:
        host, port = self.url.removeprefix("http://").split(":")
        kept = HTTPConnection(host, int(port), timeout=10)
        token = self.group.tokens

        def keep_alive() -> int:
            kept.request("POST", "/v1/clusters/edge-2/report", json.dumps(report("edge-2")),
                         {"Authorization": f"Bearer {token['edge-2']}", "Content-Type": "application/json"})
            answer = kept.getresponse()
            answer.read()
            return answer.status

        while not self.stop.is_set():
            self._try("report", lambda: http("POST", self.url + "/v1/clusters/edge-1/report",
                                             report("edge-1"), token=token["edge-1"], timeout=10)[0])
            self._try("report-kept-alive", keep_alive)
            self._try("healthz", lambda: http("GET", self.url + "/healthz", timeout=10)[0])
            time.sleep(0.1)
        kept.close()

    def failures(self) -> list[tuple[str, Any]]:
        return [(what, code) for what, code in self.answers if code != 200]


def test_idle_and_slow_connections_do_not_keep_agents_or_probes_out(make_group: Callable[..., LeadGroup]) -> None:
    group = make_group(size=1, extra_args=["--report-rate", "100", "--report-burst", "100"])
    lead = group.leads[0]
    group.wait_leader()
    group.wait_until(lambda: (group.status(lead) or {}).get("goals", {}).get("lastGood"), what="goals loaded")
    host, port = lead.http.split(":")
    target = (host, int(port))
    many = [f"127.0.0.{i}" for i in range(2, 112)]  # 110 clients other than the agents'
    slow = [f"127.0.0.{i}" for i in range(112, 142)]
    with Agent(group, lead.url) as agent:
        time.sleep(0.5)
        # 1. 1,100 idle connections from 110 addresses, 200 from the agents' own, 300 slow
        # requests: more than --max-connections (1000), reopened as soon as they are closed.
        with Flood(target, many, 10) as idle, Flood(target, slow, 10, trickle=REQUEST_HEAD) as loris, \
                Flood(target, ["127.0.0.1"], 200) as neighbours:
            time.sleep(6)
        # 2. Slow requests that fit within the anonymous limits: each is cut off at
        # --anonymous-timeout (5 s) although it keeps sending.
        with Flood(target, slow, 8, trickle=REQUEST_HEAD, reopen_per_second=0) as patient:
            deadline = time.monotonic() + scaled(20)
            while patient.closed_by_lead < len(slow) * 8 and time.monotonic() < deadline:
                time.sleep(0.1)
        time.sleep(0.5)
    status = group.status(lead)
    assert status is not None
    refused = status["http"]["refused"]
    seen = (f"opened idle {idle.opened}, slow {loris.opened}, neighbours {neighbours.opened}, "
            f"patient {patient.opened} (closed {patient.closed_by_lead}); intake {status['http']}")
    assert idle.opened >= 1100 and loris.opened >= 300 and neighbours.opened >= 200, seen
    assert len(agent.answers) >= 30, (agent.answers, seen)
    assert agent.failures() == [], (agent.failures()[:10], seen)
    assert patient.closed_by_lead >= len(slow) * 8, seen
    # The lead made room by closing connections that never showed a token (from the
    # crowd, and from the agents' own address) and timed out the slow ones; it never had
    # to refuse a connection for want of room.
    assert refused["evicted"]["count"] > 0 and refused["evicted-client"]["count"] > 0, refused
    assert refused["anonymous-timeout"]["count"] >= len(slow) * 8, refused
    assert "full" not in refused, refused
    assert status["http"]["anonymous"] <= status["http"]["anonymousLimit"]
