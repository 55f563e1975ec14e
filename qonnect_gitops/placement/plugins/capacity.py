"""Capacity. ``NodeSizeFilter``: a cluster none of whose nodes (of a supported
architecture) could hold one replica even when empty never takes the component; it is
fixed for the cycle. ``CapacityFilter``: a quick vector check on each cluster's total
free CPU and memory now; whether a replica fits on one node is checked exactly, cluster
by cluster, when replicas are distributed. The component's own running replicas that
still fit at today's size (``ctx.own``) count as room for it, or a stable plan would
look infeasible next cycle."""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np

from qonnect_gitops.model.plan import GoalKind
from qonnect_gitops.placement.framework import Context


class NodeSizeFilter:
    name = "node-size"
    goal: GoalKind = "capacity"
    reason = "has no node large enough for one replica"

    def key(self, ctx: Context) -> Hashable | None:
        c = ctx.component
        return (c.cpu, c.memory, c.architectures)

    def mask(self, ctx: Context) -> np.ndarray:
        c = ctx.component
        return ctx.ledger.holds_vector(c.cpu, c.memory, c.architectures)


class CapacityFilter:
    name = "capacity"
    goal: GoalKind = "capacity"
    reason = "lacks free capacity"

    def key(self, ctx: Context) -> Hashable | None:
        return None

    def mask(self, ctx: Context) -> np.ndarray:
        c = ctx.component
        ok = (ctx.ledger.free_cpu >= c.cpu) & (ctx.ledger.free_memory >= c.memory)
        for cluster, n in ctx.own.items():
            if n > 0:
                ok[cluster] = True
        return ok
