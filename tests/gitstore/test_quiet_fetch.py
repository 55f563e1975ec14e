"""A lead's fetch when nothing moved: one protocol v2 ``ls-refs`` of the branches others
write, nothing fetched, only the mirror's own refs compared (git daemon, real pushes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from qonnect_gitops.gitstore import DecisionMeta, StaleRef
from qonnect_gitops.gitstore.remote import Mirror

from .helpers import CountingProxy, Served, git, plan_files, seed_goals

CLUSTERS = [f"c{i}" for i in range(200)]  # the names plan_files uses


def decide(mirror: Mirror, gen: int, tag: str, clusters: int = len(CLUSTERS)):
    source = mirror.main_commit()
    assert source is not None
    return mirror.store.write_decision(
        plan_files(clusters, tag=tag), summary=f"Decision {gen}", body="Body.",
        meta=DecisionMeta(source, 1, gen, "goals-changed"), clusters=CLUSTERS[:clusters],
        timestamp=1_700_000_000 + gen)


@pytest.fixture()
def proxy(served: Served):
    with CountingProxy(served.daemon.port) as relay:
        yield relay


def test_an_idle_fetch_costs_hundreds_of_bytes_whatever_the_fleet(served: Served, proxy: CountingProxy,
                                                                   tmp_path: Path) -> None:
    url = f"git://127.0.0.1:{proxy.port}/{served.bare.name}"
    mirror = Mirror(tmp_path / "m.git", url)
    mirror.fetch()
    decide(mirror, 1, "v1")
    mirror.publish()
    before = proxy.total()
    idle = mirror.fetch()
    quiet_bytes = proxy.total() - before
    before = proxy.total()
    mirror.fetch(full=True)
    full_bytes = proxy.total() - before
    # 200 cluster branches are advertised to a full fetch (v0): > 10 KB; the quiet one
    # asks about main, the plan branch and proposals only.
    assert full_bytes > 10_000
    assert quiet_bytes < 2_000, quiet_bytes
    assert idle.received_objects == 0 and idle.commit == served.goals_commit
    assert mirror.pending() == []


def test_a_goals_push_and_a_plan_moved_by_others_are_seen(served: Served, tmp_path: Path) -> None:
    mirror = Mirror(tmp_path / "m.git", served.url)
    mirror.fetch()
    decide(mirror, 1, "v1", 3)
    mirror.publish()
    pushed = seed_goals(served.bare, {"apps/shop/app.yaml": "name: shop\nreplicas: 2\n"})
    assert mirror.fetch().commit == pushed
    assert mirror.read_goals()["apps/shop/app.yaml"].endswith(b"replicas: 2\n")
    # Another writer (a merged pull request) moves the plan branch: the next fetch follows it.
    other = Mirror(tmp_path / "other.git", served.url)
    other.fetch()
    written = decide(other, 2, "v2", 3)
    other.publish()
    mirror.fetch()
    assert mirror.store.plan_head() == written.plan_commit
    assert mirror.store.cluster_head(CLUSTERS[0]) == other.store.cluster_head(CLUSTERS[0])


def test_a_quiet_fetch_drops_what_was_never_published(served: Served, tmp_path: Path) -> None:
    mirror = Mirror(tmp_path / "m.git", served.url)
    mirror.fetch()
    first = decide(mirror, 1, "v1", 3)
    mirror.publish()
    decide(mirror, 2, "v2", 3)  # fenced before its push, say
    assert {c.ref for c in mirror.pending()} >= {"refs/heads/qonnect/plan"}
    mirror.fetch()
    assert mirror.store.plan_head() == first.plan_commit
    assert mirror.store.cluster_head(CLUSTERS[1]) == git("ls-remote", served.url,
                                                          f"refs/heads/cluster/{CLUSTERS[1]}").split()[0]
    assert mirror.pending() == []
    # And the next decision is written and published from there as usual.
    decide(mirror, 2, "v2", 3)
    assert len(mirror.publish().pushed) == 4


def test_a_cluster_branch_moved_behind_the_leaders_back_costs_one_lost_race(served: Served, tmp_path: Path) -> None:
    mirror = Mirror(tmp_path / "m.git", served.url)
    mirror.fetch()
    first = decide(mirror, 1, "v1", 3)
    mirror.publish()
    # Someone resets a cluster branch on the server; the quiet fetch cannot see it ...
    git("-C", served.bare, "update-ref", f"refs/heads/cluster/{CLUSTERS[2]}", str(first.plan_commit))
    mirror.fetch()
    decide(mirror, 2, "v2", 3)
    with pytest.raises(StaleRef):
        mirror.publish()  # ... but the compare-and-swap of the push does
    # The next fetch is a full one again: the retried cycle publishes.
    mirror.fetch()
    assert mirror.store.cluster_head(CLUSTERS[2]) == first.plan_commit
    decide(mirror, 2, "v2", 3)
    mirror.publish()
    assert git("ls-remote", served.url, f"refs/heads/cluster/{CLUSTERS[2]}").split()[0] == \
        mirror.store.cluster_head(CLUSTERS[2])


def test_distrust_makes_the_next_fetch_full(served: Served, proxy: CountingProxy, tmp_path: Path) -> None:
    url = f"git://127.0.0.1:{proxy.port}/{served.bare.name}"
    mirror = Mirror(tmp_path / "m.git", url)
    mirror.fetch()
    decide(mirror, 1, "v1")
    mirror.publish()
    mirror.distrust()  # a new term: another leader may have written
    before = proxy.total()
    mirror.fetch()
    assert proxy.total() - before > 10_000


def test_a_goals_push_fetches_main_alone(served: Served, proxy: CountingProxy, tmp_path: Path) -> None:
    url = f"git://127.0.0.1:{proxy.port}/{served.bare.name}"
    mirror = Mirror(tmp_path / "m.git", url)
    mirror.fetch()
    first = decide(mirror, 1, "v1")
    mirror.publish()
    decide(mirror, 2, "v2")  # never published: the fetch drops it, as any fetch does
    pushed = seed_goals(served.bare, {"apps/shop/app.yaml": "name: shop\nreplicas: 3\n"})
    before = proxy.total()
    assert mirror.fetch().commit == pushed
    # Asked for main alone (protocol v2): a fetch that lists the 200 cluster branches
    # moves more than 10 KB (test_an_idle_fetch_costs_hundreds_of_bytes_whatever_the_fleet).
    assert proxy.total() - before < 5_000, proxy.total() - before
    assert mirror.read_goals()["apps/shop/app.yaml"].endswith(b"replicas: 3\n")
    assert mirror.store.plan_head() == first.plan_commit and mirror.pending() == []


def test_proposals_opened_and_closed_by_another_leader_are_followed(served: Served, tmp_path: Path) -> None:
    mirror = Mirror(tmp_path / "m.git", served.url)
    mirror.fetch()
    other = Mirror(tmp_path / "other.git", served.url)
    other.fetch()
    source = other.main_commit()
    assert source is not None
    other.store.propose("p1", plan_files(1), summary="P1", description="d", clusters=["c0"],
                        timestamp=1_700_000_001, meta=DecisionMeta(source, 1, 1, "goals-changed"))
    other.publish()
    mirror.fetch()
    assert "refs/heads/qonnect/proposals/p1" in mirror.repo.references
    other.store.close_proposal("p1", "superseded", timestamp=1_700_000_002)
    other.publish()
    mirror.fetch()  # the deletion is pruned, the closed record arrives
    refs = set(mirror.repo.references)
    assert "refs/heads/qonnect/proposals/p1" not in refs
    assert "refs/remotes/origin/heads/qonnect/proposals/p1" not in refs
    assert any(r.startswith("refs/qonnect/closed/") for r in refs)
