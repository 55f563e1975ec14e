"""CPU architecture: a cluster qualifies when one of its nodes has an architecture the
component's images are built for (whether such a node has room is the capacity check)."""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np

from qonnect_gitops.model.plan import GoalKind
from qonnect_gitops.placement.framework import Context


class ArchitectureFilter:
    name = "architecture"
    goal: GoalKind = "architecture"
    reason = "has no node of a supported CPU architecture"

    def key(self, ctx: Context) -> Hashable | None:
        return tuple(sorted(ctx.component.architectures))

    def mask(self, ctx: Context) -> np.ndarray:
        archs = ctx.component.architectures
        return np.array([not archs.isdisjoint(have) for have in ctx.ledger.archs], dtype=bool)
