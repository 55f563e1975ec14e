"""Health filter: a cluster reported unhealthy, or silent for longer than the heartbeat
grace period, takes no replicas."""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np

from qonnect_gitops.model.plan import GoalKind
from qonnect_gitops.placement.framework import Context


class HealthFilter:
    name = "health"
    goal: GoalKind = "health"
    reason = "is unhealthy or silent past the heartbeat grace"

    def key(self, ctx: Context) -> Hashable | None:
        return ()

    def mask(self, ctx: Context) -> np.ndarray:
        return ctx.fleet.healthy
