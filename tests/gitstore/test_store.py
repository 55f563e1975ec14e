"""Plan commits and fan-out in a local bare repository, checked with plain git."""

from __future__ import annotations

import random
from pathlib import Path

import pygit2
import pytest

from qonnect_gitops.gitstore import (
    EMPTY_TREE_HEX,
    DecisionMeta,
    GenerationConflict,
    GitStore,
    StaleRef,
    read_tree_files,
)
from qonnect_gitops.render import PlanFiles

from .helpers import git, plan_files, trailers_of

SRC = "1" * 40


def meta(gen: int, reason: str = "goals-changed", term: int = 3) -> DecisionMeta:
    return DecisionMeta(source=SRC, term=term, generation=gen, reason=reason)  # type: ignore[arg-type]


def decide(store: GitStore, files: dict[str, bytes], gen: int, clusters: list[str], **kw: object):
    return store.write_decision(files, summary=f"Decision {gen}", body="Because the goals changed.",
                                meta=meta(gen), clusters=clusters, timestamp=1_700_000_000 + gen, **kw)  # type: ignore[arg-type]


def test_plan_and_cluster_commits_as_git_sees_them(tmp_path: Path) -> None:
    store = GitStore.init_bare(tmp_path / "r.git")
    files = plan_files(3)
    result = decide(store, files, 1, ["c0", "c1", "c2"])
    repo = tmp_path / "r.git"
    assert git("-C", repo, "rev-parse", "qonnect/plan").strip() == result.plan_commit
    assert trailers_of(repo, "qonnect/plan") == {
        "Qonnect-Source": [SRC], "Qonnect-Term": ["3"], "Qonnect-Generation": ["1"], "Qonnect-Reason": ["goals-changed"],
    }
    assert git("-C", repo, "log", "-1", "--format=%s%n%b", "qonnect/plan").startswith("Decision 1\nBecause the goals changed.")
    for c in range(3):
        branch = f"cluster/c{c}"
        # The very subtree object of the plan commit, not a copy.
        assert git("-C", repo, "rev-parse", f"{branch}^{{tree}}").strip() == \
            git("-C", repo, "rev-parse", f"qonnect/plan:clusters/c{c}").strip()
        assert trailers_of(repo, branch)["Qonnect-Plan"] == [result.plan_commit]
        assert trailers_of(repo, branch)["Qonnect-Generation"] == ["1"]
        assert git("-C", repo, "ls-tree", "-r", "--name-only", branch).split() == ["shop/m0.yaml", "shop/m1.yaml"]
    assert {c.ref for c in result.clusters} == {"refs/heads/cluster/c0", "refs/heads/cluster/c1", "refs/heads/cluster/c2"}
    assert all(c.old is None for c in result.clusters)


def test_nothing_new_writes_nothing(tmp_path: Path) -> None:
    store = GitStore.init_bare(tmp_path / "r.git")
    first = decide(store, plan_files(4), 1, [f"c{i}" for i in range(4)])
    refs_before = {r: str(store.repo.references[r].target) for r in store.repo.references}
    again = decide(store, plan_files(4), 2, [f"c{i}" for i in range(4)])
    assert not again.wrote_anything and again.plan_commit is None and again.plan_head == first.plan_commit
    assert {r: str(store.repo.references[r].target) for r in store.repo.references} == refs_before


def test_one_changed_cluster_gets_exactly_one_commit(tmp_path: Path) -> None:
    store = GitStore.init_bare(tmp_path / "r.git")
    files = plan_files(5)
    first = decide(store, files, 1, [f"c{i}" for i in range(5)])
    files["clusters/c3/shop/m0.yaml"] = b"changed\n"
    second = decide(store, files, 2, [f"c{i}" for i in range(5)])
    assert [c.ref for c in second.clusters] == ["refs/heads/cluster/c3"]
    old = {c.ref: c.new for c in first.clusters}["refs/heads/cluster/c3"]
    assert second.clusters[0].old == old
    repo = tmp_path / "r.git"
    assert git("-C", repo, "rev-parse", "cluster/c3^").strip() == old  # parented on the previous commit
    assert git("-C", repo, "rev-list", "--count", "cluster/c2").strip() == "1"
    assert git("-C", repo, "show", "cluster/c3:shop/m0.yaml") == "changed\n"
    assert trailers_of(repo, "qonnect/plan")["Qonnect-Generation"] == ["2"]


