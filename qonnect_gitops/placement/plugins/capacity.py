"""Capacity: a quick vector check on each cluster's total free CPU and memory. Whether a
replica fits on one node of a supported architecture is checked exactly, cluster by
cluster in score order, when replicas are distributed. The component's own running
replicas count as available to it, or a stable plan would look infeasible next cycle."""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np

from qonnect_gitops.placement.framework import Context


class CapacityFilter:
    name = "capacity"
    reason = "lacks free capacity"

    def key(self, ctx: Context) -> Hashable | None:
        return None

    def mask(self, ctx: Context) -> np.ndarray:
        c = ctx.component
        ok = (ctx.ledger.free_cpu >= c.cpu) & (ctx.ledger.free_memory >= c.memory)
        for cluster in ctx.own:
            ok[cluster] = True
        return ok
