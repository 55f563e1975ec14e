"""A local remote (a path or ``file://``) answers "where are these refs" from its own files:
exactly what ``git for-each-ref`` says, loose refs over packed ones, and a lead's idle
fetch from it fetches nothing (real repositories, real pushes by plain git)."""

from __future__ import annotations

import logging
import os
import random
import subprocess
from pathlib import Path

import pygit2
import pytest

from qonnect_gitops.gitstore import DecisionMeta, RemoteError
from qonnect_gitops.gitstore.lsrefs import LsRefsError, Unsupported, local_path, local_refs, remote_refs
from qonnect_gitops.gitstore.remote import Mirror

from .helpers import git, plan_files, seed_goals

WATCHED = ["refs/heads/main", "refs/heads/qonnect/plan", "refs/heads/qonnect/proposals/", "refs/qonnect/closed/"]
BRANCHES = 3000


def for_each_ref(repo: Path, prefix: str) -> dict[str, str]:
    """Plain git's view: every ref whose name starts with ``prefix`` (as a string, the way
    ``ls-refs`` matches) and the object it resolves to."""
    out = git("-C", repo, "for-each-ref", "--format=%(refname) %(objectname)", "refs/")
    return {name: oid for name, oid in (line.split(" ") for line in out.splitlines()) if name.startswith(prefix)}


def update_refs(repo: Path, lines: str) -> None:
    subprocess.run(["git", "-C", str(repo), "update-ref", "--stdin"], input=lines.encode(), check=True)


@pytest.fixture()
def goals(tmp_path: Path) -> tuple[Path, str]:
    """A bare goals repository with a first goals commit on main."""
    bare = tmp_path / "srv" / "goals.git"
    bare.parent.mkdir()
    git("init", "-q", "--bare", "-b", "main", bare)
    return bare, seed_goals(bare, {"qonnect.yaml": "review: false\n", "apps/shop/app.yaml": "name: shop\n"})


@pytest.fixture()
def fleet(goals: tuple[Path, str]) -> tuple[Path, str]:
    """The goals repository with ``BRANCHES`` cluster branches, packed as a served repository's are."""
    bare, commit = goals
    # Written as ``git pack-refs`` writes the file (sorted, main included): thousands of
    # loose refs first would cost the test seconds of file creation.
    git("-C", bare, "pack-refs", "--all")
    refs = {f"refs/heads/cluster/edge-{i:05d}": commit for i in range(BRANCHES)} | {"refs/heads/main": commit}
    (bare / "packed-refs").write_text("# pack-refs with: peeled fully-peeled sorted \n"
                                      + "".join(f"{refs[name]} {name}\n" for name in sorted(refs)))
    assert len(for_each_ref(bare, "refs/heads/")) == BRANCHES + 1
    return bare, commit


def test_the_answer_is_what_git_for_each_ref_says(fleet: tuple[Path, str]) -> None:
    bare, commit = fleet
    # Loose beside packed, an annotated tag (a peeled line in packed-refs), a symbolic ref.
    git("-C", bare, "tag", "-a", "-m", "t", "v1", commit)
    git("-C", bare, "pack-refs", "--all")
    update_refs(bare, f"create refs/heads/cluster/edge-99999 {commit}\n"
                      f"create refs/heads/qonnect/proposals/p1 {commit}\n"
                      f"create refs/qonnect/closed/p0 {commit}\n")
    git("-C", bare, "symbolic-ref", "refs/heads/qonnect/proposals/alias", "refs/heads/cluster/edge-00007")
    for prefix in ["refs/heads/cluster/edge-0001", "refs/heads/cluster/edge-0299", "refs/heads/cluster/edge-9",
                   "refs/heads/cluster/", "refs/heads/m", "refs/heads/qonnect/", "refs/tags/", "refs/",
                   "refs/nothing/"]:
        assert local_refs(bare, [prefix]).refs == for_each_ref(bare, prefix), prefix
    answer = local_refs(bare, WATCHED)
    assert answer.refs == {"refs/heads/main": commit, "refs/heads/qonnect/proposals/p1": commit,
                           "refs/heads/qonnect/proposals/alias": commit, "refs/qonnect/closed/p0": commit}
    assert (answer.sent_bytes, answer.received_bytes) == (0, 0)


