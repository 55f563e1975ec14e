"""The same inputs in any order give byte-identical JSON."""

from __future__ import annotations

import random
from datetime import timedelta

from qonnect_gitops.model.goals import App, Goals
from qonnect_gitops.model.observed import Observed
from qonnect_gitops.placement import plan
from qonnect_gitops.render.describe import plan_json
from tests.placement.builders import NOW, cluster, component, current, goals, observed


def _fleet() -> tuple[Goals, Observed]:
    clusters = [
        cluster(f"{t}-{i}", tier=t, region=r, cpu=c, cpu_hour=0.02 + 0.01 * i, arch=a)
        for i, (t, r, c, a) in enumerate(
            [("edge", "eu", "2", "arm64"), ("edge", "us", "2", "amd64"), ("fog", "eu", "4", "amd64"),
             ("fog", "us", "4", "amd64"), ("cloud", "eu", "16", "amd64"), ("cloud", "us", "16", "amd64")]
        )
    ]
    comps = [
        component("front", replicas=3, calls=("shop/api",), qos={"latency": [{"region": "eu", "maxMs": 30}], "availability": {"minClusters": 2, "spread": True}}),
        component("api", replicas=2, calls=("shop/db", "shop/cache"), arch=("amd64", "arm64")),
        component("cache", cpu=250, qos={"tiers": ["edge", "fog"], "objective": {"latency": 1, "cost": 1}}),
        component("db", kind="StatefulSet", cpu=2000, qos={"objective": "cost"}),
        component("worker", replicas=4, cpu=1000, qos={"placement": {"policy": "worst-fit"}}),
        component("stats", qos={"placement": {"policy": "traffic"}}),
    ]
    links = [(c.name, r, 5.0 if c.spec.region == r else 70.0 + i) for i, c in enumerate(clusters) for r in ("eu", "us")]
    g = goals(clusters, comps, links=links, regions=("eu", "us"))
    obs = observed(
        clusters={"fog-3": {"heartbeatAgeSeconds": 50}, "edge-1": {"free": {"cpu": "1", "memory": "1Gi"}}},
        latencies=[{"from": "fog-2", "to": "eu", "ms": 12}, {"from": "edge-0", "to": "eu", "ms": 3}],
        traffic=[{"component": "shop/stats", "region": "us", "rps": 30}, {"component": "shop/stats", "region": "eu", "rps": 10}],
    )
    return g, obs


def _shuffled(g: Goals, obs: Observed, rng: random.Random) -> tuple[Goals, Observed]:
    names = list(g.clusters)
    rng.shuffle(names)
    apps = {}
    for name, app in g.apps.items():
        comps = list(app.components)
        rng.shuffle(comps)
        apps[name] = App(app.name, app.namespace, app.document, tuple(comps))
    lat = list(g.latencies.items())
    rng.shuffle(lat)
    g2 = Goals(g.fleet, {n: g.clusters[n] for n in names}, g.network, apps, dict(lat))
    fields = obs.model_dump(by_alias=True)
    for key in ("latencies", "traffic"):
        fields[key] = list(fields[key])
        rng.shuffle(fields[key])
    items = list(fields["clusters"].items())
    rng.shuffle(items)
    fields["clusters"] = dict(items)
    return g2, Observed.model_validate(fields)


def test_shuffled_inputs_give_identical_json() -> None:
    g, obs = _fleet()
    cur = current({"shop/api": {"fog-3": 1, "cloud-4": 1}, "shop/db": {"cloud-5": 1}}, {"shop/api": NOW - timedelta(hours=1)})
    expected = plan_json(plan(g, obs, cur))
    assert '"failover"' in expected  # the scenario exercises failover, not just new placements
    rng = random.Random(1)
    for _ in range(30):
        g2, obs2 = _shuffled(g, obs, rng)
        placements = list(cur.placements.items())
        rng.shuffle(placements)
        cur2 = current(dict(placements), dict(cur.last_moved))
        assert plan_json(plan(g2, obs2, cur2)) == expected
