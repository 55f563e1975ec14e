"""An idle agent's poll costs its own branch, not the fleet: protocol v2 ``ls-refs`` of one
ref, through the same servers agents use (git daemon, smart HTTP behind basic auth)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pygit2
import pytest

from qonnect_gitops.agent import source
from qonnect_gitops.gitstore.daemon import GitDaemon
from qonnect_gitops.gitstore.lsrefs import Unsupported, ls_ref
from tests.gitstore.helpers import CountingProxy, git
from tests.gitstore.http_backend import GitHttpServer

BRANCHES = 3000
# One hello, the server's capabilities, one ls-refs request and the one ref: about 500
# bytes, where a v0 fetch first receives every one of the 3,000 refs (over 200 KB).
IDLE_POLL_BYTES = 2048


def _fleet_repo(root: Path) -> tuple[Path, str]:
    """A bare repository with ``BRANCHES`` cluster branches (packed, as a served repository's are)."""
    bare = root / "srv" / "goals.git"
    git("init", "-q", "--bare", "-b", "main", bare)
    repo = pygit2.Repository(str(bare))
    sig = pygit2.Signature("op", "op@example.org", 1_700_000_000, 0)
    tb = repo.TreeBuilder()
    tb.insert("a.yaml", repo.create_blob(b"apiVersion: v1\n"), pygit2.enums.FileMode.BLOB)
    commit = repo.create_commit(None, sig, sig, "plan", tb.write(), [])
    lines = "".join(f"create refs/heads/cluster/edge-{i:05d} {commit}\n" for i in range(BRANCHES))
    subprocess.run(["git", "-C", str(bare), "update-ref", "--stdin"], input=lines.encode(), check=True)
    git("-C", bare, "pack-refs", "--all")
    return bare, str(commit)


def _move(bare: Path, branch: str) -> str:
    repo = pygit2.Repository(str(bare))
    sig = pygit2.Signature("op", "op@example.org", 1_700_000_100, 0)
    old = repo.references[f"refs/heads/{branch}"].target
    tb = repo.TreeBuilder()
    tb.insert("a.yaml", repo.create_blob(b"apiVersion: v2\n"), pygit2.enums.FileMode.BLOB)
    new = repo.create_commit(f"refs/heads/{branch}", sig, sig, "moved", tb.write(), [old])
    return str(new)


@pytest.fixture
def fleet(tmp_path: Path) -> tuple[Path, str]:
    return _fleet_repo(tmp_path)


def test_idle_poll_through_git_daemon_costs_one_ref(fleet: tuple[Path, str], tmp_path: Path) -> None:
    bare, commit = fleet
    with GitDaemon(bare.parent) as daemon, CountingProxy(daemon.port) as proxy:
        url = f"git://127.0.0.1:{proxy.port}/goals.git"
        cache = tmp_path / "agent.git"
        assert source.fetch(cache, url, "cluster/edge-00042") == commit  # first poll: a fetch
        first = proxy.total()
        # Protocol v2 names the one ref: a libgit2 (v0) fetch downloads every branch name
        # first, more than 50 bytes a branch.
        assert first < 50 * BRANCHES / 4, first
        assert source.fetch(cache, url, "cluster/edge-00042") == commit
        idle = proxy.total() - first
        assert 0 < idle <= IDLE_POLL_BYTES
        moved = _move(bare, "cluster/edge-00042")
        before = proxy.total()
        assert source.fetch(cache, url, "cluster/edge-00042") == moved  # a moved branch is fetched
        assert proxy.total() - before < 50 * BRANCHES / 4, proxy.total() - before
        assert pygit2.Repository(str(cache))[moved] is not None
        assert url not in source._V0_REMOTES


def test_idle_poll_over_smart_http_with_credentials(fleet: tuple[Path, str], tmp_path: Path) -> None:
    bare, commit = fleet
    creds = pygit2.UserPass("agent", "s3cret")
    with GitHttpServer(bare.parent, "agent", "s3cret") as server, CountingProxy(server.port) as proxy:
        url = f"http://127.0.0.1:{proxy.port}/goals.git"
        cache = tmp_path / "agent.git"
        assert source.fetch(cache, url, "cluster/edge-00007", creds) == commit
        first = proxy.total()
        assert source.fetch(cache, url, "cluster/edge-00007", creds) == commit
        idle = proxy.total() - first
        # Two requests and their HTTP headers on top of the pkt-lines.
        assert 0 < idle <= IDLE_POLL_BYTES + 1024
        result = ls_ref(url, "refs/heads/cluster/edge-00007", creds)
        assert result.commit == commit and result.received_bytes < IDLE_POLL_BYTES
        assert ls_ref(url, "refs/heads/cluster/nowhere", creds).commit is None
        with pytest.raises(Exception, match="401"):
            ls_ref(url, "refs/heads/cluster/edge-00007", pygit2.UserPass("agent", "wrong"))


def test_a_name_is_matched_exactly_not_as_a_prefix(fleet: tuple[Path, str]) -> None:
    bare, commit = fleet
    moved = _move(bare, "cluster/edge-00010")
    with GitDaemon(bare.parent) as daemon:
        # edge-0001 is a prefix of edge-00010..edge-00019: only the exact name counts.
        assert ls_ref(daemon.url("goals.git"), "refs/heads/cluster/edge-0001").commit is None
        assert ls_ref(daemon.url("goals.git"), "refs/heads/cluster/edge-00010").commit == moved
        assert ls_ref(daemon.url("goals.git"), "refs/heads/cluster/edge-00011").commit == commit


def test_a_remote_without_v2_is_polled_by_fetching(fleet: tuple[Path, str], tmp_path: Path) -> None:
    bare, commit = fleet
    with pytest.raises(Unsupported):
        ls_ref(str(bare), "refs/heads/cluster/edge-00001")
    cache = tmp_path / "agent.git"
    assert source.fetch(cache, str(bare), "cluster/edge-00001") == commit
    assert source.fetch(cache, str(bare), "cluster/edge-00001") == commit
    assert str(bare) in source._V0_REMOTES
    moved = _move(bare, "cluster/edge-00001")
    assert source.fetch(cache, str(bare), "cluster/edge-00001") == moved


def test_a_deleted_branch_is_an_error_not_the_old_commit(fleet: tuple[Path, str], tmp_path: Path) -> None:
    bare, commit = fleet
    with GitDaemon(bare.parent) as daemon:
        url = daemon.url("goals.git")
        cache = tmp_path / "agent.git"
        assert source.fetch(cache, url, "cluster/edge-00003") == commit
        git("-C", bare, "update-ref", "-d", "refs/heads/cluster/edge-00003")
        with pytest.raises(source.SourceError, match="no branch"):
            source.fetch(cache, url, "cluster/edge-00003")
