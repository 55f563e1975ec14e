"""Traffic-aware placement (``policy: traffic``): prefer the clusters nearest to where
the component's requests arrive."""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np

from qonnect_gitops.placement.framework import Context
from qonnect_gitops.placement.plugins.latency import traffic_latency

TRAFFIC_WEIGHT = 1.0


class TrafficScore:
    name = "traffic"

    def weight(self, ctx: Context) -> float:
        return TRAFFIC_WEIGHT if ctx.component.qos.placement.policy == "traffic" else 0.0

    def key(self, ctx: Context) -> Hashable | None:
        return tuple(sorted(ctx.traffic.items()))

    def score(self, ctx: Context) -> np.ndarray:
        return traffic_latency(ctx)
