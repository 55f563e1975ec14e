"""Placement benchmark: speed on synthetic fleets, optimality against an exact MILP,
and thrash under an oscillating latency.

    PYTHONPATH=. python benchmarks/placement.py [--json] [--seeds 30] [--quick]
    PYTHONPATH=. python benchmarks/placement.py --fleet 1000 [--fleet 3000] [--trace]
    PYTHONPATH=. python benchmarks/placement.py --plan-hashes 1000

``--plan-hashes N`` prints the SHA-256 of every plan of a sequence of cycles on the
fleet-scale goals (``plan_hashes``): run it on two checkouts to tell whether a change
to the planner changed any decision or explanation.

``--fleet N`` runs only the fleet-scale part: the generated goals of
``benchmarks/fleet.py`` (N clusters over eight regions, 10 N components; see
``fleet_scale_goals`` for sizes past the goals tree's file limit), then the planner's full plan, a steady replan (nothing changed) and a
failover replan, each with the planner's peak memory (``--trace``: measured with
tracemalloc in extra runs, which are slower; otherwise the peak resident set above
what the process held before the call), wall and CPU seconds (on a shared machine CPU
time says more). The steady replan is timed twice: the first after the decision
(``steady_first_s``: every component explained anew) and the next (``steady_s``); the
failover follows them, as in a leader's loop. ``steady_late_first_cpu_s``,
``steady_late_cpu_s`` and ``failover_late_*``: the same two quiet cycles and failover
once every cooldown has passed (kept components are rescheduling candidates then). ``process_peak_mib`` is the whole
process's peak resident set (goals, plans and the planner's carry included).

Needs the ``bench`` extra (scipy) for the optimality part; qonnect_gitops never imports it.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import random
import re
import statistics
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from qonnect_gitops.model.app import QoS
from qonnect_gitops.model.cluster import Cluster
from qonnect_gitops.model.fleet import Fleet
from qonnect_gitops.model.goals import App, Component, Goals, StabilityRules
from qonnect_gitops.model.limits import MAX_TREE_FILES
from qonnect_gitops.model.network import Link, latency_table
from qonnect_gitops.model.observed import Observed
from qonnect_gitops.model.plan import CurrentPlacement, Plan
from qonnect_gitops.placement import oracle, plan

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
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
                replicas=max(
                    rng.choice([1, 1, 2, 2, 3]) if not small else rng.choice([1, 1, 2]),
                    q.availability.min_clusters,
                ),
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
    return p.current()


# ----- speed ------------------------------------------------------------------------------


def timed(fn: Any, repeat: int = 1) -> tuple[float, Any]:
    best = math.inf
    result = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t0)
    return best, result


def _fresh(goals: Goals) -> Goals:
    """An equal Goals object with a new identity (the planner caches by identity)."""
    return Goals(goals.fleet, goals.clusters, goals.network, goals.apps, goals.latencies)


def speed(quick: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"full_plan_s": {}, "mix": {}, "load_start": [round(x, 2) for x in os.getloadavg()]}
    sizes = [(100, 1000), (1000, 10000)] if not quick else [(50, 500), (200, 2000)]
    plans = {}
    for nc, nm in sizes:
        goals, mix = make_fleet(nc, nm, seed=7)
        label = f"{nc}x{nm}"
        # Best of three cold runs: each gets a new Goals object, so nothing the planner
        # derives from the goals is reused; the minimum filters out a busy machine.
        t, p = timed(lambda goals=goals: plan(_fresh(goals), observed(), CurrentPlacement()), repeat=3)
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
    plan(goals, obs, cur)  # the leader replans with the goals it planned with: warm
    t, fp = timed(lambda: plan(goals, obs, cur), repeat=3)
    out["failover_replan_s"] = round(t, 4)
    out["failover_cluster"] = busiest
    out["failover_moves"] = sum(m.replicas for m in fp.moves if m.reason == "failover")
    out["failover_reason"] = fp.reason
    out["full_plan_unplaced"] = sum(u.replicas for u in p.unplaced)
    # The independent oracle (placement/oracle.py) checking a whole plan, as tests do every
    # cycle: the full plan from nothing, and the failover against the plan before it.
    t, findings = timed(lambda: oracle.check(goals, observed(), CurrentPlacement(), p), repeat=3)
    out["oracle_full_s"] = round(t, 4)
    out["oracle_full_share"] = round(t / out["full_plan_s"][s2], 3)
    t, failover_findings = timed(lambda: oracle.check(goals, obs, cur, fp, before=p), repeat=3)
    out["oracle_failover_s"] = round(t, 4)
    out["oracle_findings"] = len(findings) + len(failover_findings)
    # A steady-state cycle with nothing changed: the plan in force, a minute later.
    obs_quiet = observed(NOW + timedelta(seconds=60))
    plan(goals, obs_quiet, cur)
    t, qp = timed(lambda: plan(goals, obs_quiet, cur), repeat=3)
    out["steady_cycle_s"] = round(t, 4)
    out["steady_cycle_moves"] = sum(m.replicas for m in qp.moves)
    # A goals edit that breaks the envelope of 1,000 running components (a new Goals
    # object: nothing derived from the old one is reused by identity).
    edited, count = break_envelopes(goals, p, 1000)

    def first_cycle_of_the_edit() -> tuple[float, Plan]:
        plan(goals, obs_quiet, cur)  # the leader's last cycle before the push (not timed)
        t0 = time.perf_counter()
        result = plan(_fresh(edited), obs_quiet, cur)
        return time.perf_counter() - t0, result

    t, ep = min((first_cycle_of_the_edit() for _ in range(3)), key=lambda r: r[0])
    out["envelope_edit_s"] = round(t, 4)
    out["envelope_edit_components"] = count
    out["envelope_edit_moved_components"] = len({m.component for m in ep.moves if m.reason == "goals-changed"})
    out["envelope_edit_unmet"] = len(ep.unmet)
    # A steady-state cycle where every cooldown has expired: all components re-evaluated.
    obs_late = observed(NOW + timedelta(hours=2))
    t, sp = timed(lambda: plan(goals, obs_late, cur), repeat=1)
    out["steady_replan_all_evaluated_s"] = round(t, 4)
    out["steady_replan_moves"] = sum(m.replicas for m in sp.moves)
    out["load_end"] = [round(x, 2) for x in os.getloadavg()]
    return out


def break_envelopes(goals: Goals, p: Plan, limit: int) -> tuple[Goals, int]:
    """The same goals with the latency envelope of up to ``limit`` placed components
    tightened so that a cluster they run on breaks it (another allowed cluster still
    meets it): every one must move in the next cycle."""
    edits: dict[str, Component] = {}
    for c in goals.components():
        if len(edits) >= limit:
            break
        where = p.placements().get(c.key) or {}
        if not c.qos.latency or not where:
            continue
        goal = c.qos.latency[0]
        running = max(goals.latencies.get((name, goal.region), 0.0) for name in where)
        allowed = [ms for (a, b), ms in goals.latencies.items() if b == goal.region and a not in where
                   and goals.clusters[a].spec.tier in (c.qos.tiers or ("cloud", "fog", "edge"))]
        better = [ms for ms in allowed if ms < running]
        if not better:
            continue
        tight = QoS.model_validate({**c.qos.model_dump(by_alias=True, exclude_unset=True),
                                    "latency": [{"region": goal.region, "maxMs": round(running - 0.05, 2)}]})
        edits[c.key] = dataclasses.replace(c, qos=tight)
    apps = {name: App(app.name, app.namespace, app.document,
                      tuple(edits.get(c.key, c) for c in app.components))
            for name, app in goals.apps.items()}
    return Goals(goals.fleet, goals.clusters, goals.network, apps, goals.latencies), len(edits)


# ----- optimality against an exact MILP -------------------------------------------------


def _nodes(goals: Goals) -> list[tuple[int, int, int, int, str]]:
    """Every node: (cluster index, cpu, memory, pods, arch)."""
    out = []
    for a, name in enumerate(sorted(goals.clusters)):
        for shape in goals.clusters[name].spec.nodes:
            for _ in range(shape.count):
                out.append((a, shape.cpu, shape.memory, shape.pods, shape.arch))
    return out


@contextlib.contextmanager
def _quiet_stdout() -> Iterator[None]:
    """Silence file descriptor 1 (C libraries write there directly) for a while."""
    sys.stdout.flush()
    saved = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)


def exact(goals: Goals, obs: Observed, time_limit: float) -> tuple[str, float | None, dict[str, dict[str, int]]]:
    """Solve the planner's full objective (closeness included) exactly with HiGHS."""
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_matrix

    from qonnect_gitops.placement.objective import terms

    t = terms(goals, obs)
    comps = {c.key: c for c in goals.components()}
    nodes = _nodes(goals)
    var_lo: list[float] = []
    var_hi: list[float] = []
    integ: list[int] = []
    cost: list[float] = []

    def new(lo: float, hi: float, integer: bool, c: float = 0.0) -> int:
        var_lo.append(lo)
        var_hi.append(hi)
        integ.append(1 if integer else 0)
        cost.append(c)
        return len(cost) - 1

    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    lo: list[float] = []
    hi: list[float] = []

    def constraint(terms_: list[tuple[int, float]], low: float, high: float) -> None:
        r = len(lo)
        for v, coef in terms_:
            rows.append(r)
            cols.append(v)
            vals.append(coef)
        lo.append(low)
        hi.append(high)

    z: dict[tuple[int, int], list[int]] = {}  # (component, cluster) -> z vars on its nodes
    y: dict[tuple[int, int], int] = {}
    node_use: dict[int, list[tuple[int, int]]] = {}  # node -> (var, component)
    for i, key in enumerate(t.components):
        c = comps[key]
        n_i = int(t.replicas[i])
        for a in np.flatnonzero(t.feasible[i]).tolist():
            vs = []
            for k, (na, cpu, mem, _pods, arch) in enumerate(nodes):
                if na != a or arch not in c.architectures or cpu < c.cpu or mem < c.memory:
                    continue
                v = new(0, n_i, True, float(t.scores[i, a]) / n_i)
                vs.append(v)
                node_use.setdefault(k, []).append((v, i))
            if vs:
                z[(i, a)] = vs
                y[(i, a)] = new(0, 1, True)
    for i, key in enumerate(t.components):
        c = comps[key]
        n_i = int(t.replicas[i])
        mine = [(a, vs) for (ii, a), vs in sorted(z.items()) if ii == i]
        constraint([(v, 1.0) for _, vs in mine for v in vs], n_i, n_i)
        k_min = c.qos.availability.min_clusters
        constraint([(y[(i, a)], 1.0) for a, _ in mine], k_min, np.inf)
        # spread: every cluster used holds lo or lo + 1 replicas (lo a free integer)
        floor = new(0, n_i, True) if c.qos.availability.spread else None
        for a, vs in mine:
            constraint([(v, 1.0) for v in vs] + [(y[(i, a)], -n_i)], -np.inf, 0)
            constraint([(v, 1.0) for v in vs] + [(y[(i, a)], -1.0)], 0, np.inf)
            if floor is not None:
                # x >= floor - n (1 - y)  and  x <= floor + 1 + n (1 - y)
                constraint([(v, 1.0) for v in vs] + [(floor, -1.0), (y[(i, a)], -float(n_i))], -float(n_i), np.inf)
                constraint([(v, 1.0) for v in vs] + [(floor, -1.0), (y[(i, a)], float(n_i))], -np.inf, 1.0 + n_i)
    for k, uses in sorted(node_use.items()):
        _, cpu, mem, pods, _ = nodes[k]
        keys = t.components
        constraint([(v, float(comps[keys[i]].cpu)) for v, i in uses], -np.inf, cpu)
        constraint([(v, float(comps[keys[i]].memory)) for v, i in uses], -np.inf, mem)
        constraint([(v, 1.0) for v, _ in uses], -np.inf, pods)
    for i, j in t.calls:
        n_i = int(t.replicas[i])
        a_set = [a for (ii, a) in z if ii == i]
        b_set = [b for (jj, b) in z if jj == j]
        for a in a_set:
            ws = []
            for b in b_set:
                w = new(0, n_i, False, t.closeness_weight * float(t.latency[a, b]) / n_i / t.latency_norm)
                ws.append(w)
                constraint([(w, 1.0), (y[(j, b)], -float(n_i))], -np.inf, 0)
            constraint([(w, 1.0) for w in ws] + [(v, -1.0) for v in z[(i, a)]], 0, 0)
    a_mat = coo_matrix((vals, (rows, cols)), shape=(len(lo), len(cost))).tocsr()
    with _quiet_stdout():  # HiGHS may print from C straight to file descriptor 1
        res = milp(
            c=np.array(cost),
            constraints=LinearConstraint(a_mat, np.array(lo), np.array(hi)),
            integrality=np.array(integ),
            bounds=Bounds(np.array(var_lo), np.array(var_hi)),
            options={"time_limit": time_limit, "mip_rel_gap": 1e-6},
        )
    if res.status == 1:
        return "timeout", None, {}
    if res.status != 0 or res.x is None:
        return "infeasible", None, {}
    placements: dict[str, dict[str, int]] = {}
    for (i, a), vs in sorted(z.items()):
        n = round(sum(res.x[v] for v in vs))
        if n:
            placements.setdefault(t.components[i], {})[t.clusters[a]] = n
    return "optimal", float(res.fun), placements


