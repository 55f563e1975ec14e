"""The HTTP API of a running group: tokens, body checks, rate limits, reads, CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from http.client import HTTPConnection

from qonnect_gitops.lead.tokens import hash_token
from tests.lead.harness import ROOT, LeadGroup, commit_goals, goals_files, http, report


def url(group: LeadGroup, path: str, index: int = 0) -> str:
    return group.leads[index].url + path


def test_report_needs_the_clusters_own_token(api_group: LeadGroup) -> None:
    path = "/v1/clusters/edge-2/report"
    code, headers, body = http("POST", url(api_group, path), report("edge-2"))
    assert code == 401 and headers["WWW-Authenticate"].startswith("Bearer")
    code, _, body = http("POST", url(api_group, path), report("edge-2"), token="qnt_not-a-token")
    assert code == 401 and body["message"] == "unknown token"
    code, _, body = http("POST", url(api_group, path), report("edge-2"),
                         token=api_group.tokens["edge-1"])
    assert code == 403 and "edge-2" in body["message"]
    code, _, body = http("POST", url(api_group, path), report("edge-2"),
                         token=api_group.admin_token)
    assert code == 403
    code, _, body = http("POST", url(api_group, path, 1), report("edge-2"),
                         token=api_group.tokens["edge-2"])
    assert code == 200 and body["accepted"] and body["leader"]["raft"]
    # The fleet's heartbeat settings travel to agents in every answer.
    assert body["heartbeatIntervalSeconds"] > 0
    assert body["heartbeatGraceSeconds"] > body["heartbeatIntervalSeconds"]


def test_bad_bodies_are_400_with_a_reason(api_group: LeadGroup) -> None:
    token = api_group.tokens["edge-3"]
    path = url(api_group, "/v1/clusters/edge-3/report", 2)
    code, _, body = http("POST", path, raw=b"{not json", token=token)
    assert code == 400 and "not valid JSON" in body["message"]
    code, _, body = http("POST", path, {**report("edge-3"), "surprise": 1}, token=token)
    assert code == 400 and "surprise" in body["message"]
    bad_node = report("edge-3")
    bad_node["nodes"][0]["freeCpu"] = "9"
    code, _, body = http("POST", path, bad_node, token=token)
    assert code == 400 and "free capacity exceeds allocatable" in body["message"]
    # Every request, even a bad one, spends from the per-lead bucket (burst 3 here):
    # the rest go to another lead.
    path = url(api_group, "/v1/clusters/edge-3/report", 0)
    code, _, body = http("POST", path, report("edge-1"), token=token)
    assert code == 400 and "names cluster 'edge-1'" in body["message"]
    # Oversized: refused from Content-Length alone, without reading the body.
    huge = report("edge-3")
    huge["sync"]["message"] = "x" * 1000
    huge["components"] = [{"component": f"app/c{i}", "healthy": True, "readyReplicas": 1,
                           "desiredReplicas": 1} for i in range(200)]
    code, _, body = http("POST", path, huge, token=token)
    assert code == 400 and "exceeds the limit of 8192 bytes" in body["message"]


def test_rate_limit_answers_429_with_retry_after(api_group: LeadGroup) -> None:
    token = api_group.tokens["edge-1"]
    path = url(api_group, "/v1/clusters/edge-1/report")
    codes = []
    for _ in range(6):
        code, headers, _ = http("POST", path, report("edge-1"), token=token)
        codes.append(code)
        if code == 429:
            assert int(headers["Retry-After"]) >= 1
    assert codes[:3] == [200, 200, 200]  # the burst
    assert 429 in codes[3:]
    # Another cluster is not affected by edge-1's limit.
    code, _, _ = http("POST", url(api_group, "/v1/clusters/edge-2/report"), report("edge-2"),
                      token=api_group.tokens["edge-2"])
    assert code == 200


def test_keep_alive_survives_refusals(api_group: LeadGroup) -> None:
    """A refused request must not desynchronise a persistent connection."""
    host, port = api_group.leads[1].http.split(":")
    conn = HTTPConnection(host, int(port), timeout=5)
    body = json.dumps(report("edge-3")).encode()
    for token, expected in ((None, 401), (api_group.tokens["edge-1"], 403)):
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        conn.request("POST", "/v1/clusters/edge-3/report", body=body, headers=headers)
        resp = conn.getresponse()
        resp.read()
        assert resp.status == expected
    conn.request("GET", "/healthz")
    resp = conn.getresponse()
    assert resp.status == 200 and json.loads(resp.read())["ok"] is True
    conn.close()


def test_undeclared_cluster_is_refused(api_group: LeadGroup) -> None:
    from qonnect_gitops.lead.tokens import create_token

    token = create_token(api_group.tokens_file, "edge-9")  # the file is reloaded live
    time.sleep(1.2)
    code, _, body = http("POST", url(api_group, "/v1/clusters/edge-9/report"), report("edge-9"),
                         token=token)
    assert code == 404 and "not declared" in body["message"]


def test_token_cli_prints_once_and_stores_only_the_hash(api_group: LeadGroup) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "qonnect_gitops", "token", "create", "edge-3",
                          "--tokens-file", str(api_group.tokens_file)],
                         capture_output=True, text=True, env=env, check=True)
    token = out.stdout.strip()
    stored = api_group.tokens_file.read_text()
    assert token.startswith("qnt_") and token not in stored
    assert f"sha256:{hash_token(token)} edge-3" in stored
    assert oct(api_group.tokens_file.stat().st_mode & 0o777) == "0o600"
    time.sleep(1.2)  # leads re-check the file at most once a second
    code, _, _ = http("POST", url(api_group, "/v1/clusters/edge-3/report", 1), report("edge-3"),
                      token=token)
    assert code == 200
    # The token is in no lead's log.
    for lead in api_group.leads:
        assert token not in lead.log_path.read_text()


def test_admin_endpoints_need_the_admin_token(api_group: LeadGroup) -> None:
    body = {"placements": {"shop/web": {"edge-1": 1}}}
    code, _, _ = http("POST", url(api_group, "/v1/plan"), body, token=api_group.tokens["edge-1"])
    assert code == 403
    code, _, resp = http("POST", url(api_group, "/v1/plan"), {"placements": "nope"},
                         token=api_group.admin_token)
    assert code == 400 and "placements" in resp["message"]
    code, _, _ = http("POST", url(api_group, "/v1/members"), {"action": "remove",
                      "raft": api_group.leads[0].raft}, token=api_group.admin_token)
    assert code == 409  # a lead cannot remove itself


def test_reads_metrics_and_status_cli(api_group: LeadGroup) -> None:
    code, _, _ = http("POST", url(api_group, "/v1/clusters/edge-2/report", 2), report("edge-2"),
                      token=api_group.tokens["edge-2"])
    assert code == 200
    code, _, plan = http("GET", url(api_group, "/v1/plan", 2), token=api_group.read_token)
    assert code == 200 and {"generation", "placements", "clusterGenerations"} <= set(plan)
    code, _, view = http("GET", url(api_group, "/v1/observed", 1), token=api_group.read_token)
    assert code == 200 and set(view["observed"]["clusters"]) == {"edge-1", "edge-2", "edge-3"}
    from qonnect_gitops.model import Observed

    observed = Observed.model_validate(view["observed"])  # the planner's own model reads it
    assert observed.clusters["edge-2"].nodes is not None  # edge-2 reported two nodes
    assert observed.clusters["edge-2"].nodes[0].free.cpu == 2500
    code, headers, text = http("GET", url(api_group, "/metrics", 2))
    assert code == 200 and headers["Content-Type"].startswith("text/plain")
    assert "# TYPE qonnect_raft_term gauge" in text
    assert 'qonnect_reports_total{code="200"}' in text
    assert 'qonnect_clusters{health="healthy"}' in text
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    token_file = api_group.root / "read-token"
    token_file.write_text(api_group.read_token + "\n")
    out = subprocess.run([sys.executable, "-m", "qonnect_gitops", "status", "--lead",
                          url(api_group, "", 2), "--token-file", str(token_file)],
                         capture_output=True, text=True, env=env, check=False)
    assert out.returncode == 0, out.stderr
    leader = api_group.wait_leader()
    assert f"leader:      {leader.node_id} raft {leader.raft}" in out.stdout
    for name in ("edge-1", "edge-2", "edge-3", "MEMBERS", "CLUSTERS", "PLACEMENTS"):
        assert name in out.stdout
    dead = subprocess.run([sys.executable, "-m", "qonnect_gitops", "status", "--lead",
                           "http://127.0.0.1:9", "--timeout", "1"],
                          capture_output=True, text=True, env=env, check=False)
    assert dead.returncode == 1 and "cannot reach" in dead.stderr


def test_invalid_goals_commit_keeps_last_good(api_group: LeadGroup) -> None:
    leader = api_group.wait_leader()
    good = (api_group.status(leader) or {})["goals"]["lastGood"]["commit"]
    files = goals_files(api_group.clusters, shop=True)
    files["clusters/edge-1.yaml"] = files["clusters/edge-1.yaml"].replace(b"tier: edge",
                                                                          b"tier: moon")
    bad = commit_goals(api_group.repo_path, files, "broken")
    status = api_group.wait_until(
        lambda: (st := api_group.status(api_group.leads[1])) and st["goals"]["lastFailed"]
        and st["goals"]["lastFailed"]["commit"] == bad and st, what="failed goals recorded")
    assert status["goals"]["lastGood"]["commit"] == good
    assert any("clusters/edge-1.yaml:" in e and "tier" in e
               for e in status["goals"]["lastFailed"]["errors"])
    assert {c["name"] for c in status["clusters"] if c["declared"]} == set(api_group.clusters)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "QONNECT_TOKEN_FILE": str(api_group.root / "admin")}
    (api_group.root / "admin").write_text(api_group.admin_token)
    out = subprocess.run([sys.executable, "-m", "qonnect_gitops", "status", "--lead",
                          api_group.leads[0].url], capture_output=True, text=True, env=env, check=False)
    assert "ERRORS" in out.stdout and bad[:12] in out.stdout
