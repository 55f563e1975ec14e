"""Communication-aware placement: a component scores better near the components it calls
(each replica calls the nearest replica of the callee) and near those that call it."""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np

from qonnect_gitops.placement.framework import Context

CLOSENESS_WEIGHT = 0.3  # per calling relation


class ClosenessScore:
    name = "closeness"

    def weight(self, ctx: Context) -> float:
        return CLOSENESS_WEIGHT if (ctx.component.calls or ctx.callers) else 0.0

    def key(self, ctx: Context) -> Hashable | None:
        return None

    def score(self, ctx: Context) -> np.ndarray:
        lat = ctx.fleet.cluster_latency
        total = np.zeros(lat.shape[0])
        # The matrix is symmetric, so a row is the latency to every cluster.
        for callee in ctx.component.calls:
            where = ctx.placement.get(callee)
            if where:
                if len(where) == 1:
                    total += lat[next(iter(where))]
                else:
                    total += lat[sorted(where)].min(axis=0)
        for caller in ctx.callers:
            where = ctx.placement.get(caller)
            if where:
                n = sum(where.values())
                for cluster, replicas in sorted(where.items()):
                    total += (replicas / n) * lat[cluster]
        return total / ctx.fleet.latency_norm

    def score_at(self, ctx: Context, clusters: list[int]) -> list[float]:
        out = []
        for a in clusters:
            row = ctx.fleet.latency_row(a)
            total = 0.0
            for callee in ctx.component.calls:
                where = ctx.placement.get(callee)
                if where:
                    total += min(row[b] for b in where)
            for caller in ctx.callers:
                where = ctx.placement.get(caller)
                if where:
                    n = sum(where.values())
                    for b, replicas in sorted(where.items()):
                        total += (replicas / n) * row[b]
            out.append(total / ctx.fleet.latency_norm)
        return out
