"""The latencies the planner sees: measurements held until they change enough to matter.

Agents measure latencies on every report, and no two measurements are equal. The
planner reads the latency tables in every mask and score, so any change to them makes
it decide the whole fleet again (``placement.carry``: "a change the whole fleet reads
starts from nothing") and the leader's decision memo misses. With thousands of
clusters some latency moves on every cycle, so every cycle would be a full plan.

So the leader holds each measured latency (a cluster's sustained latency to a region
or a cluster, ``kb`` state) at the value it last passed to the planner, and passes a
new one when:

* it crosses a latency envelope of the target some component's goals set (whether a
  goal is met must never wait);
* it moved by more than ``HoldBand`` (a tenth of the held value, at least a
  millisecond): a real change of route or load, not jitter;
* the pair is new, or is gone;
* the cycle plans afresh anyway (rescheduling, a new leader, provisioning, an
  operator's request): every held value is refreshed, so a slow drift inside the band
  reaches the planner at least once per rescheduling interval, as the rules that act
  on time alone do (``lead.memo``).

The hold is the leader's own: a new leader starts from the measurements as they are.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from qonnect_gitops.model import Goals, Observed
from qonnect_gitops.model.observed import ObservedLatency

Pair = tuple[str, str]  # (from, to)


def latency_envelopes(goals: Goals) -> dict[str, list[float]]:
    """Per region, every latency envelope (ms) some component's goals set, sorted."""
    out: dict[str, set[float]] = {}
    for component in goals.components():
        for goal in component.qos.latency:
            out.setdefault(goal.region, set()).add(float(goal.max_ms))
    return {region: sorted(values) for region, values in out.items()}


def envelopes_broken(envelopes: Mapping[str, Sequence[float]], region: str, ms: float) -> int:
    """How many of ``region``'s latency envelopes (sorted, ms) a latency of ``ms`` breaks:
    two latencies with the same count meet and break the same goals."""
    return bisect.bisect_left(envelopes.get(region, ()), ms)


@dataclass(frozen=True)
class HoldBand:
    """How far a measurement may move from the held value and still be held."""

    relative: float = 0.10
    absolute_ms: float = 1.0

    def holds(self, held_ms: float, measured_ms: float) -> bool:
        """Whether ``measured_ms`` is close enough to ``held_ms`` to keep ``held_ms``."""
        return abs(measured_ms - held_ms) <= max(self.absolute_ms, self.relative * held_ms)


def held_latencies(held: Mapping[Pair, ObservedLatency], measured: Sequence[ObservedLatency],
                   envelopes: Mapping[str, Sequence[float]], band: HoldBand) -> tuple[ObservedLatency, ...]:
    """The latencies to plan with: each measured pair at its held value while ``band``
    holds it and no envelope of its region end (sorted, ms) lies between the two values;
    otherwise at the measured value. Pairs not measured are dropped (see the module
    docstring)."""
    out: list[ObservedLatency] = []
    for lat in measured:
        old = held.get((lat.from_, lat.to))
        if old is not None and old.ms != lat.ms and band.holds(old.ms, lat.ms):
            # Agents measure from their cluster to a region; either end may be the region.
            region = lat.to if lat.to in envelopes else lat.from_
            if envelopes_broken(envelopes, region, old.ms) == envelopes_broken(envelopes, region, lat.ms):
                out.append(old)
                continue
        out.append(lat)
    return tuple(out)


@dataclass
class LatencyHold:
    """The leader's held latencies between cycles (``held_latencies``)."""

    band: HoldBand = field(default_factory=HoldBand)
    _held: dict[Pair, ObservedLatency] = field(default_factory=dict)

    def apply(self, observed: Observed, envelopes: Mapping[str, Sequence[float]]) -> Observed:
        """``observed`` with its latencies held; remembers what it passed on."""
        latencies = held_latencies(self._held, observed.latencies, envelopes, self.band)
        self._held = {(lat.from_, lat.to): lat for lat in latencies}
        if latencies == observed.latencies:
            return observed
        return observed.model_copy(update={"latencies": latencies})

    def refresh(self) -> None:
        """Pass every measurement as it is next cycle."""
        self._held.clear()
