"""Containers with limits and no requests: the planner sizes them as Kubernetes does."""

from __future__ import annotations

import pytest

from qonnect_gitops.model import GoalsError, load_goals

PATH = "apps/sensor-pipeline/manifests/compaction.yaml"


def _with(template_files: dict[str, bytes], resources: str) -> dict[str, bytes]:
    old = ("                requests:\n                  cpu: 500m\n"
           "                  memory: 512Mi\n")
    text = template_files[PATH].decode()
    assert old in text
    return {**template_files, PATH: text.replace(old, resources).encode()}


def test_limits_stand_in_for_missing_requests(template_files) -> None:
    files = _with(template_files, "                limits:\n                  cpu: \"2\"\n"
                                  "                  memory: 1Gi\n")
    compaction = load_goals(files).component("sensor-pipeline/compaction")
    assert (compaction.cpu, compaction.memory) == (2000, 1 << 30)


def test_a_request_wins_over_its_limit_per_resource(template_files) -> None:
    files = _with(template_files, "                requests:\n                  cpu: 250m\n"
                                  "                limits:\n                  cpu: \"2\"\n"
                                  "                  memory: 1Gi\n")
    compaction = load_goals(files).component("sensor-pipeline/compaction")
    assert (compaction.cpu, compaction.memory) == (250, 1 << 30)


def test_a_bad_limit_is_located(template_files) -> None:
    files = _with(template_files, "                limits:\n                  cpu: lots\n"
                                  "                  memory: 1Gi\n")
    with pytest.raises(GoalsError) as caught:
        load_goals(files)
    (problem,) = caught.value.problems
    assert problem.path == PATH and problem.field.endswith("containers[0].resources.limits.cpu")
