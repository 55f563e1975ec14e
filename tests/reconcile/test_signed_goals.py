"""Signed decisions from the writer's side: ``qonnect reconcile --once --signing-key`` signs
what it writes (``git verify-commit`` agrees), and with ``spec.goals.requireSignedCommits``
a goals commit not signed by an allowed author is not planned."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.gitstore.helpers import GIT_ENV, git
from tests.goals_repo import GoalsRepo, served_goals
from tests.signing_keys import KeyPair, allowed_signers, make_key

FLEET = "qonnect.yaml"
ANCHOR = "  regions:                # where users are; latency goals name these\n"


@pytest.fixture
def goals(tmp_path: Path) -> Iterator[GoalsRepo]:
    with served_goals(tmp_path / "goals") as repo:
        yield repo


@pytest.fixture
def keys(tmp_path: Path) -> dict[str, KeyPair]:
    return {name: make_key(tmp_path / "keys", name) for name in ("lead", "alice", "bob", "mallory")}


def reconcile(repo: GoalsRepo, key: KeyPair | None, cache: Path) -> subprocess.CompletedProcess[str]:
    signing = ["--signing-key", str(key.private)] if key else []
    return subprocess.run([sys.executable, "-m", "qonnect_gitops", "reconcile", "--repo", repo.url, "--once",
                           "--cache", str(cache), *signing], capture_output=True, text=True, cwd=ROOT, timeout=120,
                          check=False)


def commit(repo: GoalsRepo, message: str, key: KeyPair | None) -> str:
    """Commit the work tree as the operator, signed with ``key`` (git commit -S, gpg.format=ssh) or not."""
    git("add", "-A", cwd=repo.work)
    sign = ["-c", "gpg.format=ssh", "-c", f"user.signingkey={key.private}"] if key else []
    git(*sign, "commit", "-q", *(["-S"] if key else []), "-m", message, cwd=repo.work)
    git("push", "-q", "origin", "main", cwd=repo.work)
    return repo.rev("main")


def require_signatures(repo: GoalsRepo, *allowed: KeyPair) -> None:
    lines = "".join(f"      - {k.allowed(k.private.name + '@example.org')}\n" for k in allowed)
    text = (repo.work / FLEET).read_text()
    start = text.find("  goals:\n")
    if start >= 0:
        text = text[:start] + text[text.index("  regions:", start):]
    (repo.work / FLEET).write_text(text.replace(ANCHOR, f"  goals:\n    requireSignedCommits: true\n"
                                                        f"    allowedSigners:\n{lines}{ANCHOR}"))


def edit(repo: GoalsRepo, old: str, new: str) -> None:
    path = repo.work / FLEET
    text = path.read_text()
    assert text.count(old) == 1
    path.write_text(text.replace(old, new))


def verify(repo: GoalsRepo, rev: str, trusted: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(repo.bare), "-c", f"gpg.ssh.allowedSignersFile={trusted}",
                           "verify-commit", rev], env=GIT_ENV, capture_output=True, text=True, check=False)


def test_reconcile_signs_plan_and_cluster_commits_git_verifies_them(goals: GoalsRepo, keys: dict[str, KeyPair],
                                                                   tmp_path: Path) -> None:
    run = reconcile(goals, keys["lead"], tmp_path / "cache")
    assert run.returncode == 0, run.stderr
    trusted = allowed_signers(tmp_path / "trusted", keys["lead"].allowed())
    branches = git("-C", goals.bare, "for-each-ref", "--format=%(refname:short)", "refs/heads/cluster/").split()
    assert len(branches) >= 5
    for rev in ["qonnect/plan", *branches]:
        checked = verify(goals, rev, trusted)
        assert checked.returncode == 0, (rev, checked.stderr)


def test_unsigned_goals_are_not_planned_when_signatures_are_required(goals: GoalsRepo, keys: dict[str, KeyPair],
                                                                    tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    lead, alice, bob, mallory = keys["lead"], keys["alice"], keys["bob"], keys["mallory"]
    # Turning the requirement on needs a signature by one of the keys it lists.
    require_signatures(goals, alice)
    unsigned_on = commit(goals, "require signed goals", None)
    refused = reconcile(goals, lead, cache)
    assert refused.returncode == 1
    assert f"commit {unsigned_on[:12]}: spec.goals.requireSignedCommits: commit {unsigned_on[:12]} is not signed" \
        in refused.stderr
    assert "nothing written" in refused.stderr and not goals.has("qonnect/plan")

    edit(goals, "cooldownSeconds: 120", "cooldownSeconds: 121")
    signed_on = commit(goals, "require signed goals, signed", alice)
    assert reconcile(goals, lead, cache).returncode == 0
    plan = goals.rev("qonnect/plan")
    assert goals.trailers("qonnect/plan")["Qonnect-Source"] == [signed_on]

    # An unsigned change is not planned; the plan in force stays.
    edit(goals, "cooldownSeconds: 121", "cooldownSeconds: 122")
    unsigned = commit(goals, "an unsigned change", None)
    refused = reconcile(goals, lead, cache)
    assert refused.returncode == 1 and f"commit {unsigned[:12]} is not signed" in refused.stderr
    assert "alice@example.org" in refused.stderr and goals.rev("qonnect/plan") == plan
    # ... nor one that switches the requirement off: it is judged by the policy in force.
    text = (goals.work / FLEET).read_text()
    (goals.work / FLEET).write_text(text.replace("    requireSignedCommits: true\n", "")
                                    .replace(f"    allowedSigners:\n      - {alice.allowed('alice@example.org')}\n",
                                             ""))
    off = commit(goals, "signatures off, unsigned", None)
    refused = reconcile(goals, lead, cache)
    assert refused.returncode == 1 and f"commit {off[:12]} is not signed" in refused.stderr
    # ... nor one signed by a key the goals in force do not list, even one adding itself.
    require_signatures(goals, alice, mallory)
    own = commit(goals, "mallory adds herself", mallory)
    refused = reconcile(goals, lead, cache)
    assert refused.returncode == 1 and "not a trusted key" in refused.stderr and own[:12] in refused.stderr
    assert goals.rev("qonnect/plan") == plan

    # Rotation of authors: alice adds bob (signed by alice), then bob's commits are planned.
    require_signatures(goals, alice, bob)
    commit(goals, "alice adds bob", alice)
    assert reconcile(goals, lead, cache).returncode == 0
    edit(goals, "cooldownSeconds: 122", "cooldownSeconds: 123")
    by_bob = commit(goals, "bob's change", bob)
    accepted = reconcile(goals, lead, cache)
    assert accepted.returncode == 0 and accepted.stdout.startswith(f"goals {by_bob[:12]}:"), accepted.stderr
    # In one push: alice removes bob, bob's unsigned and alice's signed change follow. The
    # commits between the goals in force and main are replayed: alice's is planned.
    require_signatures(goals, alice)
    commit(goals, "alice removes bob", alice)
    edit(goals, "cooldownSeconds: 123", "cooldownSeconds: 124")
    commit(goals, "bob, unsigned", None)
    edit(goals, "cooldownSeconds: 124", "cooldownSeconds: 125")
    last = commit(goals, "alice again", alice)
    accepted = reconcile(goals, lead, cache)
    assert accepted.returncode == 0 and accepted.stdout.startswith(f"goals {last[:12]}:"), accepted.stderr
    edit(goals, "cooldownSeconds: 125", "cooldownSeconds: 126")
    refused = reconcile(goals, lead, cache) if commit(goals, "bob, removed", bob) else None
    assert refused is not None and refused.returncode == 1 and "not a trusted key" in refused.stderr
