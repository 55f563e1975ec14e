"""Rendering: per-cluster manifests that Kubernetes accepts, owned, deterministic."""

from __future__ import annotations

import random

import kubernetes_validate
import pytest
import yaml

from qonnect_gitops.model import load_goals
from qonnect_gitops.model.labels import COMPONENT_LABEL, DIGEST_ANNOTATION, MANAGED_BY_LABEL
from qonnect_gitops.model.plan import Assignment, ComponentPlan, Draining, Plan
from qonnect_gitops.render import render
from qonnect_gitops.render.placement_file import is_placement_path, placement_of
from qonnect_gitops.render.render import KUSTOMIZATION_FILE

PLACEMENT = {
    "bookinfo/productpage": {"edge-1": 1, "edge-2": 1},
    "bookinfo/details": {"edge-1": 1},
    "bookinfo/reviews-v1": {"fog-1": 1},
    "bookinfo/reviews-v2": {"fog-1": 1},
    "bookinfo/reviews-v3": {"cloud-1": 1},
    "bookinfo/ratings": {"fog-1": 1, "edge-2": 1},
    "sensor-pipeline/ingest": {"edge-1": 4, "edge-2": 2},
    "sensor-pipeline/aggregator": {"fog-3": 1, "fog-1": 1},
    "sensor-pipeline/store": {"cloud-1": 1},
    "sensor-pipeline/compaction": {"cloud-1": 1},
}


def make_plan(goals, placement=PLACEMENT, draining=None) -> Plan:
    draining = draining or {}
    return Plan(
        reason="goals-changed",
        components={
            key: ComponentPlan(
                component=key,
                kind=goals.component(key).kind,
                assignments=tuple(
                    Assignment(cluster=c, replicas=n, reason="test")
                    for c, n in sorted(placement[key].items())
                ),
                draining=tuple(Draining(cluster=c, replicas=n, reason="moving")
                               for c, n in draining.get(key, {}).items()),
            )
            for key in sorted(placement)
        },
    )


@pytest.fixture(scope="module")
def goals(template_files):
    return load_goals(template_files)


@pytest.fixture(scope="module")
def rendered(goals):
    return render(goals, make_plan(goals))


def objects(rendered, cluster: str) -> dict[str, dict]:
    return {p: yaml.safe_load(b) for p, b in rendered.cluster_files(cluster).items() if p != KUSTOMIZATION_FILE}


