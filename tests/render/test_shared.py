"""Objects several components use go wherever any of them runs."""

from __future__ import annotations

import yaml

from qonnect_gitops.model import load_goals
from qonnect_gitops.render import render
from tests.render.test_render import PLACEMENT, make_plan


def _sharing(template_files: dict[str, bytes]) -> dict[str, bytes]:
    """reviews-v2 runs as reviews-v1's ServiceAccount and reads a ConfigMap of details."""
    files = dict(template_files)
    v2 = "apps/bookinfo/manifests/reviews-v2.yaml"
    text = files[v2].decode()
    assert "serviceAccountName: bookinfo-reviews-v2" in text
    text = text.replace("serviceAccountName: bookinfo-reviews-v2", "serviceAccountName: bookinfo-reviews")
    text = text.replace('              value: "/tmp/logs"\n',
                        '              value: "/tmp/logs"\n'
                        '            - name: STARS\n              valueFrom:\n                configMapKeyRef:\n'
                        '                  name: catalogue\n                  key: stars\n', 1)
    files[v2] = text.encode()
    files["apps/bookinfo/manifests/details.yaml"] += (
        b"---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: catalogue\ndata:\n  stars: red\n")
    return files


def test_a_shared_service_account_and_config_map_go_where_any_user_runs(template_files) -> None:
    goals = load_goals(_sharing(template_files))
    placement = {**PLACEMENT, "bookinfo/reviews-v2": {"cloud-2": 1}}
    rendered = render(goals, make_plan(goals, placement))
    tree = rendered.cluster_files("cloud-2")
    # reviews-v1 and details run elsewhere; what reviews-v2 needs of theirs is here too,
    # under their own folders and labels, byte for byte as where they run.
    account = "bookinfo/reviews-v1/serviceaccount-bookinfo-reviews.yaml"
    catalogue = "bookinfo/details/configmap-catalogue.yaml"
    assert tree[account] == rendered.cluster_files("fog-1")[account]
    assert tree[catalogue] == rendered.cluster_files("edge-1")[catalogue]
    assert yaml.safe_load(tree[catalogue])["metadata"]["labels"]["qonnect.io/component"] == "details"
    # Only what is referred to (and the app's Services): not details' Deployment, not its
    # own ServiceAccount.
    assert sorted(p for p in tree if p.startswith("bookinfo/details/")) == [
        catalogue, "bookinfo/details/service-details.yaml"]
    assert "bookinfo/reviews-v1/deployment-reviews-v1.yaml" not in tree


def test_the_template_shares_nothing(template_files) -> None:
    goals = load_goals(template_files)
    for component in goals.components():
        assert {kind for kind, _ in component.references} <= {"ServiceAccount", "ConfigMap"}
    aggregator = goals.component("sensor-pipeline/aggregator")
    assert aggregator.references == {("ConfigMap", "aggregator-config")}