def violations(goals: Goals, placements: dict[str, dict[str, int]], unplaced: int) -> list[str]:
    """Independent checks of a plan: every replica placed, node capacity (first fit
    decreasing must pack the replicas on their cluster's nodes), architectures, latency
    envelopes per the declared network, availability (minClusters) and spread."""
    problems = []
    if unplaced:
        problems.append(f"{unplaced} replicas unplaced")
    comps = {c.key: c for c in goals.components()}
    per_cluster: dict[str, list[Component]] = {}
    for key, where in placements.items():
        c = comps[key]
        counts = [n for n in where.values() if n]
        if len(counts) < c.qos.availability.min_clusters:
            problems.append(f"{key}: fewer clusters than minClusters")
        if c.qos.availability.spread and counts and max(counts) - min(counts) > 1:
            problems.append(f"{key}: spread {counts}")
        if sum(where.values()) != c.replicas:
            problems.append(f"{key}: {sum(where.values())} of {c.replicas} replicas")
        for name, n in where.items():
            per_cluster.setdefault(name, []).extend([c] * n)
            for goal in c.qos.latency:
                ms = goals.declared_latency(name, goal.region)
                if ms is None and goals.clusters[name].spec.region == goal.region:
                    ms = 0.0
                if ms is None or ms > goal.max_ms:
                    problems.append(f"{key}: {name} outside the {goal.max_ms}ms envelope")
    for name, replicas in per_cluster.items():
        free = [[s.cpu, s.memory, s.pods, s.arch] for s in goals.clusters[name].spec.nodes for _ in range(s.count)]
        # Most constrained first: single-architecture replicas, then by size.
        for c in sorted(replicas, key=lambda c: (len(c.architectures), -c.cpu, -c.memory, c.key)):
            for node in free:
                if node[3] in c.architectures and node[0] >= c.cpu and node[1] >= c.memory and node[2] > 0:
                    node[0] -= c.cpu
                    node[1] -= c.memory
                    node[2] -= 1
                    break
            else:
                problems.append(f"{name}: {c.key} does not fit on any node")
    return problems


