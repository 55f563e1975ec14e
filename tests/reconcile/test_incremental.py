"""A goals push costs what it changed: one manifest edited is one file parsed, and only
the clusters running that component get a new commit; an idle cycle writes nothing."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from qonnect_gitops.lead import reconcile
from qonnect_gitops.lead.reconcile import open_mirror_for_goals, reconcile_once
from qonnect_gitops.model import Goals, Observed, ParseCache
from qonnect_gitops.model.observed import empty_observation
from tests.goals_repo import GoalsRepo, served_goals

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def goals(tmp_path: Path) -> Iterator[GoalsRepo]:
    with served_goals(tmp_path) as repo:
        yield repo


def _observe(goals: Goals) -> Observed:
    return empty_observation(NOW)


def test_one_manifest_changed_is_one_file_parsed_and_its_clusters_written(
        goals: GoalsRepo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = ParseCache()
    monkeypatch.setattr(reconcile, "_PARSED", cache)
    monkeypatch.setattr(reconcile, "_GOALS", {})
    mirror = open_mirror_for_goals(tmp_path / "lead.git", goals.url, None)
    first = reconcile_once(mirror, _observe, now=NOW)
    assert first.written is not None and first.written.plan_commit is not None
    hosting = {a.cluster for a in first.plan.components["bookinfo/details"].assignments}
    assert hosting
    idle = reconcile_once(mirror, _observe, now=NOW)
    assert not idle.changed and idle.generation == first.generation
    parsed = cache.parsed
    goals.edit("apps/bookinfo/manifests/details.yaml", "image: ", "image: mirror.example.org/", "new registry")
    changed = reconcile_once(mirror, _observe, now=NOW)
    # The manifest is parsed and its objects checked again; nothing else is read again.
    assert cache.parsed == parsed + 2
    assert changed.generation == first.generation + 1
    moved = {c.ref.rsplit("/", 1)[1] for c in changed.written.clusters} if changed.written else set()
    assert moved == hosting
