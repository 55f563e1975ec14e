"""Lead groups as real processes; every process started is killed at teardown."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.lead.harness import LeadGroup


@pytest.fixture
def make_group(tmp_path: Path) -> Iterator[Callable[..., LeadGroup]]:
    """A factory of started lead groups; stops them all afterwards, even on failure."""
    groups: list[LeadGroup] = []

    def factory(**kwargs: Any) -> LeadGroup:
        group = LeadGroup(tmp_path / f"group-{len(groups)}", **kwargs)
        groups.append(group)
        group.start_all()
        return group

    yield factory
    for group in groups:
        group.stop()


@pytest.fixture(scope="module")
def api_group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LeadGroup]:
    """One group shared by the API tests: strict limits so they are easy to hit."""
    group = LeadGroup(
        tmp_path_factory.mktemp("api"),
        clusters=["edge-1", "edge-2", "edge-3"],
        extra_args=["--report-rate", "0.5", "--report-burst", "3", "--max-body", "8192"],
    )
    group.start_all()
    try:
        leader = group.wait_leader()
        group.wait_until(lambda: (group.status(leader) or {}).get("goals", {}).get("lastGood"),
                         what="goals loaded")
        yield group
    finally:
        group.stop()
