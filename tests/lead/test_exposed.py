"""An API you can expose: TLS, reads behind tokens, /readyz, --advertise-http, agents
that reload their token and trust a private CA (real lead processes)."""

from __future__ import annotations

import hashlib
import hmac
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from qonnect_gitops.agent.report import Reporter, TokenFile
from qonnect_gitops.lead.tokens import create_token
from qonnect_gitops.model.report import AgentReport
from tests.lead.harness import ROOT, LeadGroup, http, report

SECRET = b"hook-secret"


def agent_report(cluster: str) -> AgentReport:
    body = report(cluster)
    body["agentTime"] = datetime.now(tz=UTC).isoformat()
    return AgentReport.model_validate(body)


def test_tls_group_reads_need_tokens_and_agents_verify_the_ca(
        make_group: Callable[..., LeadGroup], tmp_path: Path) -> None:
    secret = tmp_path / "hook-secret"
    secret.write_bytes(SECRET)
    group = make_group(tls=True, extra_args=["--webhook-secret-file", str(secret)])
    leader = group.wait_leader()
    assert leader.url.startswith("https://")
    group.wait_until(lambda: (group.status(leader) or {}).get("goals", {}).get("lastGood"),
                     what="goals loaded")
    lead = group.leads[0]
    # Reads: no token 401; read-only, cluster and admin tokens 200; probes open.
    assert group.get(lead, "/v1/status", token="-")[0] == 401
    code, headers, _ = http("GET", lead.url + "/v1/plan", context=group.client_context)
    assert code == 401 and headers["WWW-Authenticate"].startswith("Bearer")
    for token in (group.read_token, group.tokens["edge-1"], group.admin_token):
        for path in ("/v1/status", "/v1/plan", "/v1/observed"):
            assert group.get(lead, path, token=token)[0] == 200, path
    for path in ("/healthz", "/readyz", "/metrics"):
        assert http("GET", lead.url + path, context=group.client_context)[0] == 200, path
    # A read-only token cannot write.
    code, _, body = group.post(lead, "/v1/plan", {"placements": {}}, token=group.read_token)
    assert code == 403
    code, _, body = group.post(lead, "/v1/clusters/edge-1/report", report("edge-1"),
                               token=group.read_token)
    assert code == 403
    # The members' recorded URLs are https.
    status = group.status(lead) or {}
    assert all(m["url"].startswith("https://") for m in status["members"] if m["url"])
    assert status["self"]["url"] == lead.url
    # Plain HTTP to the TLS port gets no answer it could mistake, and the lead stays up.
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        http("GET", f"http://{lead.http}/healthz", timeout=3)
    # An agent's client: trusts the CA given, refuses a lead it cannot verify.
    token_file = tmp_path / "agent-token"
    token_file.write_text(group.tokens["edge-2"] + "\n")
    reporter = Reporter((lead.url,), "edge-2", TokenFile(token_file),
                        context=ssl.create_default_context(cafile=str(group.certs.ca)))
    answer = reporter.send_now(agent_report("edge-2"))
    assert answer["accepted"] and answer["leader"]["url"].startswith("https://")
    untrusting = Reporter((lead.url,), "edge-2", group.tokens["edge-2"])
    with pytest.raises(OSError, match="CERTIFICATE_VERIFY_FAILED"):
        untrusting.send_now(agent_report("edge-2"))
    # Token rotation without a restart: a new token in the leads' file, the old line
    # removed, the agent's file rewritten; the next report uses the new one.
    new = create_token(group.tokens_file, "edge-2")
    old = group.tokens["edge-2"]
    from qonnect_gitops.lead.tokens import hash_token

    lines = [ln for ln in group.tokens_file.read_text().splitlines() if hash_token(old) not in ln]
    group.tokens_file.write_text("\n".join(lines) + "\n")
    time.sleep(1.2)  # leads re-read their tokens file at most once a second
    token_file.write_text(new + "\n")
    answer = reporter.send_now(agent_report("edge-2"))
    assert answer["accepted"]
    # A signed webhook to a follower is forwarded to the leader over verified TLS.
    follower = next(m for m in group.leads if m is not leader)
    body = b'{"ref": "refs/heads/main"}'
    sig = "sha256=" + hmac.new(SECRET, body, hashlib.sha256).hexdigest()
    code, _, payload = group.post(follower, "/v1/hooks/git", raw=body,
                                  headers={"X-Hub-Signature-256": sig})
    assert code == 202 and payload["forwardedBy"] == follower.node_id, payload
    # qonnect status over TLS with a read-only token.
    read = tmp_path / "read"
    read.write_text(group.read_token)
    out = subprocess.run([sys.executable, "-m", "qonnect_gitops", "status", "--lead", lead.url,
                          "--token-file", str(read), "--lead-ca", str(group.certs.ca)],
                         capture_output=True, text=True, cwd=ROOT, check=False, timeout=30,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0 and "CLUSTERS" in out.stdout, out.stderr
    for member in group.leads:
        assert "Traceback" not in member.log_path.read_text()


def code_of(url: str) -> int:
    """The status of a GET, 0 while nothing listens."""
    try:
        return http("GET", url, timeout=2)[0]
    except OSError:
        return 0


def test_without_a_tokens_file_reads_are_open(make_group: Callable[..., LeadGroup]) -> None:
    group = make_group(size=1, use_tokens=False)
    lead = group.leads[0]
    group.wait_until(lambda: code_of(lead.url + "/v1/status") == 200, what="open status")
    assert http("GET", lead.url + "/v1/plan")[0] == 200
    # Writes still need a token the lead cannot check: refused.
    assert http("POST", lead.url + "/v1/plan", {"placements": {}}, token="x")[0] == 401


def test_readyz_reflects_quorum_and_advertise_http_is_recorded(
        make_group: Callable[..., LeadGroup]) -> None:
    group = make_group(extra_args=[])
    for lead in group.leads:  # restart each with an advertised name
        group.kill(lead, signal.SIGTERM)
        lead.args = ["--advertise-http", f"localhost:{lead.http.split(':')[1]}"]
    group.start_all()
    leader = group.wait_leader()
    status = group.wait_until(
        lambda: (st := group.status(leader)) and all(m["http"] and m["http"].startswith("localhost:")
                                                    for m in st["members"]) and st,
        what="advertised addresses recorded")
    assert status["leader"]["url"] == f"http://localhost:{leader.http.split(':')[1]}"
    for lead in group.leads:
        code, _, body = http("GET", lead.url + "/readyz")
        assert code == 200 and body["ready"] and body["checks"]["quorum"], body
    # Two of three gone: the survivor is alive but not ready, and says why.
    survivor, *others = group.leads
    for lead in others:
        group.kill(lead)
    body = group.wait_until(lambda: (r := http("GET", survivor.url + "/readyz", timeout=3))[0] == 503
                            and r[2], what="not ready without quorum")
    assert "quorum" in body["failing"] and not body["ready"]
    assert http("GET", survivor.url + "/healthz")[0] == 200
