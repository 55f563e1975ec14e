"""deploy/agent/ applies to a (simulated) API server under strict field validation and its
environment variables are ones `qonnect agent` reads."""

from __future__ import annotations

import re

import pytest
import yaml

from qonnect_gitops.agent.kube import Kube, api_client_from
from qonnect_gitops.cli.agent import _ENV
from tests.conftest import ROOT
from tests.deploy.kustomize import kustomize

AGENT = ROOT / "deploy" / "agent"


def test_deploy_manifest_applies_strictly(sim) -> None:
    try:
        docs = kustomize(AGENT)
    except FileNotFoundError:
        pytest.skip("kubectl not installed")
    docs.insert(0, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "qonnect-system"}})
    kube = Kube(api_client_from(sim.kubeconfig()), retries=0)
    for doc in docs:
        kube.apply(kube.resource(doc["apiVersion"], doc["kind"]), doc)
    dep = next(d for d in docs if d["kind"] == "Deployment")
    names = {e["name"] for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    known = set(_ENV.values()) | {"HOME"}
    names = {n for n in names if not n.startswith("QONNECT_GIT_")}
    assert names <= known, names - known
    text = (AGENT / "deployment.yaml").read_text()
    for commented in re.findall(r"#\s*- \{name: (QONNECT_[A-Z_]+)", text):
        assert commented in known or commented.startswith("QONNECT_GIT_"), commented
    assert yaml.safe_load((AGENT / "config.yaml").read_text())["kind"] == "ConfigMap"