def find(rendered, cluster: str, kind: str, name: str) -> dict:
    matches = [o for o in objects(rendered, cluster).values()
               if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(matches) == 1, f"{kind}/{name} on {cluster}: {len(matches)} found"
    return matches[0]


def test_every_rendered_object_passes_strict_kubernetes_validation(rendered) -> None:
    count = 0
    for path, body in rendered.files.items():
        if is_placement_path(path) or path.endswith("/" + KUSTOMIZATION_FILE):
            continue
        kubernetes_validate.validate(yaml.safe_load(body), "1.37.0", strict=True)
        count += 1
    assert count == sum(rendered.objects.values()) > 30


def test_workload_gets_per_cluster_replicas_namespace_and_ownership(rendered) -> None:
    on_edge1 = find(rendered, "edge-1", "Deployment", "ingest")
    on_edge2 = find(rendered, "edge-2", "Deployment", "ingest")
    assert (on_edge1["spec"]["replicas"], on_edge2["spec"]["replicas"]) == (4, 2)
    for obj in objects(rendered, "edge-1").values():
        labels = obj["metadata"]["labels"]
        assert labels[MANAGED_BY_LABEL] == "qonnect"
        assert obj["metadata"]["annotations"][DIGEST_ANNOTATION].startswith("sha256:")
        if obj["kind"] != "Namespace":
            assert labels["qonnect.io/app"] in ("bookinfo", "sensor-pipeline")
            assert obj["metadata"]["namespace"] in ("bookinfo", "sensors")
    assert {o["metadata"]["name"] for o in objects(rendered, "edge-1").values()
            if o["kind"] == "Namespace"} == {"bookinfo", "sensors"}


def test_clusters_hosting_nothing_have_no_files(rendered, goals) -> None:
    assert rendered.cluster_files("edge-3") == {}
    assert rendered.objects["edge-3"] == 0
    assert set(rendered.clusters) == set(goals.clusters)


def test_user_field_order_is_kept(rendered) -> None:
    body = rendered.cluster_files("edge-1")["bookinfo/details/deployment-details-v1.yaml"].decode()
    keys = [line.split(":")[0] for line in body.splitlines() if line and not line.startswith(" ")]
    assert keys == ["apiVersion", "kind", "metadata", "spec"]
    container = find(rendered, "edge-1", "Deployment", "details-v1")["spec"]["template"]["spec"]["containers"][0]
    assert list(container) == ["name", "image", "imagePullPolicy", "ports", "resources"]


def test_autoscaler_bounds_split_and_replicas_left_to_it(rendered) -> None:
    for cluster in ("fog-1", "fog-3"):
        hpa = find(rendered, cluster, "HorizontalPodAutoscaler", "aggregator")
        assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (1, 3)
        assert "replicas" not in find(rendered, cluster, "Deployment", "aggregator")["spec"]


def test_callers_get_the_service_made_global(rendered) -> None:
    # productpage runs on edge-2 and calls details, which runs only on edge-1.
    service = find(rendered, "edge-2", "Service", "details")
    assert service["metadata"]["annotations"]["service.cilium.io/global"] == "true"
    assert service["metadata"]["annotations"]["service.cilium.io/shared"] == "false"
    assert service["metadata"]["labels"][COMPONENT_LABEL] == "details"
    assert not [o for o in objects(rendered, "edge-2").values()
                if o["kind"] == "Deployment" and o["metadata"]["name"] == "details-v1"]
    hosted = find(rendered, "edge-1", "Service", "details")
    assert hosted["metadata"]["annotations"]["service.cilium.io/shared"] == "true"


def test_mcs_mesh_exports_services_where_hosted(template_files) -> None:
    files = dict(template_files)
    files["qonnect.yaml"] = files["qonnect.yaml"].replace(b"mesh: cilium", b"mesh: mcs")
    goals = load_goals(files)
    rendered = render(goals, make_plan(goals))
    export = find(rendered, "edge-1", "ServiceExport", "details")
    assert export["apiVersion"] == "multicluster.x-k8s.io/v1alpha1"
    assert export["metadata"]["namespace"] == "bookinfo"
    assert not [o for o in objects(rendered, "edge-2").values() if o["kind"] == "ServiceExport"
                and o["metadata"]["name"] == "details"]
    assert "annotations" in find(rendered, "edge-2", "Service", "details")["metadata"]
    assert "service.cilium.io/global" not in find(rendered, "edge-2", "Service", "details")["metadata"]["annotations"]


def test_draining_replicas_stay_rendered_until_removed(goals) -> None:
    placement = dict(PLACEMENT, **{"bookinfo/details": {"edge-2": 1}})
    plan = make_plan(goals, placement, draining={"bookinfo/details": {"edge-1": 1}})
    rendered = render(goals, plan)
    assert find(rendered, "edge-1", "Deployment", "details-v1")["spec"]["replicas"] == 1
    assert find(rendered, "edge-2", "Deployment", "details-v1")["spec"]["replicas"] == 1


def test_same_inputs_same_bytes_in_any_order(template_files, goals, rendered) -> None:
    items = list(template_files.items())
    for seed in range(3):
        random.Random(seed).shuffle(items)
        again = render(load_goals(dict(items)), make_plan(goals))
        assert again.files == rendered.files
        assert list(again.files) == list(rendered.files)


def test_files_grouped_by_cluster_are_the_flat_plan_tree(rendered) -> None:
    """The rendering holds each cluster's files together (the decision writer takes them
    so); as a mapping it is the flat plan tree, in path order."""
    files = rendered.files
    flat = {p: b for p, b in files.items()}
    assert list(flat) == sorted(flat) and len(files) == len(flat)
    assert set(files.directories()) == {c for c, n in rendered.objects.items() if n}
    for cluster, pairs in files.directories().items():
        assert [p for p, _ in pairs] == sorted(p for p, _ in pairs)
        assert {f"clusters/{cluster}/{p}": b for p, b in pairs} == {
            p: b for p, b in flat.items() if p.startswith(f"clusters/{cluster}/")}
        assert rendered.cluster_files(cluster) == dict(pairs)
    assert dict(files.loose()) == {p: b for p, b in flat.items() if not p.startswith("clusters/")}
    path = next(p for p in flat if p.startswith("clusters/edge-1/"))
    assert files[path] == flat[path] and path in files
    assert "clusters/edge-1/nothing.yaml" not in files and "clusters/edge-1" not in files
    with pytest.raises(KeyError):
        files["clusters/nowhere/x.yaml"]


def test_change_elsewhere_does_not_touch_other_clusters(template_files, goals, rendered) -> None:
    files = dict(template_files)
    path = "apps/bookinfo/manifests/reviews-v3.yaml"
    files[path] = files[path].replace(b"LOG_DIR", b"LOG_PATH")
    changed = render(load_goals(files), make_plan(goals))
    assert changed.cluster_files("cloud-1") != rendered.cluster_files("cloud-1")
    for cluster in ("edge-1", "edge-2", "fog-1", "fog-3"):
        assert changed.cluster_files(cluster) == rendered.cluster_files(cluster)


def test_sops_files_pass_through_untouched(template_files) -> None:
    files = dict(template_files)
    sops = (b"apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\ntype: Opaque\n"
            b"data:\n  password: ENC[AES256_GCM,data:Zm9v,iv:YmFy,tag:YmF6,type:str]\n"
            b"sops:\n  mac: ENC[AES256_GCM,data:eA==,iv:eQ==,tag:eg==,type:str]\n  version: 3.9.0\n")
    files["apps/sensor-pipeline/manifests/db-secret.enc.yaml"] = sops
    files["apps/sensor-pipeline/app.yaml"] = files["apps/sensor-pipeline/app.yaml"].replace(
        b"manifests: [manifests/store.yaml]",
        b"manifests: [manifests/store.yaml, manifests/db-secret.enc.yaml]")
    goals = load_goals(files)
    rendered = render(goals, make_plan(goals))
    assert rendered.cluster_files("cloud-1")["sensors/store/sops-db-secret.enc.yaml"] == sops


def test_plain_secrets_need_the_opt_in(template_files) -> None:
    files = dict(template_files)
    files["apps/sensor-pipeline/manifests/store.yaml"] += (
        b"---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: db\nstringData:\n  password: hunter2\n")
    from qonnect_gitops.model import GoalsError

    with pytest.raises(GoalsError, match="Secret 'db' holds plain data"):
        load_goals(files)
    files["apps/sensor-pipeline/app.yaml"] = files["apps/sensor-pipeline/app.yaml"].replace(
        b"  namespace: sensors\n", b"  namespace: sensors\n  allowPlainSecrets: true\n")
    goals = load_goals(files)
    secret = find(render(goals, make_plan(goals)), "cloud-1", "Secret", "db")
    assert secret["stringData"] == {"password": "hunter2"}


def test_placement_file_records_every_component_and_reason(rendered) -> None:
    placement = placement_of(rendered.files)
    assert placement is not None
    assert placement["reason"] == "goals-changed"
    assert set(placement["components"]) == set(PLACEMENT)
    assert placement["components"]["sensor-pipeline/ingest"]["assignments"][0] == {
        "cluster": "edge-1", "replicas": 4, "reason": "test", "score": None, "breakdown": {}}


def test_service_goes_where_its_backends_run(goals) -> None:
    # reviews-v2 runs on fog-2 without reviews-v1, which declares the reviews Service.
    placement = dict(PLACEMENT, **{"bookinfo/reviews-v2": {"fog-2": 1}})
    rendered = render(goals, make_plan(goals, placement))
    service = find(rendered, "fog-2", "Service", "reviews")
    assert service["metadata"]["annotations"]["service.cilium.io/shared"] == "true"
    assert find(rendered, "fog-2", "ServiceAccount", "bookinfo-reviews-v2")
    # ratings is called from fog-2 now, so its Service is there too, as a consumer only.
    ratings = find(rendered, "fog-2", "Service", "ratings")
    assert ratings["metadata"]["annotations"]["service.cilium.io/shared"] == "false"


def test_scope_comes_from_the_schema_not_a_list(template_files) -> None:
    """An APIService (cluster-scoped in 1.37, once missing from a hand-kept list) lands in
    _cluster without a namespace; a Role stays in the app's namespace."""
    files = dict(template_files)
    files["apps/bookinfo/manifests/details.yaml"] += (
        b"---\napiVersion: apiregistration.k8s.io/v1\nkind: APIService\nmetadata:\n  name: v1.details.example.org\n"
        b"  namespace: bookinfo\nspec:\n  group: details.example.org\n  version: v1\n"
        b"  groupPriorityMinimum: 100\n  versionPriority: 10\n"
        b"---\napiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: details:reader\nrules: []\n")
    goals = load_goals(files)
    tree = render(goals, make_plan(goals)).cluster_files("edge-1")
    api_service = yaml.safe_load(tree["_cluster/apiservice-v1.details.example.org.yaml"])
    assert "namespace" not in api_service["metadata"]
    role = yaml.safe_load(tree["bookinfo/details/role-details:reader.yaml"])
    assert role["metadata"]["namespace"] == "bookinfo"


def test_adopting_an_existing_namespace_is_an_explicit_opt_in(template_files) -> None:
    files = dict(template_files)
    goals = load_goals(files)
    tree = render(goals, make_plan(goals)).cluster_files("edge-1")
    namespace = yaml.safe_load(tree["_cluster/namespace-bookinfo.yaml"])
    assert "qonnect.io/adopt" not in namespace["metadata"]["annotations"]
    files["apps/bookinfo/app.yaml"] = files["apps/bookinfo/app.yaml"].replace(
        b"  namespace: bookinfo\n", b"  namespace: bookinfo\n  adoptNamespace: true\n")
    goals = load_goals(files)
    tree = render(goals, make_plan(goals)).cluster_files("edge-1")
    assert yaml.safe_load(tree["_cluster/namespace-bookinfo.yaml"])["metadata"]["annotations"][
        "qonnect.io/adopt"] == "enabled"
    assert "qonnect.io/adopt" not in yaml.safe_load(tree["_cluster/namespace-sensors.yaml"])["metadata"].get(
        "annotations", {})


def test_rendering_again_reuses_nothing_stale(template_files) -> None:
    """Rendering keeps what it made for a component between calls; a component of other
    goals, a changed replica count or a new manifest gives new files, never old ones."""
    goals = load_goals(template_files)
    first = render(goals, make_plan(goals))
    assert render(goals, make_plan(goals)).files == first.files
    files = dict(template_files)
    files["apps/bookinfo/manifests/details.yaml"] = files["apps/bookinfo/manifests/details.yaml"].replace(
        b"image: ", b"image: mirror.example.org/")
    edited = load_goals(files)
    second = render(edited, make_plan(edited))
    changed = {p for p in first.files if first.files[p] != second.files.get(p)}
    assert changed == {"clusters/edge-1/bookinfo/details/deployment-details-v1.yaml"}
    scaled = dict(PLACEMENT, **{"bookinfo/productpage": {"edge-1": 2, "edge-2": 1}})
    third = render(goals, make_plan(goals, scaled))
    body = yaml.safe_load(third.files["clusters/edge-1/bookinfo/productpage/deployment-productpage-v1.yaml"])
    assert body["spec"]["replicas"] == 2
    assert third.files == render(load_goals(template_files), make_plan(goals, scaled)).files


def test_goals_sharing_parsed_objects_render_like_fresh_goals(template_files) -> None:
    """Through the parse cache two commits share the objects of unchanged files; what
    renders for the second is exactly what its goals loaded afresh render."""
    from qonnect_gitops.model import ParseCache

    cache = ParseCache()
    goals = load_goals(template_files, cache)
    render(goals, make_plan(goals))
    files = dict(template_files)
    files["apps/bookinfo/manifests/details.yaml"] = files["apps/bookinfo/manifests/details.yaml"].replace(
        b"image: ", b"image: mirror.example.org/")
    files["apps/bookinfo/app.yaml"] += b"# the app file changed too: every component object is new\n"
    # A cluster's nodes decide the pods' architecture affinity: its file changed, its files change.
    files["clusters/edge-1.yaml"] = files["clusters/edge-1.yaml"].replace(b"arch: arm64", b"arch: amd64")
    shared = load_goals(files, cache)
    assert shared.component("bookinfo/ratings").workload is goals.component("bookinfo/ratings").workload
    fresh = load_goals(files)
    assert render(shared, make_plan(shared)).files == render(fresh, make_plan(fresh)).files
