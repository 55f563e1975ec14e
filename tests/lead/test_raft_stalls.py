"""A Raft node whose own thread stalled (a long collection, the process not scheduled,
another thread holding the interpreter) judges its peers by what they sent during the
stall, not by the silence it caused itself: a stalled follower starts no election while
the leader's heartbeats wait in its socket, and a stalled leader does not step down
while its followers' answers wait in its own."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from qonnect_gitops.lead.raft.node import RaftNode
from qonnect_gitops.lead.raft.secret import RaftSecret
from qonnect_gitops.lead.raft.timing import RaftTiming
from tests.ports import free_ports


@contextmanager
def _group(tmp_path: Path, timing: RaftTiming) -> Iterator[list[RaftNode]]:
    """Three in-process Raft nodes on loopback, once one of them leads."""
    addrs = [f"127.0.0.1:{p}" for p in free_ports(3)]
    secret = RaftSecret.generate()  # the group's: every node seals and opens with it
    nodes = [RaftNode(addr, addrs, tmp_path / f"n{i}", timing, secret=secret) for i, addr in enumerate(addrs)]
    try:
        deadline = time.monotonic() + 20
        while sum(n.is_leader() for n in nodes) != 1:
            assert time.monotonic() < deadline, "no leader"
            time.sleep(0.05)
        time.sleep(0.5)  # every follower has heard the leader
        yield nodes
    finally:
        for n in nodes:
            n.destroy()


def _stall_once(node: RaftNode, seconds: float) -> threading.Event:
    """Hold ``node``'s Raft thread for ``seconds`` once, between two ticks: where a thread
    back from a poll that found nothing waits for the interpreter lock or for a core,
    and where a stall hurts most (the next tick judges its deadlines before it reads)."""
    done = threading.Event()
    gaps = node.sync.tick_gaps
    mark = gaps.mark

    def stalled_mark() -> float:
        if not done.is_set():
            time.sleep(seconds)
            done.set()
        return mark()

    gaps.mark = stalled_mark  # type: ignore[method-assign]
    return done


def _terms(nodes: list[RaftNode]) -> list[int]:
    return [n.term() for n in nodes]


def test_a_follower_stalled_past_its_election_timeout_starts_no_election(tmp_path: Path) -> None:
    timing = RaftTiming()  # the defaults: elections 0.4-1.0 s
    with _group(tmp_path, timing) as nodes:
        leader = next(n for n in nodes if n.is_leader())
        follower = next(n for n in nodes if n is not leader)
        before = _terms(nodes)
        # Past the longest election timeout, short of the connection timeout (2 s).
        assert _stall_once(follower, 1.5).wait(10)
        time.sleep(1.0)  # ticks after the stall: where the old tick started its election
        assert _terms(nodes) == before
        assert leader.is_leader()
        assert follower.sync.caught_up >= 1


def test_a_leader_stalled_past_its_fallback_keeps_leading(tmp_path: Path) -> None:
    # Elections slower than the stall, so the followers wait it out; the fallback shorter.
    timing = RaftTiming(election_min=2.0, election_max=3.0, leader_fallback=0.5)
    with _group(tmp_path, timing) as nodes:
        leader = next(n for n in nodes if n.is_leader())
        before = _terms(nodes)
        assert _stall_once(leader, 1.0).wait(10)
        time.sleep(0.5)
        assert leader.raft_state() == "leader"
        assert _terms(nodes) == before


def test_an_isolated_leader_whose_every_tick_is_late_still_steps_down(tmp_path: Path) -> None:
    timing = RaftTiming()  # fallback 0.36 s
    with _group(tmp_path, timing) as nodes:
        leader = next(n for n in nodes if n.is_leader())
        gaps = leader.sync.tick_gaps
        mark = gaps.mark

        def late_mark() -> float:
            time.sleep(0.15)  # every tick a stall past the catch-up threshold (0.1 s)
            return mark()

        gaps.mark = late_mark  # type: ignore[method-assign]
        for n in nodes:
            if n is not leader:
                n.destroy()  # nobody answers any more
        deadline = time.monotonic() + 20
        while leader.raft_state() == "leader":
            # Forgiving every stall moved the answer times along with the clock: it led on alone.
            assert time.monotonic() < deadline, "an isolated leader kept leading"
            time.sleep(0.05)
        assert leader.sync.caught_up >= 1
