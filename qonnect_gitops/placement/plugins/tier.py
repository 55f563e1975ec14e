"""Tier and label affinity: ``qos.tiers`` lists the tiers a component may use (best
first; empty means any) and ``qos.clusterSelector`` matches cluster labels."""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np

from qonnect_gitops.model.plan import GoalKind
from qonnect_gitops.placement.framework import Context

TIER_PREFERENCE_WEIGHT = 0.1  # a gentle nudge: edge first unless the objective disagrees


class TierFilter:
    name = "tier"
    goal: GoalKind = "tier"
    reason = "is not in one of the component's tiers"

    def key(self, ctx: Context) -> Hashable | None:
        return ctx.component.qos.tiers

    def mask(self, ctx: Context) -> np.ndarray:
        tiers = set(ctx.component.qos.tiers)
        if not tiers:
            return np.ones(len(ctx.fleet.names), dtype=bool)
        return np.array([t in tiers for t in ctx.fleet.static.tier], dtype=bool)


class SelectorFilter:
    name = "selector"
    goal: GoalKind = "selector"
    reason = "has labels the cluster selector does not match"

    def key(self, ctx: Context) -> Hashable | None:
        selector = ctx.component.qos.cluster_selector
        return (tuple(sorted(selector.match_labels.items())), selector.match_expressions)

    def mask(self, ctx: Context) -> np.ndarray:
        selector = ctx.component.qos.cluster_selector
        if not selector.match_labels and not selector.match_expressions:
            return np.ones(len(ctx.fleet.names), dtype=bool)
        return np.array(
            [selector.matches(c.selector_labels) for c in ctx.fleet.static.clusters], dtype=bool
        )


class TierPreferenceScore:
    """Earlier tiers in ``qos.tiers`` score better."""

    name = "tier"

    def weight(self, ctx: Context) -> float:
        return TIER_PREFERENCE_WEIGHT if len(ctx.component.qos.tiers) > 1 else 0.0

    def key(self, ctx: Context) -> Hashable | None:
        return ctx.component.qos.tiers

    def score(self, ctx: Context) -> np.ndarray:
        tiers = ctx.component.qos.tiers
        rank: dict[str, float] = {t: i / (len(tiers) - 1) for i, t in enumerate(tiers)}
        return np.array([rank.get(t, 1.0) for t in ctx.fleet.static.tier])
