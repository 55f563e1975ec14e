"""Affinity to named clusters (``policy: affinity``): the named clusters come first; the
others only take what the named ones cannot (offloading)."""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np

from qonnect_gitops.placement.framework import Context

AFFINITY_PENALTY = 1.0  # larger than any objective difference: named clusters win


class AffinityScore:
    name = "affinity"

    def weight(self, ctx: Context) -> float:
        return AFFINITY_PENALTY if ctx.component.qos.placement.policy == "affinity" else 0.0

    def key(self, ctx: Context) -> Hashable | None:
        return ctx.component.qos.placement.clusters

    def score(self, ctx: Context) -> np.ndarray:
        named = set(ctx.component.qos.placement.clusters)
        return np.array([0.0 if n in named else 1.0 for n in ctx.fleet.names])
