"""Node-level decisions reach the pod templates: architecture affinity on mixed clusters,
tolerations the planner relied on, the user's own affinity kept."""

from __future__ import annotations

import kubernetes_validate
import pytest
import yaml
from kubernetes import utils

from qonnect_gitops.model import load_goals
from qonnect_gitops.render import render
from qonnect_gitops.render.placement_file import is_placement_path
from qonnect_gitops.render.render import KUSTOMIZATION_FILE
from tests.render.test_render import find, make_plan
from tests.sim.kubelet_helpers import clients, make_sim, ready, wait_for

ARCH = "kubernetes.io/arch"
PLACEMENT = {
    "bookinfo/productpage": {"fog-2": 1, "edge-1": 1},   # amd64 and arm64: no pin anywhere
    "bookinfo/details": {"edge-1": 1},
    "bookinfo/reviews-v1": {"fog-2": 1, "fog-1": 1},     # amd64 only: pinned on fog-2 only
    "bookinfo/reviews-v2": {"cloud-2": 1},
    "bookinfo/reviews-v3": {"cloud-1": 1},
    "bookinfo/ratings": {"fog-1": 1, "edge-2": 1},
    "sensor-pipeline/ingest": {"edge-1": 1},
    "sensor-pipeline/aggregator": {"fog-3": 1, "fog-2": 1},
    "sensor-pipeline/store": {"cloud-1": 1},
    "sensor-pipeline/compaction": {"cloud-2": 1},
}


def _pod_spec(obj: dict) -> dict:
    spec = obj["spec"]
    if obj["kind"] == "CronJob":
        spec = spec["jobTemplate"]["spec"]
    return spec["template"]["spec"]


def _terms(obj: dict) -> list[dict] | None:
    affinity = _pod_spec(obj).get("affinity") or {}
    required = (affinity.get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    return None if required is None else required["nodeSelectorTerms"]


def test_amd64_only_components_are_pinned_on_mixed_clusters_only(template_files) -> None:
    goals = load_goals(template_files)
    out = render(goals, make_plan(goals, PLACEMENT))
    pinned = [{"matchExpressions": [{"key": ARCH, "operator": "In", "values": ["amd64"]}]}]
    assert _terms(find(out, "fog-2", "Deployment", "reviews-v1")) == pinned
    assert _terms(find(out, "cloud-2", "Deployment", "reviews-v2")) == pinned
    assert _terms(find(out, "fog-2", "Deployment", "aggregator")) == pinned
    assert _terms(find(out, "cloud-2", "CronJob", "compaction")) == pinned
    # Clusters whose every node runs the component: the manifest is left as written.
    assert _terms(find(out, "fog-1", "Deployment", "reviews-v1")) is None
    assert _terms(find(out, "cloud-1", "Deployment", "reviews-v3")) is None
    # A component built for both architectures needs no pin on a mixed cluster.
    assert _terms(find(out, "fog-2", "Deployment", "productpage-v1")) is None
    for path, body in out.files.items():
        if not is_placement_path(path) and not path.endswith("/" + KUSTOMIZATION_FILE):
            kubernetes_validate.validate(yaml.safe_load(body), "1.37.0", strict=True)


def _tolerating(files: dict[str, bytes]) -> dict[str, bytes]:
    """reviews-v1 tolerates fog-3's taint in its goals, not in its manifest."""
    app = files["apps/bookinfo/app.yaml"].decode().replace(
        "        tiers: [fog, cloud]               # the JVM is too heavy for the shop boards\n",
        "        tiers: [fog, cloud]               # the JVM is too heavy for the shop boards\n"
        "        tolerations:\n"
        "          - {key: dedicated, operator: Equal, value: analytics, effect: NoSchedule}\n", 1)
    assert app != files["apps/bookinfo/app.yaml"].decode()
    return {**files, "apps/bookinfo/app.yaml": app.encode()}


def test_tolerations_the_planner_relied_on_are_rendered_where_the_taint_is(template_files) -> None:
    goals = load_goals(_tolerating(template_files))
    placement = {**PLACEMENT, "bookinfo/reviews-v1": {"fog-1": 1, "fog-3": 1}}
    out = render(goals, make_plan(goals, placement))
    tainted = _pod_spec(find(out, "fog-3", "Deployment", "reviews-v1"))
    assert tainted["tolerations"] == [
        {"key": "dedicated", "operator": "Equal", "value": "analytics", "effect": "NoSchedule"}]
    # fog-1 has no taint: nothing to tolerate, nothing added.
    assert "tolerations" not in _pod_spec(find(out, "fog-1", "Deployment", "reviews-v1"))
    # The aggregator's manifest tolerates the taint already: not a second copy.
    assert len(_pod_spec(find(out, "fog-3", "Deployment", "aggregator"))["tolerations"]) == 1


def _with_user_affinity(template_files: dict[str, bytes]) -> dict[str, bytes]:
    files = dict(template_files)
    path = "apps/bookinfo/manifests/reviews-v1.yaml"
    docs = list(yaml.safe_load_all(files[path]))
    for doc in docs:
        if doc["kind"] == "Deployment":
            doc["spec"]["template"]["spec"]["affinity"] = {
                "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]},
                    {"matchExpressions": [{"key": "zone", "operator": "Exists"}]},
                ]}},
                "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 10, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                                                       "labelSelector": {"matchLabels": {"app": "reviews"}}}}]},
            }
            doc["spec"]["template"]["spec"]["tolerations"] = [
                {"key": "dedicated", "operator": "Equal", "value": "analytics", "effect": "NoSchedule"}]
    files[path] = yaml.safe_dump_all(docs, sort_keys=False).encode()
    return _tolerating(files)


