"""The GitDaemon helper, and smart HTTP with basic-auth credentials."""

from __future__ import annotations

import socket
from pathlib import Path

import pygit2
import pytest

from qonnect_gitops.gitstore import DecisionMeta, RemoteError
from qonnect_gitops.gitstore.daemon import GitDaemon
from qonnect_gitops.gitstore.remote import Mirror, credentials_from_env, fetch_branch

from .helpers import git, plan_files, seed_goals
from .http_backend import GitHttpServer


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def test_git_daemon_serves_and_stops(tmp_path: Path) -> None:
    bare = tmp_path / "r.git"
    git("init", "-q", "--bare", "-b", "main", bare)
    commit = seed_goals(bare, {"a.txt": "a\n"})
    daemon = GitDaemon(tmp_path)
    with daemon:
        assert daemon.running and _accepts(daemon.port)
        assert git("ls-remote", daemon.url("r.git"), "refs/heads/main").split()[0] == commit
        # receive-pack is enabled: plain git can push through it.
        work = tmp_path / "r.git.work"
        git("push", "-q", daemon.url("r.git"), "HEAD:refs/heads/other", cwd=work)
        assert git("-C", bare, "rev-parse", "other").strip() == commit
    assert not daemon.running and not _accepts(daemon.port)


def test_smart_http_with_basic_auth(tmp_path: Path) -> None:
    srv = tmp_path / "srv"
    srv.mkdir()
    bare = srv / "goals.git"
    git("init", "-q", "--bare", "-b", "main", bare)
    git("-C", bare, "config", "http.receivepack", "true")
    seed_goals(bare, {"qonnect.yaml": "x: 1\n"})
    with GitHttpServer(srv, "qonnect", "s3cret-token") as http:
        url = http.url("goals.git")
        creds = credentials_from_env({"QONNECT_GIT_USERNAME": "qonnect", "QONNECT_GIT_TOKEN": "s3cret-token"})
        assert isinstance(creds, pygit2.UserPass)
        lead = Mirror(tmp_path / "lead.git", url, creds)
        lead.fetch()
        source = lead.main_commit()
        assert source is not None
        lead.store.write_decision(plan_files(2), summary="Over HTTP", body="b", clusters=["c0", "c1"],
                                  meta=DecisionMeta(source, 0, 1, "goals-changed"), timestamp=1_700_000_000)
        lead.publish()
        assert git("-C", bare, "rev-parse", "cluster/c1").strip() == lead.store.cluster_head("c1")
        agent = fetch_branch(tmp_path / "agent.git", url, "cluster/c1", creds)
        assert agent == lead.store.cluster_head("c1")
        assert any(path.endswith("git-receive-pack") and status == 200 for _, path, status in http.requests)
        assert not any(status == 401 for _, _, status in http.requests)  # the token went with every request

        with pytest.raises(RemoteError):
            Mirror(tmp_path / "intruder.git", url, pygit2.UserPass("qonnect", "wrong")).fetch()
        with pytest.raises(RemoteError):
            Mirror(tmp_path / "anonymous.git", url).fetch()
        assert any(status == 401 for _, _, status in http.requests)  # auth really is demanded
