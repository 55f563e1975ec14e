"""The leader holds measured latencies through jitter and never across a goal's envelope."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from qonnect_gitops.lead.latency_hold import HoldBand, LatencyHold, held_latencies
from qonnect_gitops.model.observed import ObservedLatency, empty_observation

NOW = datetime(2026, 12, 1, tzinfo=UTC)
ENVELOPES = {"eu": [20.0, 50.0], "us": [100.0]}


def lat(src: str, dst: str, ms: float) -> ObservedLatency:
    return ObservedLatency.model_validate({"from": src, "to": dst, "ms": ms})


def observed(*latencies: ObservedLatency):  # type: ignore[no-untyped-def]
    return empty_observation(NOW).model_copy(update={"latencies": tuple(latencies)})


def test_jitter_is_held_a_real_change_and_a_crossed_envelope_pass() -> None:
    hold = LatencyHold()
    first = hold.apply(observed(lat("a", "eu", 30.0), lat("b", "us", 60.0)), ENVELOPES)
    assert [x.ms for x in first.latencies] == [30.0, 60.0]
    jitter = hold.apply(observed(lat("a", "eu", 31.5), lat("b", "us", 57.0)), ENVELOPES)
    assert [x.ms for x in jitter.latencies] == [30.0, 60.0]
    # The planner's latency table is equal, value for value, to the last cycle's.
    assert jitter.latencies == first.latencies
    moved = hold.apply(observed(lat("a", "eu", 36.0), lat("b", "us", 57.0)), ENVELOPES)
    assert [x.ms for x in moved.latencies] == [36.0, 60.0]  # 20 % off: passed
    # 36 -> 49 is held by no band of 10 %; 36 -> 38 is, and crosses nothing.
    assert [x.ms for x in hold.apply(observed(lat("a", "eu", 38.0)), ENVELOPES).latencies] == [36.0]


def test_a_crossed_envelope_passes_at_once_even_inside_the_band() -> None:
    hold = LatencyHold()
    hold.apply(observed(lat("a", "eu", 49.0)), ENVELOPES)
    assert [x.ms for x in hold.apply(observed(lat("a", "eu", 50.0)), ENVELOPES).latencies] == [49.0]  # still met
    assert [x.ms for x in hold.apply(observed(lat("a", "eu", 51.0)), ENVELOPES).latencies] == [51.0]  # broken
    assert [x.ms for x in hold.apply(observed(lat("a", "eu", 49.5)), ENVELOPES).latencies] == [49.5]  # met again


def test_new_and_gone_pairs_and_a_refresh_pass_the_measurement() -> None:
    hold = LatencyHold()
    hold.apply(observed(lat("a", "eu", 30.0)), ENVELOPES)
    out = hold.apply(observed(lat("a", "eu", 30.5), lat("c", "eu", 12.0)), ENVELOPES)
    assert [(x.from_, x.ms) for x in out.latencies] == [("a", 30.0), ("c", 12.0)]
    assert hold.apply(observed(lat("c", "eu", 12.5)), ENVELOPES).latencies == (lat("c", "eu", 12.0),)
    # "a" was gone for a cycle: its next measurement is taken as it is.
    assert hold.apply(observed(lat("a", "eu", 30.5)), ENVELOPES).latencies == (lat("a", "eu", 30.5),)
    hold.refresh()
    assert hold.apply(observed(lat("a", "eu", 31.0)), ENVELOPES).latencies == (lat("a", "eu", 31.0),)


def test_small_latencies_get_the_absolute_band() -> None:
    band = HoldBand()
    assert band.holds(2.0, 2.9) and not band.holds(2.0, 3.1)
    assert band.holds(300.0, 329.0) and not band.holds(300.0, 331.0)


values = st.floats(min_value=0.0, max_value=400.0, allow_nan=False)


@given(st.lists(values, min_size=1, max_size=40), st.lists(values, max_size=4))
def test_the_planner_sees_every_envelope_on_the_side_it_was_measured(series: list[float],
                                                                    limits: list[float]) -> None:
    envelopes = {"eu": sorted(limits)}
    band = HoldBand()
    held: dict[tuple[str, str], ObservedLatency] = {}
    for ms in series:
        (out,) = held_latencies(held, (lat("a", "eu", ms),), envelopes, band)
        assert all((out.ms > e) == (ms > e) for e in limits)  # every goal judged as measured
        assert out.ms == ms or band.holds(out.ms, ms)
        held = {("a", "eu"): out}


def test_the_region_may_be_either_end_of_a_measurement() -> None:
    hold = LatencyHold()
    hold.apply(observed(lat("eu", "a", 49.0)), ENVELOPES)
    assert [x.ms for x in hold.apply(observed(lat("eu", "a", 51.0)), ENVELOPES).latencies] == [51.0]
