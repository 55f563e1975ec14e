"""deploy/flux/ and deploy/argocd/: what `kubectl kustomize` renders validates against the
upstream CRD schemas (source-controller, kustomize-controller, Argo CD; testdata/crds), served
by a simulated cluster and applied with the real kubectl (server-side, strict), and keeps
the settings docs/agent.md promises."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from qonnect_gitops.sim.cluster import SimCluster
from tests.conftest import ROOT
from tests.deploy.kustomize import kubectl, kustomize
from tests.deploy.syncers import install_crds

DEPLOY = ROOT / "deploy"

try:
    kubectl()
except FileNotFoundError:  # pragma: no cover
    pytest.skip("kubectl not installed", allow_module_level=True)


@pytest.fixture(scope="module")
def sim_with_crds(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with SimCluster(name="hub", namespace_delay=0.0) as sim:
        install_crds(sim)
        path = tmp_path_factory.mktemp("kube") / "config"
        path.write_text(sim.kubeconfig_yaml())
        yield path


def _apply(kubeconfig: Path, docs: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([kubectl(), "--kubeconfig", str(kubeconfig), "apply", "--server-side",
                           "--validate=strict", "-f", "-"], input=yaml.safe_dump_all(docs),
                          capture_output=True, text=True, timeout=60, check=False)


def _docs(*paths: str) -> list[dict[str, Any]]:
    return [d for p in paths for d in yaml.safe_load_all((DEPLOY / p).read_text()) if d]


def test_flux_manifests_validate_and_sync_the_cluster_branch_with_prune_and_health(sim_with_crds) -> None:
    objects = kustomize(DEPLOY / "flux")
    assert sorted(o["kind"] for o in objects) == ["GitRepository", "Kustomization"]
    run = _apply(sim_with_crds, objects)
    assert run.returncode == 0, run.stderr
    assert "gitrepository.source.toolkit.fluxcd.io/qonnect serverside-applied" in run.stdout
    source = next(o for o in objects if o["kind"] == "GitRepository")
    sync = next(o for o in objects if o["kind"] == "Kustomization")
    assert source["spec"]["ref"]["branch"].startswith("cluster/")
    assert sync["spec"]["sourceRef"] == {"kind": "GitRepository", "name": source["metadata"]["name"]}
    assert (sync["spec"]["prune"], sync["spec"]["wait"], sync["spec"]["path"]) == (True, True, "./")
    assert sync["spec"]["deletionPolicy"] == "Orphan"
    assert {o["metadata"]["namespace"] for o in objects} == {"flux-system"}


def test_the_commented_signature_check_is_valid_flux_too(sim_with_crds) -> None:
    """docs/agent.md tells Flux users to uncomment spec.verify: it must then validate."""
    source = next(o for o in kustomize(DEPLOY / "flux") if o["kind"] == "GitRepository")
    source["spec"]["verify"] = {"mode": "HEAD", "secretRef": {"name": "qonnect-signers"}}
    text = (DEPLOY / "flux" / "gitrepository.yaml").read_text()
    assert "# verify:\n  #   mode: HEAD\n  #   secretRef:\n  #     name: qonnect-signers" in text
    run = _apply(sim_with_crds, [source])
    assert run.returncode == 0, run.stderr


def test_argocd_application_and_applicationset_validate_and_follow_cluster_branches(sim_with_crds) -> None:
    objects = kustomize(DEPLOY / "argocd")
    (app,) = objects
    appset = _docs("argocd/applicationset.yaml")[0]
    appset["metadata"]["namespace"] = "argocd"
    run = _apply(sim_with_crds, [app, appset])
    assert run.returncode == 0, run.stderr
    assert "application.argoproj.io/qonnect-edge-1 serverside-applied" in run.stdout
    assert "applicationset.argoproj.io/qonnect serverside-applied" in run.stdout
    for spec in (app["spec"], appset["spec"]["template"]["spec"]):
        assert spec["source"]["targetRevision"].startswith("cluster/") and spec["source"]["path"] == "."
        assert spec["syncPolicy"]["automated"] == {"prune": True, "selfHeal": True, "allowEmpty": False}
        assert "ServerSideApply=true" in spec["syncPolicy"]["syncOptions"]
    assert app["metadata"]["name"] == "qonnect-" + app["spec"]["source"]["targetRevision"].removeprefix("cluster/")
    assert "finalizers" not in app["metadata"]  # deleting the Application keeps the workloads
    (git,) = [g["git"] for g in appset["spec"]["generators"]]
    assert git["revision"] == "main" and git["files"] == [{"path": "clusters/*.yaml"}]
    assert appset["spec"]["syncPolicy"] == {"applicationsSync": "create-update", "preserveResourcesOnDeletion": True}


@pytest.mark.parametrize(("kind", "path", "field"), [
    ("Kustomization", ("spec",), "prunee"),
    ("GitRepository", ("spec", "ref"), "brnch"),
    ("Application", ("spec", "syncPolicy", "automated"), "prunne"),
])
def test_a_misspelt_field_is_refused_by_the_upstream_schema(sim_with_crds, kind, path, field) -> None:
    """The check can fail: the CRDs' schemas, not a lenient server, accept the manifests."""
    objects = kustomize(DEPLOY / ("argocd" if kind == "Application" else "flux"))
    obj = next(o for o in objects if o["kind"] == kind)
    node = obj
    for key in path:
        node = node[key]
    node[field] = True
    run = _apply(sim_with_crds, [obj])
    assert run.returncode != 0
    assert field in run.stderr


def test_a_value_outside_the_schema_is_refused(sim_with_crds) -> None:
    sync = next(o for o in kustomize(DEPLOY / "flux") if o["kind"] == "Kustomization")
    sync["spec"]["deletionPolicy"] = "Cascade"
    run = _apply(sim_with_crds, [sync])
    assert run.returncode != 0 and "deletionPolicy" in run.stderr
