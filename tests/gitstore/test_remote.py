"""Mirrors against a repository served by git daemon (and file://), checked with plain git."""

from __future__ import annotations

from pathlib import Path

import pygit2
import pytest

from qonnect_gitops.gitstore import DecisionMeta, RemoteError, StaleRef, gitcli, resolve_commit
from qonnect_gitops.gitstore.remote import Mirror, fetch_branch, fetch_for_review, narrow_fetch

from .helpers import CountingProxy, Served, git, plan_files, seed_goals, trailers_of


def decide(mirror: Mirror, files: dict[str, bytes], gen: int, clusters: list[str], **kw: object):
    source = mirror.main_commit()
    assert source is not None
    return mirror.store.write_decision(
        files, summary=f"Decision {gen}", body="Body.", meta=DecisionMeta(source, 1, gen, "goals-changed"),
        clusters=clusters, timestamp=1_700_000_000 + gen, **kw)  # type: ignore[arg-type]


def test_clone_of_a_cluster_branch_shows_exactly_its_files(served: Served, tmp_path: Path) -> None:
    mirror = Mirror(tmp_path / "m.git", served.url)
    mirror.fetch()
    assert mirror.read_goals()["apps/shop/app.yaml"] == b"name: shop\n"
    files = plan_files(3)
    files["clusters/c1/extra/cm.yaml"] = b"kind: ConfigMap\n"
    result = decide(mirror, files, 1, ["c0", "c1", "c2"])
    published = mirror.publish()
    assert published.pushes == 1 and len(published.pushed) == 4  # one atomic push
    assert mirror.pending() == []

    clone = tmp_path / "clone-c1"
    git("clone", "-q", "--branch", "cluster/c1", served.url, clone)
    assert sorted(git("ls-files", cwd=clone).split()) == ["extra/cm.yaml", "shop/m0.yaml", "shop/m1.yaml"]
    assert (clone / "extra" / "cm.yaml").read_text() == "kind: ConfigMap\n"
    t = trailers_of(clone, "HEAD")
    assert t["Qonnect-Plan"] == [result.plan_commit]
    assert t["Qonnect-Source"] == [served.goals_commit]
    assert t["Qonnect-Reason"] == ["goals-changed"] and t["Qonnect-Term"] == ["1"]
    # The served repository itself holds the plan branch with its trailers.
    assert trailers_of(served.bare, "qonnect/plan")["Qonnect-Generation"] == ["1"]

    # An idle cycle pushes nothing.
    decide(mirror, files, 2, ["c0", "c1", "c2"])
    assert mirror.publish().pushes == 0


def test_remote_rejection_is_a_typed_error(served: Served, tmp_path: Path) -> None:
    # The server refuses one ref in its update hook: receive-pack reports it, pygit2 does not raise.
    hook = served.bare / "hooks" / "update"
    hook.write_text('#!/bin/sh\ncase "$1" in refs/heads/cluster/c1) echo "c1 is frozen" >&2; exit 1;; esac\nexit 0\n')
    hook.chmod(0o755)
    mirror = Mirror(tmp_path / "m.git", served.url)
    mirror.fetch()
    decide(mirror, plan_files(2), 1, ["c0", "c1"])
    with pytest.raises(StaleRef) as err:
        mirror.publish()
    assert list(err.value.refs) == ["refs/heads/cluster/c1"]
    assert "rejected by remote" in err.value.refs["refs/heads/cluster/c1"]
    remote_refs = git("ls-remote", served.url)
    assert "refs/heads/cluster/c0" in remote_refs and "refs/heads/cluster/c1" not in remote_refs
    # What was accepted is remembered; only the rejected ref is still pending.
    assert [c.ref for c in mirror.pending()] == ["refs/heads/cluster/c1"]


def test_file_url_works_too(tmp_path: Path) -> None:
    bare = tmp_path / "goals.git"
    git("init", "-q", "--bare", "-b", "main", bare)
    seed_goals(bare, {"qonnect.yaml": "x: 1\n"})
    mirror = Mirror(tmp_path / "m.git", f"file://{bare}")
    mirror.fetch()
    decide(mirror, plan_files(2), 1, ["c0", "c1"])
    mirror.publish()
    assert git("-C", bare, "ls-tree", "-r", "--name-only", "cluster/c0").split() == ["shop/m0.yaml", "shop/m1.yaml"]
    agent = fetch_branch(tmp_path / "agent.git", f"file://{bare}", "cluster/c0")
    assert agent == git("-C", bare, "rev-parse", "cluster/c0").strip()
    with pytest.raises(RemoteError, match="no branch cluster/c9"):
        fetch_branch(tmp_path / "agent.git", f"file://{bare}", "cluster/c9")


