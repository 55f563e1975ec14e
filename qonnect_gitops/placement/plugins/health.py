"""Health filter: a cluster reported unhealthy, or silent for longer than the heartbeat
grace period, takes no replicas; nor does a cordoned one (healthy, but judged Degraded,
Stalled or Silent by the leads' health model), though what runs there stays."""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np

from qonnect_gitops.model.plan import GoalKind
from qonnect_gitops.placement.framework import Context


class HealthFilter:
    name = "health"
    goal: GoalKind = "health"
    reason = "is unhealthy, silent past the heartbeat grace, or cordoned"

    def key(self, ctx: Context) -> Hashable | None:
        return ()

    def mask(self, ctx: Context) -> np.ndarray:
        return ctx.fleet.placeable
