"""What one planning cycle leaves for the next, so that a replan costs what changed.

A component kept exactly as it ran (every hard goal met, held by its cooldown or not
movable by rescheduling, nothing draining, no unmet goal) is decided by its own inputs
only: its component, its entry of the placement in force, its traffic, the clock
against its cooldown, and the clusters it runs on (health, reports, and the running
replicas the ledger settles there). Such a component is *quiet*. The next cycle takes
its ``Work`` and its explained plan verbatim unless one of those inputs changed, or a
component it calls or is called by is decided anew (its closeness explanation reads
their placement). Everything else is decided the ordinary way, against a ledger that
charges every running replica exactly as a cycle from nothing would.

Where a change touches what every component reads (the static fleet, the latency
tables, the node shapes behind the node-size masks), the cycle starts from nothing.
The property test ``tests/placement/test_carry.py`` checks that a carried cycle's plan
is byte for byte the plan of a cycle from nothing, over random fleets and histories.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from qonnect_gitops.model.goals import Component
from qonnect_gitops.model.observed import ObservedCluster, ObservedWorkload
from qonnect_gitops.model.plan import ComponentPlan, CurrentPlacement
from qonnect_gitops.placement.capacity import Running
from qonnect_gitops.placement.distribute import Offload
from qonnect_gitops.placement.fleet import StaticFleet
from qonnect_gitops.placement.records import KeepKind, Work

if TYPE_CHECKING:
    from qonnect_gitops.placement.cycle import Removal

DRAINING = "#draining"  # ledger key suffix: the previous plan's draining replicas


def owner(ledger_key: str) -> str:
    """The component a ledger key charges (draining replicas carry a suffix)."""
    return ledger_key[: -len(DRAINING)] if ledger_key.endswith(DRAINING) else ledger_key


@dataclass
class Carry:
    """The inputs one cycle planned from and the results a later cycle may reuse."""

    static: StaticFleet
    latency_token: object
    shapes: tuple[tuple[tuple[str, int, int], ...], ...]
    components: dict[str, Component]
    current: CurrentPlacement
    healthy: list[bool]
    placeable: list[bool]
    reports: dict[str, ObservedCluster]
    # Per component, what agents report it runs where it is placed (issue 31).
    workloads: dict[str, tuple[ObservedWorkload, ...]]
    traffic: dict[str, dict[int, float]]
    completed: set[str]
    now: float
    # Components kept exactly as they ran, and when each one's cooldown ends (inf: never).
    quiet: dict[str, Work]
    until: dict[str, float]
    # Every running replica the ledger was charged with, per cluster.
    charges: dict[int, list[Running]]
    plans: dict[str, ComponentPlan]
    # Per cluster, the CPU and memory of its charges (sums of replicas x request).
    sums: dict[int, tuple[int, int]]
    # Every component's Work of the cycle, in key order.
    works: dict[str, Work]
    # Quiet components kept because no move could clear their minImprovement: that bound
    # reads the lowest static score over the clusters their class may use, which health
    # changes anywhere can move. Per quiet component its floor's key; per key the floor
    # and a component to compute it again with.
    bounds: dict[str, Hashable]
    floors: dict[Hashable, tuple[float, Component, int]]
    # How many components the cycle took over from the one before (for tests and figures).
    carried: int = 0
    # Rescheduling's offloaded alternatives (components kept because the move to the
    # nearest cluster with room gained too little), with what they read of the ledger:
    # the next cycle distributes anew only where that changed (``distribute.remembered``).
    offloads: dict[str, Offload] = field(default_factory=dict)
    offloads_reused: int = 0  # how many of the last cycle's the cycle used (tests, figures)
    # ``current.last_moved`` of the components of ``works``, in key order (the plan's
    # ``last_moved`` before the cycle's own moves; ``explain._last_moved_base``).
    last_moved_base: dict[str, datetime] | None = None
    # The components that left the goals or completed, with the replicas they leave
    # (``cycle.Removal``), as the cycle found them.
    removed: list[Removal] = field(default_factory=list)
    # Every component's target at the end of the cycle (``works[key].target``, the same
    # objects): the next cycle's placement map starts from it for what it carries,
    # instead of walking every component (``Cycle.carried_placement``).
    targets: dict[str, dict[int, int]] = field(default_factory=dict)
    # The components of ``components`` that are not quiet (every one of them is decided
    # in the next cycle), kept in step with ``quiet`` instead of compared with it.
    unquiet: set[str] = field(default_factory=set)


def is_quiet(work: Work, healthy: list[bool]) -> bool:
    """Whether a decided component was kept on the short path (see the module doc): held
    by its cooldown or as not movable, or kept by rescheduling's bound before any search
    (no placement could clear its minImprovement: that reads no capacity)."""
    keep = work.keep
    c = work.component
    if keep is None:
        return False
    if keep.kind in (KeepKind.COOLDOWN, KeepKind.NOT_MOVABLE):
        kept = work.target is work.current  # held before rescheduling looked at it
    elif keep.kind == KeepKind.NO_GAIN_BOUND:
        kept = work.target == work.current  # rescheduling kept it before any search
    else:
        return False  # the answer of a search against this cycle's ledger
    return (
        kept
        and not work.touched
        and not work.shortfalls
        and not work.drains
        and not work.drained
        and not work.moves
        and not work.undeclared
        and not work.lost
        and not work.stalled
        and not work.unplaced
        and not c.colocate_with
        and c.qos.scaling is None
        and work.replicas >= c.qos.availability.min_clusters
        and c.qos.placement.policy not in ("best-fit", "worst-fit")
        and all(healthy[i] for i in work.current)
    )


def quiet_until(work: Work) -> float:
    keep = work.keep
    if keep is not None and keep.kind == KeepKind.COOLDOWN and keep.until is not None:
        return keep.until
    return math.inf


def changed_keys(old: Mapping[str, object], new: Mapping[str, object]) -> set[str]:
    """Keys whose value differs between two mappings (added and removed ones too)."""
    if old is new:
        return set()
    out = {k for k, v in new.items() if old.get(k, _MISSING) != v}
    out.update(old.keys() - new.keys())
    return out


_MISSING = object()


def clusters_named(where: Iterable[str], index: Mapping[str, int]) -> list[int]:
    return [i for i in (index.get(name) for name in where) if i is not None]
