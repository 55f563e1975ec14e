"""Placement benchmark: speed on synthetic fleets, optimality against an exact MILP,
and thrash under an oscillating latency.

    PYTHONPATH=. python benchmarks/placement.py [--json] [--seeds 30] [--quick]

Needs the ``bench`` extra (scipy) for the optimality part; qonnect_gitops never imports it.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import numpy as np

from qonnect_gitops.model.app import QoS
from qonnect_gitops.model.cluster import Cluster
from qonnect_gitops.model.fleet import Fleet
from qonnect_gitops.model.goals import App, Component, Goals, StabilityRules
from qonnect_gitops.model.network import Link, latency_table
from qonnect_gitops.model.observed import Observed
from qonnect_gitops.model.plan import CurrentPlacement, Plan
from qonnect_gitops.placement import plan

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)
MI = 2**20


# ----- synthetic fleets -----------------------------------------------------------------


@dataclass
class Mix:
    clusters: int
    components: int
    envelopes: float = 0.0
    calls_per_component: float = 0.0
    tainted: float = 0.0
    arm_only: float = 0.0
    node_shapes: float = 0.0

    def row(self) -> str:
        return (
            f"{self.clusters} clusters ({self.tainted:.0%} tainted, {self.arm_only:.0%} arm64-only, "
            f"{self.node_shapes:.1f} node shapes each), {self.components} components "
            f"({self.envelopes:.0%} with latency envelopes, {self.calls_per_component:.1f} calls each)"
        )


def make_fleet(n_clusters: int, n_components: int, seed: int, small: bool = False) -> tuple[Goals, Mix]:
    """A realistic synthetic fleet: cloud/fog/edge tiers over regions, arm64-only edge
    clusters, taints, mixed node shapes, latency envelopes and call graphs."""
    rng = random.Random(seed)
    n_regions = max(2, min(10, n_clusters // 4))
    regions = [f"region-{r}" for r in range(n_regions)]
    # Regions on a line: latency grows with distance.
    pos = {r: i * 25.0 for i, r in enumerate(regions)}
    clusters = []
    links = []
    mix = Mix(n_clusters, n_components)
    shapes_total = 0
    for i in range(n_clusters):
        u = rng.random()
        tier = "cloud" if u < 0.15 else "fog" if u < 0.45 else "edge"
        region = regions[i % n_regions] if i < n_regions else rng.choice(regions)
        taints = []
        if tier == "edge" and rng.random() < 0.25:
            taints.append({"key": "edge", "value": "true", "effect": "NoSchedule"})
        elif rng.random() < 0.1:
            taints.append({"key": "spot", "value": "true", "effect": "PreferNoSchedule"})
        mix.tainted += bool(taints)
        arm_only = tier == "edge" and rng.random() < 0.4
        mix.arm_only += arm_only
        nodes = []
        for _ in range(rng.randint(1, 3)):
            if tier == "cloud":
                cpu, mem, count = rng.choice([(8000, 32768), (16000, 65536), (4000, 16384)]), None, rng.randint(2, 6 if not small else 3)
                cpu, mem = cpu
            elif tier == "fog":
                (cpu, mem), count = rng.choice([(4000, 8192), (8000, 16384)]), rng.randint(1, 4 if not small else 2)
            else:
                (cpu, mem), count = rng.choice([(2000, 4096), (4000, 8192)]), rng.randint(1, 3 if not small else 2)
            arch = "arm64" if arm_only else rng.choice(["amd64", "amd64", "arm64"]) if tier != "cloud" else "amd64"
            nodes.append({"count": count, "cpu": f"{cpu}m", "memory": f"{mem}Mi", "arch": arch})
        if not arm_only and all(n["arch"] == "arm64" for n in nodes):
            nodes[0]["arch"] = "amd64"
        shapes_total += len(nodes)
        price = {"cloud": 0.03, "fog": 0.05, "edge": 0.08}[tier] * rng.uniform(0.7, 1.3)
        clusters.append(
            Cluster.model_validate(
                {
                    "apiVersion": "qonnect.io/v1alpha1",
                    "kind": "Cluster",
                    "metadata": {"name": f"{tier}-{i:04d}", "labels": {"zone": f"z{i % 3}"}},
                    "spec": {
                        "tier": tier,
                        "region": region,
                        "taints": taints,
                        "nodes": nodes,
                        "cost": {"cpuHour": round(price, 4), "memoryGiBHour": round(price / 8, 5)},
                        "energy": {
                            "wattsPerCpu": {"cloud": 8.0, "fog": 10.0, "edge": 6.0}[tier],
                            "carbonIntensity": round(rng.uniform(50, 500), 1),
                        },
                    },
                }
            )
        )
        base = {"cloud": 8.0, "fog": 4.0, "edge": 1.0}[tier]
        for r in regions:
            ms = base + abs(pos[r] - pos[region]) + rng.uniform(0, 3)
            links.append(Link.model_validate({"from": f"{tier}-{i:04d}", "to": r, "ms": round(ms, 1)}))
    mix.tainted /= n_clusters
    mix.arm_only /= n_clusters
    mix.node_shapes = shapes_total / n_clusters
    fleet = Fleet.model_validate(
        {
            "apiVersion": "qonnect.io/v1alpha1",
            "kind": "Fleet",
            "metadata": {"name": "bench"},
            "spec": {"regions": regions},
        }
    )
    # A modest set of QoS profiles, shared as real apps share defaults.
    profiles: list[QoS] = []
    for k in range(40):
        q: dict[str, Any] = {}
        if k % 3 == 0:
            q["latency"] = [{"region": regions[k % n_regions], "maxMs": float(rng.choice([15, 30, 60]))}]
        q["objective"] = rng.choice(
            ["latency", "cost", "energy", {"latency": 0.6, "cost": 0.4}, {"cost": 0.5, "energy": 0.5}]
        )
        if k % 5 == 1:
            q["tiers"] = ["edge", "fog"]
        elif k % 5 == 2:
            q["tiers"] = ["fog", "cloud"]
        if k % 4 == 0:
            q["tolerations"] = [{"key": "edge", "operator": "Exists"}]
        if k % 7 == 3:
            q["availability"] = {"minClusters": 2, "spread": True}
        profiles.append(QoS.model_validate(q))
    components: list[Component] = []
    app_size = 10
    calls_total = 0
    for j in range(n_components):
        app = f"app-{j // app_size:04d}"
        local = j % app_size
        q = profiles[rng.randrange(len(profiles))]
        mix.envelopes += bool(q.latency)
        first = (j // app_size) * app_size
        last = min(first + app_size, n_components)
        callees = sorted(
            {f"{app}/c{t - first}" for t in rng.sample(range(first, last), min(2, last - first)) if t != j}
        )
        calls_total += len(callees)
        arch = frozenset({"amd64", "arm64"}) if rng.random() < 0.6 else frozenset({"amd64"})
        components.append(
            Component(
                app=app,
                name=f"c{local}",
                namespace=app,
                kind="Deployment",
                workload={},
                manifests=(),
                replicas=rng.choice([1, 1, 2, 2, 3]) if not small else rng.choice([1, 1, 2]),
                cpu=rng.choice([100, 250, 500, 1000]),
                memory=rng.choice([128, 256, 512, 1024]) * MI,
                architectures=arch,
                calls=tuple(callees),
                qos=q,
                stability=StabilityRules(300.0, 0.1, 1, False),
            )
        )
    mix.envelopes /= n_components
    mix.calls_per_component = calls_total / n_components
    apps: dict[str, list[Component]] = {}
    for c in components:
        apps.setdefault(c.app, []).append(c)
    goals = Goals(
        fleet=fleet,
        clusters={c.name: c for c in sorted(clusters, key=lambda c: c.name)},
        network=None,
        apps={a: App(a, a, None, tuple(cs)) for a, cs in sorted(apps.items())},  # type: ignore[arg-type]
        latencies=latency_table(tuple(links)),
    )
    return goals, mix


def observed(now: datetime = NOW, **fields: Any) -> Observed:
    return Observed.model_validate({"now": now.isoformat(), **fields})


def after(p: Plan) -> CurrentPlacement:
    return CurrentPlacement(placements=p.placements(), last_moved=p.last_moved)


# ----- speed ------------------------------------------------------------------------------


def timed(fn: Any, repeat: int = 1) -> tuple[float, Any]:
    best = math.inf
    result = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t0)
    return best, result


def speed(quick: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"full_plan_s": {}, "mix": {}}
    sizes = [(100, 1000), (1000, 10000)] if not quick else [(50, 500), (200, 2000)]
    plans = {}
    for nc, nm in sizes:
        goals, mix = make_fleet(nc, nm, seed=7)
        label = f"{nc}x{nm}"
        # Each run on a fresh Goals object copy would be identical; first call builds caches.
        t, p = timed(lambda: plan(goals, observed(), CurrentPlacement()), repeat=1)
        out["full_plan_s"][label] = round(t, 4)
        out["mix"][label] = mix.row()
        plans[label] = (goals, p)
    (s1, s2) = [f"{a}x{b}" for a, b in sizes]
    size_ratio = (sizes[1][0] * sizes[1][1]) / (sizes[0][0] * sizes[0][1])
    out["growth_ratio"] = round(out["full_plan_s"][s2] / out["full_plan_s"][s1], 2)
    out["size_ratio"] = size_ratio
    goals, p = plans[s2]
    cur = after(p)
    busiest = max(
        goals.clusters,
        key=lambda n: (sum(w.get(n, 0) for w in cur.placements.values()), n),
    )
    obs = observed(NOW + timedelta(seconds=60), clusters={busiest: {"healthy": False}})
    t, fp = timed(lambda: plan(goals, obs, cur), repeat=3)
    out["failover_replan_s"] = round(t, 4)
    out["failover_cluster"] = busiest
    out["failover_moves"] = sum(m.replicas for m in fp.moves if m.reason == "failover")
    out["failover_reason"] = fp.reason
    out["full_plan_unplaced"] = sum(u.replicas for u in p.unplaced)
    # A steady-state cycle where every cooldown has expired: all components re-evaluated.
    obs_late = observed(NOW + timedelta(hours=2))
    t, sp = timed(lambda: plan(goals, obs_late, cur), repeat=1)
    out["steady_replan_all_evaluated_s"] = round(t, 4)
    out["steady_replan_moves"] = sum(m.replicas for m in sp.moves)
    return out


def _main_speed_only() -> None:
    print(json.dumps(speed(quick=False), indent=1))


if __name__ == "__main__" and "--speed-only" in sys.argv:
    _main_speed_only()
