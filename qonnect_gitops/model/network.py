"""``network.yaml``: latency between clusters and to user regions (kind ``Network``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from qonnect_gitops.model.base import Header, Metadata, Name, UserModel
from qonnect_gitops.model.limits import MAX_LATENCY_MS


class Link(UserModel):
    """Round-trip latency from ``from`` to ``to``; symmetric unless both directions are given."""

    from_: Name = Field(alias="from", description="A cluster.")
    to: Name = Field(description="A cluster or a user region.")
    ms: float = Field(ge=0, le=MAX_LATENCY_MS, description="Round-trip latency in milliseconds.")


class NetworkSpec(UserModel):
    latencies: tuple[Link, ...] = ()


class Network(Header):
    """The ``network.yaml`` document."""

    kind: Literal["Network"]
    metadata: Metadata
    spec: NetworkSpec = Field(default_factory=NetworkSpec)


def latency_table(links: tuple[Link, ...]) -> dict[tuple[str, str], float]:
    """Both directions of every link; an explicitly given direction wins over a mirrored one."""
    table: dict[tuple[str, str], float] = {}
    for link in links:
        table.setdefault((link.to, link.from_), link.ms)
    for link in links:
        table[(link.from_, link.to)] = link.ms
    return table