def test_cluster_hosting_nothing_gets_empty_tree_and_prune_limit(tmp_path: Path) -> None:
    store = GitStore.init_bare(tmp_path / "r.git")
    decide(store, plan_files(2), 1, ["c0", "c1"])
    files = {k: v for k, v in plan_files(2).items() if not k.startswith("clusters/c1/")}
    files["placement.yaml"] = b"moved away from c1\n"
    result = decide(store, files, 2, ["c0", "c1", "c9"], prune_limits={"c1": 2})
    repo = tmp_path / "r.git"
    assert {c.ref for c in result.clusters} == {"refs/heads/cluster/c1", "refs/heads/cluster/c9"}
    assert git("-C", repo, "rev-parse", "cluster/c1^{tree}").strip() == EMPTY_TREE_HEX
    t = trailers_of(repo, "cluster/c1")
    assert t["Qonnect-Allow-Empty"] == ["true"] and t["Qonnect-Prune-Limit"] == ["2"]
    assert "Qonnect-Prune-Limit" not in trailers_of(repo, "cluster/c9")
    assert trailers_of(repo, "cluster/c9")["Qonnect-Allow-Empty"] == ["true"]
    assert "Qonnect-Allow-Empty" not in trailers_of(repo, "cluster/c0")
    # The plan commit records what the fan-out needs to be replayed.
    plan = trailers_of(repo, "qonnect/plan")
    assert plan["Qonnect-Empty-Cluster"] == ["c1", "c9"] and plan["Qonnect-Prune-Limit"] == ["c1=2"]


def test_a_decision_that_empties_a_cluster_says_how_many_files_it_removes(tmp_path: Path) -> None:
    """An agent holds an empty tree to its prune limit like any other (Allow-Empty only says
    the emptiness is intended), so whoever writes the emptying commit writes the limit too,
    even when the caller passed none or too small a one."""
    store = GitStore.init_bare(tmp_path / "r.git")
    decide(store, plan_files(3, manifests=3), 1, ["c0", "c1", "c2"])
    files = {k: v for k, v in plan_files(3, manifests=3).items() if not k.startswith(("clusters/c1/", "clusters/c2/"))}
    files["placement.yaml"] = b"moved away from c1 and c2\n"
    decide(store, files, 2, ["c0", "c1", "c2"], prune_limits={"c2": 1})
    repo = tmp_path / "r.git"
    for cluster in ("c1", "c2"):
        t = trailers_of(repo, f"cluster/{cluster}")
        assert t["Qonnect-Allow-Empty"] == ["true"] and t["Qonnect-Prune-Limit"] == ["3"], (cluster, t)


def test_same_inputs_same_ids_whatever_the_order(tmp_path: Path) -> None:
    files = plan_files(6, manifests=3)
    items = list(files.items())
    random.Random(7).shuffle(items)
    a = decide(GitStore.init_bare(tmp_path / "a.git"), files, 1, [f"c{i}" for i in range(6)])
    b = decide(GitStore.init_bare(tmp_path / "b.git"), dict(items), 1, [f"c{i}" for i in reversed(range(6))])
    assert a.plan_commit == b.plan_commit
    assert a.clusters == b.clusters
    c = decide(GitStore.init_bare(tmp_path / "c.git"), files, 1, [f"c{i}" for i in range(6)],
               prune_limits={})
    assert c.plan_commit == a.plan_commit
    # A different timestamp is a different commit, with the same tree.
    d = GitStore.init_bare(tmp_path / "d.git")
    r = d.write_decision(files, summary="Decision 1", body="Because the goals changed.", meta=meta(1),
                         clusters=[], timestamp=5)
    assert r.plan_commit != a.plan_commit
    assert d.repo[r.plan_commit].tree_id == GitStore(tmp_path / "a.git").repo[a.plan_commit].tree_id


class _Untouchable(tuple):  # type: ignore[type-arg]
    """A cluster's (path, bytes) pairs that fail the test when anything walks them."""

    def __iter__(self):  # type: ignore[no-untyped-def]
        raise AssertionError("the paths of a cluster that did not change were walked")


def _grouped(files: dict[str, bytes], untouched: tuple[str, ...] = ()) -> PlanFiles:
    """``files`` grouped by cluster as render gives them; ``untouched`` clusters must not be walked."""
    clusters: dict[str, list[tuple[str, bytes]]] = {}
    for path, data in files.items():
        if path.startswith("clusters/"):
            _, name, inside = path.split("/", 2)
            clusters.setdefault(name, []).append((inside, data))
    return PlanFiles({p: b for p, b in files.items() if not p.startswith("clusters/")},
                     {name: (_Untouchable if name in untouched else tuple)(sorted(pairs))
                      for name, pairs in clusters.items()})