def satisfiable(goals: Goals, obs: Observed) -> Goals:
    """Small random fleets often have no cluster at all for some profile (a tight
    envelope, a tier the fleet lacks); such components get a plain profile instead, so
    the comparison is about choices, not about components nobody can place."""
    from qonnect_gitops.placement.objective import terms

    t = terms(goals, obs)
    fixed = {
        key
        for i, key in enumerate(t.components)
        if t.feasible[i].sum() < goals.component(key).qos.availability.min_clusters
    }
    if not fixed:
        return goals
    plain = QoS.model_validate({"objective": {"latency": 0.5, "cost": 0.5}})
    apps = {
        name: App(app.name, app.namespace, app.document, tuple(
            dataclasses.replace(c, qos=plain) if c.key in fixed else c for c in app.components
        ))
        for name, app in goals.apps.items()
    }
    return Goals(goals.fleet, goals.clusters, goals.network, apps, goals.latencies)


def quality(seeds: int, time_limit: float) -> dict[str, Any]:
    from qonnect_gitops.placement.objective import evaluate, terms

    gaps: list[float] = []
    timeouts = 0
    infeasible = 0
    broken: list[str] = []
    solve_times: list[float] = []
    sizes = [(8, 20), (12, 36), (16, 48), (20, 60)]
    for seed in range(seeds):
        nc, nm = sizes[seed % len(sizes)]
        goals, _ = make_fleet(nc, nm, seed=1000 + seed, small=True)
        obs = observed()
        goals = satisfiable(goals, obs)
        p = plan(goals, obs, CurrentPlacement())
        ours = p.placements()
        problems = violations(goals, ours, sum(u.replicas for u in p.unplaced))
        t0 = time.perf_counter()
        status, _, opt = exact(goals, obs, time_limit)
        solve_times.append(time.perf_counter() - t0)
        if status == "timeout":
            timeouts += 1
            continue
        if status == "infeasible":
            infeasible += 1
            continue
        t = terms(goals, obs)
        j_ours, j_opt = evaluate(t, ours), evaluate(t, opt)
        if problems:
            broken.append(f"seed {seed}: {problems[:3]}")
            continue
        gap = (j_ours - j_opt) / j_opt if j_opt > 0 else 0.0
        if gap < -1e-6:
            broken.append(f"seed {seed}: negative gap {gap:.4f}")
        gaps.append(gap)
    return {
        "optimality_gap": {
            "mean": round(statistics.fmean(gaps), 4) if gaps else None,
            "worst": round(float(max(gaps)), 4) if gaps else None,
            "instances": len(gaps),
            "timeouts": timeouts,
            "infeasible_instances": infeasible,
            "exact_solve_s_max": round(max(solve_times), 2) if solve_times else None,
            "broken": broken,
        }
    }


