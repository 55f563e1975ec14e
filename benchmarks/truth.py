"""What the leads do over a random sequence of cluster outages, in virtual time.

The Knowledge Base (``kb``) and the planner (``placement``) are pure, so a whole fleet's
ten minutes can be replayed in seconds: the template's nine clusters report every
interval from a virtual clock (what each runs is what the plan placed there, ready one
report after it was placed), while a random sequence of outages drives some of them
``Silent`` (agent gone), ``Degraded`` (API server down, agent reporting) or ``Stalled``
(the agent refuses its branch). After every report round the leader's cycle plans from
``kb.snapshot`` as the lead does, and a decision that differs is put in force.

Figures (issue "What runs is the truth"):

* ``moves_per_change``: decisions that moved replicas, per cluster state change (an
  outage starting or ending). Goal: at most 1.
* ``flaps``: a component moved back to a cluster it left within the cooldown, or a
  cluster's "gone" judgement flipping more often than its state changed. Goal: 0.
* ``stalled_to_replaced_s``: from a cluster turning Stalled to each component it refused
  being placed elsewhere or listed unmet. Goal: a report interval and a cycle.

``python benchmarks/truth.py [--seconds 600] [--seed 1] [--json]``; the machine's load is
printed beside the wall time (the figures themselves are in virtual time).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from qonnect_gitops.kb import KnowledgeBase, ReportEntry, ReportRecord
from qonnect_gitops.kb.state import heartbeat_from_goals, inventory_from_goals, workloads_from_goals
from qonnect_gitops.model import Goals, load_goals, read_directory
from qonnect_gitops.model.plan import CurrentPlacement, Plan
from qonnect_gitops.model.report import AgentReport
from qonnect_gitops.placement.provision import plan_with_pools

TEMPLATE = Path(__file__).resolve().parent.parent / "repo-template"
T0 = 1_900_000_000.0
OUTAGES = ("Silent", "Degraded", "Stalled")


@dataclass
class Spell:
    cluster: str
    state: str
    start: float
    end: float


@dataclass
class Figures:
    state_changes: int = 0
    moving_decisions: int = 0
    decisions: int = 0
    flaps: list[str] = field(default_factory=list)
    stalled_to_replaced: list[float] = field(default_factory=list)


def outage_sequence(goals: Goals, seconds: float, rng: random.Random) -> list[Spell]:
    """Random outages over ``seconds``: one cluster at a time in trouble, each spell 10 to
    90 s, then at least 30 s of calm (so every change can be counted on its own)."""
    names = sorted(goals.clusters)
    spells, t = [], 20.0
    while t < seconds - 60:
        length = rng.uniform(10, 90)
        spells.append(Spell(rng.choice(names), rng.choice(OUTAGES), t, t + length))
        t += length + rng.uniform(30, 90)
    return spells


def report_of(cluster: str, now: float, state: str, running: dict[str, int], goals: Goals,
              applied: int) -> ReportRecord:
    spec = goals.clusters[cluster].spec
    nodes = [{"name": f"{cluster}-{i}-{n}", "arch": shape.arch, "ready": True,
              "allocatableCpu": f"{shape.cpu}m", "allocatableMemory": str(shape.memory),
              "freeCpu": f"{shape.cpu // 2}m", "freeMemory": str(shape.memory // 2)}
             for i, shape in enumerate(spec.nodes) for n in range(shape.count)]
    body: dict[str, Any] = {
        "cluster": cluster, "agentTime": datetime.fromtimestamp(now, tz=UTC).isoformat(),
        "applied": {"commit": "a" * 40, "generation": applied},
        "sync": {"state": "Ready", "reason": "ReconciliationSucceeded", "message": ""},
        "nodes": nodes,
        "components": [{"component": comp, "healthy": True, "readyReplicas": n, "desiredReplicas": n}
                       for comp, n in sorted(running.items())],
    }
    if state == "Degraded":
        body["sync"] = {"state": "Stalled", "reason": "ApiUnavailable", "message": "connection refused"}
        body["nodes"], body["components"] = [], []
    elif state == "Stalled":
        body["sync"] = {"state": "Stalled", "reason": "OwnershipConflict", "message": "a hand-made object"}
    return ReportRecord.from_report(AgentReport.model_validate(body))


def run(seconds: float, seed: int) -> dict[str, Any]:
    goals = load_goals(read_directory(TEMPLATE))
    interval = goals.fleet.spec.heartbeat.interval_seconds
    cooldown = goals.fleet.spec.stability.cooldown_seconds
    rng = random.Random(seed)
    spells = outage_sequence(goals, seconds, rng)
    kb = KnowledgeBase()
    kb.apply_leader("lead-1", 1, T0)
    kb.apply_goals("c" * 40, inventory_from_goals(goals), heartbeat_from_goals(goals),
                   workloads_from_goals(goals), T0)
    current = CurrentPlacement()
    plan: Plan | None = None
    running: dict[str, dict[str, int]] = {c: {} for c in goals.clusters}  # what each cluster runs
    applied: dict[str, int] = {c: 0 for c in goals.clusters}  # the generation each agent applied
    placed_at: dict[tuple[str, str], float] = {}
    left_at: dict[tuple[str, str], float] = {}  # (component, cluster) -> when it moved off
    figures = Figures(state_changes=2 * len(spells))
    stalled_waiting: dict[tuple[str, str], float] = {}
    t = T0
    while t < T0 + seconds:
        rel = t - T0
        troubled = {s.cluster: s.state for s in spells if s.start <= rel < s.end}
        wanted = plan.placements() if plan else {}
        draining = ({k: {d.cluster: d.replicas for d in cp.draining} for k, cp in plan.components.items()}
                    if plan else {})
        for cluster in goals.clusters:
            state = troubled.get(cluster, "Ready")
            if state == "Silent":
                continue
            if state == "Ready":
                # The agent applied its branch; what was placed a report ago is ready now.
                running[cluster] = {comp: n + draining.get(comp, {}).get(cluster, 0)
                                    for comp, where in wanted.items() for c, n in where.items()
                                    if c == cluster and placed_at.get((comp, c), t) < t}
                applied[cluster] = kb.cluster_generation(cluster)
            record = report_of(cluster, t, state, running[cluster], goals, applied[cluster])
            kb.apply_reports([ReportEntry(cluster, t, record)])
        observed = kb.snapshot(datetime.fromtimestamp(t, tz=UTC))
        new = plan_with_pools(goals, observed, current, None)
        if plan is None or new.placements() != plan.placements() or new.unmet != plan.unmet:
            figures.decisions += 1
            before = plan.placements() if plan else {}
            after = new.placements()
            moved = False
            for comp in sorted(set(before) | set(after)):
                for cluster in set(before.get(comp, {})) | set(after.get(comp, {})):
                    was, now_n = before.get(comp, {}).get(cluster, 0), after.get(comp, {}).get(cluster, 0)
                    if was == now_n:
                        continue
                    moved = moved or plan is not None
                    if now_n > was:
                        placed_at[(comp, cluster)] = t
                        left = left_at.get((comp, cluster))
                        if left is not None and t - left < cooldown and troubled.get(cluster, "Ready") == "Ready" \
                                and not any(s.cluster == cluster and left <= T0 + s.end <= t for s in spells):
                            figures.flaps.append(f"{comp} back on {cluster} {t - left:.0f}s after leaving it")
                    elif now_n == 0:
                        left_at[(comp, cluster)] = t
            figures.moving_decisions += moved
            kb.apply_plan(after, {}, new.reason, "c" * 40, 1, t,
                          [u.model_dump(mode="json") for u in new.unmet])
            plan, current = new, new.current()
        # Stalled: every component the cluster was sent and does not run must be replaced or unmet.
        for cluster, state in troubled.items():
            if state != "Stalled" or plan is None:
                continue
            for comp, where in plan.placements().items():
                if where.get(cluster) and running[cluster].get(comp, 0) < where[cluster]:
                    stalled_waiting.setdefault((comp, cluster), t)
        for (comp, cluster), since in list(stalled_waiting.items()):
            where = plan.placements().get(comp, {}) if plan else {}
            elsewhere = any(c != cluster and n for c, n in where.items())
            unmet = plan is not None and any(u.component == comp and u.goal == "health" for u in plan.unmet)
            if elsewhere or unmet or not where.get(cluster):
                figures.stalled_to_replaced.append(t - since)
                del stalled_waiting[(comp, cluster)]
        t += interval
    waits = sorted(figures.stalled_to_replaced)
    return {
        "virtualSeconds": seconds, "seed": seed, "clusters": len(goals.clusters),
        "outages": len(spells), "stateChanges": figures.state_changes,
        "decisions": figures.decisions, "movingDecisions": figures.moving_decisions,
        "movesPerChange": round(figures.moving_decisions / max(1, figures.state_changes), 3),
        "flaps": len(figures.flaps), "flapExamples": figures.flaps[:5],
        "stalledToReplacedSeconds": {"count": len(waits), "max": waits[-1] if waits else None,
                                     "median": waits[len(waits) // 2] if waits else None},
        "neverReplaced": sorted(f"{c} on {cl}" for c, cl in stalled_waiting),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=600.0, help="virtual seconds of outages")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--seeds", type=int, default=1, help="run this many seeds from --seed on")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = []
    started = time.perf_counter()
    for seed in range(args.seed, args.seed + args.seeds):
        results.append(run(args.seconds, seed))
    wall = time.perf_counter() - started
    doc = {"load": os.getloadavg(), "wallSeconds": round(wall, 2), "runs": results}
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    print(f"load {doc['load'][0]:.2f} {doc['load'][1]:.2f} {doc['load'][2]:.2f}; wall {wall:.1f}s")
    print(f"{'seed':>4} {'outages':>7} {'changes':>7} {'moving':>6} {'per change':>10} {'flaps':>5} "
          f"{'stalled->replaced s (median/max)':>32}")
    for r in results:
        st = r["stalledToReplacedSeconds"]
        print(f"{r['seed']:>4} {r['outages']:>7} {r['stateChanges']:>7} {r['movingDecisions']:>6} "
              f"{r['movesPerChange']:>10} {r['flaps']:>5} {str(st['median']) + '/' + str(st['max']):>32}")
        for example in r["flapExamples"]:
            print(f"     flap: {example}")
        if r["neverReplaced"]:
            print(f"     never replaced: {r['neverReplaced']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