def test_decisions_from_grouped_files_are_the_commits_of_flat_files(tmp_path: Path) -> None:
    """The leader writes render's files grouped by cluster: the same commits and refs as the
    same files given flat, and a decision that changes one cluster does not walk the
    paths of the others."""
    flat, grouped = GitStore.init_bare(tmp_path / "flat.git"), GitStore.init_bare(tmp_path / "grouped.git")
    names = [f"c{i}" for i in range(6)]

    def both(files: dict[str, bytes], gen: int, clusters: list[str], untouched: tuple[str, ...] = (),
             **kw: object) -> tuple[object, object]:
        a = decide(flat, files, gen, clusters, **kw)
        b = decide(grouped, _grouped(files, untouched), gen, clusters, **kw)  # type: ignore[arg-type]
        assert a == b
        refs = {r: str(flat.repo.references[r].target) for r in flat.repo.references}
        assert refs == {r: str(grouped.repo.references[r].target) for r in grouped.repo.references}
        return a, b

    files = plan_files(6, manifests=3)
    both(files, 1, names)
    files["clusters/c3/shop/m1.yaml"] = b"changed\n"
    files["placement.yaml"] = b"c3 changed\n"
    second, _ = both(files, 2, names, untouched=("c0", "c1", "c2", "c4", "c5"))
    assert [c.ref for c in second.clusters] == ["refs/heads/cluster/c3"]  # type: ignore[attr-defined]
    assert git("-C", tmp_path / "grouped.git", "show", "cluster/c3:shop/m1.yaml") == "changed\n"
    # c1 emptied (with a prune limit), c9 new and empty, c7 new with files.
    files = {p: b for p, b in files.items() if not p.startswith("clusters/c1/")}
    files["clusters/c7/shop/m0.yaml"] = b"new\n"
    third, _ = both(files, 3, [*names, "c7", "c9"], untouched=("c0", "c2", "c3", "c4", "c5"),
                    prune_limits={"c1": 3})
    assert {c.ref.rsplit("/", 1)[1] for c in third.clusters} == {"c1", "c7", "c9"}  # type: ignore[attr-defined]
    # A store that did not write the plan in force (a new leader) reads it back: the same commits.
    flat, grouped = GitStore(tmp_path / "flat.git"), GitStore(tmp_path / "grouped.git")
    files["clusters/c9/shop/m0.yaml"] = b"now hosting\n"
    fourth, _ = both(files, 4, [*names, "c7", "c9"])
    assert [c.ref for c in fourth.clusters] == ["refs/heads/cluster/c9"]  # type: ignore[attr-defined]
    with pytest.raises(GenerationConflict):
        decide(grouped, _grouped(plan_files(2, tag="v9")), 4, names)  # type: ignore[arg-type]


def test_generation_must_increase(tmp_path: Path) -> None:
    store = GitStore.init_bare(tmp_path / "r.git")
    decide(store, plan_files(1), 5, ["c0"])
    with pytest.raises(GenerationConflict):
        decide(store, plan_files(1, tag="v2"), 5, ["c0"])


def test_expected_plan_is_compare_and_swap(tmp_path: Path) -> None:
    store = GitStore.init_bare(tmp_path / "r.git")
    first = decide(store, plan_files(1), 1, ["c0"])
    decide(store, plan_files(1, tag="v2"), 2, ["c0"], expected_plan=first.plan_commit)
    head = store.plan_head()
    with pytest.raises(StaleRef) as err:
        decide(store, plan_files(1, tag="v3"), 3, ["c0"], expected_plan=first.plan_commit)
    assert "refs/heads/qonnect/plan" in err.value.refs
    assert store.plan_head() == head


def test_a_held_ref_lock_is_a_stale_ref(tmp_path: Path) -> None:
    store = GitStore.init_bare(tmp_path / "r.git")
    decide(store, plan_files(1), 1, ["c0"])
    head = store.plan_head()
    lock = tmp_path / "r.git" / "refs" / "heads" / "qonnect" / "plan.lock"
    lock.write_text("held by another writer\n")  # what git or another process holds while updating
    with pytest.raises(StaleRef, match="locked"):
        decide(store, plan_files(1, tag="v2"), 2, ["c0"])
    lock.unlink()
    assert store.plan_head() == head


