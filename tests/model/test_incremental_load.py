"""Reloading goals with a warm parse cache costs what changed: an unchanged component or app
is the very object of the last load, a changed blob is parsed and resolved again, and a
fleet-level change reaches everything that depends on it. Problems are the same either way."""

from __future__ import annotations

import pytest

from qonnect_gitops.model import GoalsError, ParseCache, Problem, load_goals
from qonnect_gitops.model.goals import Component, Goals

DETAILS = "apps/bookinfo/manifests/details.yaml"


def _components(goals: Goals) -> dict[str, Component]:
    return {c.key: c for app in goals.apps.values() for c in app.components}


def _refused_alike(files: dict[str, bytes], cache: ParseCache) -> list[Problem]:
    """The problems of ``files`` loaded with ``cache``, asserted to be an uncached load's."""
    with pytest.raises(GoalsError) as uncached:
        load_goals(files)
    with pytest.raises(GoalsError) as cached:
        load_goals(files, cache)
    assert cached.value.problems == uncached.value.problems
    return list(cached.value.problems)


def test_an_unchanged_reload_returns_the_same_objects(template_files: dict[str, bytes]) -> None:
    cache = ParseCache()
    first = load_goals(template_files, cache)
    again = load_goals(dict(template_files), cache)
    for name, app in first.apps.items():
        assert again.apps[name] is app
    assert again.warnings == first.warnings


def test_a_changed_manifest_is_parsed_and_its_component_resolved_again(template_files: dict[str, bytes]) -> None:
    cache = ParseCache()
    first = load_goals(template_files, cache)
    files = dict(template_files)
    files[DETAILS] = files[DETAILS].replace(b"replicas: 1", b"replicas: 3", 1)
    assert files[DETAILS] != template_files[DETAILS]
    parsed = cache.parsed
    changed = load_goals(files, cache)
    assert cache.parsed == parsed + 2  # the manifest parsed, its objects checked: nothing else
    before, after = _components(first), _components(changed)
    assert after["bookinfo/details"] is not before["bookinfo/details"]
    assert after["bookinfo/details"] == _components(load_goals(files))["bookinfo/details"]
    assert after["bookinfo/details"].replicas == 3 != before["bookinfo/details"].replicas
    # Every other component is the object of the first load; the other app too.
    assert all(after[k] is before[k] for k in before if k != "bookinfo/details")
    assert changed.apps["bookinfo"] is not first.apps["bookinfo"]
    assert changed.apps["sensor-pipeline"] is first.apps["sensor-pipeline"]
    assert changed == load_goals(files)


def test_a_changed_app_file_resolves_its_components_again(template_files: dict[str, bytes]) -> None:
    cache = ParseCache()
    first = load_goals(template_files, cache)
    files = dict(template_files)
    files["apps/bookinfo/app.yaml"] = files["apps/bookinfo/app.yaml"].replace(b"maxCostPerHour: 0.05",
                                                                              b"maxCostPerHour: 0.07", 1)
    changed = load_goals(files, cache)
    assert changed.component("bookinfo/reviews-v1").qos.max_cost_per_hour == 0.07
    assert changed.apps["bookinfo"] == load_goals(files).apps["bookinfo"]
    assert changed.component("bookinfo/details") is not first.component("bookinfo/details")
    assert changed.apps["sensor-pipeline"] is first.apps["sensor-pipeline"]


def test_changed_fleet_defaults_reach_every_component(template_files: dict[str, bytes]) -> None:
    cache = ParseCache()
    first = load_goals(template_files, cache)
    files = dict(template_files)
    files["qonnect.yaml"] = files["qonnect.yaml"].replace(b"cooldownSeconds: 120", b"cooldownSeconds: 900")
    changed = load_goals(files, cache)
    assert changed == load_goals(files)
    for key, component in _components(changed).items():
        assert component is not _components(first)[key]
        if component.qos.migration.cooldown_seconds is None:
            assert component.stability.cooldown_seconds == 900
    # A change elsewhere in qonnect.yaml leaves the components as they were.
    files["qonnect.yaml"] = template_files["qonnect.yaml"].replace(b"intervalSeconds: 2", b"intervalSeconds: 3")
    assert files["qonnect.yaml"] != template_files["qonnect.yaml"]
    other = load_goals(files, cache)
    assert other.fleet.spec.heartbeat.interval_seconds == 3
    assert all(c is _components(first)[k] for k, c in _components(other).items())


@pytest.mark.parametrize("edit", ["region", "network"])
def test_fleet_regions_and_network_are_checked_again_for_unchanged_apps(
        template_files: dict[str, bytes], edit: str) -> None:
    """A latency goal stays right only while its region exists and is measured: an app
    whose own files did not change is refused as an uncached load refuses it."""
    cache = ParseCache()
    load_goals(template_files, cache)
    files = dict(template_files)
    if edit == "region":
        files["qonnect.yaml"] = files["qonnect.yaml"].replace(b"- eu-central\n", b"- eu-south\n")
    else:
        files["network.yaml"] = b"\n".join(line for line in files["network.yaml"].split(b"\n")
                                           if b"to: eu-central" not in line)
    problems = _refused_alike(files, cache)
    assert any(p.path == "apps/bookinfo/app.yaml" and "eu-central" in p.message for p in problems)
    assert load_goals(template_files, cache) == load_goals(template_files)


def test_a_manifest_taken_by_two_components_is_refused_from_the_cache_too(template_files: dict[str, bytes]) -> None:
    """The cache never skips the checks across components: a file listed twice is refused."""
    cache = ParseCache()
    load_goals(template_files, cache)
    files = dict(template_files)
    files["apps/bookinfo/app.yaml"] = files["apps/bookinfo/app.yaml"].replace(
        b"manifests: [manifests/ratings.yaml]", b"manifests: [manifests/details.yaml]")
    problems = _refused_alike(files, cache)
    assert any("already used by component 'details'" in p.message for p in problems)


def test_a_missing_manifest_is_seen_by_an_unchanged_app(template_files: dict[str, bytes]) -> None:
    cache = ParseCache()
    load_goals(template_files, cache)
    files = {p: b for p, b in template_files.items() if p != DETAILS}
    problems = _refused_alike(files, cache)
    assert any("not found" in p.message for p in problems)