def test_interrupted_publish_is_completed_by_the_next_leader(served: Served, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    old = Mirror(tmp_path / "old.git", served.url)
    old.fetch()
    result = decide(old, plan_files(3), 1, ["c0", "c1", "c2"])
    real_push = Mirror.push
    calls = []

    def push_then_die(self: Mirror, changes, **kw):  # type: ignore[no-untyped-def]
        calls.append(changes)
        if len(calls) == 2:
            raise ConnectionError("leader lost its network after pushing the plan")
        return real_push(self, changes, **kw)

    monkeypatch.setattr(Mirror, "push", push_then_die)
    with pytest.raises(ConnectionError):
        old.publish(atomic=False)  # the decision and its fan-out in two pushes
    monkeypatch.undo()
    assert git("ls-remote", served.url, "refs/heads/cluster/*") == ""
    assert git("ls-remote", served.url, "refs/heads/qonnect/plan").split()[0] == result.plan_commit

    new = Mirror(tmp_path / "new.git", served.url)
    new.fetch()
    changes = new.store.fan_out(new.store.plan_head())  # type: ignore[arg-type]
    assert changes == list(result.clusters)  # the same commits the old leader would have pushed
    new.publish()
    heads = git("ls-remote", served.url, "refs/heads/cluster/*").split()
    assert sorted(heads[1::2]) == ["refs/heads/cluster/c0", "refs/heads/cluster/c1", "refs/heads/cluster/c2"]


def test_fetch_takes_only_what_the_lead_needs_and_drops_unpushed_writes(served: Served, tmp_path: Path) -> None:
    work = served.bare.parent / (served.bare.name + ".work")
    git("checkout", "-q", "-b", "feature/x", cwd=work)
    (work / "big.bin").write_bytes(b"z" * 10_000)
    git("add", "-A", cwd=work)
    git("commit", "-q", "-m", "unrelated", cwd=work)
    git("push", "-q", "origin", "feature/x", cwd=work)
    mirror = Mirror(tmp_path / "m.git", served.url)
    mirror.fetch()
    assert not any("feature" in r for r in mirror.repo.references)
    feature_commit = git("rev-parse", "HEAD", cwd=work).strip()
    assert feature_commit not in mirror.repo

    decide(mirror, plan_files(1), 1, ["c0"])
    assert mirror.store.plan_head() is not None
    mirror.fetch()  # never published: the remote has no plan, so neither do we now
    assert mirror.store.plan_head() is None and mirror.pending() == []


def test_a_big_decision_is_one_valid_pack_and_gc_consolidates_packs(served: Served, tmp_path: Path) -> None:
    mirror = Mirror(tmp_path / "m.git", served.url)
    repo = tmp_path / "m.git"
    git("-C", repo, "config", "gc.autoPackLimit", "3")
    mirror.fetch()

    def count() -> dict[str, int]:
        stats = dict(line.split(": ") for line in git("-C", repo, "count-objects", "-v").splitlines())
        return {"loose": int(stats["count"]), "packs": int(stats["packs"])}

    before = count()
    decide(mirror, plan_files(150, manifests=4), 1, [f"c{i}" for i in range(150)])
    after = count()
    # ~900 new objects, none of them loose: one new pack.
    assert after["loose"] == before["loose"] and after["packs"] == before["packs"] + 1
    git("-C", repo, "fsck", "--strict", "--no-dangling")  # git itself accepts our pack, index, trees, commits
    for gen in (2, 3, 4):
        decide(mirror, plan_files(150, manifests=4, tag=f"v{gen}"), gen, [f"c{i}" for i in range(150)])
    assert count()["packs"] > 3
    mirror.publish()
    assert count()["packs"] > 3  # publishing pushes and leaves upkeep for later
    assert mirror.upkeep() is not None  # runs git gc --auto: too many packs -> one
    assert count()["packs"] == 1
    assert mirror.upkeep() is None  # nothing pushed since
    assert mirror.store.plan_head() == git("-C", repo, "rev-parse", "qonnect/plan").strip()
    git("-C", served.bare, "fsck", "--strict", "--no-dangling")


def test_narrow_fetch_gets_one_branch_only(served: Served, tmp_path: Path) -> None:
    mirror = Mirror(tmp_path / "m.git", served.url)
    mirror.fetch()
    decide(mirror, plan_files(20, manifests=5), 1, [f"c{i}" for i in range(20)])
    mirror.publish()
    with CountingProxy(served.daemon.port) as proxy:
        url = f"git://127.0.0.1:{proxy.port}/{served.bare.name}"
        narrow = narrow_fetch(tmp_path / "agent.git", url, "cluster/c7")
        narrow_bytes = proxy.total()
        assert narrow.commit == git("ls-remote", served.url, "refs/heads/cluster/c7").split()[0]
        pygit2.init_repository(str(tmp_path / "full.git"), bare=True).remotes.create_anonymous(
            url).fetch(["+refs/*:refs/*"])
        assert 0 < narrow_bytes < (proxy.total() - narrow_bytes) / 5
        assert git("-C", tmp_path / "agent.git", "for-each-ref", "--format=%(refname)").split() == \
            ["refs/heads/cluster/c7"]
        # A second fetch with nothing new transfers little: no objects, one ref named.
        before = proxy.total()
        assert narrow_fetch(tmp_path / "agent.git", url, "cluster/c7").commit == narrow.commit
        assert proxy.total() - before < narrow_bytes


def test_deleting_a_ref_is_compare_and_swap_too(served: Served, tmp_path: Path) -> None:
    a = Mirror(tmp_path / "a.git", served.url)
    a.fetch()
    source = a.main_commit()
    assert source is not None
    a.store.propose("p1", plan_files(1), summary="P1", description="d", clusters=["c0"], timestamp=1_700_000_001,
                    meta=DecisionMeta(source, 1, 1, "goals-changed"))
    a.publish()
    # A human force-pushes something else onto p1 after we saw it.
    served.force(source, "refs/heads/qonnect/proposals/p1")
    a.store.propose("p2", plan_files(1, tag="v2"), summary="P2", description="d", clusters=["c0"],
                    timestamp=1_700_000_002, meta=DecisionMeta(source, 1, 2, "goals-changed"))
    with pytest.raises(StaleRef) as err:
        a.publish()  # p2 goes up, but closing p1 (a deletion) must not clobber the human's commit
    assert "refs/heads/qonnect/proposals/p1" in err.value.refs
    assert git("ls-remote", served.url, "refs/heads/qonnect/proposals/p1").split()[0] == source


@pytest.mark.parametrize("command_line", [True, False])
def test_a_review_fetch_takes_the_named_branches_and_pull_refs_only(
        served: Served, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command_line: bool) -> None:
    mirror = Mirror(tmp_path / "m.git", served.url)
    mirror.fetch()
    decide(mirror, plan_files(3), 1, ["c0", "c1", "c2"])
    mirror.publish()
    git("-C", served.bare, "update-ref", "refs/pull/7/head", served.goals_commit)
    if not command_line:
        monkeypatch.setattr(gitcli, "available", lambda credentials: False)
    repo = fetch_for_review(tmp_path / "review.git", served.url, ["refs/pull/7/head", "refs/pull/8/head"],
                            branches=["main"])
    assert sorted(repo.references) == ["refs/qonnect-review/pull/7/head", "refs/remotes/origin/heads/main"]
    assert str(resolve_commit(repo, "main").id) == served.goals_commit
    assert mirror.store.cluster_head("c0") not in repo  # no cluster branch came along


@pytest.mark.parametrize("name", ["main:refs/heads/evil", "main..x", "a b", "main.lock", ""])
def test_a_review_fetch_refuses_branch_names_a_forge_event_made_up(served: Served, tmp_path: Path,
                                                                   name: str) -> None:
    with pytest.raises(ValueError, match="invalid ref name"):
        fetch_for_review(tmp_path / "review.git", served.url, branches=[name])
    assert not (tmp_path / "review.git").exists()
