"""Random fleets from the benchmark generator: every plan satisfies every constraint
(checked independently of the planner), and improvement steps never break them."""

from __future__ import annotations

import pytest

from benchmarks.placement import make_fleet, satisfiable, violations
from qonnect_gitops.model.plan import CurrentPlacement
from qonnect_gitops.placement import plan
from qonnect_gitops.placement.objective import evaluate, terms
from tests.placement.builders import observed


@pytest.mark.parametrize("seed", range(12))
def test_plans_of_random_fleets_are_valid(seed: int) -> None:
    clusters, components = [(8, 20), (12, 36), (16, 48), (20, 60)][seed % 4]
    goals, _ = make_fleet(clusters, components, seed=5000 + seed, small=True)
    obs = observed()
    goals = satisfiable(goals, obs)
    p = plan(goals, obs, CurrentPlacement())
    assert violations(goals, p.placements(), sum(u.replicas for u in p.unplaced)) == []
    # The same inputs again: the same plan.
    again = plan(goals, obs, CurrentPlacement())
    assert again.model_dump_json() == p.model_dump_json()
    assert evaluate(terms(goals, obs), p.placements()) > 0
