"""Tokens, rate limits and the report model, without processes."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from qonnect_gitops.lead.raft.secret import new_secret
from qonnect_gitops.lead.ratelimit import RateLimiter
from qonnect_gitops.lead.tokens import (
    ADMIN,
    Principal,
    TokenKind,
    TokenStore,
    create_token,
    create_tokens,
    hash_token,
    parse_tokens,
)
from qonnect_gitops.model.report import MAX_NODES, AgentReport
from tests.lead.harness import report


def test_tokens_file_round_trip_and_reload(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    one = create_token(path, "edge-1")
    store = TokenStore(path)
    assert store.subject(one) == "edge-1"
    assert store.subject(one + "x") is None
    two = create_token(path, ADMIN)
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))  # ensure a new mtime
    store._checked = 0.0  # skip the once-a-second re-check delay
    assert store.subject(two) == ADMIN
    assert one not in path.read_text() and two not in path.read_text()


def _rewrite(store: TokenStore, path: Path, text: str) -> None:
    """Replace the tokens file and let the store see it at its next check."""
    path.write_text(text)
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))  # ensure a new mtime
    store._checked = 0.0  # skip the once-a-second re-check delay


def test_a_remembered_token_removed_from_the_file_is_refused_at_once(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    kept, revoked, admin = (create_token(path, subject) for subject in ("edge-1", "edge-2", ADMIN))
    store = TokenStore(path)
    for _ in range(3):
        assert store.subject(kept) == "edge-1" and store.subject(revoked) == "edge-2"
    assert store.principal(admin) == Principal(TokenKind.ADMIN, "admin")
    assert store.remembered() == 3
    _rewrite(store, path, "".join(line + "\n" for line in path.read_text().splitlines()
                                  if hash_token(revoked) not in line))
    assert store.subject(revoked) is None and store.principal(revoked) is None
    assert store.principal(kept) == Principal(TokenKind.CLUSTER, "edge-1")
    assert store.remembered() == 1  # nothing of the previous file is kept
    # Given to another cluster in the new file: the remembered answer does not outlive it.
    _rewrite(store, path, f"sha256:{hash_token(kept)} edge-9\n")
    assert store.subject(kept) == "edge-9"
    path.unlink()
    store._checked = 0.0
    assert store.subject(kept) is None and store.remembered() == 0


def test_the_token_memory_holds_only_tokens_of_the_file(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    tokens = create_tokens(path, [f"edge-{i}" for i in range(20)])
    store = TokenStore(path)
    for i in range(5000):  # a flood of wrong tokens: refused, none remembered
        assert store.subject(f"qnt_wrong-{i}") is None
    assert store.remembered() == 0
    for _ in range(3):
        assert [store.subject(t) for t in tokens] == [f"edge-{i}" for i in range(20)]
        assert [store.subject(" " + t) for t in tokens] == [None] * 20
    assert store.remembered() == len(store) == 20


def test_broken_tokens_file_keeps_previous_tokens(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    token = create_token(path, "edge-1")
    store = TokenStore(path)
    path.write_text(path.read_text() + "garbage line here\n")
    store._checked = 0.0
    assert store.subject(token) == "edge-1"
    assert store.last_error is not None and "line 2" in store.last_error


def test_parse_tokens_rejects_plain_tokens() -> None:
    with pytest.raises(ValueError, match="line 1"):
        parse_tokens("qnt_plaintext edge-1\n")
    digest = hash_token("t")
    assert parse_tokens(f"# comment\n\nsha256:{digest} edge-1\n") == {digest: "edge-1"}


def test_rate_limiter_bucket() -> None:
    now = [0.0]
    limiter = RateLimiter(rate=2.0, burst=3, clock=lambda: now[0])
    assert [limiter.acquire("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    wait = limiter.acquire("a")
    assert wait == pytest.approx(0.5)
    assert limiter.acquire("b") == 0.0  # keys are independent
    now[0] = 0.5
    assert limiter.acquire("a") == 0.0
    assert RateLimiter.retry_after_header(0.2) == "1"
    assert RateLimiter.retry_after_header(2.1) == "3"


def test_rate_limiter_keys_a_client_chooses_are_bounded() -> None:
    """Keyed by source address, an attacker with many addresses cannot grow the buckets
    without end: past ``max_keys`` refilled buckets go first, then the oldest half."""
    now = [0.0]
    limiter = RateLimiter(rate=1.0, burst=2, clock=lambda: now[0], max_keys=4)
    for i in range(4):
        assert limiter.acquire(f"10.0.0.{i}") == 0.0
    now[0] = 10.0  # every bucket refilled: they are dropped for the new key
    assert limiter.acquire("10.0.1.0") == 0.0
    assert len(limiter) == 1
    for i in range(10):
        limiter.acquire(f"10.0.2.{i}")
        limiter.acquire(f"10.0.2.{i}")  # spent: none of these refilled
        assert len(limiter) <= 4
    assert limiter.acquire("10.0.2.9") > 0  # the newest keys keep their state


def test_report_model_bounds_and_vocabulary() -> None:
    ok = AgentReport.model_validate(report("edge-1"))
    assert ok.nodes[0].free_cpu == 2500 and ok.sync.state == "Ready"
    bad_state = report("edge-1")
    bad_state["sync"]["state"] = "Fine"
    with pytest.raises(ValidationError):
        AgentReport.model_validate(bad_state)
    too_many = report("edge-1", nodes=MAX_NODES + 1)
    with pytest.raises(ValidationError, match="at most 500"):
        AgentReport.model_validate(too_many)
    dup = report("edge-1")
    dup["nodes"][1]["name"] = dup["nodes"][0]["name"]
    with pytest.raises(ValidationError, match="duplicate"):
        AgentReport.model_validate(dup)
    refused = report("edge-1")
    refused["refusals"] = [{"reason": "PruneLimitExceeded", "message": "would delete 80%"}]
    assert AgentReport.model_validate(refused).refusals[0].reason == "PruneLimitExceeded"
    refused["refusals"] = [{"reason": "JustBecause"}]
    with pytest.raises(ValidationError):
        AgentReport.model_validate(refused)
    naive = report("edge-1")
    naive["agentTime"] = "2026-01-01T00:00:00"
    with pytest.raises(ValidationError):
        AgentReport.model_validate(naive)


def test_lead_cli_refuses_unsafe_timing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from qonnect_gitops.cli import main

    secret = tmp_path / "raft-secret"
    secret.write_text(new_secret())
    data = tmp_path / "data"
    base = ["lead", "--id", "x", "--raft", "127.0.0.1:1", "--http", "127.0.0.1:2",
            "--data-dir", str(data), "--raft-secret-file", str(secret)]
    assert main([*base, "--election-min", "1.0", "--election-max", "0.5"]) == 2
    assert main([*base, "--election-min", "0.4", "--leader-fallback", "0.5"]) == 2
    assert "below --election-min" in capsys.readouterr().err
    assert not data.exists()  # refused before any Raft file was created


def test_lead_cli_refuses_to_start_without_a_raft_secret_or_off_its_address(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from qonnect_gitops.cli import main

    monkeypatch.delenv("QONNECT_RAFT_SECRET_FILE", raising=False)
    monkeypatch.delenv("QONNECT_RAFT_BIND", raising=False)
    data = tmp_path / "data"
    base = ["lead", "--id", "x", "--http", "127.0.0.1:2", "--data-dir", str(data)]
    assert main([*base, "--raft", "127.0.0.1:1"]) == 2
    assert "--raft-secret-file (or QONNECT_RAFT_SECRET_FILE) is required" in capsys.readouterr().err
    secret = tmp_path / "raft-secret"
    secret.write_text("too-short\n")
    assert main([*base, "--raft", "127.0.0.1:1", "--raft-secret-file", str(secret)]) == 2
    assert f"{secret}:1: a secret of 9 characters; expected at least 32" in capsys.readouterr().err
    secret.write_text(f"# the group's Raft secret\n{new_secret()}\n")
    # 192.0.2.1 (TEST-NET-1) is no address of this host: bind a local one with --raft-bind.
    assert main([*base, "--raft", "192.0.2.1:7001", "--raft-secret-file", str(secret)]) == 2
    assert "is no address of this host" in capsys.readouterr().err
    monkeypatch.setenv("QONNECT_RAFT_SECRET_FILE", str(tmp_path / "absent"))
    assert main([*base, "--raft", "192.0.2.1:7001", "--raft-bind", "127.0.0.1:7001"]) == 2
    assert "cannot read the Raft secret file" in capsys.readouterr().err
    assert not data.exists()


def test_token_cli_needs_cluster_or_admin(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from qonnect_gitops.cli import main

    path = tmp_path / "tokens"
    assert main(["token", "create", "--tokens-file", str(path)]) == 2
    assert main(["token", "create", "Edge_1", "--tokens-file", str(path)]) == 2
    assert not path.exists()
    assert main(["token", "create", "--admin", "--tokens-file", str(path)]) == 0
    token = capsys.readouterr().out.strip()
    assert TokenStore(path).subject(token) == ADMIN
