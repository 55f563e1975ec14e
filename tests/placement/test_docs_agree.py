"""Issue 32: docs and code agree on replica counts below ``minClusters``.

The docs said fixed replicas below ``minClusters`` are listed as unmet availability and
that ``replicas: 0`` is allowed, while validation refuses both for a Deployment. The docs
now say what validation does; these tests hold both to it."""

from __future__ import annotations

from pathlib import Path

import pytest

from qonnect_gitops.model import GoalsError, load_goals

ROOT = Path(__file__).resolve().parents[2]
APP = "apps/bookinfo/app.yaml"
DETAILS = "    - name: details\n      manifests: [manifests/details.yaml]\n"


def _with(template_files: dict[str, bytes], old: str, new: str) -> dict[str, bytes]:
    files = dict(template_files)
    text = files[APP].decode()
    assert text.count(old) == 1
    files[APP] = text.replace(old, new).encode()
    return files


def test_a_deployment_with_no_replicas_is_refused_as_the_reference_says(template_files: dict[str, bytes]) -> None:
    with pytest.raises(GoalsError) as refused:
        load_goals(_with(template_files, DETAILS, DETAILS + "      replicas: 0\n"))
    assert "must run on at least 1 clusters but has at most 0 replicas" in str(refused.value)
    reference = (ROOT / "docs/qos-reference.md").read_text()
    assert "a Deployment cannot be scaled to `0` in the goals" in reference
    assert "for a Deployment at least `availability.minClusters` (so `0` is refused)" in reference


def test_fewer_replicas_than_min_clusters_refused_for_a_deployment_unmet_for_a_statefulset(
        template_files: dict[str, bytes]) -> None:
    with pytest.raises(GoalsError) as refused:
        load_goals(_with(template_files, "          - {region: eu-central, maxMs: 20}\n",
                         "          - {region: eu-central, maxMs: 20}\n        availability: {minClusters: 2}\n"))
    assert "must run on at least 2 clusters but has at most 1 replicas" in str(refused.value)
    placement = (ROOT / "docs/placement.md").read_text()
    assert "refused by validation (so is `replicas: 0` for a Deployment); a StatefulSet's fewer" in placement
    assert "Fixed replicas fewer than `minClusters` are listed as unmet `availability`" not in placement
