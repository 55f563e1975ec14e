"""Signed decisions, on the agent's side: only commits signed by a key of its own
configuration are applied; anything else is refused as ``UnsignedCommit`` or
``UntrustedSigner`` (naming the commit), reported to the leads, and the cluster keeps
running what it last applied."""

from __future__ import annotations

from pathlib import Path

import pygit2
import pytest
import yaml

from qonnect_gitops.agent.config import AgentConfig
from qonnect_gitops.gitstore import trailers as tr
from qonnect_gitops.gitstore.tree import build_tree
from tests.agent.conftest import CLUSTER, Branch, Recorder, configmap, configmap_names, namespace, path_of
from tests.gitstore.helpers import git
from tests.model.test_hostile_input import BOMB
from tests.signing_keys import allowed_signers, make_key


def _forge_with_git(branch: Branch, tmp_path: Path, objects: list[dict], generation: int) -> str:
    """An attacker with push access writes an unsigned commit onto the cluster branch with plain git."""
    work = tmp_path / "attacker"
    git("clone", "-q", "-b", f"cluster/{CLUSTER}", branch.url, work)
    for path in work.glob("*"):
        if path.name != ".git":
            git("rm", "-rq", path.name, cwd=work)
    for obj in objects:
        target = work / path_of(obj)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(yaml.safe_dump(obj, sort_keys=False))
    git("add", "-A", cwd=work)
    message = tr.format_message("forged", "", [(tr.SOURCE, "0" * 40), (tr.TERM, "9"),
                                               (tr.GENERATION, str(generation)), (tr.REASON, "goals-changed")])
    git("commit", "-q", "-m", message, cwd=work)
    git("push", "-q", "origin", f"HEAD:refs/heads/cluster/{CLUSTER}", cwd=work)
    return git("rev-parse", "HEAD", cwd=work).strip()


def test_a_forged_unsigned_commit_is_refused_and_the_cluster_keeps_its_state(
        make_agent, branch: Branch, core, recorder: Recorder, tmp_path: Path) -> None:
    branch.publish([namespace("shop"), configmap("a")])
    agent = make_agent(leads=(recorder.url,))
    first = agent.sync()
    assert first.state == "Ready" and configmap_names(core) == {"a"}

    forged = _forge_with_git(branch, tmp_path, [namespace("shop"), configmap("evil")], generation=99)
    assert branch.store.repo.references[f"refs/heads/cluster/{CLUSTER}"].resolve().target == pygit2.Oid(hex=forged)
    result = agent.sync(full=True)
    assert result.commit == forged
    assert (result.state, result.reason, result.exit_code) == ("Stalled", "UnsignedCommit", 1)
    assert [(r.reason, r.commit) for r in result.refusals] == [("UnsignedCommit", forged)]
    assert f"commit {forged[:12]} is not signed" in result.refusals[0].message
    assert f"keeping {first.commit[:12]} running" in result.message
    assert configmap_names(core) == {"a"}  # nothing applied, nothing pruned
    assert result.applied is not None and result.applied.commit == first.commit

    # The leads hear of it like of any refusal.
    assert agent.reporter is not None
    agent.reporter.start()
    agent.sync()
    assert agent.reporter.flush(10.0)
    report = recorder.reports[-1]
    assert [(r["reason"], r["commit"]) for r in report["refusals"]] == [("UnsignedCommit", forged)]
    assert report["sync"]["reason"] == "UnsignedCommit" and report["attempted"] == forged
    assert report["applied"]["commit"] == first.commit

    # The leader's next (signed) decision is applied on top of the forged commit.
    branch.generation = 99
    branch.publish([namespace("shop"), configmap("a"), configmap("b")])
    assert agent.sync().state == "Ready"
    assert configmap_names(core) == {"a", "b"}


