"""Trees straight from the object database: determinism, path hygiene, reading what git wrote."""

from __future__ import annotations

import random
from pathlib import Path

import pygit2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qonnect_gitops.gitstore import (
    EMPTY_TREE_HEX,
    InvalidPath,
    RevisionNotFound,
    build_tree,
    read_tree_files,
)
from qonnect_gitops.gitstore.objects import ObjectBatch
from qonnect_gitops.gitstore.tree import list_tree_paths, tree_id_of

from .helpers import git, seed_goals

_name = st.text(alphabet="abcdefghij-_.0123456789", min_size=1, max_size=6).filter(lambda s: s not in (".", ".."))
_paths = st.lists(_name, min_size=1, max_size=4).map("/".join)


def _prefix_free(files: dict[str, bytes]) -> dict[str, bytes]:
    # A path cannot be a file and a directory at once; drop the offenders.
    keys = sorted(files)
    return {k: files[k] for k in keys if not any(o.startswith(k + "/") for o in keys)}


@settings(max_examples=40, deadline=None)
@given(st.dictionaries(_paths, st.binary(max_size=40), max_size=12), st.randoms())
def test_tree_id_ignores_dict_order(tmp_path_factory: pytest.TempPathFactory, files: dict[str, bytes],
                                    rnd: random.Random) -> None:
    files = _prefix_free(files)
    repo = pygit2.init_repository(str(tmp_path_factory.mktemp("r")), bare=True)
    items = list(files.items())
    rnd.shuffle(items)
    assert build_tree(repo, files) == build_tree(repo, dict(items))
    # ... and the tree holds exactly those files.
    sig = pygit2.Signature("t", "t@t", 1, 0)
    commit = repo.create_commit("refs/heads/x", sig, sig, "x", build_tree(repo, dict(items)), [])
    assert read_tree_files(repo, str(commit)) == files


def _reference_tree(repo: pygit2.Repository, files: dict[str, bytes]) -> pygit2.Oid:
    # libgit2's own TreeBuilder, as the independent reference for ids and entry order.
    dirs: dict[str, dict[str, bytes]] = {}
    blobs = {k: v for k, v in files.items() if "/" not in k}
    for path, data in files.items():
        if "/" in path:
            head, rest = path.split("/", 1)
            dirs.setdefault(head, {})[rest] = data
    builder = repo.TreeBuilder()
    for name, data in blobs.items():
        builder.insert(name, repo.create_blob(data), pygit2.enums.FileMode.BLOB)
    for name, sub in dirs.items():
        builder.insert(name, _reference_tree(repo, sub), pygit2.enums.FileMode.TREE)
    return builder.write()


@settings(max_examples=40, deadline=None)
@given(st.dictionaries(_paths, st.binary(max_size=40), max_size=12))
def test_tree_ids_match_libgit2(tmp_path_factory: pytest.TempPathFactory, files: dict[str, bytes]) -> None:
    files = _prefix_free(files)
    files.update({"a-b": b"1", "a.b": b"2", "a0": b"3", "a/x": b"4"})  # '/'-sorting edge cases
    files = _prefix_free(files)
    repo = pygit2.init_repository(str(tmp_path_factory.mktemp("r")), bare=True)
    assert build_tree(repo, files) == _reference_tree(repo, files)


@settings(max_examples=40, deadline=None)
@given(st.dictionaries(_paths, st.binary(max_size=40), max_size=12))
def test_tree_id_in_memory_is_the_written_one(tmp_path_factory: pytest.TempPathFactory,
                                              files: dict[str, bytes]) -> None:
    """What an idle cycle compares with the plan commit, without writing or reading a blob."""
    files = _prefix_free(files)
    repo = pygit2.init_repository(str(tmp_path_factory.mktemp("r")), bare=True)
    assert tree_id_of(files) == _reference_tree(repo, files)
    sig = pygit2.Signature("t", "t@t", 1, 0)
    commit = repo.create_commit("refs/heads/x", sig, sig, "x", build_tree(repo, files), [])
    assert list_tree_paths(repo, str(commit)) == set(read_tree_files(repo, str(commit)))


def test_incremental_build_reuses_unchanged_subtrees(tmp_path: Path) -> None:
    repo = pygit2.init_repository(str(tmp_path), bare=True)
    files = {f"clusters/c{i}/m{j}.yaml": f"{i}/{j}".encode() for i in range(50) for j in range(3)}
    base = build_tree(repo, files)
    files["clusters/c7/m1.yaml"] = b"changed"
    batch = ObjectBatch(repo)
    new = build_tree(repo, files, base=base, batch=batch)
    assert len(batch) == 4  # the new blob and the three trees above it: c7, clusters, root
    batch.flush()
    assert new == build_tree(repo, files)  # same id as a build from scratch
    assert read_tree_files(repo, _commit(repo, new), "clusters/c7")["clusters/c7/m1.yaml"] == b"changed"


