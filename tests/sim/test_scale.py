"""Size: pools of identical nodes never materialised, paged lists and Tables, and work per write that does not grow."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

from kubernetes import client

from qonnect_gitops.sim import SimCluster
from tests.sim.conftest import Kubectl
from tests.sim.kubelet_helpers import (
    clients,
    deployment,
    make_sim,
    pods_of,
    ready,
    shape,
    wait_for,
)

MILLION = 1_000_000
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"


def _get(sim: SimCluster, path: str, accept: str = "application/json") -> dict[str, object]:
    req = urllib.request.Request(sim.url + path, headers={"Accept": accept})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())  # type: ignore[no-any-return]


def test_a_pool_of_a_million_nodes_is_listed_by_pages_and_scheduled_on(tmp_path: Path) -> None:
    # Goals cap a node group at 10,000 (model.limits); the sim, like a real API server, must
    # still never materialise whatever count it is given, so the shape is built past that cap.
    pool = shape(2, "4", "16Gi").model_copy(update={"count": MILLION})
    with make_sim(pool, shape(2, "64", "256Gi", arch="arm64"), name="big") as sim:
        assert sim.node_count() == MILLION + 2
        assert sim.core.store.count() < 1000  # the nodes are not stored one by one
        core, apps, _, api = clients(sim)
        page = core.list_node(limit=500)
        assert [n.metadata.name for n in page.items[:3]] == ["big-node-1", "big-node-2", "big-node-3"]
        assert page.metadata.remaining_item_count == MILLION + 2 - 500
        page = core.list_node(limit=500, _continue=page.metadata._continue)
        assert page.items[0].metadata.name == "big-node-501"
        last = core.read_node(f"big-node-{MILLION + 2}")
        assert last.metadata.labels["kubernetes.io/arch"] == "arm64" and last.status.allocatable["cpu"] == "64"
        table = _get(sim, "/api/v1/nodes?limit=3", TABLE)
        assert [r["cells"][0] for r in table["rows"]] == ["big-node-1", "big-node-2", "big-node-3"]  # type: ignore
        assert table["metadata"]["remainingItemCount"] == MILLION - 1  # type: ignore[index]
        # The scheduler sees the pool: zone selectors, arch selectors, and counts in its message.
        apps.create_namespaced_deployment("default", deployment("web", 3, pod_spec={
            "nodeSelector": {"topology.kubernetes.io/zone": "eu-central-b", "kubernetes.io/arch": "amd64"}}))
        apps.create_namespaced_deployment("default", deployment("arm", 1, pod_spec={
            "nodeSelector": {"kubernetes.io/arch": "arm64"}}))
        apps.create_namespaced_deployment("default", deployment("huge", 1, cpu="100"))
        wait_for(lambda: len([p for p in pods_of(core, "web") if ready(p)]) == 3, timeout=20, what="web ready")
        wait_for(lambda: [p for p in pods_of(core, "arm") if ready(p)], timeout=20, what="arm ready")
        zones = {core.read_node(p.spec.node_name).metadata.labels["topology.kubernetes.io/zone"]
                 for p in pods_of(core, "web")}
        # Least allocated: each replica goes to another empty node of the pool (node 2, 5, 8: zone b).
        assert zones == {"eu-central-b"}
        assert sorted(p.spec.node_name for p in pods_of(core, "web")) == ["big-node-2", "big-node-5", "big-node-8"]
        assert pods_of(core, "arm")[0].spec.node_name in (f"big-node-{MILLION + 1}", f"big-node-{MILLION + 2}")
        pending = wait_for(lambda: [p for p in pods_of(core, "huge") if p.status.conditions], what="unschedulable")
        assert pending[0].status.conditions[0].message == f"0/{MILLION + 2} nodes are available: " \
                                                          f"{MILLION + 2} Insufficient cpu."
        # Changing one pool node stores that node only; kubectl finds it as any other.
        node = pods_of(core, "web")[0].spec.node_name
        sim.fail_node(node)
        assert core.read_node(node).spec.taints[-1].key == "node.kubernetes.io/unreachable"
        assert sim.node_count() == MILLION + 2
        path = tmp_path / "kubeconfig"
        path.write_text(sim.kubeconfig_yaml())
        kubectl = Kubectl(path, tmp_path / "cache")
        out = kubectl("get", "node", node, f"big-node-{MILLION}").stdout.splitlines()
        assert out[1].split()[:2] == [node, "NotReady"] and out[2].split()[:2] == [f"big-node-{MILLION}", "Ready"]
        wait_for(lambda: len([p for p in pods_of(core, "web") if ready(p) and p.spec.node_name != node]) == 3,
                 timeout=20, what="rescheduled off the failed node")
        client.CoreV1Api(api).delete_node(f"big-node-{MILLION}")
        assert sim.node_count() == MILLION + 1


def test_kubectl_get_pages_tables(kubectl: Kubectl, api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    for i in range(25):
        core.create_namespaced_config_map("default", {"metadata": {"name": f"cm-{i:02d}"}})
    out = kubectl("get", "configmaps", "--chunk-size=10", "--no-headers").stdout.splitlines()
    assert len(out) == 26  # 25 and kube-root-ca.crt: every chunk, not only the first
    assert kubectl("get", "configmaps", "--chunk-size=10", "-o", "name").stdout.count("configmap/") == 26


def test_table_pages_carry_continue_and_remaining_count(sim: SimCluster, api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    for i in range(5):
        core.create_namespaced_config_map("default", {"metadata": {"name": f"c{i}"}})
    first = _get(sim, "/api/v1/namespaces/default/configmaps?limit=2", TABLE)
    assert first["kind"] == "Table" and len(first["rows"]) == 2  # type: ignore[arg-type]
    meta = first["metadata"]
    assert meta["remainingItemCount"] == 4 and meta["continue"]  # type: ignore[index]
    second = _get(sim, f"/api/v1/namespaces/default/configmaps?limit=2&continue={meta['continue']}", TABLE)  # type: ignore[index]
    assert [r["cells"][0] for r in second["rows"]] == ["c2", "c3"]  # type: ignore[index, union-attr]
    # With a selector the count is not known without reading everything: it is left out, as upstream.
    filtered = _get(sim, "/api/v1/namespaces/default/configmaps?limit=1&fieldSelector=metadata.name!%3Dc0", TABLE)
    assert "remainingItemCount" not in filtered["metadata"] and filtered["metadata"]["continue"]  # type: ignore


def test_work_caused_by_a_write_does_not_grow_with_the_cluster() -> None:
    with make_sim(shape(4, "32", "128Gi"), delay=0.01) as sim:
        core, apps, _, _ = clients(sim)
        assert sim.controllers is not None

        def settle() -> None:
            wait_for(lambda: sim.controllers is not None and sim.controllers.syncs == _syncs_after_quiet(sim),
                     what="quiet")

        def cost_of_one_write(name: str) -> int:
            settle()
            before = sim.controllers.syncs  # type: ignore[union-attr]
            apps.create_namespaced_deployment("default", deployment(name, 1))
            wait_for(lambda: [p for p in pods_of(core, name) if ready(p)], what=f"{name} ready")
            settle()
            return sim.controllers.syncs - before  # type: ignore[union-attr]

        small = cost_of_one_write("first")
        for i in range(60):
            apps.create_namespaced_deployment("default", deployment(f"fill-{i}", 1))
            core.create_namespaced_service("default", {"metadata": {"name": f"fill-{i}"}, "spec": {
                "selector": {"app": f"fill-{i}"}, "ports": [{"port": 80}]}})
        wait_for(lambda: len([p for p in core.list_namespaced_pod("default").items if ready(p)]) == 61,
                 timeout=60, what="fill ready")
        big = cost_of_one_write("last")
        assert big <= small + 2, (small, big)  # the same syncs for the same change, whatever the cluster holds


def _syncs_after_quiet(sim: SimCluster) -> int:
    import time

    assert sim.controllers is not None
    before = sim.controllers.syncs
    time.sleep(0.3)
    return before if sim.controllers.syncs == before else -1
