"""Bin packing policies: ``best-fit`` packs onto the most used clusters, ``worst-fit``
spreads onto the emptiest. Depends on capacity consumed so far, so it is never cached."""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np

from qonnect_gitops.placement.framework import Context

UTILISATION_WEIGHT = 0.5


class UtilisationScore:
    name = "utilisation"

    def weight(self, ctx: Context) -> float:
        policy = ctx.component.qos.placement.policy
        return UTILISATION_WEIGHT if policy in ("best-fit", "worst-fit") else 0.0

    def key(self, ctx: Context) -> Hashable | None:
        return None

    def score(self, ctx: Context) -> np.ndarray:
        used = ctx.ledger.utilisation()
        return 1.0 - used if ctx.component.qos.placement.policy == "best-fit" else used

    def score_at(self, ctx: Context, clusters: list[int]) -> list[float]:
        ledger = ctx.ledger
        best = ctx.component.qos.placement.policy == "best-fit"
        out = []
        for a in clusters:
            used = min(max(1.0 - float(ledger.free_cpu[a]) / float(ledger.total_cpu[a]), 0.0), 1.0)
            out.append(1.0 - used if best else used)
        return out