def test_interrupted_fan_out_is_completed_identically(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clusters = [f"c{i}" for i in range(4)]
    files = {k: v for k, v in plan_files(4).items() if not k.startswith("clusters/c2/")}
    reference = GitStore.init_bare(tmp_path / "ref.git")
    expected = decide(reference, files, 1, clusters, prune_limits={"c2": 0})

    store = GitStore.init_bare(tmp_path / "crash.git")

    def crash(self: GitStore, *args: object) -> None:
        raise KeyboardInterrupt("leader died between plan commit and fan-out")

    monkeypatch.setattr(GitStore, "_move_clusters", crash)
    with pytest.raises(KeyboardInterrupt):
        decide(store, files, 1, clusters, prune_limits={"c2": 0})
    monkeypatch.undo()
    assert store.plan_head() == expected.plan_commit
    assert store.cluster_head("c0") is None
    # A later leader knows only the plan branch.
    recovered = GitStore(tmp_path / "crash.git").fan_out(store.plan_head())
    assert tuple(recovered) == expected.clusters  # same commits, same ids, empty c2 with its prune limit
    assert GitStore(tmp_path / "crash.git").fan_out(store.plan_head()) == []


def test_fan_out_after_a_forge_merge_uses_the_merged_trailers(tmp_path: Path) -> None:
    store = GitStore.init_bare(tmp_path / "r.git")
    first = decide(store, plan_files(2), 1, ["c0", "c1"])
    prop = store.propose("p2", plan_files(2, tag="v2"), summary="Move things", description="# Why\n\nBecause.",
                         meta=meta(2, "rescheduling"), clusters=["c0", "c1"], timestamp=1_700_000_100)
    assert prop is not None
    # A forge merges the pull request with a merge commit on the plan branch.
    repo = store.repo
    sig = pygit2.Signature("Forge", "forge@example.org", 1_700_000_200, 0)
    merge = repo.create_commit(None, sig, sig, "Merge pull request #7 from qonnect/proposals/p2\n",
                               repo[pygit2.Oid(hex=prop.commit)].tree_id,
                               [pygit2.Oid(hex=first.plan_commit), pygit2.Oid(hex=prop.commit)])
    repo.references.create("refs/heads/qonnect/plan", merge, force=True)
    changes = store.catch_up()
    assert len(changes) == 2 and store.catch_up() == []
    t = trailers_of(tmp_path / "r.git", "cluster/c0")
    assert t["Qonnect-Plan"] == [str(merge)] and t["Qonnect-Reason"] == ["rescheduling"]
    assert read_tree_files(repo, "cluster/c1")["shop/m0.yaml"].endswith(b"tag: v2\n")


def _eight_clusters(tag: str, changed: str, placement: str) -> PlanFiles:
    """A plan of eight clusters (two manifests each) as render gives it, ``changed`` the
    one whose files are tagged ``tag``."""
    clusters = {f"c{i}": tuple((f"shop/m{m}.yaml", f"c{i} {m} {tag if f'c{i}' == changed else 'v1'}".encode())
                               for m in range(2)) for i in range(8)}
    return PlanFiles({"placement.yaml": placement.encode()}, clusters)


def test_the_same_decisions_written_into_two_repositories_leave_each_whole(tmp_path: Path) -> None:
    """The tree memos serve every repository a process writes: the same decisions (equal
    trees) written into one repository and then into another, one changed cluster at a
    time, must leave each holding every object its refs reach. Written first with an
    other plan file (the same clusters trees under a new root), starting from each of the
    first repository's decisions in turn, so whichever tree a process-wide memo held
    longest is met again (the 303374f code raised KeyError for the new clusters tree)."""
    clusters = [f"c{i}" for i in range(8)]
    decisions = [(f"v{gen}", f"c{gen % 7}") for gen in range(1, 21)]  # more than a memo keeps
    for start in range(len(decisions)):
        first, second = (GitStore.init_bare(tmp_path / f"{start}-{n}.git") for n in ("a", "b"))
        previous: PlanFiles = PlanFiles({}, {})
        for gen, (tag, changed) in enumerate(decisions, start=1):
            files = _eight_clusters(tag, changed, f"plan {tag}\n")
            result = decide(first, files, gen, clusters)
            moved = {change.ref.rpartition("/")[2] for change in result.clusters}
            assert moved == {c for c in clusters if files.cluster(c) != previous.cluster(c)}
            previous = files
        for gen, (tag, changed) in enumerate(decisions[start:], start=1):
            decide(second, _eight_clusters(tag, changed, f"other plan {tag}\n"), gen, clusters)
        for store in (first, second):
            git("-C", store.repo.path, "fsck", "--full", "--strict", "--no-dangling")
            assert read_tree_files(store.repo, "cluster/c5") == previous.cluster("c5")
            assert read_tree_files(store.repo, "cluster/c6") == previous.cluster("c6")
