"""``stateful: true``: any workload kind pinned like a StatefulSet."""

from __future__ import annotations

from dataclasses import replace

from qonnect_gitops.model import load_goals
from qonnect_gitops.placement import plan
from tests.placement.builders import cluster, component, current, goals, observed


def test_a_stateful_deployment_waits_for_its_failed_cluster_and_says_so() -> None:
    clusters = [cluster("a"), cluster("b")]
    cache = replace(component("cache"), stateful=True)
    assert cache.keeps_state and not cache.movable
    p = plan(goals(clusters, [cache]), observed(clusters={"a": {"healthy": False}}), current({"shop/cache": {"a": 1}}))
    assert p.placements()["shop/cache"] == {"a": 1}
    (unmet,) = [u for u in p.unmet if u.component == "shop/cache"]
    assert unmet.goal == "health"
    assert "a stateful Deployment moves only with qos.migration.allowStateful" in unmet.message
    # The same Deployment without state fails over at once.
    plain = component("cache")
    p2 = plan(goals(clusters, [plain]), observed(clusters={"a": {"healthy": False}}), current({"shop/cache": {"a": 1}}))
    assert p2.placements()["shop/cache"] == {"b": 1} and p2.reason == "failover"
    # Opting in to moves lets the stateful one fail over too.
    opted = replace(component("cache", allow_stateful=True), stateful=True)
    p3 = plan(goals(clusters, [opted]), observed(clusters={"a": {"healthy": False}}), current({"shop/cache": {"a": 1}}))
    assert p3.placements()["shop/cache"] == {"b": 1}


def test_a_stateful_deployment_is_not_moved_by_rescheduling() -> None:
    # b is far cheaper; a plain Deployment out of its cooldown moves there, a stateful one stays.
    clusters = [cluster("a", cpu_hour=1.0), cluster("b", cpu_hour=0.01)]
    for stateful, where in ((None, {"b": 1}), (True, {"a": 1})):
        web = replace(component("web", qos={"objective": "cost"}, cooldown=0.0), stateful=stateful)
        p = plan(goals(clusters, [web]), observed(), current({"shop/web": {"a": 1}}))
        assert p.placements()["shop/web"] == where, stateful


def test_stateful_is_read_from_the_goals_and_false_unpins_nothing(template_files) -> None:
    text = template_files["apps/bookinfo/app.yaml"].decode()
    edited = text.replace("      manifests: [manifests/details.yaml]\n",
                          "      manifests: [manifests/details.yaml]\n      stateful: true\n", 1)
    assert edited != text
    g = load_goals({**template_files, "apps/bookinfo/app.yaml": edited.encode()})
    assert g.component("bookinfo/details").keeps_state
    assert not g.component("bookinfo/productpage").keeps_state
    assert g.component("sensor-pipeline/store").keeps_state  # a StatefulSet, as before
