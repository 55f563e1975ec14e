"""deploy/agent.yaml is valid against the API schemas (strict field validation) and its
environment variables are ones `qonnect agent` reads."""

from __future__ import annotations

import re

import yaml

from qonnect_gitops.agent.kube import Kube, api_client_from
from qonnect_gitops.cli.agent import _ENV
from tests.conftest import ROOT


def test_deploy_manifest_applies_strictly(sim) -> None:
    docs = [d for d in yaml.safe_load_all((ROOT / "deploy" / "agent.yaml").read_text()) if d]
    kube = Kube(api_client_from(sim.kubeconfig()), retries=0)
    for doc in docs:  # in file order: the Namespace comes first
        kube.apply(kube.resource(doc["apiVersion"], doc["kind"]), doc)
    dep = next(d for d in docs if d["kind"] == "Deployment")
    names = {e["name"] for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    known = set(_ENV.values())
    assert names <= known, names - known
    text = (ROOT / "deploy" / "agent.yaml").read_text()
    for commented in re.findall(r"#\s*- \{name: (QONNECT_[A-Z_]+)", text):
        assert commented in known or commented.startswith("QONNECT_GIT_"), commented