def test_a_cluster_directory_seen_before_is_neither_hashed_nor_written_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Hashing a decision that changed one cluster hashes that cluster's blobs only; the ids
    stay those of a build from scratch, and a repository that never got the recalled
    directories still gets them written."""
    from qonnect_gitops.gitstore import tree as tree_module

    files = {f"clusters/c{i}/ns/m{j}.yaml": f"{i}/{j}".encode() for i in range(40) for j in range(3)}
    files["placement.yaml"] = b"v1"
    first = tree_id_of(files)
    hashed: list[bytes] = []
    real = tree_module.object_id

    def counting(kind: int, data: bytes) -> bytes:
        if kind == tree_module.BLOB:
            hashed.append(data)
        return real(kind, data)

    monkeypatch.setattr(tree_module, "object_id", counting)
    changed = dict(files)
    changed["clusters/c7/ns/m1.yaml"] = b"changed"
    changed["placement.yaml"] = b"v2"
    assert tree_id_of(files) == first
    assert hashed == [b"v1"]  # the top-level file; every cluster directory was recalled
    hashed.clear()
    second = tree_id_of(changed)
    assert sorted(hashed) == sorted([b"v2", b"7/0", b"changed", b"7/2"])
    fresh_repo = pygit2.init_repository(str(tmp_path / "fresh"), bare=True)
    assert second == _reference_tree(fresh_repo, changed)
    # Recalled from the hashing above, but never written into this repository: written now.
    other = pygit2.init_repository(str(tmp_path / "other"), bare=True)
    written = build_tree(other, changed)
    assert written == second
    assert read_tree_files(other, _commit(other, written)) == changed
    # A bad path is refused even inside a directory whose other files were seen before.
    bad = dict(changed)
    bad["clusters/c3/../escape.yaml"] = b"x"
    with pytest.raises(InvalidPath):
        tree_id_of(bad)


def _commit(repo: pygit2.Repository, tree: pygit2.Oid) -> str:
    sig = pygit2.Signature("t", "t@t", 1, 0)
    return str(repo.create_commit(None, sig, sig, "t", tree, []))


def test_empty_mapping_is_the_empty_tree(tmp_path: Path) -> None:
    repo = pygit2.init_repository(str(tmp_path), bare=True)
    assert str(build_tree(repo, {})) == EMPTY_TREE_HEX


@pytest.mark.parametrize("bad", ["/abs", "a//b", "a/../b", "./a", "a/", "", ".git/config", "a\\b"])
def test_bad_paths_are_refused(tmp_path: Path, bad: str) -> None:
    repo = pygit2.init_repository(str(tmp_path), bare=True)
    with pytest.raises(InvalidPath):
        build_tree(repo, {bad: b"x"})


def test_file_and_directory_clash_is_refused(tmp_path: Path) -> None:
    repo = pygit2.init_repository(str(tmp_path), bare=True)
    with pytest.raises(InvalidPath):
        build_tree(repo, {"a": b"1", "a/b": b"2"})


def test_read_goals_that_plain_git_committed(tmp_path: Path) -> None:
    bare = tmp_path / "goals.git"
    git("init", "-q", "--bare", "-b", "main", bare)
    first = seed_goals(bare, {"qonnect.yaml": "a: 1\n", "apps/shop/app.yaml": "x\n", "apps/shop/manifests/d.yaml": "d\n"})
    second = seed_goals(bare, {"apps/shop/app.yaml": "y\n"})
    assert read_tree_files(bare, first) == {
        "qonnect.yaml": b"a: 1\n",
        "apps/shop/app.yaml": b"x\n",
        "apps/shop/manifests/d.yaml": b"d\n",
    }
    # By branch name, by abbreviated id, and under a prefix (paths stay repo-relative).
    assert read_tree_files(bare, "main")["apps/shop/app.yaml"] == b"y\n"
    assert read_tree_files(str(bare), second[:10], prefix="apps/shop/manifests") == {"apps/shop/manifests/d.yaml": b"d\n"}
    assert read_tree_files(bare, "main", prefix="nope") == {}
    with pytest.raises(RevisionNotFound):
        read_tree_files(bare, "no-such-branch")


class _Untouchable(tuple):  # type: ignore[type-arg]
    """A directory's (path, bytes) pairs that fail the test when anything walks them."""

    def __iter__(self):  # type: ignore[no-untyped-def]
        raise AssertionError("the paths of a directory that did not change were walked")


def _flat(loose: dict[str, bytes], clusters: dict[str, tuple[tuple[str, bytes], ...]]) -> dict[str, bytes]:
    return {**loose, **{f"clusters/{name}/{path}": data for name, files in clusters.items()
                        for path, data in tuple.__iter__(files)}}