def test_an_unsigned_commit_is_refused_before_any_file_of_it_is_parsed(make_agent, branch: Branch, core) -> None:
    branch.publish([namespace("shop"), configmap("a")])
    agent = make_agent()
    agent.sync()
    repo = branch.store.repo
    bomb = b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bomb, namespace: shop}\ndata:\n" + \
        b"".join(b"  " + line + b"\n" for line in BOMB.splitlines())
    tree = build_tree(repo, {"shop/web/configmap-bomb.yaml": bomb})
    sig = pygit2.Signature("x", "x@example.org", 1_700_000_500, 0)
    head = branch.write_commit(tree, "bomb\n", sig, signer=None)
    result = agent.sync()
    assert (result.reason, result.refusals[0].commit) == ("UnsignedCommit", head)
    assert configmap_names(core) == {"a"}


def test_a_commit_signed_by_an_unknown_key_is_refused_as_untrusted_signer(
        make_agent, branch: Branch, core, tmp_path: Path) -> None:
    branch.publish([namespace("shop"), configmap("a")])
    agent = make_agent()
    agent.sync()
    intruder = make_key(tmp_path / "keys", "intruder")
    head = branch.raw_commit([namespace("shop"), configmap("evil")], generation=5, signer=intruder.signer())
    result = agent.sync(full=True)
    assert (result.state, result.reason) == ("Stalled", "UntrustedSigner")
    assert [(r.reason, r.commit) for r in result.refusals] == [("UntrustedSigner", head)]
    assert intruder.signer().public.fingerprint in result.refusals[0].message
    assert configmap_names(core) == {"a"}
    assert agent.build_report(result).refusals[0].reason == "UntrustedSigner"


def test_key_rotation_two_keys_valid_at_once(make_agent, branch: Branch, core, tmp_path: Path) -> None:
    old, new = branch.key, make_key(tmp_path / "keys", "lead-2026")
    branch.publish([namespace("shop"), configmap("a")])
    agent = make_agent()
    assert agent.sync().state == "Ready"

    # 1. The agents trust both keys (their file is re-read: no restart).
    allowed_signers(branch.trusted, old.allowed(), new.allowed())
    # 2. The leader switches to the new key: its decisions are accepted.
    branch.store.signer = new.signer()
    branch.publish([namespace("shop"), configmap("a"), configmap("b")])
    result = agent.sync()
    assert result.state == "Ready" and configmap_names(core) == {"a", "b"}
    # 3. The old key is removed: the commit the cluster runs is not judged again ...
    allowed_signers(branch.trusted, new.allowed())
    assert agent.sync(full=True).state == "Ready"
    # ... and a commit signed by the old key is no longer accepted.
    stale = branch.raw_commit([namespace("shop"), configmap("old")], generation=3, signer=old.signer())
    refused = agent.sync()
    assert (refused.reason, refused.refusals[0].commit) == ("UntrustedSigner", stale)
    assert configmap_names(core) == {"a", "b"}


def test_a_commit_the_cluster_already_runs_is_not_judged_again(make_agent, branch: Branch, tmp_path: Path) -> None:
    branch.publish([namespace("shop"), configmap("a")])
    agent = make_agent()
    assert agent.sync().state == "Ready"
    # The old key leaves the agent's file before the leader wrote anything with the new one.
    allowed_signers(branch.trusted, make_key(tmp_path / "keys", "next").allowed())
    restarted = make_agent(cache_dir=tmp_path / "fresh-cache")
    assert restarted.sync(full=True).state == "Ready"


def test_an_unusable_trusted_keys_update_keeps_the_keys_in_force(make_agent, branch: Branch, core) -> None:
    branch.publish([namespace("shop"), configmap("a")])
    agent = make_agent()
    branch.trusted.write_text("qonnect@localhost ssh-ed25519 not-base64!\n")
    branch.publish([namespace("shop"), configmap("a"), configmap("b")])
    assert agent.sync().state == "Ready" and configmap_names(core) == {"a", "b"}


def test_no_trusted_keys_is_refused_unless_unsigned_is_allowed(make_agent, branch: Branch, core,
                                                               tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no trusted keys"):
        AgentConfig(cluster=CLUSTER, repo=branch.url)
    branch.raw_commit([namespace("shop"), configmap("plain")], generation=1, signer=None)
    agent = make_agent(trusted_keys=None, allow_unsigned=True)
    assert agent.sync().state == "Ready" and configmap_names(core) == {"plain"}
