"""The leader's decision memo: a cycle whose inputs did not change neither plans nor
renders, and anything the planner reads (goals, plan in force, observation, the clock past
the memo's age, a heartbeat past the grace) makes it plan again. Real cycles against the
template goals served by git daemon; the planner is counted, not replaced."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from qonnect_gitops.lead import reconcile
from qonnect_gitops.lead.memo import DecisionMemo, observation_key, renders_alike, same_outcome
from qonnect_gitops.lead.reconcile import open_mirror_for_goals, reconcile_once
from qonnect_gitops.model import Goals, Observed, ParseCache, Plan
from qonnect_gitops.model.observed import ObservedCluster, empty_observation
from qonnect_gitops.model.plan import Assignment, ComponentPlan, Draining
from tests.goals_repo import GoalsRepo, served_goals

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def goals(tmp_path: Path) -> Iterator[GoalsRepo]:
    with served_goals(tmp_path) as repo:
        yield repo


@pytest.fixture
def plans(monkeypatch: pytest.MonkeyPatch) -> list[datetime]:
    """The ``now`` of every call of the planner (the real one) during the test."""
    monkeypatch.setattr(reconcile, "_PARSED", ParseCache())
    monkeypatch.setattr(reconcile, "_GOALS", {})
    calls: list[datetime] = []
    real = reconcile.plan_with_pools

    def counted(goals, observed, current, provisioning):  # type: ignore[no-untyped-def]
        calls.append(observed.now)
        return real(goals, observed, current, provisioning)

    monkeypatch.setattr(reconcile, "plan_with_pools", counted)
    return calls


def _at(now: datetime, **clusters: ObservedCluster):  # type: ignore[no-untyped-def]
    def observe(goals: Goals) -> Observed:
        return empty_observation(now).model_copy(update={"clusters": dict(clusters)})
    return observe


def test_an_idle_cycle_reuses_the_decision_and_writes_nothing(goals: GoalsRepo, tmp_path: Path,
                                                              plans: list[datetime]) -> None:
    memo = DecisionMemo(max_age_seconds=60)
    mirror = open_mirror_for_goals(tmp_path / "lead.git", goals.url, None)
    first = reconcile_once(mirror, _at(NOW), now=NOW, memo=memo)
    assert first.changed and len(plans) == 1
    # The first plan was made before its plan commit existed: the plan in force differs,
    # so the next cycle plans once more (it finds the same decision and writes nothing).
    second = reconcile_once(mirror, _at(NOW + timedelta(seconds=10)), now=NOW + timedelta(seconds=10), memo=memo)
    assert not second.changed and len(plans) == 2
    for later in (20, 30, 40):
        now = NOW + timedelta(seconds=later)
        idle = reconcile_once(mirror, _at(now), now=now, memo=memo)
        assert not idle.changed and idle.plan is second.plan
    assert len(plans) == 2
    # Past the memo's age the clock may matter (cooldowns end): plan again.
    late = NOW + timedelta(seconds=75)
    reconcile_once(mirror, _at(late), now=late, memo=memo)
    assert plans[-1] == late and len(plans) == 3


def test_what_the_planner_reads_makes_it_plan_again(goals: GoalsRepo, tmp_path: Path,
                                                    plans: list[datetime]) -> None:
    memo = DecisionMemo(max_age_seconds=600)
    mirror = open_mirror_for_goals(tmp_path / "lead.git", goals.url, None)
    reconcile_once(mirror, _at(NOW), now=NOW, memo=memo)
    hosting = sorted({a.cluster for c in memo.decision.components.values() for a in c.assignments})  # type: ignore[union-attr]
    reconcile_once(mirror, _at(NOW, **{hosting[0]: ObservedCluster(heartbeat_age_seconds=1)}), now=NOW, memo=memo)
    count = len(plans)
    # A heartbeat age inside the grace is not news; past it, the cluster is failing over.
    grace = goals_grace(memo)
    fresh = ObservedCluster(heartbeat_age_seconds=grace / 2)
    reconcile_once(mirror, _at(NOW, **{hosting[0]: fresh}), now=NOW, memo=memo)
    assert len(plans) == count
    silent = ObservedCluster(heartbeat_age_seconds=grace + 1)
    failover = reconcile_once(mirror, _at(NOW, **{hosting[0]: silent}), now=NOW, memo=memo)
    assert len(plans) == count + 1 and failover.changed
    assert failover.plan.reason == "failover"
    # The goals change: plan again.
    count = len(plans)
    goals.edit("apps/bookinfo/manifests/details.yaml", "image: ", "image: mirror.example.org/", "new registry")
    reconcile_once(mirror, _at(NOW, **{hosting[0]: silent}), now=NOW, memo=memo)
    assert len(plans) == count + 1
    # forget() (a new term, a rescheduling trigger): plan again.
    memo.forget()
    reconcile_once(mirror, _at(NOW, **{hosting[0]: silent}), now=NOW, memo=memo)
    assert len(plans) == count + 2


def goals_grace(memo: DecisionMemo) -> float:
    inputs = memo._inputs
    assert inputs is not None
    return float(inputs.goals.fleet.spec.heartbeat.grace_seconds)


def test_the_observation_key_ignores_the_clock_and_ages_inside_the_grace() -> None:
    a = empty_observation(NOW).model_copy(update={"clusters": {"x": ObservedCluster(heartbeat_age_seconds=3)}})
    b = empty_observation(NOW + timedelta(hours=1)).model_copy(
        update={"clusters": {"x": ObservedCluster(heartbeat_age_seconds=9)}})
    c = empty_observation(NOW).model_copy(update={"clusters": {"x": ObservedCluster(heartbeat_age_seconds=31)}})
    d = empty_observation(NOW).model_copy(update={"clusters": {"x": ObservedCluster(healthy=False)}})
    assert observation_key(a, 30) == observation_key(b, 30)
    assert observation_key(a, 30) != observation_key(c, 30)
    assert observation_key(a, 30) != observation_key(d, 30)


@pytest.fixture
def renders(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The reason of every decision rendered during the test (the real renderer)."""
    calls: list[str] = []
    real = reconcile.render

    def counted(goals, plan):  # type: ignore[no-untyped-def]
        calls.append(plan.reason)
        return real(goals, plan)

    monkeypatch.setattr(reconcile, "render", counted)
    return calls