def test_grouped_files_reuse_an_unchanged_directory_without_walking_it(tmp_path: Path) -> None:
    """A plan grouped by cluster (as render gives it): a cluster whose files are the ones of
    the last build keeps its tree id without a walk over its paths, a changed file is
    written, and every id is the one the flat mapping and libgit2 give."""
    from qonnect_gitops.gitstore.tree import tree_ids_under
    from qonnect_gitops.render import PlanFiles

    repo = pygit2.init_repository(str(tmp_path / "r"), bare=True)
    clusters = {f"g{i}": tuple((f"ns/m{j}.yaml", f"g{i}/{j}".encode()) for j in range(3)) for i in range(40)}
    base = build_tree(repo, PlanFiles({"placement.yaml": b"v1"}, clusters))
    flat_repo = pygit2.init_repository(str(tmp_path / "flat"), bare=True)
    assert base == build_tree(flat_repo, _flat({"placement.yaml": b"v1"}, clusters))
    assert base == _reference_tree(pygit2.init_repository(str(tmp_path / "ref"), bare=True),
                                   _flat({"placement.yaml": b"v1"}, clusters))

    changed = {name: _Untouchable(files) for name, files in clusters.items()}
    changed["g7"] = (("ns/m0.yaml", b"g7/0"), ("ns/m1.yaml", b"changed"), ("ns/m2.yaml", b"g7/2"))
    grouped = PlanFiles({"placement.yaml": b"v2"}, changed)
    batch = ObjectBatch(repo)
    new = build_tree(repo, grouped, base=base, batch=batch)
    # The new blobs (placement.yaml, g7's m1) and the trees above m1: g7/ns, g7, clusters, root.
    assert len(batch) == 6
    assert tree_id_of(grouped) == new
    assert tree_ids_under(grouped, "clusters")["g3"] == tree_ids_under(
        PlanFiles({}, clusters), "clusters")["g3"]
    batch.flush()
    flat = _flat({"placement.yaml": b"v2"}, changed)
    assert new == build_tree(flat_repo, flat)
    assert new == _reference_tree(pygit2.init_repository(str(tmp_path / "ref2"), bare=True), flat)
    assert read_tree_files(repo, _commit(repo, new)) == flat


def test_grouped_files_are_checked_like_flat_ones(tmp_path: Path) -> None:
    from qonnect_gitops.render import PlanFiles

    repo = pygit2.init_repository(str(tmp_path), bare=True)
    with pytest.raises(InvalidPath):
        build_tree(repo, PlanFiles({}, {"..": (("m.yaml", b"x"),)}))
    with pytest.raises(InvalidPath):
        build_tree(repo, PlanFiles({}, {"g1": (("ns/../../escape.yaml", b"x"),)}))
    with pytest.raises(InvalidPath):  # a file where the grouped directory is
        build_tree(repo, PlanFiles({"clusters/g1": b"x"}, {"g1": (("m.yaml", b"x"),)}))


def test_a_grouped_mapping_hashed_and_written_once_is_written_whole_elsewhere(tmp_path: Path) -> None:
    """What hashing and writing a grouped mapping found out is reused for the same mapping,
    and never stands for objects a repository does not have."""
    from qonnect_gitops.gitstore.tree import tree_ids_under
    from qonnect_gitops.render import PlanFiles

    clusters = {f"h{i}": tuple((f"ns/m{j}.yaml", f"h{i}/{j}/{tmp_path}".encode()) for j in range(2))
                for i in range(300)}  # a clusters tree large enough to be remembered by id
    grouped = PlanFiles({"placement.yaml": b"p"}, clusters)
    flat = _flat({"placement.yaml": b"p"}, clusters)
    hashed = tree_id_of(grouped)
    assert tree_ids_under(grouped, "clusters")["h5"] == tree_id_of(flat, "clusters/h5")
    first = pygit2.init_repository(str(tmp_path / "first"), bare=True)
    assert build_tree(first, grouped) == hashed
    again = dict(clusters, h5=(("ns/m0.yaml", b"changed"),))
    new = build_tree(first, PlanFiles({"placement.yaml": b"p"}, again), base=hashed)
    assert read_tree_files(first, _commit(first, new)) == _flat({"placement.yaml": b"p"}, again)
    other = pygit2.init_repository(str(tmp_path / "other"), bare=True)
    assert build_tree(other, grouped) == hashed
    assert read_tree_files(other, _commit(other, hashed)) == flat
    with pytest.raises(KeyError):  # a base this repository does not have is refused, even if remembered
        build_tree(pygit2.init_repository(str(tmp_path / "third"), bare=True), grouped, base=new)