# ----- thrash -----------------------------------------------------------------------------


def thrash(cycles: int = 100, cooldown_cycles: int = 10, cycle_s: float = 30.0) -> dict[str, Any]:
    """A measured latency oscillates around the envelope; count the moves. Control: the
    same latency breaching for good must move the component within one cooldown."""
    fleet = Fleet.model_validate(
        {"apiVersion": "qonnect.io/v1alpha1", "kind": "Fleet", "metadata": {"name": "t"},
         "spec": {"regions": ["eu"]}}
    )
    clusters = [
        Cluster.model_validate(
            {"apiVersion": "qonnect.io/v1alpha1", "kind": "Cluster", "metadata": {"name": n},
             "spec": {"tier": "fog", "region": "eu", "nodes": [{"count": 1, "cpu": "4", "memory": "8Gi"}],
                      "cost": {"cpuHour": 0.04}, "energy": {"wattsPerCpu": 10, "carbonIntensity": 200}}}
        )
        for n in ("fog-a", "fog-b")
    ]
    web = Component(
        app="shop", name="web", namespace="shop", kind="Deployment", workload={}, manifests=(),
        replicas=1, cpu=500, memory=256 * MI, architectures=frozenset({"amd64"}), calls=(),
        qos=QoS.model_validate({"latency": [{"region": "eu", "maxMs": 50}]}),
        stability=StabilityRules(cooldown_cycles * cycle_s, 0.1, 1, False),
    )
    goals = Goals(
        fleet=fleet, clusters={c.name: c for c in clusters}, network=None,
        apps={"shop": App("shop", "shop", None, (web,))},  # type: ignore[arg-type]
        latencies=latency_table(tuple(Link.model_validate({"from": c.name, "to": "eu", "ms": 45}) for c in clusters)),
    )

    def run(latency_of: Any) -> tuple[int, int | None]:
        cur = after(plan(goals, observed(), CurrentPlacement()))
        moves, first_move = 0, None
        for k in range(1, cycles + 1):
            now = NOW + timedelta(seconds=k * cycle_s)
            lat = [{"from": n, "to": "eu", "ms": latency_of(n, k)} for n in ("fog-a", "fog-b")]
            p = plan(goals, observed(now, latencies=lat), cur)
            moved = sum(m.replicas for m in p.moves)
            if moved and first_move is None:
                first_move = k
            moves += moved
            cur = after(p)
        return moves, first_move

    # Oscillation: each cluster swings 45 <-> 55 ms around the 50 ms envelope, in
    # opposite phase, so whichever runs the component breaches every other cycle.
    def oscillating(name: str, k: int) -> float:
        return (55.0 if k % 2 else 45.0) if name == "fog-a" else (45.0 if k % 2 else 55.0)

    def sustained(name: str, k: int) -> float:
        return 80.0 if name == "fog-a" else 45.0

    moves, _ = run(oscillating)
    _, first = run(sustained)
    return {
        "thrash_moves": moves,
        "thrash_cooldown_periods": cycles // cooldown_cycles,
        "sustained_breach_moved": first is not None and first <= cooldown_cycles,
        "sustained_breach_moved_after_cycles": first,
    }


