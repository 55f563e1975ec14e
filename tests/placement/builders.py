"""Small hand-made fleets for planner tests, built straight from the models."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

from qonnect_gitops.model.app import QoS
from qonnect_gitops.model.cluster import Cluster
from qonnect_gitops.model.fleet import Fleet
from qonnect_gitops.model.goals import App, Component, Goals, StabilityRules
from qonnect_gitops.model.limits import MAX_NODES_PER_CLUSTER, MAX_NODES_PER_GROUP
from qonnect_gitops.model.network import Link, latency_table
from qonnect_gitops.model.observed import Observed
from qonnect_gitops.model.plan import CurrentPlacement, Plan

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def cluster(
    name: str,
    tier: str = "cloud",
    region: str = "eu-central",
    cpu: str = "4",
    memory: str = "8Gi",
    count: int = 1,
    arch: str = "amd64",
    cpu_hour: float = 0.04,
    watts: float = 10.0,
    carbon: float = 300.0,
    taints: tuple[dict[str, str], ...] = (),
    labels: dict[str, str] | None = None,
    nodes: list[dict[str, Any]] | None = None,
) -> Cluster:
    """A cluster; a pool ``count`` above what goals files may declare (10,000 nodes)
    is set past validation, to show the planner handles pools by their count."""
    groups = nodes or [{"count": count, "cpu": cpu, "memory": memory, "arch": arch}]
    wanted = [int(g.get("count", 1)) for g in groups]
    groups = [{**g, "count": min(n, MAX_NODES_PER_GROUP)} for g, n in zip(groups, wanted)]
    if sum(g["count"] for g in groups) > MAX_NODES_PER_CLUSTER:
        groups = [{**g, "count": 1} for g in groups]
    built = Cluster.model_validate(
        {
            "apiVersion": "qonnect.io/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": name, "labels": labels or {}},
            "spec": {
                "tier": tier,
                "region": region,
                "taints": list(taints),
                "nodes": groups,
                "cost": {"cpuHour": cpu_hour, "memoryGiBHour": 0.0},
                "energy": {"wattsPerCpu": watts, "carbonIntensity": carbon},
            },
        }
    )
    if [g.count for g in built.spec.nodes] == wanted:
        return built
    pools = tuple(g.model_copy(update={"count": n}) for g, n in zip(built.spec.nodes, wanted))
    return built.model_copy(update={"spec": built.spec.model_copy(update={"nodes": pools})})


def component(
    name: str,
    app: str = "shop",
    replicas: int = 1,
    cpu: int = 500,
    memory: int = 2**29,
    kind: str = "Deployment",
    arch: tuple[str, ...] = ("amd64",),
    calls: tuple[str, ...] = (),
    qos: dict[str, Any] | None = None,
    cooldown: float = 300.0,
    min_improvement: float = 0.1,
    budget: int = 1,
    allow_stateful: bool = False,
) -> Component:
    return Component(
        app=app,
        name=name,
        namespace=app,
        kind=kind,  # type: ignore[arg-type]
        workload={},
        manifests=(),
        replicas=replicas,
        cpu=cpu,
        memory=memory,
        architectures=frozenset(arch),
        calls=tuple(sorted(calls)),
        qos=QoS.model_validate(qos or {}),
        stability=StabilityRules(cooldown, min_improvement, budget, allow_stateful),
    )


def goals(
    clusters: list[Cluster],
    components: list[Component],
    links: list[tuple[str, str, float]] = (),  # type: ignore[assignment]
    grace: float = 20.0,
    regions: tuple[str, ...] = (),
) -> Goals:
    fleet = Fleet.model_validate(
        {
            "apiVersion": "qonnect.io/v1alpha1",
            "kind": "Fleet",
            "metadata": {"name": "test"},
            "spec": {"heartbeat": {"intervalSeconds": 1, "graceSeconds": grace}, "regions": list(regions)},
        }
    )
    apps: dict[str, list[Component]] = {}
    for c in components:
        apps.setdefault(c.app, []).append(c)
    table = latency_table(tuple(Link.model_validate({"from": a, "to": b, "ms": ms}) for a, b, ms in links))
    return Goals(
        fleet=fleet,
        clusters={c.name: c for c in sorted(clusters, key=lambda c: c.name)},
        network=None,
        apps={
            name: App(name=name, namespace=name, document=None, components=tuple(cs))  # type: ignore[arg-type]
            for name, cs in sorted(apps.items())
        },
        latencies=table,
    )


def replaced(g: Goals, c: Component) -> Goals:
    """The same goals with component ``c`` in place of the one with its key."""
    apps = {name: dataclasses.replace(app, components=tuple(c if x.key == c.key else x for x in app.components))
            for name, app in g.apps.items()}
    return Goals(g.fleet, g.clusters, g.network, apps, g.latencies)


def observed(**fields: Any) -> Observed:
    fields.setdefault("now", NOW.isoformat())
    return Observed.model_validate(fields)


def current(placements: dict[str, dict[str, int]], last_moved: dict[str, datetime] | None = None) -> CurrentPlacement:
    return CurrentPlacement(placements=placements, last_moved=last_moved or {})


def after(p: Plan) -> CurrentPlacement:
    """The current placement a plan leaves behind (draining done)."""
    return CurrentPlacement(placements=p.placements(), last_moved=p.last_moved)
