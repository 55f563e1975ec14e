"""The loader's parse cache: a goals change re-parses only the files whose blob changed,
and the result is the one an uncached load gives."""

from __future__ import annotations

import gc
from collections.abc import Callable

import pytest

from qonnect_gitops.model import GoalsError, ParseCache, load_goals

CRD = (b"apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n"
       b"metadata: {name: widgets.example.org}\nspec:\n  group: example.org\n  scope: Namespaced\n"
       b"  names: {plural: widgets, singular: widget, kind: Widget}\n"
       b"  versions:\n    - name: v1\n      served: true\n      storage: true\n      schema:\n"
       b"        openAPIV3Schema:\n          type: object\n          properties:\n            spec:\n"
       b"              type: object\n              properties:\n                size: {type: %s}\n")
WIDGET = b"---\napiVersion: example.org/v1\nkind: Widget\nmetadata: {name: w1}\nspec: {size: 3}\n"


def _parseable(files: dict[str, bytes]) -> int:
    """The files a load parses: the fleet, network, cluster and app files and every manifest."""
    return len([p for p in files if p.endswith(".yaml")])


def test_only_the_changed_blob_is_parsed_again(template_files: dict[str, bytes]) -> None:
    cache = ParseCache()
    first = load_goals(template_files, cache)
    parsed = cache.parsed
    assert parsed >= _parseable(template_files)  # manifests count twice: parsed, then checked
    again = load_goals(dict(template_files), cache)
    assert cache.parsed == parsed  # an unchanged tree: nothing parsed or validated again
    assert again.clusters == first.clusters and again.apps == first.apps
    files = dict(template_files)
    files["clusters/edge-1.yaml"] = files["clusters/edge-1.yaml"].replace(b"k3s", b"k8s")
    files["apps/bookinfo/manifests/details.yaml"] += b"# a comment changes the blob\n"
    changed = load_goals(files, cache)
    # One cluster file, one manifest parsed and one manifest's objects checked.
    assert cache.parsed == parsed + 3
    assert changed.clusters == load_goals(files).clusters != first.clusters
    assert changed.component("bookinfo/details") == load_goals(files).component("bookinfo/details")


def test_a_cached_problem_is_reported_again_and_a_fix_is_seen(template_files: dict[str, bytes]) -> None:
    cache = ParseCache()
    files = dict(template_files)
    files["clusters/fog-1.yaml"] = files["clusters/fog-1.yaml"].replace(b"tier: fog", b"tier: sky")
    with pytest.raises(GoalsError) as uncached:
        load_goals(files)
    for _ in range(2):  # the second time from the cache: the same problems, file and line
        with pytest.raises(GoalsError) as caught:
            load_goals(files, cache)
        assert caught.value.problems == uncached.value.problems
    assert load_goals(template_files, cache).clusters["fog-1"].spec.tier == "fog"


def test_object_checks_follow_a_changed_custom_resource_definition(template_files: dict[str, bytes]) -> None:
    """A manifest's bytes alone do not decide its problems: the CRDs in the goals do too."""
    files = dict(template_files)
    files["apps/bookinfo/manifests/details.yaml"] += b"---\n" + CRD % b"integer" + WIDGET
    cache = ParseCache()
    assert load_goals(files, cache).warnings == ()
    files["apps/bookinfo/manifests/details.yaml"] = template_files["apps/bookinfo/manifests/details.yaml"] + WIDGET
    files["apps/bookinfo/manifests/crd.yaml"] = CRD % b"string"
    app = files["apps/bookinfo/app.yaml"]
    files["apps/bookinfo/app.yaml"] = app.replace(b"manifests: [manifests/productpage.yaml]",
                                                  b"manifests: [manifests/productpage.yaml, manifests/crd.yaml]")
    assert files["apps/bookinfo/app.yaml"] != app
    with pytest.raises(GoalsError) as caught:
        load_goals(files, cache)
    assert [p.message for p in caught.value.problems] == ["got 3; expected a string"]


def test_entries_of_files_gone_from_the_goals_are_dropped(template_files: dict[str, bytes]) -> None:
    cache = ParseCache()
    load_goals(template_files, cache)
    full = len(cache)
    smaller = {p: b for p, b in template_files.items() if p != "clusters/cloud-3.yaml"}
    smaller["network.yaml"] = b"\n".join(line for line in template_files["network.yaml"].split(b"\n")
                                         if b"cloud-3" not in line)
    for _ in range(ParseCache.KEEP_LOADS + 1):
        load_goals(smaller, cache)
    assert len(cache) == full - 1  # cloud-3's file is forgotten; the edited network.yaml replaced


def _grown(files: dict[str, bytes], clusters: int) -> dict[str, bytes]:
    """``files`` with ``clusters`` more edge clusters, each with links to both regions."""
    grown = dict(files)
    edge = files["clusters/edge-1.yaml"]
    links = []
    for i in range(clusters):
        name = f"edge-x{i}"
        grown[f"clusters/{name}.yaml"] = edge.replace(b"name: edge-1", b"name: " + name.encode())
        links += [f"    - {{from: {name}, to: eu-central, ms: 9}}\n", f"    - {{from: {name}, to: eu-west, ms: 30}}\n"]
    grown["network.yaml"] = files["network.yaml"] + "".join(links).encode()
    return grown


def _young_containers_left_by(load: Callable[[], object]) -> int:
    """Containers the cyclic collector tracks that ``load`` allocated and left alive (the
    young generation the next collection walks with every thread stopped)."""
    gc.collect()
    gc.disable()  # nothing collected or promoted while counting
    try:
        before = len(gc.get_objects(0))
        kept = load()
        young = len(gc.get_objects(0)) - before
        del kept
        return young
    finally:
        gc.enable()


@pytest.mark.parametrize("clusters", [0, 300])
def test_a_cached_load_leaves_no_container_per_file(template_files: dict[str, bytes], clusters: int) -> None:
    """A load of an unchanged tree makes the new ``Goals`` and its few dicts, not a container
    per file or per latency link: at 3,000 clusters each cached load left 100,000 young
    ones, and the next collection walked them all (0.13 s)."""
    files = _grown(template_files, clusters)
    cache = ParseCache()
    first = load_goals(files, cache)
    assert ("edge-x0" in first.clusters) == (clusters > 0)
    assert _young_containers_left_by(lambda: load_goals(dict(files), cache)) < 20
    # A changed cluster file: that file's documents, not the whole tree's.
    files["clusters/edge-1.yaml"] = files["clusters/edge-1.yaml"].replace(b"k3s", b"k8s")
    assert _young_containers_left_by(lambda: load_goals(dict(files), cache)) < 300
