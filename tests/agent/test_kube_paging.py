"""Kube.list reads large collections in pages (limit/continue), against the simulated API."""

from __future__ import annotations

from qonnect_gitops.agent.kube import Kube, api_client_from
from tests.agent.conftest import SimCluster, configmap, namespace


def test_list_reads_every_object_in_pages(sim: SimCluster) -> None:
    kube = Kube(api_client_from(sim.kubeconfig()), retries=0)
    kube.apply(kube.resource("v1", "Namespace"), namespace("shop"))
    cm = kube.resource("v1", "ConfigMap")
    for i in range(23):
        obj = configmap(f"cm-{i:02d}", component="web" if i % 2 else "db")
        kube.apply(cm, obj)
    before = kube.requests
    items = kube.list(cm, "shop", page_size=5)
    names = sorted(o["metadata"]["name"] for o in items)
    assert [n for n in names if n != "kube-root-ca.crt"] == [f"cm-{i:02d}" for i in range(23)]
    assert kube.requests - before == -(-len(items) // 5)  # full pages of 5, then the rest
    before = kube.requests
    selected = kube.list(cm, "shop", label_selector="qonnect.io/component=web", page_size=4)
    assert sorted(o["metadata"]["name"] for o in selected) == [f"cm-{i:02d}" for i in range(1, 23, 2)]
    assert kube.requests - before == 3  # 11 matches in pages of 4
    before = kube.requests
    assert len(kube.list(cm, "shop")) == len(items)
    assert kube.requests - before == 1  # the default page holds them all
