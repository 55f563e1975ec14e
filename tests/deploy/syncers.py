"""The upstream Flux and Argo CD CRDs (trimmed, testdata/crds/README.md) in a simulated cluster."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from qonnect_gitops.sim.cluster import SimCluster

CRDS = Path(__file__).resolve().parent / "testdata" / "crds"
FILES = ("gitrepositories.yaml", "kustomizations.yaml", "application.yaml", "applicationset.yaml")


def crds() -> list[dict[str, Any]]:
    """The four CRDs as kept in testdata."""
    return [yaml.safe_load((CRDS / name).read_text()) for name in FILES]


def install_crds(sim: SimCluster, timeout: float = 10.0) -> None:
    """Create the CRDs (and the namespaces flux-system and argocd) and wait until they are served."""
    api = client.ApiClient(_configuration(sim))
    ext, core = client.ApiextensionsV1Api(api), client.CoreV1Api(api)
    for ns in ("flux-system", "argocd"):
        core.create_namespace({"metadata": {"name": ns}})
    for crd in crds():
        ext.create_custom_resource_definition(crd)
    deadline = time.monotonic() + timeout
    while True:
        established = [c for c in ext.list_custom_resource_definition().items
                       if any(cond.type == "Established" and cond.status == "True" for cond in c.status.conditions or ())]
        if len(established) >= len(FILES):
            return
        if time.monotonic() > deadline:
            raise TimeoutError("CRDs not established")
        time.sleep(0.05)


def _configuration(sim: SimCluster) -> client.Configuration:
    cfg = client.Configuration()
    cfg.host = sim.url
    cfg.api_key = {"authorization": f"Bearer {sim.core.users.admin_token}"}
    return cfg
