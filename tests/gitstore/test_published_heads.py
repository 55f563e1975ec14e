"""``Mirror.published_head``: what the remote holds for each cluster branch as the mirror
last fetched or pushed it (the leader's report answers read it), against git daemon."""

from __future__ import annotations

from pathlib import Path

import pytest

from qonnect_gitops.gitstore import StaleRef
from qonnect_gitops.gitstore.remote import Mirror

from .helpers import Served, git, plan_files
from .test_remote import decide


def remote_head(served: Served, cluster: str) -> str:
    return git("-C", served.bare, "rev-parse", f"refs/heads/cluster/{cluster}").strip()


def test_heads_follow_pushes_and_fetches_never_local_writes(served: Served, tmp_path: Path) -> None:
    mirror = Mirror(tmp_path / "m.git", served.url)
    mirror.fetch()
    assert mirror.published_head("c0") is None  # no branch yet
    decide(mirror, plan_files(2), 1, ["c0", "c1"])
    assert mirror.published_head("c0") is None  # written locally, not pushed: not published
    mirror.publish()
    first = {c: remote_head(served, c) for c in ("c0", "c1")}
    assert {c: mirror.published_head(c) for c in first} == first
    assert mirror.published_head("c") is None and mirror.published_head("cluster/c0") is None

    # Another mirror (a later leader) moves c1; this one learns it at its next full fetch.
    other = Mirror(tmp_path / "other.git", served.url)
    other.fetch()
    decide(other, plan_files(2, tag="v2"), 2, ["c0", "c1"])
    other.publish()
    assert mirror.published_head("c1") == first["c1"]  # stale until fetched
    mirror.distrust()  # a new term
    assert mirror.published_head("c1") is None  # unknown rather than stale
    mirror.fetch()
    assert {c: mirror.published_head(c) for c in first} == {c: remote_head(served, c) for c in first}
    assert mirror.published_head("c1") != first["c1"]


def test_a_rejected_push_forgets_the_head(served: Served, tmp_path: Path) -> None:
    mirror = Mirror(tmp_path / "m.git", served.url)
    mirror.fetch()
    decide(mirror, plan_files(2), 1, ["c0", "c1"])
    mirror.publish()
    hook = served.bare / "hooks" / "update"
    hook.write_text('#!/bin/sh\ncase "$1" in refs/heads/cluster/c1) exit 1;; esac\nexit 0\n')
    hook.chmod(0o755)
    decide(mirror, plan_files(2, tag="v2"), 2, ["c0", "c1"])
    with pytest.raises(StaleRef):
        mirror.publish()
    assert mirror.published_head("c0") == remote_head(served, "c0")  # accepted
    assert mirror.published_head("c1") is None  # refused: what the remote holds is not known