def test_an_unsorted_packed_refs_is_read_whole(fleet: tuple[Path, str]) -> None:
    bare, _ = fleet
    packed = bare / "packed-refs"
    lines = packed.read_text().splitlines()
    records = [line for line in lines[1:] if not line.startswith("^")]
    packed.write_text("# pack-refs with: peeled \n" + "\n".join(reversed(records)) + "\n")
    assert local_refs(bare, ["refs/heads/cluster/edge-0002"]).refs == for_each_ref(bare, "refs/heads/cluster/edge-0002")
    assert len(local_refs(bare, ["refs/heads/cluster/edge-0002"]).refs) == 10


def test_the_search_of_a_sorted_packed_refs_finds_every_name_under_a_prefix(goals: tuple[Path, str]) -> None:
    # Many small files of names close to each other (shared prefixes, peeled lines): the
    # halving search must land on the first name under each prefix every time, as a scan
    # of the whole file would.
    bare, commit = goals
    rnd = random.Random(21)
    for _ in range(150):
        names = sorted({name for name in ("refs/x/" + "".join(rnd.choice("ab/c-") for _ in range(rnd.randint(1, 6)))
                                          for _ in range(rnd.randint(0, 30)))
                        if pygit2.reference_is_valid_name(name)})
        lines = "".join(f"{commit} {name}\n" + (f"^{commit}\n" if rnd.random() < 0.3 else "") for name in names)
        (bare / "packed-refs").write_text("# pack-refs with: peeled fully-peeled sorted \n" + lines)
        for _ in range(5):
            prefix = "refs/x/" + "".join(rnd.choice("ab/c-") for _ in range(rnd.randint(0, 4)))
            found = local_refs(bare, [prefix]).refs
            assert found == {name: commit for name in names if name.startswith(prefix)}, (prefix, names)


def test_a_packed_ref_updated_loose_reads_the_loose_value(fleet: tuple[Path, str]) -> None:
    bare, commit = fleet
    assert not (bare / "refs" / "heads" / "main").exists()  # packed by the fixture
    pushed = seed_goals(bare, {"apps/shop/app.yaml": "name: shop\nreplicas: 2\n"})
    assert (bare / "refs" / "heads" / "main").is_file()
    assert f"{commit} refs/heads/main" in (bare / "packed-refs").read_text()
    assert local_refs(bare, ["refs/heads/main"]).refs == {"refs/heads/main": pushed}


def test_a_deleted_ref_is_absent_whether_it_was_loose_or_packed(fleet: tuple[Path, str]) -> None:
    bare, commit = fleet
    update_refs(bare, f"create refs/heads/qonnect/plan {commit}\n")  # loose
    assert local_refs(bare, WATCHED).refs.keys() == {"refs/heads/main", "refs/heads/qonnect/plan"}
    git("-C", bare, "update-ref", "-d", "refs/heads/qonnect/plan")
    git("-C", bare, "update-ref", "-d", "refs/heads/cluster/edge-00042")  # packed
    assert local_refs(bare, WATCHED).refs.keys() == {"refs/heads/main"}
    assert "refs/heads/cluster/edge-00042" not in local_refs(bare, ["refs/heads/cluster/edge-0004"]).refs
    # A symbolic ref whose target is gone is no ref either, as git shows it.
    git("-C", bare, "symbolic-ref", "refs/heads/qonnect/plan", "refs/heads/cluster/edge-00042")
    assert local_refs(bare, WATCHED).refs.keys() == {"refs/heads/main"}