# ----- fleet scale ------------------------------------------------------------------------


def _rss_mib(field: str) -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    return math.nan


def _reset_peak() -> None:
    """Reset the process's peak resident set (VmHWM) so the next call's peak is its own."""
    with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _measured(fn: Any, trace: bool) -> tuple[float, float, Any]:
    """Seconds and peak MiB of ``fn()``: resident set above the start (or tracemalloc)."""
    import gc
    import tracemalloc

    gc.collect()
    if trace:
        tracemalloc.start()
        result = fn()
        peak = tracemalloc.get_traced_memory()[1] / MI
        tracemalloc.stop()
        return math.nan, peak, result
    _reset_peak()
    before = _rss_mib("VmRSS")
    t0, c0 = time.perf_counter(), time.process_time()
    result = fn()
    seconds = time.perf_counter() - t0
    _CPU.append(time.process_time() - c0)  # on a shared machine CPU time says more than wall
    _PEAK.append(_rss_mib("VmHWM"))
    return seconds, _rss_mib("VmHWM") - before, result


_CPU: list[float] = []
_PEAK: list[float] = []  # the process's whole peak resident set after each measured call


def fleet_scale_goals(clusters: int) -> Goals:
    """``benchmarks.fleet``'s goals at ``clusters`` clusters with 10 components each.

    ``load_goals`` refuses trees of more than ``MAX_TREE_FILES`` files (each component
    has a manifest of its own), so where 10 per cluster would pass it the tree is loaded
    with the apps that fit and those are copied in memory under new names, each copy's
    QoS a new object equal in content (as separate app files would give)."""
    from benchmarks.fleet import APP_SIZE, components_per_cluster, fleet_goals
    from qonnect_gitops.model import load_goals

    if components_per_cluster(clusters) == 10:
        return load_goals(fleet_goals(clusters, 10))
    files = fleet_goals(clusters, 1)
    # network.yaml passes the 1 MiB a YAML document may hold past ~8,000 clusters: the
    # loader validates its first links, and the whole table is read from its lines.
    head, links = files["network.yaml"].decode().split("  latencies:\n")
    lines = links.splitlines(keepends=True)
    table = latency_table(tuple(
        Link.model_validate({"from": a, "to": b, "ms": float(ms)})
        for a, b, ms in re.findall(r"\{from: (\S+), to: (\S+), ms: ([0-9.]+)\}", links)
    ))
    files["network.yaml"] = (head + "  latencies:\n" + "".join(lines[:1000])).encode()
    apps = sorted({path.split("/")[1] for path in files if path.startswith("apps/")})
    room = MAX_TREE_FILES - (len(files) - sum(1 for p in files if p.startswith("apps/")))
    keep = set(apps[: max(1, room // (APP_SIZE + 1))])
    loaded = load_goals({p: b for p, b in files.items() if not p.startswith("apps/") or p.split("/")[1] in keep})
    originals = list(loaded.apps.values())
    copies: dict[str, App] = {}
    for k in range(clusters * 10 // APP_SIZE):
        app = originals[k % len(originals)]
        name = f"app-{k:06d}"
        components = tuple(
            dataclasses.replace(c, app=name, namespace=name, qos=c.qos.model_copy()) for c in app.components
        )
        copies[name] = dataclasses.replace(app, name=name, namespace=name, components=components)
    return Goals(loaded.fleet, loaded.clusters, loaded.network, copies, table)


def fleet_scale(clusters: int, trace: bool) -> dict[str, Any]:
    """The planner on ``benchmarks.fleet``'s generated goals at ``clusters`` clusters and
    10 components per cluster."""
    from qonnect_gitops.placement import evaluate

    t0 = time.perf_counter()
    goals = fleet_scale_goals(clusters)
    out: dict[str, Any] = {"clusters": clusters, "components": sum(len(a.components) for a in goals.apps.values())}
    out["goals_load_s"] = round(time.perf_counter() - t0, 2)
    obs = observed(NOW)

    def cold() -> Plan:
        evaluate.forget()  # nothing derived from these goals is reused
        return plan(goals, obs, CurrentPlacement())

    t, mib, first = _measured(cold, False)
    out["full_s"], out["full_peak_mib"], out["full_cpu_s"] = round(t, 3), round(mib, 1), round(_CPU[-1], 3)
    cur = after(first)
    quiet = observed(NOW + timedelta(seconds=60))
    # The first replan after a decision explains every component anew (the kept ones
    # were new in the decision); the next ones reuse what still holds.
    t, mib, sp = _measured(lambda: plan(goals, quiet, cur), False)
    out["steady_first_s"], out["steady_first_cpu_s"] = round(t, 3), round(_CPU[-1], 3)
    t, mib, sp = _measured(lambda: plan(goals, quiet, cur), False)
    out["steady_s"], out["steady_peak_mib"], out["steady_cpu_s"] = round(t, 3), round(mib, 1), round(_CPU[-1], 3)
    out["steady_moves"] = sum(m.replicas for m in sp.moves)
    busiest = max(goals.clusters, key=lambda n: (sum(w.get(n, 0) for w in cur.placements.values()), n))
    failed = observed(NOW + timedelta(seconds=60), clusters={busiest: {"healthy": False}})
    t, mib, fp = _measured(lambda: plan(goals, failed, cur), False)
    out["failover_s"], out["failover_peak_mib"], out["failover_cpu_s"] = round(t, 3), round(mib, 1), round(_CPU[-1], 3)
    out["failover_moves"] = sum(m.replicas for m in fp.moves if m.reason == "failover")
    # The same failover once every cooldown has passed: kept components are rescheduling
    # candidates then and are decided anew in every cycle (not carried, see placement/carry.py).
    # Two quiet cycles first, as a leader's loop runs them: the first decides every
    # component anew (rescheduling candidates now), the second carries what it kept.
    late_quiet = observed(NOW + timedelta(hours=2))
    t, _, _ = _measured(lambda: plan(goals, late_quiet, cur), False)
    out["steady_late_first_cpu_s"] = round(_CPU[-1], 3)
    t, _, _ = _measured(lambda: plan(goals, late_quiet, cur), False)
    out["steady_late_cpu_s"] = round(_CPU[-1], 3)
    late = observed(NOW + timedelta(hours=2, seconds=60), clusters={busiest: {"healthy": False}})
    t, _, lp = _measured(lambda: plan(goals, late, cur), False)
    out["failover_late_s"], out["failover_late_cpu_s"] = round(t, 3), round(_CPU[-1], 3)
    out["failover_late_moves"] = sum(m.replicas for m in lp.moves if m.reason == "failover")
    out["unplaced"] = sum(u.replicas for u in first.unplaced)
    if trace:
        out["full_traced_mib"] = round(_measured(cold, True)[1], 1)
        plan(goals, quiet, cur)
        out["failover_traced_mib"] = round(_measured(lambda: plan(goals, failed, cur), True)[1], 1)
    out["rss_after_mib"] = round(_rss_mib("VmRSS"), 1)
    # The whole process at its peak while planning (goals and plans held included).
    out["process_peak_mib"] = round(max(_PEAK), 1) if _PEAK else math.nan
    return out


def plan_hashes(clusters: int) -> dict[str, Any]:
    """The SHA-256 of each plan's JSON over a sequence of cycles a leader meets on the
    fleet-scale goals: the first decision, quiet cycles, failovers inside and past the
    cooldowns, each decision applied before the next, and a failed cluster's return.
    Equal hashes on two checkouts: the same decisions, reasons and scores."""
    import hashlib

    from qonnect_gitops.placement import evaluate

    goals = fleet_scale_goals(clusters)
    evaluate.forget()
    out: dict[str, Any] = {"clusters": clusters}
    current = CurrentPlacement()

    def cycle(name: str, at: timedelta, apply: bool = True, **fields: Any) -> None:
        nonlocal current
        p = plan(goals, observed(NOW + at, **fields), current)
        out[name] = hashlib.sha256(p.model_dump_json().encode()).hexdigest()[:16]
        if apply:
            current = after(p)

    cycle("01_first", timedelta(0))
    def load(n: str) -> tuple[int, str]:
        return sum(w.get(n, 0) for w in current.placements.values()), n

    busiest = max(goals.clusters, key=load)
    other = max((n for n in goals.clusters if n != busiest), key=load)
    cycle("02_quiet", timedelta(seconds=60), apply=False)
    cycle("03_quiet", timedelta(seconds=60), apply=False)
    cycle("04_failover", timedelta(seconds=90), apply=False, clusters={busiest: {"healthy": False}})
    cycle("05_late_quiet", timedelta(hours=2))
    cycle("06_late_quiet", timedelta(hours=2, seconds=30))
    cycle("07_late_failover", timedelta(hours=2, seconds=60), clusters={busiest: {"healthy": False}})
    cycle("08_after_failover", timedelta(hours=2, seconds=90), clusters={busiest: {"healthy": False}})
    cycle("09_second_failover", timedelta(hours=2, seconds=120),
          clusters={busiest: {"healthy": False}, other: {"healthy": False}})
    cycle("10_both_back", timedelta(hours=2, seconds=150))
    cycle("11_quiet", timedelta(hours=2, seconds=180))
    cycle("12_much_later", timedelta(hours=5))
    cycle("13_much_later", timedelta(hours=5, seconds=30))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--seeds", type=int, default=30, help="exact-solver instances")
    parser.add_argument("--time-limit", type=float, default=10.0, help="seconds per exact solve")
    parser.add_argument("--quick", action="store_true", help="smaller speed sizes")
    parser.add_argument("--only", choices=("speed", "quality", "thrash"), help="run one part (JSON)")
    parser.add_argument("--fleet", type=int, action="append", metavar="N",
                        help="only the fleet-scale part at N clusters (repeatable)")
    parser.add_argument("--trace", action="store_true", help="with --fleet: tracemalloc peaks too")
    parser.add_argument("--plan-hashes", type=int, metavar="N",
                        help="only the hash of each plan of a sequence of cycles at N clusters")
    args = parser.parse_args(argv)
    if args.plan_hashes:
        print(json.dumps(plan_hashes(args.plan_hashes), sort_keys=True), flush=True)
        return 0
    if args.fleet:
        for n in args.fleet:
            print(json.dumps(fleet_scale(n, args.trace), sort_keys=True), flush=True)
        return 0
    parts = {"speed": lambda: speed(args.quick), "quality": lambda: quality(args.seeds, args.time_limit), "thrash": thrash}
    if args.only:
        print(json.dumps(parts[args.only](), sort_keys=True, default=float))
        return 0
    result: dict[str, Any] = {}
    for part in parts.values():
        result.update(part())
    if args.json:
        print(json.dumps(result, sort_keys=True, default=float))
        return 0
    for label, mix in result["mix"].items():
        print(f"{'fleet ' + label:34} {mix}")
    rows = [
        *[(f"full plan {k}", f"{v:.3f} s", "goal <= 2 s at 1000x10000") for k, v in result["full_plan_s"].items()],
        ("growth (time ratio / size ratio)", f"{result['growth_ratio']} / {result['size_ratio']:.0f}", "time grows less than size: no worse than linear"),
        ("failover replan", f"{result['failover_replan_s']:.3f} s", f"{result['failover_moves']} replicas off {result['failover_cluster']}; goal <= 0.2 s"),
        ("oracle, full plan checked", f"{result['oracle_full_s']:.3f} s",
         f"{result['oracle_full_share']:.0%} of the full plan at 1000x10000; goal <= 10 %; "
         f"{result['oracle_findings']} findings"),
        ("oracle, failover checked", f"{result['oracle_failover_s']:.3f} s", "the whole plan, against the one before"),
        ("steady cycle, nothing changed", f"{result['steady_cycle_s']:.3f} s", f"{result['steady_cycle_moves']} replicas moved; goal <= 0.3 s"),
        ("goals edit breaking envelopes", f"{result['envelope_edit_s']:.3f} s",
         f"{result['envelope_edit_components']} components, {result['envelope_edit_moved_components']} moved, "
         f"{result['envelope_edit_unmet']} unmet; goal <= 0.5 s"),
        ("replan, all cooldowns expired", f"{result['steady_replan_all_evaluated_s']:.3f} s", f"{result['steady_replan_moves']} replicas moved"),
        ("optimality gap mean / worst", f"{result['optimality_gap']['mean']} / {result['optimality_gap']['worst']}",
         f"{result['optimality_gap']['instances']} instances, {result['optimality_gap']['timeouts']} timeouts, broken: {len(result['optimality_gap']['broken'])}"),
        ("thrash moves (100 cycles)", str(result["thrash_moves"]), f"goal <= {result['thrash_cooldown_periods']}"),
        ("sustained breach moved", str(result["sustained_breach_moved"]), f"after {result['sustained_breach_moved_after_cycles']} cycles"),
    ]
    for name, value, note in rows:
        print(f"{name:34} {value:>14}  {note}")
    print(f"{'load (1, 5, 15 min)':34} {result['load_start']!s:>14}  at the start; {result['load_end']} after speed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
