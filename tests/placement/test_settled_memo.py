"""The ledger's settlement memo: a cluster charged the very same running replica groups
as before finds its settlement by identity (``Ledger.settled_last``), and every way of
finding it settles the cluster exactly as a ledger without any memo does."""

from __future__ import annotations

from qonnect_gitops.placement.capacity import Ledger, Running, Settled
from qonnect_gitops.placement.fleet import build_static
from tests.placement.builders import cluster, goals, observed

ARCHS = frozenset({"amd64"})


def _fleet() -> tuple[object, object]:
    g = goals([cluster("a", cpu="4", memory="8Gi", count=3), cluster("b", cpu="2", memory="4Gi", count=2)], [])
    return g, build_static(g)


def _state(ledger: Ledger) -> tuple[object, ...]:
    """What a settlement decides: free totals, nodes, and how many replicas of each fit."""
    return (
        ledger.free_cpu.tolist(),
        ledger.free_memory.tolist(),
        [[(s.nodes, None if s.pool is None else (s.pool.count, s.pool.cpu)) for s in ledger.segments[i]]
         for i in range(ledger.n)],
        sorted(ledger.fitted.items()),
    )


def _settled(g: object, static: object, runs: dict[int, list[Running]], settled: dict | None = None,
             last: dict | None = None) -> Ledger:
    ledger = Ledger(static, g, observed(), settled, last)  # type: ignore[arg-type]
    for i, rs in runs.items():
        ledger.occupy_all(i, rs)
    ledger.settle_all()
    return ledger


def _runs() -> dict[int, list[Running]]:
    return {
        0: [Running("shop/web", 1500, 2**30, ARCHS, 3), Running("shop/db", 3000, 2**31, ARCHS, 2)],
        1: [Running("shop/cache", 1000, 2**29, ARCHS, 5)],
    }


def test_the_same_groups_again_are_found_by_identity_and_settle_as_without_a_memo() -> None:
    g, static = _fleet()
    runs = _runs()
    settled: dict = {}
    last: dict = {}
    first = _settled(g, static, runs, settled, last)
    assert set(last) == {0, 1}
    stored = {i: entry[1] for i, entry in last.items()}
    again = _settled(g, static, runs, settled, last)
    # Found, not settled anew: the entries are the ones stored the first time.
    assert {i: entry[1] for i, entry in last.items()} == stored
    assert all(last[i][1] is stored[i] for i in stored)
    assert _state(again) == _state(first) == _state(_settled(g, static, runs))


def test_equal_new_groups_are_found_by_content_and_remembered_by_identity_from_then_on() -> None:
    g, static = _fleet()
    settled: dict = {}
    last: dict = {}
    _settled(g, static, _runs(), settled, last)
    fresh = _runs()  # equal groups, other objects
    ledger = _settled(g, static, fresh, settled, last)
    assert all(a is b for a, b in zip(last[0][0], fresh[0]))
    assert _state(ledger) == _state(_settled(g, static, fresh))


def test_a_stale_identity_entry_is_not_used_for_other_groups() -> None:
    g, static = _fleet()
    settled: dict = {}
    last: dict = {}
    _settled(g, static, _runs(), settled, last)
    other = {0: [Running("shop/web", 1500, 2**30, ARCHS, 1)], 1: _runs()[1]}
    ledger = _settled(g, static, other, settled, last)
    assert _state(ledger) == _state(_settled(g, static, other))
    assert last[0][0] == tuple(other[0])


def test_clearing_the_bounded_memo_clears_the_identity_entries_with_it() -> None:
    g, static = _fleet()
    settled: dict = {}
    last: dict = {}
    _settled(g, static, _runs(), settled, last)
    # Fill the memo past its bound (2 x clusters + 16) with settlements of nothing that
    # runs: the next settlement anew clears both.
    for k in range(2 * 2 + 17):
        settled[(0, (Running(f"x/{k}", 1, 1, ARCHS, 1),))] = Settled((), 0.0, 0.0, {}, {})
    other = {0: [Running("shop/other", 100, 2**20, ARCHS, 1)]}
    ledger = _settled(g, static, other, settled, last)
    assert set(last) == {0}
    assert len(settled) == 1
    assert _state(ledger) == _state(_settled(g, static, other))
