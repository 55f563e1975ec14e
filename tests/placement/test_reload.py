"""Goals loaded again (new objects, equal content, one component edited) reuse what the
planner derived from the last ones, and plan exactly as goals never seen before."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from qonnect_gitops.model.goals import Goals
from qonnect_gitops.model.plan import CurrentPlacement
from qonnect_gitops.placement import evaluate, plan
from qonnect_gitops.render.describe import plan_json
from tests.placement.builders import NOW, after, cluster, component, goals, observed


def _goals(edge_cpu: int) -> Goals:
    clusters = [cluster("cloud-1", tier="cloud", region="r1", cpu="8"),
                cluster("edge-1", tier="edge", region="r2", cpu="2", cpu_hour=0.01),
                cluster("fog-1", tier="fog", region="r2", cpu="4", cpu_hour=0.02)]
    components = [component("api", calls=("shop/db",), qos={"latency": [{"region": "r2", "maxMs": 30}]}),
                  component("db", replicas=2, qos={"objective": "cost"}),
                  component("edge", cpu=edge_cpu, qos={"tiers": ["edge", "fog"]})]
    links = [("cloud-1", "r2", 40.0), ("edge-1", "r1", 45.0), ("fog-1", "r1", 35.0), ("edge-1", "fog-1", 4.0)]
    return goals(clusters, components, links, regions=("r1", "r2"))


def test_equal_goals_share_the_fleet_and_plan_as_if_new() -> None:
    first = _goals(500)
    decided = plan(first, observed(), CurrentPlacement())
    quiet = observed(now=(NOW + timedelta(seconds=60)).isoformat())
    plan(first, quiet, after(decided))
    edited = _goals(300)  # every object new; one component's request changed
    assert evaluate.goal_index(edited).fleet is evaluate.goal_index(first).fleet
    warm = plan_json(plan(edited, quiet, after(decided)))
    evaluate.forget()
    cold = plan_json(plan(dataclasses.replace(edited), quiet, after(decided)))
    assert warm == cold
