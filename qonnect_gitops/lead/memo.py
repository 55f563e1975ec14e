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
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from qonnect_gitops.model import Goals, Observed, Plan
from qonnect_gitops.render import RenderedPlan


def observation_key(observed: Observed, grace_seconds: float) -> tuple[Any, ...]:
    """What of an observation the planner's decision depends on, comparable with ``==``:
    everything but ``now`` and heartbeat ages, which count only as past the grace or not."""
    clusters = tuple(
        (name, c.healthy,
         c.heartbeat_age_seconds is not None and c.heartbeat_age_seconds > grace_seconds,
         c.free, c.nodes)
        for name, c in observed.clusters.items()
    )
    return (clusters, observed.latencies, observed.traffic, observed.completed_jobs,
            tuple(observed.cluster_api.items()))


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
        """Keep a decision planned and rendered from these inputs at ``now``."""
        if decision is not self.decision or rendered is not self.rendered:
            self._held_by.clear()
        self._inputs = _Inputs(goals, plan_head, observation_key(observed, goals.fleet.spec.heartbeat.grace_seconds))
        self._at = now
        self.decision, self.rendered = decision, rendered

    def held_by(self, commit: str | None, rendered: RenderedPlan) -> bool:
        """Whether ``commit`` is known to hold exactly ``rendered`` (and its decision)."""
        return commit is not None and rendered is self.rendered and commit in self._held_by

    def holds(self, commit: str, rendered: RenderedPlan) -> None:
        """Record that ``commit`` holds ``rendered`` (compared, or just written)."""
        if rendered is self.rendered:
            self._held_by.add(commit)

    def forget(self) -> None:
        """Plan afresh next cycle."""
        self._inputs = self._at = self.decision = self.rendered = None
        self._held_by.clear()
