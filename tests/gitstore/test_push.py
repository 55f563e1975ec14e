"""The mirror's pushes: the git command line (explicit refspecs and branch patterns) and
the libgit2 path, each ref a compare-and-swap against what the mirror last saw."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from qonnect_gitops.gitstore import DecisionMeta, FanOutStale, RemoteError, StaleRef, gitcli
from qonnect_gitops.gitstore.daemon import free_ports
from qonnect_gitops.gitstore.remote import Mirror, narrow_fetch

from .helpers import Served, git, plan_files


def decide(mirror: Mirror, n: int, gen: int, tag: str = "v1") -> None:
    source = mirror.main_commit()
    assert source is not None
    mirror.store.write_decision(plan_files(n, tag=tag), summary=f"Decision {gen}", body="b",
                                meta=DecisionMeta(source, 1, gen, "goals-changed"),
                                clusters=[f"c{i}" for i in range(n)], timestamp=1_700_000_000 + gen)


def remote_head(served: Served, ref: str) -> str:
    return git("ls-remote", served.url, ref).split()[0]


@pytest.mark.parametrize("clusters", [3, gitcli.EXPLICIT_REFSPECS_MAX + 6])
def test_a_branch_moved_behind_the_mirrors_back_loses_and_the_rest_lands(
        served: Served, tmp_path: Path, clusters: int) -> None:
    # Few branches are pushed by name, many under the cluster branch pattern: the lease
    # protects the moved branch either way.
    mirror = Mirror(tmp_path / "m.git", served.url)
    mirror.fetch()
    decide(mirror, clusters, 1)
    mirror.publish()
    human = remote_head(served, "refs/heads/cluster/c0")
    main = remote_head(served, "refs/heads/main")
    served.force(main, "refs/heads/cluster/c1")

    decide(mirror, clusters, 2, tag="v2")
    with pytest.raises(FanOutStale) as err:
        mirror.publish()
    assert list(err.value.refs) == ["refs/heads/cluster/c1"]
    assert remote_head(served, "refs/heads/cluster/c1") == main  # the other writer's commit stands
    assert remote_head(served, "refs/heads/cluster/c0") != human
    assert remote_head(served, "refs/heads/cluster/c0") == mirror.store.cluster_head("c0")
    assert remote_head(served, "refs/heads/qonnect/plan") == mirror.store.plan_head()
    assert [c.ref for c in mirror.pending()] == ["refs/heads/cluster/c1"]

    mirror.fetch()  # the next cycle sees the other writer's commit and writes over it
    assert mirror.store.cluster_head("c1") == main


def test_a_decision_and_its_fan_out_are_one_atomic_push(served: Served, tmp_path: Path) -> None:
    mirror = Mirror(tmp_path / "m.git", served.url)
    mirror.fetch()
    decide(mirror, 3, 1)
    assert mirror.publish().pushes == 1
    # Another leader's plan commit wins the race: the atomic push lands nothing at all,
    # not even the branches whose leases still held.
    main = remote_head(served, "refs/heads/main")
    served.force(main, "refs/heads/qonnect/plan")
    before = {c: remote_head(served, f"refs/heads/cluster/c{c}") for c in range(3)}
    decide(mirror, 3, 2, tag="v2")
    with pytest.raises(StaleRef) as err:
        mirror.publish()
    assert not isinstance(err.value, FanOutStale)
    assert "refs/heads/qonnect/plan" in err.value.refs
    assert remote_head(served, "refs/heads/qonnect/plan") == main
    assert {c: remote_head(served, f"refs/heads/cluster/c{c}") for c in range(3)} == before


def test_a_remote_without_atomic_pushes_gets_two(served: Served, tmp_path: Path) -> None:
    git("-C", served.bare, "config", "receive.advertiseAtomic", "false")
    mirror = Mirror(tmp_path / "m.git", served.url)
    mirror.fetch()
    decide(mirror, 3, 1)
    assert mirror.publish().pushes == 3  # the refused atomic one, then the decision and its fan-out
    assert mirror.pending() == []
    assert remote_head(served, "refs/heads/cluster/c2") == mirror.store.cluster_head("c2")
    decide(mirror, 3, 2, tag="v2")
    assert mirror.publish().pushes == 2  # remembered: no atomic attempt again
    assert remote_head(served, "refs/heads/qonnect/plan") == mirror.store.plan_head()


def test_two_pushes_put_the_decision_out_before_its_fan_out(served: Served, tmp_path: Path) -> None:
    mirror = Mirror(tmp_path / "m.git", served.url)
    mirror.fetch()
    decide(mirror, 3, 1)
    seen: list[tuple[str, str]] = []

    def between() -> None:
        clusters = git("ls-remote", served.url, "refs/heads/cluster/*")
        seen.append((remote_head(served, "refs/heads/qonnect/plan"), clusters))

    # An atomic publish has no "between": nothing is out until everything is.
    assert mirror.publish(between=between).pushes == 1 and seen == []
    decide(mirror, 3, 2, tag="v2")
    old_c0 = remote_head(served, "refs/heads/cluster/c0")
    assert mirror.publish(between=between, atomic=False).pushes == 2
    ((plan, clusters),) = seen
    assert plan == mirror.store.plan_head() and old_c0 in clusters
    assert remote_head(served, "refs/heads/cluster/c0") == mirror.store.cluster_head("c0") != old_c0


def test_a_pattern_push_creates_new_branches_and_updates_the_rest(served: Served, tmp_path: Path) -> None:
    many = gitcli.EXPLICIT_REFSPECS_MAX + 6
    mirror = Mirror(tmp_path / "m.git", served.url)
    mirror.fetch()
    decide(mirror, many, 1)
    mirror.publish()
    decide(mirror, many + 3, 2, tag="v2")  # three clusters join; every branch's files change
    specs = gitcli.refspecs([(c.ref, c.new is None) for c in mirror.pending()], ["refs/heads/cluster/"])
    assert specs == ["refs/heads/cluster/*:refs/heads/cluster/*", "refs/heads/qonnect/plan:refs/heads/qonnect/plan"]
    mirror.publish()
    assert mirror.pending() == []
    names = git("ls-remote", served.url, "refs/heads/cluster/*").split()[1::2]
    assert len(names) == many + 3
    for i in (0, many + 2):
        assert remote_head(served, f"refs/heads/cluster/c{i}") == mirror.store.cluster_head(f"c{i}")


def test_deletions_and_other_refs_stay_explicit_beside_a_pattern() -> None:
    updates = [(f"refs/heads/cluster/c{i}", False) for i in range(gitcli.EXPLICIT_REFSPECS_MAX)]
    updates += [("refs/heads/qonnect/proposals/p1", True), ("refs/qonnect/closed/p1", False)]
    assert gitcli.refspecs(updates, ["refs/heads/cluster/"]) == [
        "refs/heads/cluster/*:refs/heads/cluster/*", ":refs/heads/qonnect/proposals/p1",
        "refs/qonnect/closed/p1:refs/qonnect/closed/p1"]
    few = updates[-2:]
    assert gitcli.refspecs(few, ["refs/heads/cluster/"]) == [
        ":refs/heads/qonnect/proposals/p1", "refs/qonnect/closed/p1:refs/qonnect/closed/p1"]


def test_without_the_command_line_libgit2_pushes_with_the_same_guarantees(
        served: Served, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gitcli, "available", lambda credentials: False)
    mirror = Mirror(tmp_path / "m.git", served.url)
    mirror.fetch()
    decide(mirror, 3, 1)
    assert mirror.publish().pushes == 2
    main = remote_head(served, "refs/heads/main")
    served.force(main, "refs/heads/cluster/c2")
    decide(mirror, 3, 2, tag="v2")
    with pytest.raises(StaleRef) as err:
        mirror.publish()
    assert "refs/heads/cluster/c2" in err.value.refs
    assert remote_head(served, "refs/heads/cluster/c2") == main


def test_an_unreachable_remote_is_a_remote_error_and_nothing_counts_as_pushed(
        served: Served, tmp_path: Path) -> None:
    mirror = Mirror(tmp_path / "m.git", served.url)
    mirror.fetch()
    decide(mirror, 2, 1)
    pending = mirror.pending()
    (port,) = free_ports(1)
    git("-C", tmp_path / "m.git", "remote", "set-url", "origin", f"git://127.0.0.1:{port}/goals.git")
    with pytest.raises(RemoteError):
        mirror.push(pending)
    assert mirror.pending() == pending


def test_porcelain_lines_are_read_by_their_flag() -> None:
    out = ("To git://example/goals.git\n"
           " \trefs/heads/a:refs/heads/a\t1111111..2222222\n"
           "*\trefs/heads/b:refs/heads/b\t[new branch]\n"
           "-\t:refs/heads/c\t[deleted]\n"
           "=\trefs/heads/d:refs/heads/d\t[up to date]\n"
           "!\trefs/heads/e:refs/heads/e\t[rejected] (stale info)\n"
           "!\trefs/heads/f:refs/heads/f\t[remote rejected] (hook declined)\n"
           "Done\n")
    outcome = gitcli.parse_porcelain(out)
    assert outcome.accepted == {"refs/heads/a", "refs/heads/b", "refs/heads/c", "refs/heads/d"}
    assert outcome.rejected == {"refs/heads/e": "[rejected] (stale info)",
                                "refs/heads/f": "[remote rejected] (hook declined)"}


def test_a_git_too_old_for_the_command_line_paths_leaves_them_to_libgit2(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gitcli, "git_version", lambda: (2, 20))
    assert not gitcli.available(None)
    with pytest.raises(gitcli.Unavailable, match=r"git 2\.20 \(needs 2\.31\)"):
        gitcli.fetch(Path("/nonexistent"), "origin", ["+refs/heads/main:refs/heads/main"])
    monkeypatch.setattr(gitcli, "git_version", lambda: ())
    assert not gitcli.available(None)
    monkeypatch.undo()
    assert gitcli.available(None) and not gitcli.available(object())


def test_a_remote_that_looks_like_an_option_is_a_remote(tmp_path: Path) -> None:
    witness = tmp_path / "ran"
    with pytest.raises(RemoteError):
        narrow_fetch(tmp_path / "agent.git", f"--upload-pack=touch {witness}", "cluster/c0")
    with pytest.raises(gitcli.GitFailed):
        gitcli.fetch(tmp_path / "agent.git", f"--upload-pack=touch {witness}", ["+refs/heads/a:refs/heads/a"])
    assert not witness.exists()


def test_without_git_on_the_path_the_mirror_fetches_publishes_and_skips_its_upkeep(
        served: Served, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    gitcli.git_version.cache_clear()
    try:
        assert not gitcli.available(None)
        mirror = Mirror(tmp_path / "m.git", served.url)
        mirror.fetch()  # libgit2; the upkeep after it finds no git and is skipped
        decide(mirror, 3, 1)
        assert mirror.publish().pushes == 2
        assert narrow_fetch(tmp_path / "agent.git", served.url, "cluster/c1").commit == \
            mirror.store.cluster_head("c1")
    finally:
        monkeypatch.undo()
        gitcli.git_version.cache_clear()
    assert remote_head(served, "refs/heads/cluster/c1") == mirror.store.cluster_head("c1")


def test_a_checked_push_lands_whole_or_names_the_refs_elsewhere_than_expected(
        served: Served, tmp_path: Path) -> None:
    many = gitcli.EXPLICIT_REFSPECS_MAX + 6
    mirror = Mirror(tmp_path / "m.git", served.url)
    mirror.fetch()
    decide(mirror, many, 1)
    assert mirror.publish().pushes == 1  # one atomic push, checked by the hook
    seen = Path(mirror.path) / "refs/remotes/origin/heads/cluster/c0"
    assert not seen.exists()  # git wrote no tracking ref; the mirror recorded them packed
    assert mirror.pending() == []
    assert remote_head(served, "refs/heads/cluster/c0") == mirror.store.cluster_head("c0")

    decide(mirror, many, 2, tag="v2")
    main = remote_head(served, "refs/heads/main")
    served.force(main, "refs/heads/cluster/c3")
    before = git("ls-remote", served.url)
    specs = gitcli.refspecs([(c.ref, c.new is None) for c in mirror.pending()], ["refs/heads/cluster/"])
    expected = {c.ref: c.old for c in mirror.pending()}
    outcome = gitcli.push_checked(mirror.path, served.url, specs, expected)
    assert not outcome.accepted and list(outcome.rejected) == ["refs/heads/cluster/c3"]
    assert git("ls-remote", served.url) == before  # nothing landed
    # A branch the pattern would push that the caller did not expect to move is refused too.
    del expected["refs/heads/cluster/c5"]
    expected["refs/heads/cluster/c3"] = main
    outcome = gitcli.push_checked(mirror.path, served.url, specs, expected)
    assert list(outcome.rejected) == ["refs/heads/cluster/c5"]
    assert git("ls-remote", served.url) == before


def test_a_checked_push_keeps_the_url_and_its_credentials_off_the_command_line(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    url = "https://qonnect:s3cr3t-token@git.example.org/fleet/goals.git"
    ran: list[tuple[list[str], dict[str, str]]] = []

    def run(command: list[str], verb: str, credentials: object, timeout: float,
            config: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        ran.append((command, dict(config or {})))
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(gitcli, "_run", run)
    gitcli.push_checked(tmp_path, url, ["refs/heads/cluster/*:refs/heads/cluster/*"], {"refs/heads/cluster/a": None})
    ((command, config),) = ran
    assert not any("s3cr3t" in arg for arg in command)
    assert url in config.values()
    assert "+refs/heads/cluster/*:refs/heads/cluster/*" in command and "--atomic" in command
    env = gitcli._environment(None, config)
    assert url in env.values() and env["GIT_CONFIG_COUNT"] == "1"


def test_where_the_hook_cannot_run_the_big_push_is_leased_as_before(
        served: Served, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    many = gitcli.EXPLICIT_REFSPECS_MAX + 6
    mirror = Mirror(tmp_path / "m.git", served.url)
    mirror.fetch()
    decide(mirror, many, 1)
    real_access = gitcli.os.access
    monkeypatch.setattr(gitcli.os, "access", lambda path, mode: False if str(path).endswith("pre-push")
                        else real_access(path, mode))
    assert mirror.publish().pushes == 1
    assert (Path(mirror.path) / "refs/remotes/origin/heads/cluster/c0").exists()  # git's tracking ref
    assert remote_head(served, "refs/heads/cluster/c0") == mirror.store.cluster_head("c0")
    assert mirror.pending() == []