def test_a_fresh_plan_that_finds_the_decision_in_force_renders_nothing(
        goals: GoalsRepo, tmp_path: Path, plans: list[datetime], renders: list[str]) -> None:
    memo = DecisionMemo(max_age_seconds=600)
    mirror = open_mirror_for_goals(tmp_path / "lead.git", goals.url, None)
    first = reconcile_once(mirror, _at(NOW), now=NOW, memo=memo)
    assert first.changed and len(renders) == 1
    # The plan commit just written holds that rendering: the next cycle plans again (the
    # plan in force is new), finds the same decision and neither renders nor writes.
    second = reconcile_once(mirror, _at(NOW), now=NOW, memo=memo)
    assert not second.changed and len(plans) == 2 and len(renders) == 1
    # A rescheduling trigger (forget) plans afresh; the same decision renders nothing.
    memo.forget()
    third = reconcile_once(mirror, _at(NOW + timedelta(seconds=5)), now=NOW + timedelta(seconds=5), memo=memo)
    assert not third.changed and len(plans) == 3 and len(renders) == 1
    # A decision that moves replicas is rendered and written.
    hosting = sorted({a.cluster for c in third.plan.components.values() for a in c.assignments})
    silent = ObservedCluster(heartbeat_age_seconds=goals_grace(memo) + 1)
    failover = reconcile_once(mirror, _at(NOW, **{hosting[0]: silent}), now=NOW, memo=memo)
    assert failover.changed and renders[-1] == "failover" and len(renders) == 2
    # The goals change: the remembered rendering belongs to other goals.
    goals.edit("apps/bookinfo/manifests/details.yaml", "image: ", "image: mirror.example.org/", "new registry")
    changed = reconcile_once(mirror, _at(NOW, **{hosting[0]: silent}), now=NOW, memo=memo)
    assert changed.changed and len(renders) == 3


def test_renders_alike_reads_what_runs_where_and_nothing_else() -> None:
    def plan(reason: str, score: float, draining: tuple[Draining, ...] = (),
             replicas: int = 2) -> Plan:
        component = ComponentPlan(component="shop/web", kind="Deployment", draining=draining, assignments=(
            Assignment(cluster="edge-1", replicas=replicas, reason=reason, score=score),))
        return Plan(reason="rescheduling", components={"shop/web": component})

    base = plan("closest", 1.0)
    assert renders_alike(base, plan("cheapest now", 7.5))  # wording and scores only
    assert not renders_alike(base, plan("closest", 1.0, replicas=3))
    old = (Draining(cluster="edge-2", replicas=1, reason="moved"),)
    assert same_outcome(base, plan("closest", 1.0, old))  # the same target...
    assert not renders_alike(base, plan("closest", 1.0, old))  # ...but edge-2 still runs one
