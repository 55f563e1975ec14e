"""The loader on valid input: the template, defaults, and what it resolves."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qonnect_gitops.model import GoalsError, load_goals
from qonnect_gitops.model.yamlpos import parse_yaml


def test_template_resolves(template_files: dict[str, bytes]) -> None:
    goals = load_goals(template_files)
    assert list(goals.clusters) == sorted(goals.clusters) and len(goals.clusters) == 9
    assert {c.spec.tier for c in goals.clusters.values()} == {"cloud", "fog", "edge"}
    assert {c.spec.distribution for c in goals.clusters.values()} == {"k8s", "k3s"}
    productpage = goals.component("bookinfo/productpage")
    # Requests come from the manifest when the component does not set resources.
    assert (productpage.cpu, productpage.memory) == (100, 128 * 2**20)
    # App defaults fill what the component leaves out, field by field.
    assert productpage.qos.tiers == ("edge", "fog", "cloud")
    assert productpage.qos.objective.latency == 0.6
    assert goals.component("bookinfo/reviews-v3").qos.objective.cost == 1.0
    assert productpage.calls == (
        "bookinfo/details", "bookinfo/reviews-v1", "bookinfo/reviews-v2", "bookinfo/reviews-v3",
    )
    store = goals.component("sensor-pipeline/store")
    assert store.kind == "StatefulSet" and not store.movable
    assert goals.component("sensor-pipeline/compaction").kind == "CronJob"
    # Fleet stability defaults reach every component.
    assert store.stability.cooldown_seconds == 120 and store.stability.disruption_budget == 1


def test_latency_is_symmetric_unless_both_directions_given(template_files: dict[str, bytes]) -> None:
    files = dict(template_files)
    files["network.yaml"] = files["network.yaml"].replace(
        b"{from: fog-1, to: edge-1, ms: 8}", b"{from: fog-1, to: edge-1, ms: 99}"
    )
    goals = load_goals(files)
    assert goals.declared_latency("edge-1", "fog-1") == 99
    assert goals.declared_latency("fog-1", "edge-1") == 99
    files["network.yaml"] += b"    - {from: edge-1, to: fog-1, ms: 7}\n"
    goals = load_goals(files)
    assert goals.declared_latency("edge-1", "fog-1") == 7
    assert goals.declared_latency("fog-1", "edge-1") == 99


def test_init_containers_count_by_their_peak(template_files: dict[str, bytes]) -> None:
    files = dict(template_files)
    path = "apps/bookinfo/manifests/details.yaml"
    files[path] = files[path].replace(
        b"      containers:\n",
        b"      initContainers:\n        - name: warm\n          image: busybox\n"
        b"          resources: {requests: {cpu: '2', memory: 32Mi}}\n      containers:\n",
    )
    details = load_goals(files).component("bookinfo/details")
    assert (details.cpu, details.memory) == (2000, 64 * 2**20)


documents = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=25,
)
yaml_texts = st.one_of(
    st.text(max_size=200),
    documents.map(lambda d: __import__("yaml").safe_dump(d)),
)
goal_paths = st.sampled_from(
    ["qonnect.yaml", "network.yaml", "clusters/edge-1.yaml", "apps/bookinfo/app.yaml",
     "apps/bookinfo/manifests/details.yaml"]
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=goal_paths, text=yaml_texts)
def test_arbitrary_yaml_only_ever_raises_goals_error(
    template_files: dict[str, bytes], path: str, text: str
) -> None:
    files = dict(template_files)
    files[path] = text.encode("utf-8", "surrogatepass") if text else b""
    try:
        load_goals(files)
    except GoalsError as exc:
        assert exc.problems and all(p.path and p.message for p in exc.problems)


@settings(max_examples=200, deadline=None)
@given(raw=st.binary(max_size=120))
def test_arbitrary_bytes_only_ever_raise_goals_error(raw: bytes) -> None:
    try:
        parse_yaml("x.yaml", raw)
    except GoalsError:
        pass


def test_recursive_alias_is_refused_not_looped() -> None:
    try:
        parse_yaml("x.yaml", b"a: &x [*x]\n")
    except GoalsError as exc:
        assert "alias" in str(exc)
    else:  # ruamel may refuse the alias itself; either way no recursion error escapes
        pass


def test_sidecars_count_with_the_containers(template_files: dict[str, bytes]) -> None:
    files = dict(template_files)
    path = "apps/bookinfo/manifests/details.yaml"
    files[path] = files[path].replace(
        b"      containers:\n",
        b"      initContainers:\n        - name: proxy\n          image: envoy\n          restartPolicy: Always\n"
        b"          resources: {requests: {cpu: 100m, memory: 32Mi}}\n      containers:\n",
    )
    details = load_goals(files).component("bookinfo/details")
    assert (details.cpu, details.memory) == (150, 96 * 2**20)
