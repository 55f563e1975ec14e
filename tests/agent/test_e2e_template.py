"""The real thing: ``qonnect reconcile --once`` renders repo-template onto cluster branches;
agents apply them to simulated clusters, and a second pass finds nothing to change."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml
from kubernetes import dynamic

from qonnect_gitops.agent.agent import Agent
from qonnect_gitops.agent.config import AgentConfig
from qonnect_gitops.sim import SimCluster
from tests.conftest import ROOT
from tests.gitstore.helpers import git
from tests.goals_repo import served_goals
from tests.signing_keys import allowed_signers, make_key


def test_rendered_branches_apply_cleanly_and_converge(tmp_path: Path) -> None:
    key = make_key(tmp_path / "keys", "lead")
    trusted = allowed_signers(tmp_path / "trusted-keys", key.allowed())
    with served_goals(tmp_path / "goals") as goals:
        run = subprocess.run([sys.executable, "-m", "qonnect_gitops", "reconcile", "--repo", goals.url, "--once",
                              "--signing-key", str(key.private)],
                             capture_output=True, text=True, cwd=ROOT, timeout=120, check=False)
        assert run.returncode == 0, run.stderr
        refs = git("-C", goals.bare, "for-each-ref", "--format=%(refname:strip=3)", "refs/heads/cluster/").split()
        populated = [c for c in refs if git("-C", goals.bare, "ls-tree", "-r", "--name-only", f"cluster/{c}").strip()]
        assert populated, refs
        total = 0
        for cluster in populated[:3]:
            files = git("-C", goals.bare, "ls-tree", "-r", "--name-only", f"cluster/{cluster}").split()
            manifests = [f for f in files if f.endswith(".yaml") and not f.rsplit("/", 1)[-1].startswith("sops-")]
            with SimCluster(name=cluster, namespace_delay=0.0) as sim:
                agent = Agent(AgentConfig(cluster=cluster, repo=goals.url, kubeconfig=sim.kubeconfig(),
                                          cache_dir=tmp_path / "cache", api_backoff=0.01, wait_timeout=0,
                                          trusted_keys=trusted))
                first = agent.sync()
                failed = [(r.name, r.message) for r in first.objects if r.action == "failed"]
                assert failed == [], failed
                assert first.refusals == [] and first.state in ("Ready", "Reconciling"), first.message
                assert len(first.objects) == len(manifests)
                assert {r.action for r in first.objects} == {"created"}
                # every object exists, read back through the official dynamic client
                dyn = dynamic.DynamicClient(agent.kube.api)
                for path in manifests:
                    obj = yaml.safe_load(git("-C", goals.bare, "show", f"cluster/{cluster}:{path}"))
                    res = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
                    meta = obj["metadata"]
                    live = res.get(name=meta["name"], namespace=meta.get("namespace"))
                    assert live.metadata.labels["app.kubernetes.io/managed-by"] == "qonnect"
                # a second full pass over rendered manifests writes nothing (the diff is exact)
                second = agent.sync(full=True)
                changed = [(r.name, r.action, r.message) for r in second.objects if r.action != "unchanged"]
                assert changed == [], changed
                total += len(manifests)
        assert total >= 10, total  # Bookinfo and the sensor pipeline, not a token object or two