def test_the_users_affinity_and_tolerations_are_kept_and_merged(template_files) -> None:
    goals = load_goals(_with_user_affinity(template_files))
    placement = {**PLACEMENT, "bookinfo/reviews-v1": {"fog-2": 1, "fog-3": 1}}
    out = render(goals, make_plan(goals, placement))
    arch = {"key": ARCH, "operator": "In", "values": ["amd64"]}
    mixed = find(out, "fog-2", "Deployment", "reviews-v1")
    assert _terms(mixed) == [
        {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}, arch]},
        {"matchExpressions": [{"key": "zone", "operator": "Exists"}, arch]},
    ]
    assert "podAntiAffinity" in _pod_spec(mixed)["affinity"]
    tainted = _pod_spec(find(out, "fog-3", "Deployment", "reviews-v1"))
    assert len(tainted["tolerations"]) == 1  # the user's own, not a second copy
    assert tainted["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"][0]["matchExpressions"] == [{"key": "disk", "operator": "In", "values": ["ssd"]}]


@pytest.mark.slow  # a simulated cluster serving the official client
def test_a_mixed_architecture_sim_runs_amd64_only_pods_on_amd64_nodes_only(template_files) -> None:
    """fog-2 of the template (two arm64 and two amd64 nodes) as a simulated cluster: its
    branch as rendered, applied with the official client; every pod lands where it runs."""
    goals = load_goals(template_files)
    placement = {**PLACEMENT, "bookinfo/reviews-v1": {"fog-2": 10}, "bookinfo/productpage": {"fog-2": 6}}
    files = render(goals, make_plan(goals, placement)).cluster_files("fog-2")
    fog2 = goals.clusters["fog-2"]
    docs = [yaml.safe_load(files[p]) for p in sorted(files, key=lambda p: (not p.startswith("_cluster/"), p))
            if p != KUSTOMIZATION_FILE]
    with make_sim(*fog2.spec.nodes, name="fog-2") as sim:
        core, _, _, api = clients(sim)
        arch_of = {n.metadata.name: n.metadata.labels[ARCH] for n in core.list_node().items}
        assert sorted(set(arch_of.values())) == ["amd64", "arm64"]
        for doc in docs:
            if doc["kind"] in ("Namespace", "ServiceAccount", "Deployment"):
                utils.create_from_dict(api, doc)

        def running() -> list:
            pods = core.list_namespaced_pod("bookinfo").items
            return pods if len(pods) == 16 and all(ready(p) for p in pods) else []

        pods = wait_for(running, 30, "16 ready pods")
    where = {(p.metadata.labels["app"], arch_of[p.spec.node_name]) for p in pods}
    assert {arch for app, arch in where if app == "reviews"} == {"amd64"}
    assert ("productpage", "arm64") in where  # the others may go anywhere, and do
