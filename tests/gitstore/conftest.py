"""Fixtures of the gitstore tests: bare repositories served by ``git daemon`` on loopback."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from qonnect_gitops.gitstore.daemon import GitDaemon

from .helpers import Served, git, seed_goals


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    srv = tmp_path / "srv"
    srv.mkdir()
    bare = srv / "goals.git"
    git("init", "-q", "--bare", "-b", "main", bare)
    commit = seed_goals(bare, {"qonnect.yaml": "review: false\n", "apps/shop/app.yaml": "name: shop\n"})
    with GitDaemon(srv) as daemon:
        yield Served(tmp_path, bare, daemon, commit)
