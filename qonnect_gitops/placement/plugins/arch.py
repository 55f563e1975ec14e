"""CPU architecture: a cluster qualifies when one of its nodes has an architecture the
component's images are built for (whether such a node has room is the capacity check)."""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np

from qonnect_gitops.placement.framework import Context


class ArchitectureFilter:
    name = "architecture"
    reason = "has no node of a supported CPU architecture"

    def key(self, ctx: Context) -> Hashable | None:
        return tuple(sorted(ctx.component.architectures))

    def mask(self, ctx: Context) -> np.ndarray:
        archs = ctx.component.architectures
        return np.array(
            [
                any(node[3] in archs for node in nodes) if nodes else False
                for nodes in ctx.ledger.nodes
            ],
            dtype=bool,
        )
