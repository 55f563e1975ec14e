"""The leader's memory of its last decision, so a cycle whose inputs did not change costs
what changed rather than a plan and a render of the whole fleet.

The planner is a pure function of the goals, the observation, the placement in force and
the clock. Three of those are cheap to compare: the goals are one object per goals commit
(``reconcile._goals_at``), the placement in force is named by the plan commit, and the
observation is compared field by field after removing what moves every cycle without
changing any decision: the clock itself, and heartbeat ages, of which the planner only asks
whether they passed the grace (``placement.fleet.build_view``).

The clock is the one input that cannot be compared: cooldowns end, pool clusters linger
and back off. A remembered decision is therefore reused for at most ``max_age_seconds``
(the loop passes its rescheduling interval, whose trigger also forgets it), so rules that
act on time alone act at most one rescheduling interval late, as they already did between
two rescheduling cycles of an otherwise quiet fleet.

The memo also remembers which plan commits are known to hold the rendered decision
(``same_decision`` compared them, or the cycle wrote them): commit ids name content, so
that stays true, and an idle cycle skips hashing every cluster tree again.

A cycle whose inputs changed plans again, and usually finds the decision it already has:
a report moved a cluster's free CPU, a rescheduling trigger asked for a fresh plan, and
the stability rules keep everything where it is. When the new decision runs the same
replicas where the remembered one does (``renders_alike``) and a commit is known to hold
the remembered rendering, that rendering is the new decision's too (``render`` is a pure
function of the goals and what runs where), so the cycle neither renders nor compares the
fleet again (``rendering_for``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from qonnect_gitops.model import Goals, Observed, Plan
from qonnect_gitops.model.plan import ComponentPlan
from qonnect_gitops.placement.provision import state_key
from qonnect_gitops.render import RenderedPlan


def observation_key(observed: Observed, grace_seconds: float) -> tuple[Any, ...]:
    """What of an observation the planner's decision depends on, comparable with ``==``:
    everything but ``now`` and heartbeat ages, which count only as past the grace or not
    (the health model's judgement, ``state`` and ``recovering``, is compared whole)."""
    clusters = tuple(
        (name, c.healthy, c.state, c.reason, c.recovering,
         c.heartbeat_age_seconds is not None and c.heartbeat_age_seconds > grace_seconds,
         c.free, c.nodes)
        for name, c in observed.clusters.items()
    )
    return (clusters, observed.latencies, observed.traffic, observed.completed_jobs,
            tuple(observed.cluster_api.items()), observed.workloads)


def same_outcome(a: Plan, b: Plan) -> bool:
    """Whether two decisions place alike: the same target replicas per cluster for every
    component, the same provisioning state (``state_key``), the same unplaced replicas and
    unmet goals. Reasons, scores and times may differ: a decision that differs from the
    plan in force only in them changes nothing that runs, and is not written."""
    return (_same_replicas(a, b, draining=False)
            and state_key(a.provisioning) == state_key(b.provisioning)
            and sorted((u.component, u.replicas) for u in a.unplaced)
            == sorted((u.component, u.replicas) for u in b.unplaced)
            and sorted((u.component, u.goal) for u in a.unmet) == sorted((u.component, u.goal) for u in b.unmet))


def renders_alike(a: Plan, b: Plan) -> bool:
    """``same_outcome``, and the cluster branches of both read the same: the replicas still
    draining, and the dynamic clusters exactly as provisioned (their Cluster API objects
    and membership are rendered from them)."""
    return (same_outcome(a, b) and _same_replicas(a, b, draining=True)
            and (a.provisioning.clusters if a.provisioning else ())
            == (b.provisioning.clusters if b.provisioning else ()))


def _same_replicas(a: Plan, b: Plan, *, draining: bool) -> bool:
    """Per component, the same replicas per cluster (target, or with ``draining`` the
    replicas still draining too). Components carried from one plan to the next are the
    same objects, so a quiet fleet costs a dict walk."""
    theirs = b.components
    if a.components.keys() != theirs.keys():
        return False
    for key, mine in a.components.items():
        other = theirs[key]
        if mine is other:
            continue
        if _replicas(mine, draining) != _replicas(other, draining):
            return False
    return True


def _replicas(component: ComponentPlan, draining: bool) -> Any:
    if draining:
        return tuple((d.cluster, d.replicas) for d in component.draining)
    return component.replicas_by_cluster(include_draining=False)


@dataclass(frozen=True)
class _Inputs:
    goals: Goals
    plan_head: str | None
    observation: tuple[Any, ...]

    def same(self, other: _Inputs) -> bool:
        # Goals by identity: one object per commit, and comparing two fleets field by
        # field would cost what this memo saves.
        return (self.goals is other.goals and self.plan_head == other.plan_head
                and self.observation == other.observation)


@dataclass
class DecisionMemo:
    """The last decision, its rendering and what it was computed from (see the module
    docstring). One per leader; ``forget()`` when leadership or the time rules need a
    fresh plan."""

    max_age_seconds: float = 60.0
    _inputs: _Inputs | None = None
    _at: datetime | None = None
    decision: Plan | None = None
    rendered: RenderedPlan | None = None
    _rendered_goals: Goals | None = None  # what ``rendered`` was rendered from, with ``decision``
    _held_by: set[str] = field(default_factory=set)

    def recall(self, goals: Goals, plan_head: str | None, observed: Observed,
               now: datetime) -> tuple[Plan, RenderedPlan] | None:
        """The remembered decision and rendering if these inputs are the remembered ones."""
        if self._inputs is None or self._at is None or self.decision is None or self.rendered is None:
            return None
        age = (now - self._at).total_seconds()
        if not 0 <= age <= self.max_age_seconds:
            return None
        inputs = _Inputs(goals, plan_head, observation_key(observed, goals.fleet.spec.heartbeat.grace_seconds))
        if not inputs.same(self._inputs):
            return None
        return self.decision, self.rendered

    def remember(self, goals: Goals, plan_head: str | None, observed: Observed, now: datetime,
                 decision: Plan, rendered: RenderedPlan) -> None:
        """Keep a decision planned and rendered from these inputs at ``now``. The commits
        known to hold the rendering stay known while the rendering is the same object
        (``rendering_for`` found it for this decision)."""
        if rendered is not self.rendered:
            self._held_by.clear()
        self._inputs = _Inputs(goals, plan_head, observation_key(observed, goals.fleet.spec.heartbeat.grace_seconds))
        self._at = now
        self.decision, self.rendered, self._rendered_goals = decision, rendered, goals

    def rendering_for(self, goals: Goals, commit: str | None, decision: Plan) -> RenderedPlan | None:
        """The remembered rendering when ``commit`` is known to hold it and ``decision``,
        planned from the same goals, runs the same replicas where the remembered decision
        does (``renders_alike``): then ``commit`` holds this decision too, and nothing need
        be rendered or compared. None otherwise."""
        if (commit is None or commit not in self._held_by or self.rendered is None
                or self.decision is None or goals is not self._rendered_goals):
            return None
        return self.rendered if renders_alike(decision, self.decision) else None

    def held_by(self, commit: str | None, rendered: RenderedPlan) -> bool:
        """Whether ``commit`` is known to hold exactly ``rendered`` (and its decision)."""
        return commit is not None and rendered is self.rendered and commit in self._held_by

    def holds(self, commit: str, rendered: RenderedPlan) -> None:
        """Record that ``commit`` holds ``rendered`` (compared, or just written)."""
        if rendered is self.rendered:
            self._held_by.add(commit)

    def forget(self) -> None:
        """Plan afresh next cycle. What is known about the remembered rendering stays: it
        is a fact about commits, and a fresh plan that finds the same decision reuses it
        (``rendering_for``)."""
        self._inputs = self._at = None
