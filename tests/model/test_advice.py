"""Advice on valid goals: Service names a component uses without listing it in ``calls``,
and ``calls`` that no Service leads to; warnings with positions, from ``qonnect validate``."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from qonnect_gitops.model import load_goals
from tests.conftest import ROOT, TEMPLATE


def _edit(files: dict[str, bytes], path: str, old: str, new: str) -> dict[str, bytes]:
    text = files[path].decode()
    assert old in text, old
    return {**files, path: text.replace(old, new, 1).encode()}


def test_the_template_gets_no_advice(template_files) -> None:
    assert load_goals(template_files).warnings == ()


def test_a_service_named_in_a_container_but_not_in_calls_is_warned_about(template_files) -> None:
    # reviews-v1 does not call ratings; reviews-v2 does (no warning for it).
    files = _edit(template_files, "apps/bookinfo/manifests/reviews-v1.yaml",
                  '              value: "/tmp/logs"\n',
                  '              value: "/tmp/logs"\n'
                  '            - name: RATINGS_URL\n              value: "http://ratings:9080/ratings"\n'
                  '            - name: MODE\n              value: "ratings"\n')
    files = _edit(files, "apps/bookinfo/manifests/reviews-v2.yaml",
                  '              value: "/tmp/logs"\n',
                  '              value: "/tmp/logs"\n'
                  '            - name: RATINGS_URL\n              value: "http://ratings:9080/ratings"\n')
    warnings = load_goals(files).warnings
    assert [(w.path, w.field) for w in warnings] == [
        ("apps/bookinfo/manifests/reviews-v1.yaml", "spec.template.spec.containers[0].env[1].value")]
    assert warnings[0].line == 53
    assert "names Service 'ratings' (bookinfo/ratings) but 'calls' of bookinfo/reviews-v1" in warnings[0].message
    assert "planner does not keep them close" in warnings[0].message


def test_another_apps_service_in_a_config_map_is_warned_about(template_files) -> None:
    files = _edit(template_files, "apps/sensor-pipeline/manifests/aggregator.yaml",
                  '  upstream: "ingest:1883"\n',
                  '  upstream: "ingest:1883"\n  catalogue: details.bookinfo.svc.cluster.local\n')
    (warning,) = load_goals(files).warnings
    assert (warning.path, warning.field) == ("apps/sensor-pipeline/manifests/aggregator.yaml", "data.catalogue")
    assert "bookinfo/details" in warning.message and "may not resolve" in warning.message
    # Listing the call silences it.
    files = _edit(files, "apps/sensor-pipeline/app.yaml", "calls: [ingest, store]",
                  "calls: [ingest, store, bookinfo/details]")
    assert load_goals(files).warnings == ()


def test_calls_to_a_component_without_a_service_are_warned_about(tmp_path: Path) -> None:
    tree = tmp_path / "goals"
    shutil.copytree(TEMPLATE, tree)
    app = tree / "apps" / "sensor-pipeline" / "app.yaml"
    app.write_text(app.read_text().replace("calls: [store]", "calls: [store, aggregator]"))
    result = subprocess.run([sys.executable, "-m", "qonnect_gitops", "validate", str(tree)],
                            capture_output=True, text=True, cwd=ROOT, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        ("warning: apps/sensor-pipeline/app.yaml:40:22: spec.components[3].calls[1]: 'aggregator' has no "
         "Service leading to it (none of its own, no selector matching its pods): callers cannot reach it by name")]


def test_a_pod_using_an_object_no_manifest_defines_is_warned_about(template_files) -> None:
    files = _edit(template_files, "apps/bookinfo/manifests/details.yaml",
                  "serviceAccountName: bookinfo-details", "serviceAccountName: bookinfo-reader")
    (warning,) = load_goals(files).warnings
    assert (warning.path, warning.line, warning.field) == ("apps/bookinfo/manifests/details.yaml", 26, "metadata.name")
    assert "ServiceAccount 'bookinfo-reader', which no manifest of app 'bookinfo' defines" in warning.message
    # Another component's object is fine: it is rendered wherever a user of it runs.
    files = _edit(template_files, "apps/bookinfo/manifests/details.yaml",
                  "serviceAccountName: bookinfo-details", "serviceAccountName: bookinfo-ratings")
    assert load_goals(files).warnings == ()


def test_the_clusters_own_rbac_in_goals_is_warned_about(template_files) -> None:
    """Agents refuse system RBAC (SystemObject): validate says so before a cluster stalls."""
    files = {**template_files, "apps/bookinfo/manifests/admin.yaml": b"""apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: cluster-admin}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}
subjects: [{kind: Group, name: "system:masters", apiGroup: rbac.authorization.k8s.io}]
"""}
    files = _edit(files, "apps/bookinfo/app.yaml", "manifests: [manifests/details.yaml]",
                  "manifests: [manifests/details.yaml, manifests/admin.yaml]")
    warnings = load_goals(files).warnings
    assert [(w.path, w.field, w.line) for w in warnings] == [
        ("apps/bookinfo/manifests/admin.yaml", "metadata.name", 3)]
    assert "cluster's own RBAC" in warnings[0].message and "--allow-system-object" in warnings[0].message
