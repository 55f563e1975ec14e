"""Issue 14's attacks, each against real lead processes over HTTP (and the agent's
webhook server): every one is refused or neutralised with a clear answer, and the
lead stays up and keeps its loop cycling."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from http.client import HTTPConnection
from pathlib import Path
from typing import Any

import pytest

from qonnect_gitops.agent.metrics import serve as agent_serve
from tests.lead.harness import ROOT, Lead, LeadGroup, http, report

FUTURE = time.time() + 365 * 86400


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LeadGroup]:
    """A group with a short read timeout and generous rate limits (attacks come fast)."""
    g = LeadGroup(tmp_path_factory.mktemp("attacks"),
                  extra_args=["--report-rate", "1000", "--report-burst", "1000",
                              "--read-timeout", "1", "--max-body", "65536"])
    g.start_all()
    try:
        leader = g.wait_leader()
        g.wait_until(lambda: (g.status(leader) or {}).get("goals", {}).get("lastGood"),
                     what="goals loaded")
        # The leader's first cycle records the plan it writes: a plan a test posts before
        # then is replaced by it (the loop plans from the plan branch, not the KB).
        g.wait_until(lambda: ((g.status(leader) or {}).get("loop") or {}).get("cycles", 0) >= 1,
                     what="the leader's first cycle")
        yield g
    finally:
        g.stop()


def post_report(group: LeadGroup, cluster: str, body: Any = None, raw: bytes | None = None,
                lead: int = 0, token: str | None = None) -> tuple[int, Any]:
    code, _, payload = http("POST", f"{group.leads[lead].url}/v1/clusters/{cluster}/report",
                            body, raw=raw, token=token or group.tokens[cluster])
    return code, payload


def put_plan(group: LeadGroup, placements: dict[str, dict[str, int]]) -> tuple[int, Any]:
    code, _, payload = http("POST", group.leads[0].url + "/v1/plan", {"placements": placements},
                            token=group.admin_token)
    return code, payload


def cluster_row(group: LeadGroup, name: str, lead: int = 0) -> dict[str, Any]:
    status = group.status(group.leads[lead]) or {}
    return next(c for c in status["clusters"] if c["name"] == name)


def raw_exchange(lead: Lead, data: bytes, wait: float = 5.0) -> bytes:
    """Send raw bytes, return everything the server answers until it closes."""
    host, port = lead.http.split(":")
    with socket.create_connection((host, int(port)), timeout=wait) as sock:
        sock.sendall(data)
        chunks = []
        try:
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        except TimeoutError:
            pass
    return b"".join(chunks)


def status_line(answer: bytes) -> tuple[int, dict[str, Any]]:
    head, _, body = answer.partition(b"\r\n\r\n")
    code = int(head.split(b" ", 2)[1])
    return code, json.loads(body) if body.strip() else {}


# ------------------------------------------------------------- 1. own cluster only

def test_a_cluster_token_cannot_remove_another_clusters_component(group: LeadGroup) -> None:
    assert put_plan(group, {"shop/web": {"edge-1": 1, "edge-2": 1}, "shop/migrate": {"edge-2": 1}})[0] == 200
    claim = report("edge-3")
    claim["components"] = [
        {"component": c, "healthy": True, "readyReplicas": 0, "desiredReplicas": 0, "completed": True}
        for c in ("shop/web", "shop/migrate")]
    code, body = post_report(group, "edge-3", claim)
    assert code == 200 and body["ignoredComponents"] == ["shop/migrate", "shop/web"], body
    assert any("ignored claims" in w for w in body["warnings"])
    # edge-1 runs web, a Deployment: it cannot declare it a completed Job either.
    claim = report("edge-1")
    claim["components"] = [{"component": "shop/web", "healthy": True, "readyReplicas": 1,
                            "desiredReplicas": 1, "completed": True}]
    code, body = post_report(group, "edge-1", claim, lead=1)
    assert code == 200 and body["ignoredComponents"] == ["shop/web"]
    _, _, view = http("GET", group.leads[2].url + "/v1/observed", token=group.read_token)
    assert view["observed"].get("completedJobs", []) == []
    _, _, text = http("GET", group.leads[0].url + "/metrics")
    # Two completions and the traffic of shop/web (the harness report carries some).
    assert 'qonnect_report_claims_ignored_total{cluster="edge-3"} 3' in text
    assert cluster_row(group, "edge-3")["ignoredClaims"] == 3
    # The plan in force is untouched.
    _, _, plan = http("GET", group.leads[0].url + "/v1/plan", token=group.read_token)
    assert plan["placements"]["shop/web"] == {"edge-1": 1, "edge-2": 1}


# ------------------------------------------------------------------ 2. the lead's time

def test_a_future_agent_clock_does_not_silence_the_cluster(group: LeadGroup) -> None:
    before = cluster_row(group, "edge-2")["reports"]
    code, body = post_report(group, "edge-2", report("edge-2", agent_time=FUTURE))
    assert code == 200 and body["clockSkewSeconds"] > 300 and "clock" in body["warnings"][0]
    # Honest reports afterwards are stored (never 200-and-dropped): the count says so.
    for _ in range(3):
        code, body = post_report(group, "edge-2", report("edge-2"), lead=2)
        assert code == 200, body
    row = group.wait_until(lambda: (r := cluster_row(group, "edge-2")) and r["reports"] >= before + 4
                           and r, what="four reports stored")
    assert row["reports"] == before + 4 and row["healthy"] and row["heartbeatAgeSeconds"] < 5
    assert abs(row["clockSkewSeconds"]) < 60  # the last one's clock was right
    _, _, text = http("GET", group.leads[0].url + "/metrics")
    assert 'qonnect_report_clock_skew_total{cluster="edge-2"} 1' in text


# ------------------------------------------------------------- 3. finite, bounded numbers

@pytest.mark.parametrize(("mutate", "field"), [
    (lambda t: t.replace('"rps": 40.0', '"rps": Infinity'), "traffic.0.rps"),
    (lambda t: t.replace('"ms": 12.5', '"ms": NaN'), "latencies.0.ms"),
    (lambda t: t.replace('"ms": 12.5', '"ms": -Infinity'), "latencies.0.ms"),
    (lambda t: t.replace('"rps": 40.0', '"rps": 1e999'), "traffic.0.rps"),
    (lambda t: t.replace('"readyReplicas": 2', '"readyReplicas": ' + "9" * 5000), "components.0.readyReplicas"),
])
def test_non_finite_literals_are_400_naming_the_field(group: LeadGroup, mutate: Callable[[str], str],
                                                      field: str) -> None:
    text = mutate(json.dumps(report("edge-1")))
    code, body = post_report(group, "edge-1", raw=text.encode())
    assert code == 400 and body["message"].startswith(field), body


@pytest.mark.parametrize(("path", "value", "expect"), [
    (("traffic", 0, "rps"), 1.7e308, "traffic.0.rps"),
    (("latencies", 0, "ms"), 1e300, "latencies.0.ms"),
    (("nodes", 0, "allocatableCpu"), "1e999999", "nodes.0.allocatableCpu"),
    (("nodes", 0, "freeMemory"), "9" * 39, "nodes.0.freeMemory"),
    (("applied", "generation"), 10**19, "applied.generation"),
])
def test_out_of_range_values_are_400_naming_the_field(group: LeadGroup, path: tuple[Any, ...],
                                                      value: Any, expect: str) -> None:
    body = report("edge-1")
    target: Any = body
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    code, answer = post_report(group, "edge-1", body)
    assert code == 400 and expect in answer["message"], answer


def test_plan_writes_are_validated_like_goals(group: LeadGroup) -> None:
    cases = [
        ({"shop/nope": {"edge-1": 1}}, "placements.shop/nope: unknown component"),
        ({"shop/web": {"edge-9": 1}}, "placements.shop/web.edge-9: unknown cluster"),
        ({"shop/web": {"edge-1": -2}}, "placements.shop/web.edge-1: -2 replicas"),
        ({"shop/web": {"edge-1": 10**6}}, "at most 10000"),
    ]
    for placements, message in cases:
        code, body = put_plan(group, placements)
        assert code == 400 and message in body["message"], body
    code, _, body = http("POST", group.leads[1].url + "/v1/plan",
                         raw=b'{"placements": {"shop/web": {"edge-1": NaN}}}', token=group.admin_token)
    assert code == 400 and "placements.shop/web.edge-1" in body["message"]


# ---------------------------------------------------------------- 4. every handler answers

@pytest.mark.parametrize("header", ["X-Hub-Signature-256", "X-Gitea-Signature"])
def test_non_ascii_webhook_signatures_are_401(group: LeadGroup, header: str) -> None:
    lead = group.leads[1]
    value = "sha256=\xe9\xe8" if header == "X-Hub-Signature-256" else "\xff" * 64
    answer = raw_exchange(lead, (f"POST /v1/hooks/git HTTP/1.1\r\nHost: x\r\n{header}: {value}\r\n"
                                 "Content-Length: 2\r\n\r\n{}").encode("iso-8859-1"))
    code, body = status_line(answer)
    assert code == 401 and body["error"] == "unauthorized"


@pytest.mark.parametrize(("request_bytes", "expected"), [
    (b"POST /v1/hooks/git HTTP/1.1\r\nContent-Length: abc\r\n\r\n", 400),
    (b"POST /v1/hooks/git HTTP/1.1\r\nContent-Length: -5\r\n\r\n", 400),
    (b"POST /v1/hooks/git HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n{}", 400),
    (b"POST /v1/hooks/git HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
    (b"POST /v1/hooks/git HTTP/1.1\r\n\r\n", 400),
    (b"GARBAGE\r\n\r\n", 400),
    (b"GET /healthz HTTP/9.9\r\n\r\n", 400),
    (b"DELETE /v1/plan HTTP/1.1\r\n\r\n", 405),
    (b"GET /healthz HTTP/1.1\r\nBad Header\r\n\r\n", 400),
    (b"GET /healthz HTTP/1.1\r\nX: " + b"a" * 20000 + b"\r\n\r\n", 431),
    (b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\n\r\n", 414),
    (b"POST /v1/hooks/git HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"short\"", 408),  # then silence
])
def test_malformed_requests_get_a_json_4xx(group: LeadGroup, request_bytes: bytes, expected: int) -> None:
    answer = raw_exchange(group.leads[2], request_bytes)
    code, body = status_line(answer)
    assert code == expected and body["message"], answer[:300]


def test_an_integer_of_5000_digits_is_400(group: LeadGroup) -> None:
    raw = b'{"placements": {"shop/web": {"edge-1": ' + b"7" * 5000 + b"}}}"
    code, _, body = http("POST", group.leads[0].url + "/v1/plan", raw=raw, token=group.admin_token)
    assert code == 400 and "placements.shop/web.edge-1" in body["message"]


def thread_count(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError("no Threads line")


def test_idle_connections_hold_no_threads_and_the_lead_answers(group: LeadGroup) -> None:
    lead = group.leads[0]
    assert lead.proc is not None
    before = thread_count(lead.proc.pid)
    host, port = lead.http.split(":")
    # 400 connections from 40 addresses: past --anonymous-connections (250) the oldest
    # without a token are closed to make room, so the last 250 stay open.
    sockets = [socket.create_connection((host, int(port)), timeout=5, source_address=(f"127.0.0.{2 + i % 40}", 0))
               for i in range(400)]
    try:
        for sock in sockets[200:300]:  # of those, 100 send a partial request line and stall
            sock.sendall(b"GET /heal")
        time.sleep(0.5)
        assert thread_count(lead.proc.pid) < before + 20
        code, _, body = http("GET", lead.url + "/healthz", timeout=5)
        assert code == 200 and body["ok"]
        # A stalled one is answered 408 after the read timeout (1 s here) and closed.
        sockets[200].settimeout(5)
        code, _ = status_line(sockets[200].recv(4096))
        assert code == 408
        sockets[0].settimeout(5)
        assert sockets[0].recv(4096) == b""  # among the oldest idle: closed for a newer one
    finally:
        for sock in sockets:
            sock.close()


def test_the_connection_cap_answers_503_once_authenticated_connections_fill_it(
        make_group: Callable[..., LeadGroup]) -> None:
    """Connections without a token never hold the last place: a new one closes the oldest
    of them. Only connections that presented a valid token fill --max-connections, and
    then a new connection is answered 503."""
    g = make_group(size=1, extra_args=["--max-connections", "20", "--idle-timeout", "30"])
    lead = g.leads[0]
    g.wait_until(lambda: g.status(lead), what="lead up")
    host, port = lead.http.split(":")
    idle = [socket.create_connection((host, int(port)), timeout=5) for _ in range(20)]
    readers: list[HTTPConnection] = []
    try:
        time.sleep(0.3)
        code, _, _ = http("GET", lead.url + "/healthz")
        assert code == 200  # an idle connection without a token made room
        for _ in range(20):
            reader = HTTPConnection(host, int(port), timeout=5)
            reader.request("GET", "/v1/status", headers={"Authorization": f"Bearer {g.read_token}"})
            answer = reader.getresponse()
            answer.read()
            assert answer.status == 200
            readers.append(reader)
        code, headers, body = http("GET", lead.url + "/healthz")
        assert code == 503 and "too many connections" in body["message"] and headers["Retry-After"]
        readers[0].request("GET", "/v1/status", headers={"Authorization": f"Bearer {g.read_token}"})
        intake = json.loads(readers[0].getresponse().read())["http"]
        assert intake["refused"]["full"]["count"] >= 1 and intake["open"] == 20, intake
    finally:
        for sock in idle:
            sock.close()
        for reader in readers:
            reader.close()
    g.wait_until(lambda: http("GET", lead.url + "/healthz")[0] == 200, what="served again")


# ------------------------------------------------------------------- the agent's webhook

@pytest.fixture
def agent_server() -> Iterator[tuple[str, int, list[int]]]:
    pushes: list[int] = []
    server = agent_serve("127.0.0.1:0", None, b"s3cret", lambda: pushes.append(1))
    server.read_timeout = 1.0
    host, port = server.server_address[:2]
    try:
        yield str(host), int(port), pushes
    finally:
        server.shutdown()
        server.server_close()


def agent_exchange(server: tuple[str, int, list[int]], data: bytes) -> tuple[int, dict[str, Any]]:
    with socket.create_connection(server[:2], timeout=5) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return status_line(b"".join(chunks))


@pytest.mark.parametrize(("request_bytes", "expected"), [
    ("POST /webhook HTTP/1.1\r\nX-Hub-Signature-256: sha256=\xe9\r\nContent-Length: 2\r\n\r\n{}", 401),
    ("POST /webhook HTTP/1.1\r\nX-Gitea-Signature: \xff\xfe\r\nContent-Length: 2\r\n\r\n{}", 401),
    ("POST /webhook HTTP/1.1\r\nContent-Length: abc\r\n\r\n", 400),
    ("POST /webhook HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400),
    ("POST /webhook HTTP/1.1\r\nContent-Length: 50\r\n\r\n{}", 408),  # short body, then silence
    ("BREW /webhook HTTP/1.1\r\n\r\n", 405),
    ("GET /nope HTTP/1.1\r\n\r\n", 404),
])
def test_agent_webhook_answers_every_malformed_request(agent_server: tuple[str, int, list[int]],
                                                       request_bytes: str, expected: int) -> None:
    code, body = agent_exchange(agent_server, request_bytes.encode("iso-8859-1"))
    assert code == expected and body.get("message"), body
    assert agent_server[2] == []


# --------------------------------------------------------------------------- 5. secrets

def test_repository_credentials_are_never_shown(make_group: Callable[..., LeadGroup],
                                                tmp_path: Path) -> None:
    secret = "ghp_S3cr3tT0ken0000"
    url = f"http://x-access-token:{secret}@127.0.0.1:9/goals.git?private_token={secret}"
    g = make_group(size=1, repo_url=url)
    lead = g.leads[0]
    status = g.wait_until(lambda: (st := g.status(lead)) and st["goalsSource"]["lastFetchError"] and st,
                          what="fetch error recorded")
    text = json.dumps(status)
    assert secret not in text and "***@127.0.0.1:9" in status["goalsSource"]["repo"]
    # A report whose message carries a URL with credentials is shown redacted.
    body = report("edge-1")
    body["sync"] = {"state": "Stalled", "reason": "FetchFailed",
                    "message": f"fetch of cluster/edge-1 from https://bot:{secret}@git.example.org/x failed"}
    assert post_report(g, "edge-1", body)[0] == 200
    row = cluster_row(g, "edge-1")
    assert secret not in json.dumps(row) and "https://***@git.example.org/x" in row["sync"]["message"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    token_file = tmp_path / "read"
    token_file.write_text(g.read_token)
    for cmd in (["status", "--lead", lead.url, "--token-file", str(token_file)],
                ["reconcile", "--once", "--repo", url],
                ["validate", "--repo", url]):
        out = subprocess.run([sys.executable, "-m", "qonnect_gitops", *cmd], capture_output=True,
                             text=True, env=env, check=False, cwd=ROOT, timeout=60)
        assert secret not in out.stdout + out.stderr, (cmd, out.stdout, out.stderr)
    assert secret not in lead.log_path.read_text()


# ------------------------------------------------------------------- the loop survives

def test_the_loop_keeps_cycling_after_the_attacks(group: LeadGroup) -> None:
    leader = group.wait_leader()
    first = (group.status(leader) or {})["loop"]["cycles"]
    group.wait_until(lambda: (group.status(leader) or {})["loop"]["cycles"] > first + 1,
                     what="two more cycles")
    for lead in group.leads:
        assert lead.alive()
        code, _, body = http("GET", lead.url + "/readyz")
        assert code == 200 and body["ready"], body
    threads = [thread_count(lead.proc.pid) for lead in group.leads if lead.proc]
    assert max(threads) < 120, threads
    # No traceback anywhere: unexpected errors would be logged as http_handler_failed.
    for lead in group.leads:
        assert "http_handler_failed" not in lead.log_path.read_text()
        assert "Traceback" not in lead.log_path.read_text()

