"""Large ref batches written as one rewrite of ``packed-refs``: the same refs, the same
compare-and-swap, read back by libgit2 and by plain git."""

from __future__ import annotations

from pathlib import Path

import pygit2
import pytest

from qonnect_gitops.gitstore import DecisionMeta, StaleRef, packedrefs
from qonnect_gitops.gitstore.errors import PackedRefsCorrupt
from qonnect_gitops.gitstore.remote import Mirror
from qonnect_gitops.gitstore.store import cas_update_refs

from .helpers import Served, git, plan_files

MANY = packedrefs.PACKED_BATCH_MIN + 6


def commits(repo: pygit2.Repository, n: int) -> list[pygit2.Oid]:
    """``n`` distinct commits of the empty tree."""
    tree = repo.TreeBuilder().write()
    sig = pygit2.Signature("t", "t@example.org", 1_700_000_000, 0)
    return [repo.create_commit(None, sig, sig, f"c{i}", tree, []) for i in range(n)]


def refs_by_git(path: str | Path) -> str:
    return git("-C", path, "for-each-ref", "--format=%(refname) %(objectname) %(*objectname)")


def names(n: int) -> list[str]:
    return [f"refs/heads/cluster/c{i:03d}" for i in range(n)]


@pytest.fixture
def repo(tmp_path: Path) -> pygit2.Repository:
    return pygit2.init_repository(str(tmp_path / "r.git"), bare=True)


def test_a_large_batch_is_one_packed_refs_file_read_back_by_libgit2_and_git(repo: pygit2.Repository) -> None:
    ids = commits(repo, MANY)
    assert packedrefs.suits(repo, {n: (None, i) for n, i in zip(names(MANY), ids, strict=True)})
    cas_update_refs(repo, {n: (None, i) for n, i in zip(names(MANY), ids, strict=True)}, "fan-out")
    git_dir = Path(repo.path)
    assert not (git_dir / "refs/heads/cluster").exists() or not any((git_dir / "refs/heads/cluster").iterdir())
    assert not list(git_dir.glob("**/*.lock"))
    for name, oid in zip(names(MANY), ids, strict=True):
        assert repo.references[name].target == oid  # the same Repository object sees the new file
        assert git("-C", git_dir, "rev-parse", "--verify", name).strip() == str(oid)
    git("-C", git_dir, "fsck", "--full", "--strict")
    # Moved again (compare-and-swap on the packed values) and a few deleted.
    again = commits(repo, MANY + 1)[1:]
    moves = {n: (old, new) for n, old, new in zip(names(MANY), ids, again, strict=True)}
    moves.update({n: (ids[k], None) for k, n in enumerate(names(MANY)[:3])})
    cas_update_refs(repo, moves, "fan-out")
    assert [r for r in refs_by_git(git_dir).split("\n") if r][:1] == [f"{names(MANY)[3]} {again[3]} "]
    assert names(MANY)[0] not in repo.references