def test_a_ref_that_cannot_be_read_is_an_error_not_an_absent_ref(fleet: tuple[Path, str]) -> None:
    # git refuses these too; taken for absent, a plan branch would look deleted.
    bare, commit = fleet
    (bare / "refs" / "heads" / "qonnect").mkdir()
    (bare / "refs" / "heads" / "qonnect" / "plan").write_text("not an id\n")
    with pytest.raises(LsRefsError):
        local_refs(bare, WATCHED)
    (bare / "refs" / "heads" / "qonnect" / "plan").unlink()
    assert local_refs(bare, WATCHED).refs == {"refs/heads/main": commit}
    packed = bare / "packed-refs"
    packed.write_text(packed.read_text().rstrip("\n"))  # the last line unterminated
    with pytest.raises(LsRefsError):
        local_refs(bare, ["refs/heads/main"])


def test_a_repository_that_is_not_there_is_an_error_the_mirror_handles(tmp_path: Path,
                                                                        goals: tuple[Path, str]) -> None:
    with pytest.raises(LsRefsError):
        local_refs(tmp_path / "nowhere.git", WATCHED)
    # A plain directory inside a repository's work tree is no repository: no search upwards.
    inside = goals[0].parent / "goals.git.work" / "apps"
    assert inside.is_dir()
    with pytest.raises(LsRefsError):
        local_refs(inside, WATCHED)
    with pytest.raises(LsRefsError):
        remote_refs(f"file://{tmp_path}/nowhere.git", WATCHED)
    with pytest.raises(Unsupported):
        remote_refs("file://elsewhere/srv/goals.git", WATCHED)
    with pytest.raises(Unsupported):
        remote_refs("git@forge.example:org/goals.git", WATCHED)  # SSH: not local, no v2 client
    mirror = Mirror(tmp_path / "m.git", str(tmp_path / "nowhere.git"))
    with pytest.raises(RemoteError):
        mirror.fetch()


def test_which_urls_are_local() -> None:
    assert local_path("/srv/goals.git") == Path("/srv/goals.git")
    assert local_path("goals.git") == Path("goals.git")
    assert local_path("./a:b/goals.git") == Path("./a:b/goals.git")  # a slash before the colon: a path
    assert local_path("file:///srv/go%61ls.git") == Path("/srv/goals.git")  # decoded, as git does
    assert local_path("file://localhost/srv/goals.git") == Path("/srv/goals.git")
    assert local_path("forge.example:goals.git") is None
    assert local_path("git://forge.example/goals.git") is None
    assert local_path("https://forge.example/goals.git") is None


def decide(mirror: Mirror, gen: int, clusters: int = 3):
    source = mirror.main_commit()
    assert source is not None
    return mirror.store.write_decision(
        plan_files(clusters, tag=f"v{gen}"), summary=f"Decision {gen}", body="Body.",
        meta=DecisionMeta(source, 1, gen, "goals-changed"), clusters=[f"c{i}" for i in range(clusters)],
        timestamp=1_700_000_000 + gen)


