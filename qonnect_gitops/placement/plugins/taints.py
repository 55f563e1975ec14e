"""Taints: NoSchedule and NoExecute keep a component away unless it tolerates them;
PreferNoSchedule only makes the cluster score worse."""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np

from qonnect_gitops.model.app import Toleration
from qonnect_gitops.model.cluster import Taint
from qonnect_gitops.model.plan import GoalKind
from qonnect_gitops.placement.framework import Context

PREFER_NO_SCHEDULE_PENALTY = 0.2


def _tolerated(taint: Taint, tolerations: tuple[Toleration, ...]) -> bool:
    return any(t.tolerates(taint.key, taint.value, taint.effect) for t in tolerations)


class TaintFilter:
    name = "taints"
    goal: GoalKind = "selector"  # tolerations select clusters as a selector does
    reason = "has a NoSchedule/NoExecute taint the component does not tolerate"

    def key(self, ctx: Context) -> Hashable | None:
        return ctx.component.qos.tolerations  # frozen models: hashable by content

    def mask(self, ctx: Context) -> np.ndarray:
        tolerations = ctx.component.qos.tolerations
        return np.array(
            [
                all(
                    t.effect == "PreferNoSchedule" or _tolerated(t, tolerations)
                    for t in c.spec.taints
                )
                for c in ctx.fleet.static.clusters
            ],
            dtype=bool,
        )


class TaintPreferenceScore:
    name = "taint"

    def weight(self, ctx: Context) -> float:
        return PREFER_NO_SCHEDULE_PENALTY

    def key(self, ctx: Context) -> Hashable | None:
        return ctx.component.qos.tolerations  # frozen models: hashable by content

    def score(self, ctx: Context) -> np.ndarray:
        tolerations = ctx.component.qos.tolerations
        return np.array(
            [
                float(
                    any(
                        t.effect == "PreferNoSchedule" and not _tolerated(t, tolerations)
                        for t in c.spec.taints
                    )
                )
                for c in ctx.fleet.static.clusters
            ]
        )
