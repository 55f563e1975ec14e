"""Review mode over a daemon-served repository: propose, supersede, approve, refuse stale ones; the CLI."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from qonnect_gitops.cli import approve as approve_cmd
from qonnect_gitops.cli import proposals as proposals_cmd
from qonnect_gitops.gitstore import (
    DecisionMeta,
    ProposalError,
    ProposalNotFound,
    StaleProposal,
)
from qonnect_gitops.gitstore.proposals import pull_request_for
from qonnect_gitops.gitstore.remote import Mirror

from .helpers import Served, git, plan_files, seed_goals, trailers_of

CLUSTERS = ["c0", "c1"]
DESCRIPTION = "## What moves\n\n| component | from | to |\n|---|---|---|\n| shop/web | c0 | c1 |\n\nWhy: latency."


def cli(*argv: str) -> int:
    # Only our commands: the other registered commands live on other branches.
    parser = argparse.ArgumentParser(prog="qonnect")
    sub = parser.add_subparsers(dest="command")
    proposals_cmd.register(sub)
    approve_cmd.register(sub)
    args = parser.parse_args(list(argv))
    return int(args.handler(args))


def propose(mirror: Mirror, pid: str, gen: int, tag: str):
    source = mirror.main_commit()
    assert source is not None
    return mirror.store.propose(pid, plan_files(2, tag=tag), summary=f"Proposal {pid}", description=DESCRIPTION,
                                meta=DecisionMeta(source, 2, gen, "rescheduling"), clusters=CLUSTERS,
                                timestamp=1_700_000_000 + gen)


def closed_note(bare: Path, pid: str) -> str:
    return git("-C", bare, "cat-file", "tag", f"refs/qonnect/closed/{pid}").split("\n\n", 1)[1].strip()


def test_review_cycle_over_git_daemon(served: Served, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lead = Mirror(tmp_path / "lead.git", served.url)
    lead.fetch()
    source = lead.main_commit()
    assert source is not None
    lead.store.write_decision(plan_files(2), summary="First", body="b", meta=DecisionMeta(source, 2, 1, "goals-changed"),
                              clusters=CLUSTERS, timestamp=1_700_000_000)
    lead.publish()
    plan_before = git("ls-remote", served.url, "refs/heads/qonnect/plan").split()[0]

    p1 = propose(lead, "p1", 2, "v2")
    assert p1 is not None and not p1.stale and p1.base == plan_before
    lead.publish()
    assert git("ls-remote", served.url, "refs/heads/qonnect/plan").split()[0] == plan_before  # plan untouched
    body = git("-C", served.bare, "log", "-1", "--format=%B", "qonnect/proposals/p1")
    assert "| shop/web | c0 | c1 |" in body
    assert trailers_of(served.bare, "qonnect/proposals/p1")["Qonnect-Proposal"] == ["p1"]

    # An idle cycle proposes nothing new.
    assert propose(lead, "p1-again", 3, "v2") == p1
    assert lead.pending() == []

    p2 = propose(lead, "p2", 3, "v3")
    assert p2 is not None
    lead.publish()
    remote_refs = git("ls-remote", served.url)
    assert "refs/heads/qonnect/proposals/p1" not in remote_refs and "refs/heads/qonnect/proposals/p2" in remote_refs
    assert closed_note(served.bare, "p1") == f"superseded by proposal p2 ({p2.commit})"
    assert trailers_of(served.bare, "qonnect/proposals/p2")["Qonnect-Supersedes"] == ["p1"]

    assert cli("proposals", "--repo", served.url, "--closed") == 0
    out = capsys.readouterr().out
    assert "p2" in out and "ready" in out and "superseded by proposal p2" in out

    # Approve from the command line, as a reviewer would (no goals model on this branch).
    assert cli("approve", "p2", "--repo", served.url, "--no-validate") == 0
    assert "approved p2" in capsys.readouterr().out
    assert git("ls-remote", served.url, "refs/heads/qonnect/plan").split()[0] == p2.commit
    assert closed_note(served.bare, "p2") == f"approved: plan branch fast-forwarded to {p2.commit}"
    clone = tmp_path / "c1"
    git("clone", "-q", "--branch", "cluster/c1", served.url, clone)
    assert (clone / "shop" / "m0.yaml").read_text().endswith("tag: v3\n")
    assert trailers_of(clone, "HEAD")["Qonnect-Plan"] == [p2.commit]
    assert "refs/heads/qonnect/proposals/" not in git("ls-remote", served.url)


def test_direct_decision_supersedes_open_proposals(served: Served, tmp_path: Path) -> None:
    lead = Mirror(tmp_path / "lead.git", served.url)
    lead.fetch()
    propose(lead, "p1", 1, "v1")
    lead.publish()
    source = lead.main_commit()
    assert source is not None
    result = lead.store.write_decision(plan_files(2, tag="failover"), summary="Failover", body="c0 is gone",
                                       meta=DecisionMeta(source, 3, 2, "failover"), clusters=CLUSTERS,
                                       timestamp=1_700_000_050)
    assert result.closed_proposals == ("p1",)
    lead.publish()
    assert trailers_of(served.bare, "qonnect/plan")["Qonnect-Supersedes"] == ["p1"]
    assert closed_note(served.bare, "p1") == f"superseded by plan commit {result.plan_commit}"
    assert "proposals/p1" not in git("ls-remote", served.url)
    # Proposal ids are never reused (a replaced proposal would be a forced push).
    with pytest.raises(ProposalError, match="already used"):
        propose(lead, "p1", 3, "v9")


def test_stale_proposal_is_refused_with_the_reason(served: Served, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    lead = Mirror(tmp_path / "lead.git", served.url)
    lead.fetch()
    p1 = propose(lead, "p1", 1, "v1")
    assert p1 is not None
    lead.publish()
    # Someone else moves the plan branch with plain git (e.g. another merge).
    work = served.bare.parent / (served.bare.name + ".work")
    git("checkout", "-q", "--orphan", "hand", cwd=work)
    (work / "placement.yaml").write_text("by hand\n")
    git("add", "placement.yaml", cwd=work)
    git("commit", "-q", "-m", "hand-made plan", cwd=work)
    git("push", "-q", "origin", "HEAD:refs/heads/qonnect/plan", cwd=work)

    lead.fetch()
    [listed] = lead.store.list_proposals()
    assert listed.stale
    with pytest.raises(StaleProposal, match=r"has moved to .* \(hand-made plan\)"):
        lead.store.approve("p1")
    assert cli("approve", "p1", "--repo", served.url, "--no-validate") == 1
    assert "refused" in capsys.readouterr().out
    assert git("ls-remote", served.url, "refs/heads/qonnect/plan").split()[0] != p1.commit


def test_validation_hook_can_refuse_and_unknown_ids_are_named(served: Served, tmp_path: Path) -> None:
    lead = Mirror(tmp_path / "lead.git", served.url)
    lead.fetch()
    p1 = propose(lead, "p1", 1, "v1")
    assert p1 is not None
    seen: list[dict[str, bytes]] = []

    def validate(files: dict[str, bytes]) -> None:
        seen.append(files)
        raise ValueError("apps/shop/app.yaml:1: name is required")

    with pytest.raises(ValueError, match="name is required"):
        lead.store.approve("p1", validate=validate)
    assert seen[0]["apps/shop/app.yaml"] == b"name: shop\n"  # the goals the proposal was computed from
    assert lead.store.plan_head() is None
    with pytest.raises(ProposalNotFound, match="open: p1"):
        lead.store.approve("nope")
    ok = lead.store.approve("p1", validate=lambda files: None, timestamp=1_700_000_500)
    assert ok.plan_head == p1.commit and len(ok.clusters) == 2


def test_pull_request_seam(tmp_path: Path) -> None:
    bare = tmp_path / "goals.git"
    git("init", "-q", "--bare", "-b", "main", bare)
    seed_goals(bare, {"qonnect.yaml": "x\n"})
    lead = Mirror(tmp_path / "lead.git", f"file://{bare}")
    lead.fetch()
    p = propose(lead, "g7", 7, "v7")
    assert p is not None
    pr = pull_request_for(lead.store, p)
    assert (pr.head_branch, pr.base_branch, pr.title) == ("qonnect/proposals/g7", "qonnect/plan", "Proposal g7")
    assert pr.body.startswith(DESCRIPTION) and "qonnect approve g7" in pr.body


def test_a_second_lead_sees_closures_after_fetch(tmp_path: Path) -> None:
    bare = tmp_path / "goals.git"
    git("init", "-q", "--bare", "-b", "main", bare)
    seed_goals(bare, {"qonnect.yaml": "x\n"})
    a = Mirror(tmp_path / "a.git", f"file://{bare}")
    b = Mirror(tmp_path / "b.git", f"file://{bare}")
    a.fetch()
    propose(a, "p1", 1, "v1")
    a.publish()
    b.fetch()
    assert [p.id for p in b.store.list_proposals()] == ["p1"]
    a.store.approve("p1", timestamp=1_700_000_900)
    a.publish()
    b.fetch()  # the deleted proposal branch is pruned; the closure record arrives
    assert b.store.list_proposals() == []
    assert [(c.id, c.note.split(":")[0]) for c in b.store.list_closed()] == [("p1", "approved")]
    assert b.store.plan_head() == a.store.plan_head() and b.store.catch_up() == []