@pytest.mark.parametrize("form", ["path", "file"])
def test_an_idle_fetch_from_a_local_remote_fetches_nothing(fleet: tuple[Path, str], tmp_path: Path, form: str,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    bare, commit = fleet
    mirror = Mirror(tmp_path / "m.git", str(bare) if form == "path" else f"file://{bare}")
    assert mirror.fetch().commit == commit  # the first fetch of a term: every cluster branch
    assert len(mirror.published_heads()) == BRANCHES
    decide(mirror, 1)
    mirror.publish()
    # Someone moves a cluster branch behind the leader's back: only a fetch of the cluster
    # branches would see it, and an idle fetch asks about the watched refs alone.
    moved = seed_goals(bare, {"apps/shop/app.yaml": "name: shop\nreplicas: 5\n"}, "elsewhere")
    git("-C", bare, "update-ref", "refs/heads/main", commit)  # main back where it was
    git("-C", bare, "update-ref", "refs/heads/cluster/edge-02999", moved)
    with caplog.at_level(logging.DEBUG, logger="qonnect_gitops.gitstore.remote"):
        idle = mirror.fetch()
    events = [r.getMessage() for r in caplog.records]
    assert "mirror_unchanged" in events and "mirror_fetched" not in events, events
    assert (idle.commit, idle.received_bytes, idle.received_objects) == (commit, 0, 0)
    assert mirror.published_head("edge-02999") == commit
    assert moved not in mirror.repo  # no object came over
    assert mirror.pending() == []
    mirror.fetch(full=True)
    assert mirror.published_head("edge-02999") == moved


@pytest.mark.parametrize("form", ["path", "file"])
def test_a_push_to_main_of_the_local_remote_is_fetched(goals: tuple[Path, str], tmp_path: Path, form: str) -> None:
    bare, commit = goals
    mirror = Mirror(tmp_path / "m.git", str(bare) if form == "path" else f"file://{bare}")
    assert mirror.fetch().commit == commit
    assert mirror.store.plan_head() is None  # no plan branch yet: the first fetch names none
    first = decide(mirror, 1)
    mirror.publish()
    # Another clone pushes a goals commit to main.
    other = tmp_path / "other"
    git("clone", "-q", bare, other)
    (other / "apps" / "shop" / "app.yaml").write_text("name: shop\nreplicas: 3\n")
    git("commit", "-q", "-am", "three replicas", cwd=other)
    git("push", "-q", "origin", "main", cwd=other)
    pushed = git("rev-parse", "HEAD", cwd=other).strip()
    assert mirror.fetch().commit == pushed
    assert mirror.read_goals()["apps/shop/app.yaml"] == b"name: shop\nreplicas: 3\n"
    assert mirror.store.plan_head() == first.plan_commit and mirror.pending() == []
    # The plan branch deleted on the remote is gone from the mirror too, quiet fetch or full.
    git("-C", bare, "update-ref", "-d", "refs/heads/qonnect/plan")
    mirror.fetch()
    assert mirror.store.plan_head() is None
    assert "refs/remotes/origin/heads/qonnect/plan" not in mirror.repo.references
    mirror.fetch(full=True)
    assert mirror.store.plan_head() is None


def test_a_relative_path_names_the_same_repository_for_fetch_and_push(goals: tuple[Path, str], tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    bare, commit = goals
    monkeypatch.chdir(bare.parent)
    mirror = Mirror(tmp_path / "m.git", "goals.git")  # git runs inside the mirror: relative to here all the same
    assert mirror.url == str(bare)
    assert mirror.fetch().commit == commit
    written = decide(mirror, 1)
    mirror.publish()
    assert git("-C", bare, "rev-parse", "qonnect/plan").strip() == written.plan_commit
    assert mirror.fetch().commit == commit


def test_a_work_tree_remote_is_read_through_its_git_directory(tmp_path: Path) -> None:
    work = tmp_path / "work"
    git("init", "-q", "-b", "main", work)
    (work / "qonnect.yaml").write_text("x: 1\n")
    git("add", "-A", cwd=work)
    git("commit", "-q", "-m", "goals", cwd=work)
    head = git("rev-parse", "HEAD", cwd=work).strip()
    assert local_refs(work, WATCHED).refs == {"refs/heads/main": head}
    linked = tmp_path / "linked"
    git("-C", work, "worktree", "add", "-q", "-b", "side", linked)
    assert local_refs(linked, ["refs/heads/"]).refs == {"refs/heads/main": head, "refs/heads/side": head}
    assert os.path.isfile(linked / ".git")  # the linked work tree's refs live in the main one's
    assert pygit2.Repository(str(linked)).references["refs/heads/side"].target == pygit2.Oid(hex=head)
