"""A fake forge over a real bare repository, for every dialect."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from qonnect_gitops.forge import Forge, connect
from qonnect_gitops.forge.config import ForgeSettings
from qonnect_gitops.forge.fake import FakeForge, FakeForgeConfig, HookTarget
from qonnect_gitops.forge.http import RetryPolicy

DIALECTS = ("github", "gitlab", "gitea")
TOKEN = "t0ken-for-the-fake-forge"
REPOSITORY = "demo/goals"
ENV = {**os.environ, "GIT_AUTHOR_NAME": "operator", "GIT_AUTHOR_EMAIL": "op@example.org",
       "GIT_COMMITTER_NAME": "operator", "GIT_COMMITTER_EMAIL": "op@example.org"}


def git(*args: str | Path, cwd: Path | None = None) -> str:
    return subprocess.run(["git", *map(str, args)], cwd=cwd, env=ENV, capture_output=True, text=True,
                          check=True).stdout.strip()


@dataclass
class Repo:
    """A bare repository with branches ``main`` and ``feature`` (one commit ahead)."""

    bare: Path
    work: Path

    def commit_on(self, branch: str, name: str, text: str) -> str:
        git("checkout", "-q", branch, cwd=self.work)
        (self.work / name).write_text(text)
        git("add", "-A", cwd=self.work)
        git("commit", "-q", "-m", f"{name} on {branch}", cwd=self.work)
        git("push", "-q", "origin", branch, cwd=self.work)
        return git("rev-parse", "HEAD", cwd=self.work)

    def rev(self, ref: str) -> str:
        return git("-C", self.bare, "rev-parse", ref)


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    bare, work = tmp_path / "goals.git", tmp_path / "work"
    git("init", "-q", "--bare", "-b", "main", bare)
    git("init", "-q", "-b", "main", work)
    git("remote", "add", "origin", str(bare), cwd=work)
    r = Repo(bare, work)
    (work / "README").write_text("goals\n")
    git("add", "-A", cwd=work)
    git("commit", "-q", "-m", "first", cwd=work)
    git("push", "-q", "origin", "main", cwd=work)
    git("checkout", "-q", "-b", "feature", cwd=work)
    r.commit_on("feature", "change", "one\n")
    return r


def make_forge(repo: Repo, hooks: tuple[HookTarget, ...] = ()) -> FakeForge:
    return FakeForge(FakeForgeConfig({REPOSITORY: repo.bare}, tokens=(TOKEN,), hooks=hooks))


@pytest.fixture
def fake(repo: Repo) -> Iterator[FakeForge]:
    """The fake forge; a test fails if any request or answer broke a description."""
    with make_forge(repo) as forge:
        yield forge
        assert forge.violations == []


def settings(forge: FakeForge, dialect: str, name: str = "fake", token_file: Path | None = None) -> ForgeSettings:
    """The fake forge as a lead's forges file describes it."""
    return ForgeSettings(name=name, type=dialect, url=forge.url, repository=REPOSITORY,  # type: ignore[arg-type]
                         token_file=token_file)


def forges_file(path: Path, forge: FakeForge, dialect: str, name: str = "fake") -> Path:
    """A lead's ``--forges`` file naming the fake forge, with its token in a file beside it."""
    token = path.with_name(path.name + ".token")
    token.write_text(TOKEN + "\n")
    path.write_text(f"forges:\n  - name: {name}\n    type: {dialect}\n    url: '{forge.url}'\n"
                    f"    repository: {REPOSITORY}\n    tokenFile: {token}\n")
    return path


def client(forge: FakeForge, dialect: str, token: str = TOKEN, policy: RetryPolicy | None = None) -> Forge:
    return connect(settings(forge, dialect), token,
                   policy or RetryPolicy(base_delay=0.05, max_delay=0.2, max_wait=5.0))
