"""The plugin interface of the planner, in the spirit of a scheduler framework: filters
say where a component may run, scores say how good each remaining cluster is. Both work
on a whole vector of clusters at once (numpy, indexed in cluster-name order).

A new policy is a new module in ``placement.plugins`` registering one more plugin.
Filters name the hard goal they enforce (``goal``), so an exclusion is explained and
reported as unmet from the filter that made it, never from its message.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from qonnect_gitops.model.goals import Component, Goals
from qonnect_gitops.model.plan import GoalKind
from qonnect_gitops.placement.capacity import Ledger
from qonnect_gitops.placement.fleet import FleetView


@dataclass
class Context:
    """What plugins may look at while judging one component."""

    goals: Goals
    fleet: FleetView
    ledger: Ledger
    component: Component
    replicas: int  # the replicas to place in total this cycle
    traffic: Mapping[int, float]  # region index -> rps arriving for this component
    placement: Mapping[str, Mapping[int, int]]  # component key -> cluster index -> replicas
    callers: tuple[str, ...]  # components that call this one
    own: Mapping[int, int] = field(default_factory=dict)  # its replicas already running


class Filter(Protocol):
    """Rejects clusters a component must not run on."""

    name: str
    goal: GoalKind  # the hard goal a rejection breaks (reported in ``Plan.unmet``)
    reason: str  # what a rejection means, e.g. "lacks a supported CPU architecture"

    def key(self, ctx: Context) -> Hashable | None:
        """A cache key when the mask depends only on it (per cycle); None if dynamic."""

    def mask(self, ctx: Context) -> np.ndarray:
        """Boolean vector: True where the component may run."""


class Score(Protocol):
    """Rates clusters for a component: lower is better, roughly within [0, 1]."""

    name: str

    def weight(self, ctx: Context) -> float:
        """How much this term counts for the component (0: not used)."""

    def key(self, ctx: Context) -> Hashable | None:
        """A cache key when the vector depends only on it (per cycle); None if dynamic."""

    def score(self, ctx: Context) -> np.ndarray:
        """Float vector over all clusters."""


class DynamicScore(Score, Protocol):
    """A score that depends on decisions made during the cycle (never cached)."""

    def score_at(self, ctx: Context, clusters: list[int]) -> list[float]:
        """The score at a few clusters only: explanations need it for every component,
        and a whole vector each would cost a large fleet most of a cycle."""
