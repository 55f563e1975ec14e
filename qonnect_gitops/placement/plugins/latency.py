"""Latency: the envelope (``qos.latency``: from each named region within ``maxMs``) is a
filter; how close a cluster comes to the regions is the latency objective."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping

import numpy as np

from qonnect_gitops.model.goals import Component
from qonnect_gitops.model.plan import GoalKind
from qonnect_gitops.placement.framework import Context


def _goals(ctx: Context) -> tuple[tuple[int, float], ...]:
    """The ``serve: all`` goals: (region index, maxMs)."""
    index = ctx.fleet.static.region_index
    return tuple((index[g.region], g.max_ms) for g in ctx.component.qos.latency if g.serve == "all")


def nearest_goals(component: Component, region_index: Mapping[str, int]) -> tuple[tuple[int, float], ...]:
    """The ``serve: nearest`` goals: (region index, maxMs)."""
    if not component.qos.latency:
        return ()  # most components: asked several times per component and cycle
    return tuple((region_index[g.region], g.max_ms) for g in component.qos.latency if g.serve == "nearest")


def unserved(region_latency: np.ndarray, nearest: tuple[tuple[int, float], ...],
             clusters: Iterable[int]) -> list[tuple[int, float]]:
    """The ``nearest`` goals no cluster of ``clusters`` is within the envelope of."""
    used = list(clusters)
    return [(r, m) for r, m in nearest if not any(region_latency[i, r] <= m for i in used)]


class LatencyEnvelopeFilter:
    name = "latency"
    goal: GoalKind = "latency"
    reason = "is outside the latency envelope"

    def key(self, ctx: Context) -> Hashable | None:
        return _goals(ctx), nearest_goals(ctx.component, ctx.fleet.static.region_index)

    def mask(self, ctx: Context) -> np.ndarray:
        return envelope_mask(ctx.fleet.region_latency, ctx)


def envelope_mask(region_latency: np.ndarray, ctx: Context) -> np.ndarray:
    """Clusters whose latency (per the given [cluster, region] table) to every region of
    the component's latency goals is within its ``maxMs``; an unknown latency fails."""
    ok = np.ones(len(ctx.fleet.names), dtype=bool)
    for region, max_ms in _goals(ctx):
        ok &= region_latency[:, region] <= max_ms
    nearest = nearest_goals(ctx.component, ctx.fleet.static.region_index)
    if nearest:
        # Each replica serves one of the regions from nearby.
        near = np.zeros(len(ctx.fleet.names), dtype=bool)
        for region, max_ms in nearest:
            near |= region_latency[:, region] <= max_ms
        ok &= near
    return ok


class LatencyScore:
    """Latency to the goal regions as a fraction of each envelope; without goals, the
    latency to where the component's traffic comes from, as a fraction of the worst."""

    name = "latency"

    def weight(self, ctx: Context) -> float:
        o = ctx.component.qos.objective
        return o.latency / (o.latency + o.cost + o.energy)

    def key(self, ctx: Context) -> Hashable | None:
        goals = _goals(ctx)
        nearest = nearest_goals(ctx.component, ctx.fleet.static.region_index)
        return ("goals", goals, nearest) if goals or nearest else ("traffic", tuple(sorted(ctx.traffic.items())))

    def score(self, ctx: Context) -> np.ndarray:
        goals = _goals(ctx)
        nearest = nearest_goals(ctx.component, ctx.fleet.static.region_index)
        lat = ctx.fleet.region_latency
        if goals or nearest:
            total = np.zeros(len(ctx.fleet.names))
            for region, max_ms in goals:
                total += np.minimum(lat[:, region] / max_ms, 2.0)
            if nearest:
                # The nearest goals count as one, their mean: a cluster near several of the
                # regions serves more of them (one replica may be enough).
                total += np.mean([np.minimum(lat[:, r] / m, 2.0) for r, m in nearest], axis=0)
            return total / (len(goals) + (1 if nearest else 0))
        return traffic_latency(ctx)


def traffic_latency(ctx: Context) -> np.ndarray:
    """rps-weighted latency from the regions the component's traffic comes from, as a
    fraction of the fleet's largest latency; zeros when no traffic was observed."""
    n = len(ctx.fleet.names)
    rps = sum(ctx.traffic.values())
    if rps <= 0:
        return np.zeros(n)
    total = np.zeros(n)
    for region, r in sorted(ctx.traffic.items()):
        column = ctx.fleet.region_latency[:, region]
        total += r * np.where(np.isfinite(column), column, ctx.fleet.latency_norm)
    return np.minimum(total / rps / ctx.fleet.latency_norm, 1.0)
