"""Money and energy: the cost cap (``qos.maxCostPerHour`` over all replicas) is a filter;
the price and the carbon of one replica are objectives."""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np

from qonnect_gitops.model.plan import GoalKind
from qonnect_gitops.placement.framework import Context


def replica_cost(ctx: Context) -> np.ndarray:
    """Price per hour of one replica on each cluster."""
    s = ctx.fleet.static
    price: np.ndarray = ctx.component.cpu * s.cpu_price + ctx.component.memory * s.memory_price
    return price


def _normalised(values: np.ndarray) -> np.ndarray:
    top = float(values.max()) if values.size else 0.0
    return values / top if top > 0 else np.zeros_like(values)


class CostCapFilter:
    """Every cluster used must keep the whole component under the cap: one replica may
    cost at most cap / replicas there, so any mix of such clusters stays under it."""

    name = "cost"
    goal: GoalKind = "cost"
    reason = "would exceed maxCostPerHour"

    def key(self, ctx: Context) -> Hashable | None:
        c = ctx.component
        return (c.qos.max_cost_per_hour, c.cpu, c.memory, ctx.replicas)

    def mask(self, ctx: Context) -> np.ndarray:
        cap = ctx.component.qos.max_cost_per_hour
        if cap is None:
            return np.ones(len(ctx.fleet.names), dtype=bool)
        return replica_cost(ctx) * max(ctx.replicas, 1) <= cap + 1e-9


class CostScore:
    name = "cost"

    def weight(self, ctx: Context) -> float:
        o = ctx.component.qos.objective
        return o.cost / (o.latency + o.cost + o.energy)

    def key(self, ctx: Context) -> Hashable | None:
        return (ctx.component.cpu, ctx.component.memory)

    def score(self, ctx: Context) -> np.ndarray:
        return _normalised(replica_cost(ctx))


class EnergyScore:
    """Watts per CPU times the grid's carbon intensity, for the replica's CPU."""

    name = "energy"

    def weight(self, ctx: Context) -> float:
        o = ctx.component.qos.objective
        return o.energy / (o.latency + o.cost + o.energy)

    def key(self, ctx: Context) -> Hashable | None:
        return ()  # proportional to CPU, so normalised it does not depend on the size

    def score(self, ctx: Context) -> np.ndarray:
        return _normalised(ctx.fleet.static.energy_per_millicore)