def test_the_same_batch_gives_the_same_refs_as_libgit2s_transaction(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repos = [pygit2.init_repository(str(tmp_path / f"{k}.git"), bare=True) for k in ("packed", "loose")]
    for k, repo in enumerate(repos):
        if k == 1:
            monkeypatch.setattr(packedrefs, "PACKED_BATCH_MIN", 10**9)
        ids = commits(repo, MANY)
        cas_update_refs(repo, {n: (None, i) for n, i in zip(names(MANY), ids, strict=True)}, "fan-out")
    assert not (Path(repos[0].path) / "refs/heads/cluster/c000").exists()
    assert (Path(repos[1].path) / "refs/heads/cluster/c000").exists()
    assert refs_by_git(repos[0].path) == refs_by_git(repos[1].path)


def test_a_ref_elsewhere_than_expected_refuses_the_whole_batch(repo: pygit2.Repository) -> None:
    ids = commits(repo, MANY + 1)
    first = {n: (None, i) for n, i in zip(names(MANY), ids[:MANY], strict=True)}
    cas_update_refs(repo, first, "fan-out")
    before = (Path(repo.path) / "packed-refs").read_bytes()
    moves = {n: (i, ids[-1]) for n, i in zip(names(MANY), ids[:MANY], strict=True)}
    moves[names(MANY)[5]] = (ids[-1], ids[0])  # we think it is elsewhere
    with pytest.raises(StaleRef) as lost:
        cas_update_refs(repo, moves, "fan-out")
    assert list(lost.value.refs) == [names(MANY)[5]]
    assert (Path(repo.path) / "packed-refs").read_bytes() == before
    assert not list(Path(repo.path).glob("**/*.lock"))


def test_loose_refs_are_locked_moved_into_packed_refs_and_their_files_removed(repo: pygit2.Repository) -> None:
    ids = commits(repo, MANY + 1)
    loose = names(MANY)[:2]
    for name, oid in zip(loose, ids[:2], strict=True):
        repo.references.create(name, oid)
    assert (Path(repo.path) / loose[0]).exists()
    updates = {n: (ids[k] if n in loose else None, ids[-1]) for k, n in enumerate(names(MANY))}
    cas_update_refs(repo, updates, "fan-out")
    assert not (Path(repo.path) / loose[0]).exists()
    assert all(repo.references[n].target == ids[-1] for n in names(MANY))
    git("-C", repo.path, "fsck", "--full", "--strict")


def test_a_ref_another_writer_holds_is_stale_and_its_lock_stays_that_writers(repo: pygit2.Repository) -> None:
    ids = commits(repo, MANY)
    held = Path(repo.path) / f"{names(MANY)[7]}.lock"
    held.parent.mkdir(parents=True, exist_ok=True)
    held.write_text("another writer\n")
    with pytest.raises(StaleRef) as lost:
        cas_update_refs(repo, {n: (None, i) for n, i in zip(names(MANY), ids, strict=True)}, "fan-out")
    assert list(lost.value.refs) == [names(MANY)[7]]
    assert held.read_text() == "another writer\n"
    assert not (Path(repo.path) / "packed-refs").exists()
    held.unlink()
    (Path(repo.path) / "packed-refs.lock").write_text("")  # now packed-refs itself is being rewritten
    with pytest.raises(StaleRef):
        cas_update_refs(repo, {n: (None, i) for n, i in zip(names(MANY), ids, strict=True)}, "fan-out")
    assert (Path(repo.path) / "packed-refs.lock").exists()


def test_a_name_clashing_with_an_existing_ref_is_refused_before_anything_is_written(
        repo: pygit2.Repository) -> None:
    ids = commits(repo, MANY)
    repo.references.create("refs/heads/cluster/c000/x", ids[0])
    with pytest.raises(ValueError, match="c000"):
        cas_update_refs(repo, {n: (None, i) for n, i in zip(names(MANY), ids, strict=True)}, "fan-out")
    assert not (Path(repo.path) / "packed-refs").exists()
    # Once that ref is gone, an empty directory left behind is no clash (git ignores it).
    repo.references.delete("refs/heads/cluster/c000/x")
    (Path(repo.path) / "refs/heads/cluster/c000").mkdir(parents=True, exist_ok=True)
    cas_update_refs(repo, {n: (None, i) for n, i in zip(names(MANY), ids, strict=True)}, "fan-out")
    assert git("-C", repo.path, "rev-parse", "refs/heads/cluster/c000").strip() == str(ids[0])


def test_peeled_tags_packed_by_git_still_peel_after_a_batch(repo: pygit2.Repository) -> None:
    ids = commits(repo, MANY)
    git_dir = Path(repo.path)
    tag = repo.create_tag("closed-x", ids[0], pygit2.enums.ObjectType.COMMIT,
                          pygit2.Signature("t", "t@example.org", 1, 0), "closed")
    repo.references.create("refs/qonnect/closed/x", tag)
    git("-C", git_dir, "pack-refs", "--all")
    assert "^" in (git_dir / "packed-refs").read_text()
    cas_update_refs(repo, {n: (None, i) for n, i in zip(names(MANY), ids, strict=True)}, "fan-out")
    assert git("-C", git_dir, "rev-parse", "refs/qonnect/closed/x^{commit}").strip() == str(ids[0])
    assert repo.references["refs/qonnect/closed/x"].peel(pygit2.Commit).id == ids[0]
    git("-C", git_dir, "fsck", "--full", "--strict")


def test_a_repository_keeping_reflogs_is_written_by_libgit2(repo: pygit2.Repository) -> None:
    ids = commits(repo, MANY)
    updates = {n: (None, i) for n, i in zip(names(MANY), ids, strict=True)}
    assert packedrefs.suits(repo, updates)
    assert not packedrefs.suits(repo, dict(list(updates.items())[:3]))
    repo.config["core.logAllRefUpdates"] = "always"
    assert not packedrefs.suits(repo, updates)


def test_a_fan_out_written_packed_lands_on_the_remote_as_the_loose_one_does(
        served: Served, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    remotes = []
    for k in ("packed", "loose"):
        if k == "loose":
            monkeypatch.setattr(packedrefs, "PACKED_BATCH_MIN", 10**9)
        bare = served.bare.parent / f"{k}.git"
        git("clone", "-q", "--bare", served.bare, bare)
        mirror = Mirror(tmp_path / f"{k}-mirror.git", served.daemon.url(bare.name))
        mirror.fetch()
        for gen, tag in ((1, "v1"), (2, "v2")):
            source = mirror.main_commit()
            assert source is not None
            mirror.store.write_decision(plan_files(MANY, tag=tag), summary=f"Decision {gen}", body="b",
                                        meta=DecisionMeta(source, 1, gen, "goals-changed"),
                                        clusters=[f"c{i}" for i in range(MANY)], timestamp=1_700_000_000 + gen)
            assert len(mirror.publish().pushed) == MANY + 1
        remotes.append(refs_by_git(bare))
        git("-C", bare, "fsck", "--full", "--strict")
        git("-C", mirror.path, "fsck", "--full", "--strict")
        assert mirror.pending() == []
    assert remotes[0] == remotes[1]
    assert remotes[0].count("refs/heads/cluster/") == MANY


@pytest.mark.parametrize("damage", [
    "a record with no name",
    "an id that is no id",
    "a peeled line first",
    "the last line unterminated",
])
def test_a_packed_refs_git_would_refuse_is_refused_and_left_as_it_was(repo: pygit2.Repository, damage: str) -> None:
    # Rewritten from a partial reading, the file would lose the refs it could not read.
    ids = commits(repo, MANY)
    cas_update_refs(repo, {n: (None, i) for n, i in zip(names(MANY), ids, strict=True)}, "fan-out")
    packed = Path(repo.path) / "packed-refs"
    text = packed.read_text()
    header, first, rest = text.split("\n", 2)
    damaged = {
        "a record with no name": f"{header}\n{first.split(' ')[0]}\n{rest}",
        "an id that is no id": f"{header}\n{'z' * 40} {first.split(' ')[1]}\n{rest}",
        "a peeled line first": f"{header}\n^{ids[0]}\n{first}\n{rest}",
        "the last line unterminated": text.rstrip("\n"),
    }[damage]
    packed.write_text(damaged)
    with pytest.raises(PackedRefsCorrupt):
        packedrefs.read_packed(Path(repo.path))
    again = commits(repo, MANY + 1)[1:]
    with pytest.raises(PackedRefsCorrupt):
        cas_update_refs(repo, {n: (o, i) for n, o, i in zip(names(MANY), ids, again, strict=True)}, "fan-out")
    assert packed.read_text() == damaged
    assert not list(Path(repo.path).glob("**/*.lock"))


def test_the_whole_read_and_the_prefix_search_agree_with_git(repo: pygit2.Repository) -> None:
    ids = commits(repo, 3)
    for k, name in enumerate(["refs/heads/cluster/a", "refs/heads/cluster/b", "refs/heads/main"]):
        repo.references.create(name, ids[k])
    repo.create_tag("t", ids[0], pygit2.enums.ObjectType.COMMIT, pygit2.Signature("t", "t@example.org"), "tag")
    git("-C", repo.path, "pack-refs", "--all")
    whole = packedrefs.read_packed(Path(repo.path))
    by_git = {line.split(" ")[0]: line.split(" ")[1:] for line in refs_by_git(repo.path).splitlines() if line}
    assert {n.decode(): [v[0].decode(), (v[1] or b"").decode()] for n, v in whole.items()} == by_git
    assert packedrefs.names_under(Path(repo.path) / "packed-refs", ["refs/heads/cluster/", "refs/tags/"]) == {
        "refs/heads/cluster/a", "refs/heads/cluster/b", "refs/tags/t"}
    assert packedrefs.names_under(Path(repo.path) / "missing", ["refs/"]) == set()
