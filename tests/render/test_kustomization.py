"""Every cluster branch builds with `kubectl kustomize` (what Flux and Argo CD run) and
yields exactly the objects qonnect's own agent reads from it: the ``Kustomization`` file
the renderer writes lists every object file, and the agent never takes it for an object."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pygit2
import pytest

from qonnect_gitops.agent.source import read_revision
from qonnect_gitops.gitstore.tree import build_tree
from qonnect_gitops.model import load_goals
from qonnect_gitops.model.observed import empty_observation
from qonnect_gitops.model.plan import CurrentPlacement
from qonnect_gitops.placement import plan as make_plan
from qonnect_gitops.render import render
from qonnect_gitops.render.render import KUSTOMIZATION_FILE, kustomization
from tests.deploy.kustomize import kubectl, kustomize
from tests.render.test_render import make_plan as fixed_plan

try:
    kubectl()
except FileNotFoundError:  # pragma: no cover
    pytest.skip("kubectl not installed", allow_module_level=True)


def _everywhere(goals: Any) -> dict[str, dict[str, int]]:
    """Every component on every cluster of the fleet: every cluster branch holds something,
    Services for callers only and shared objects included."""
    return {c.key: {name: 1 for name in goals.clusters} for c in goals.components()}


def _canonical(objects: list[dict[str, Any]]) -> list[str]:
    return sorted(json.dumps(o, sort_keys=True) for o in objects)


def _agent_reads(tmp: Path, files: dict[str, bytes]) -> list[dict[str, Any]]:
    """The objects the agent reads from a commit holding ``files`` (``source.read_revision``)."""
    repo = pygit2.init_repository(str(tmp), bare=True)
    sig = pygit2.Signature("test", "test@example.org", 0, 0)
    commit = repo.create_commit("refs/heads/cluster/x", sig, sig, "branch", build_tree(repo, files), [])
    return list(read_revision(tmp, str(commit)).objects)


def _write(root: Path, files: dict[str, bytes]) -> Path:
    for path, body in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(body)
    return root


@pytest.mark.parametrize("placement", ["planner", "fixed", "everywhere"])
def test_every_cluster_branch_builds_with_kustomize_as_the_agent_reads_it(template_files, tmp_path, placement) -> None:
    goals = load_goals(template_files)
    if placement == "planner":  # the template as `qonnect plan` and the demo's first cycle place it
        decided = make_plan(goals, empty_observation(datetime(2026, 1, 1, tzinfo=UTC)), CurrentPlacement())
    else:
        decided = fixed_plan(goals, _everywhere(goals)) if placement == "everywhere" else fixed_plan(goals)
    rendered = render(goals, decided)
    built = 0
    for cluster in rendered.clusters:
        files = rendered.cluster_files(cluster)
        if not files:  # a cluster hosting nothing keeps the empty tree (Qonnect-Allow-Empty)
            assert rendered.objects[cluster] == 0
            continue
        assert KUSTOMIZATION_FILE in files
        agent = _agent_reads(tmp_path / f"{cluster}.git", files)
        assert len(agent) == rendered.objects[cluster]
        built_objects = kustomize(_write(tmp_path / cluster, files))
        assert _canonical(built_objects) == _canonical(agent), cluster
        built += 1
    assert built >= (9 if placement == "everywhere" else 3)


def test_the_kustomization_lists_object_files_only_in_order_and_quotes_odd_paths() -> None:
    files = {
        "shop/web/deployment-web.yaml": b"", "_cluster/namespace-shop.yaml": b"",
        "shop/web/sops-secret.enc.yaml": b"encrypted", "shop/web/role-a:b #c.yaml": b"",
        KUSTOMIZATION_FILE: b"old",
    }
    text = kustomization(files).decode()
    assert text.splitlines()[1:] == [
        "apiVersion: kustomize.config.k8s.io/v1beta1", "kind: Kustomization", "resources:",
        "- _cluster/namespace-shop.yaml", "- shop/web/deployment-web.yaml", '- "shop/web/role-a:b #c.yaml"']
    assert kustomization(dict(reversed(list(files.items())))) == kustomization(files)


def test_an_older_agent_reads_a_branch_with_the_kustomization_as_before(template_files, tmp_path) -> None:
    """The agent reads only *.yaml and *.yml files: the same objects with and without it."""
    goals = load_goals(template_files)
    files = render(goals, fixed_plan(goals)).cluster_files("edge-1")
    without = {p: b for p, b in files.items() if p != KUSTOMIZATION_FILE}
    assert _canonical(_agent_reads(tmp_path / "with.git", files)) == \
        _canonical(_agent_reads(tmp_path / "without.git", without))
