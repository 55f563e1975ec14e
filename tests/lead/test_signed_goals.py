"""The leader and ``spec.goals.requireSignedCommits``: a goals commit not signed by an allowed
author is not planned, and is reported like invalid goals (the lead's goals failure record,
``qonnect status`` ERRORS); the leader signs what it writes."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pygit2

from qonnect_gitops.gitstore.objects import serialize_commit
from qonnect_gitops.gitstore.signing import SigningKey
from tests.conftest import ROOT
from tests.gitstore.helpers import GIT_ENV
from tests.lead.fleet import wait_for
from tests.lead.harness import LeadGroup, _tree, goals_files
from tests.signing_keys import KeyPair, allowed_signers, make_key

CLUSTERS = ["edge-1", "edge-2"]


def push_goals(repo_path: Path, files: dict[str, bytes], message: str, key: SigningKey | None) -> str:
    """A commit of ``files`` on ``main`` as an operator pushes it, signed with ``key`` or not."""
    repo = pygit2.Repository(str(repo_path))
    sig = pygit2.Signature("operator", "op@example.org")
    parent = repo.references["refs/heads/main"].target
    content = serialize_commit(_tree(repo, files).raw, [parent.raw], sig, sig, message)
    oid = repo.odb.write(pygit2.enums.ObjectType.COMMIT, key.sign_commit(content) if key else content)
    repo.references["refs/heads/main"].set_target(oid)
    return str(oid)


def goals(required: list[KeyPair], grace: float = 30.0) -> dict[str, bytes]:
    files = goals_files(CLUSTERS, grace)
    if required:
        lines = "".join(f"      - {k.allowed(k.private.name + '@example.org')}\n" for k in required)
        fleet = files["qonnect.yaml"].decode().replace(
            "spec:\n", f"spec:\n  goals:\n    requireSignedCommits: true\n    allowedSigners:\n{lines}")
        files["qonnect.yaml"] = fleet.encode()
    return files


def test_unsigned_goals_are_refused_with_a_clear_status(make_group: Callable[..., LeadGroup], tmp_path: Path) -> None:
    lead_key = make_key(tmp_path / "keys", "lead")
    alice, mallory = make_key(tmp_path / "keys", "alice"), make_key(tmp_path / "keys", "mallory")
    group = make_group(size=1, clusters=CLUSTERS, shop=False, grace=30.0,
                       extra_args=["--signing-key", str(lead_key.private)])
    leader = group.wait_leader()

    def status() -> dict:
        return group.status(leader) or {}

    def good() -> str | None:
        return ((status().get("goals") or {}).get("lastGood") or {}).get("commit")

    wait_for(lambda: good() == group.goals_commit, 20, "first goals accepted", group)
    on = push_goals(group.repo_path, goals([alice]), "require signed goals", alice.signer())
    wait_for(lambda: good() == on, 20, "signed goals accepted", group)
    plan = pygit2.Repository(str(group.repo_path)).references["refs/heads/qonnect/plan"].target
    trusted = allowed_signers(tmp_path / "trusted", lead_key.allowed())
    checked = subprocess.run(["git", "-C", str(group.repo_path), "-c", f"gpg.ssh.allowedSignersFile={trusted}",
                              "verify-commit", "qonnect/plan"], env=GIT_ENV, capture_output=True, text=True,
                             check=False)
    assert checked.returncode == 0, checked.stderr

    for files, message, key in ((goals([alice], grace=40.0), "unsigned change", None),
                                (goals([]), "requirement off, unsigned", None),
                                (goals([alice, mallory]), "mallory adds herself", mallory.signer())):
        bad = push_goals(group.repo_path, files, message, key)
        failed = wait_for(lambda bad=bad: (f := (status().get("goals") or {}).get("lastFailed")) and
                          f["commit"] == bad and f, 20, f"{message}: refusal recorded", group)
        error = failed["errors"][0]
        assert error.startswith(f"commit {bad[:12]}: spec.goals.requireSignedCommits: commit {bad[:12]}"), error
        assert "alice@example.org" in error and "not planned" in error
        assert good() == on
    assert pygit2.Repository(str(group.repo_path)).references["refs/heads/qonnect/plan"].target == plan

    (tmp_path / "read-token").write_text(group.read_token)
    cli = subprocess.run([sys.executable, "-m", "qonnect_gitops", "status", "--lead", leader.url,
                          "--token-file", str(tmp_path / "read-token")],
                         capture_output=True, text=True, cwd=ROOT, timeout=30, check=False)
    assert "ERRORS" in cli.stdout and f"goals {bad[:12]} rejected" in cli.stdout, cli.stdout + cli.stderr
    assert "spec.goals.requireSignedCommits" in cli.stdout

    # Signed by alice again: planned from the goals in force on.
    fixed = push_goals(group.repo_path, goals([alice], grace=45.0), "alice's change", alice.signer())
    wait_for(lambda: good() == fixed, 20, "signed change accepted", group)
