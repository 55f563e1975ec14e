"""Local search over the replicas placed from scratch this cycle.

Greedy placement decides one component at a time: capacity goes to whoever comes first
and a component cannot know where the components it talks to will land. This step
revisits those decisions with the exact objective (see ``objective.py``): it moves one
replica to another cluster, or swaps two replicas of different components between
their clusters, whenever that lowers the objective, within the same filters, node
capacity and availability rules. Components that were already running are never
touched here: moving them is for the stability rules to decide.

The work is bounded (``budget`` evaluated moves per cycle) so a plan of a huge fleet
stays fast; the order of evaluation is fixed, so results stay deterministic.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from qonnect_gitops.model.goals import Component
from qonnect_gitops.placement.capacity import Ledger

EPSILON = 1e-9
CANDIDATES = 6  # best clusters by static score tried per replica, plus neighbours' clusters


@dataclass
class Movable:
    """One freshly placed component, as the local search sees it."""

    component: Component
    replicas: int
    target: dict[int, int]  # cluster -> replicas, changed in place
    taken: list[tuple[int, int, int]]  # (cluster, node, replicas) held in the ledger
    static: np.ndarray  # static score per cluster
    allowed: np.ndarray  # passes every filter but capacity
    pinned: frozenset[int] = frozenset()  # clusters the offloading/bursting rules chose
    preferred: int | None = None  # the best cluster ignoring capacity
    key: str = ""  # app/name

    def __post_init__(self) -> None:
        self.key = self.component.key


def pair_cost(
    placement: Mapping[str, Mapping[int, int]],
    caller: str,
    callee: str,
    replicas: Callable[[str], int],
    latency: np.ndarray,
    scale: float,
) -> float:
    """Closeness cost of caller -> callee: each caller replica to the nearest callee."""
    src = placement.get(caller)
    dst = placement.get(callee)
    if not src or not dst:
        return 0.0
    n = max(replicas(caller), 1)
    targets = sorted(dst)
    if len(targets) == 1:
        t = targets[0]
        cost = sum(k * latency[a, t] for a, k in src.items())
    else:
        cost = sum(k * latency[a, targets].min() for a, k in src.items())
    return float(cost) * scale / n


def local_cost(
    key: str,
    target: Mapping[int, int],
    replicas: int,
    static: np.ndarray,
    placement: dict[str, dict[int, int]],
    calls: Mapping[str, Sequence[str]],
    callers: Mapping[str, Sequence[str]],
    replicas_of: Callable[[str], int],
    latency: np.ndarray,
    scale: float,
) -> float:
    """The terms of the objective that involve one component, were it placed at
    ``target`` (the shared ``placement`` map is restored before returning)."""
    saved = placement.get(key)
    placement[key] = dict(target)
    try:
        total = sum(k * float(static[a]) for a, k in target.items()) / max(replicas, 1)
        total += sum(pair_cost(placement, key, j, replicas_of, latency, scale) for j in calls.get(key, ()))
        total += sum(pair_cost(placement, k, key, replicas_of, latency, scale) for k in callers.get(key, ()))
        return total
    finally:
        if saved is None:
            del placement[key]
        else:
            placement[key] = saved


class Search:
    """The objective's terms around each component, and the moves that improve them."""

    def __init__(
        self,
        movables: Sequence[Movable],
        placement: dict[str, dict[int, int]],
        calls: Mapping[str, Sequence[str]],
        callers: Mapping[str, Sequence[str]],
        replicas: Callable[[str], int],
        latency: np.ndarray,
        norm: float,
        weight: float,
        ledger: Ledger,
    ) -> None:
        self.movables = list(movables)
        self.placement = placement  # every component's clusters (shared with the planner)
        self.calls = calls
        self.callers = callers
        self.replicas = replicas
        self.latency = latency
        self.scale = weight / norm
        self.ledger = ledger
        self.by_key = {m.key: m for m in self.movables}
        self.on: dict[int, set[str]] = {}  # cluster -> fresh components with replicas there
        for m in self.movables:
            for a in m.target:
                self.on.setdefault(a, set()).add(m.key)
        self.evaluations = 0
        self.best_cache: dict[tuple[int, int], list[int]] = {}

    # ----- the objective around one component -------------------------------------------

    def local(self, m: Movable) -> float:
        """Every term of the objective that involves this component."""
        return local_cost(
            m.key, m.target, m.replicas, m.static, self.placement,
            self.calls, self.callers, self.replicas, self.latency, self.scale,
        )

    # ----- moves ------------------------------------------------------------------------

    def _shift(self, m: Movable, src: int, dst: int) -> None:
        key = m.key
        m.target[src] -= 1
        if m.target[src] == 0:
            del m.target[src]
            self.on[src].discard(key)
        m.target[dst] = m.target.get(dst, 0) + 1
        self.on.setdefault(dst, set()).add(key)
        self.placement[m.key] = dict(m.target)

    def _release_one(self, m: Movable, cluster: int) -> tuple[int, int, int]:
        for i, (c, node, k) in enumerate(m.taken):
            if c == cluster:
                if k == 1:
                    del m.taken[i]
                else:
                    m.taken[i] = (c, node, k - 1)
                one = (c, node, 1)
                self.ledger.release([one], m.component.cpu, m.component.memory)
                return one
        raise ValueError("no recorded replica on that cluster")

    def _take_one(self, m: Movable, cluster: int) -> bool:
        c = m.component
        return self.ledger.take(cluster, c.cpu, c.memory, c.architectures, 1, m.taken) == 1

    def _restore(self, m: Movable, released: tuple[int, int, int]) -> None:
        cluster, node, _ = released
        c = m.component
        n = self.ledger.nodes[cluster][node]
        n[0] -= c.cpu
        n[1] -= c.memory
        n[2] -= 1
        self.ledger.free_cpu[cluster] -= c.cpu
        self.ledger.free_memory[cluster] -= c.memory
        m.taken.append(released)

    def _availability_ok(self, m: Movable, src: int, dst: int) -> bool:
        clusters = len(m.target) - (1 if m.target[src] == 1 else 0) + (0 if dst in m.target else 1)
        return clusters >= min(m.component.qos.availability.min_clusters, m.replicas)

    def candidates(self, m: Movable) -> list[int]:
        # The best clusters by static score are shared by every component of a class.
        cache_key = (id(m.static), id(m.allowed))
        best = self.best_cache.get(cache_key)
        if best is None:
            allowed = np.flatnonzero(m.allowed)
            scores = m.static[allowed]
            k = min(CANDIDATES, allowed.size)
            best = self.best_cache[cache_key] = allowed[np.lexsort((allowed, scores))[:k]].tolist()
        near: set[int] = set()
        key = m.key
        for other in (*self.calls.get(key, ()), *self.callers.get(key, ())):
            near.update(self.placement.get(other, {}))
        return sorted(set(best) | {c for c in near if m.allowed[c]})

    def try_relocate(self, m: Movable, src: int, dst: int, before: float) -> str:
        """"moved", "worse" (the objective would not improve) or "full" (no room)."""
        if not self._availability_ok(m, src, dst):
            return "worse"
        self.evaluations += 1
        self._shift(m, src, dst)
        after = self.local(m)
        outcome = "worse"
        if after < before - EPSILON:
            released = self._release_one(m, src)
            if self._take_one(m, dst):
                return "moved"
            self._restore(m, released)
            outcome = "full"
        self._shift(m, dst, src)
        return outcome

    def try_swap(self, m: Movable, src: int, dst: int) -> str | None:
        """Swap one replica of m on src with one of another fresh component on dst;
        returns the other component when it helped."""
        for other_key in sorted(self.on.get(dst, ())):
            other = self.by_key[other_key]
            if other is m or dst not in other.target or other.component.qos.availability.spread:
                continue
            if dst in other.pinned and src != other.preferred:
                continue
            if other.component.kind == "DaemonSet" or not other.allowed[src]:
                continue
            if not self._availability_ok(m, src, dst) or not self._availability_ok(other, dst, src):
                continue
            self.evaluations += 1
            before = self.local(m) + self.local(other)
            self._shift(m, src, dst)
            self._shift(other, dst, src)
            after = self.local(m) + self.local(other)
            if after < before - EPSILON:
                mine = self._release_one(m, src)
                theirs = self._release_one(other, dst)
                if self._take_one(m, dst):
                    if self._take_one(other, src):
                        return other_key
                    self._release_one(m, dst)
                self._restore(other, theirs)
                self._restore(m, mine)
            self._shift(other, src, dst)
            self._shift(m, dst, src)
        return None

    def run(self, budget: int, passes: int) -> set[str]:
        """Improve until no move helps, ``passes`` sweeps are done or the budget is spent;
        returns the components that changed."""
        changed: set[str] = set()
        for _ in range(passes):
            improved = False
            for m in self.movables:
                c = m.component
                if c.kind == "DaemonSet" or c.qos.availability.spread:
                    continue
                for src in sorted(m.target, key=lambda a: (-float(m.static[a]), a)):
                    if self.evaluations >= budget:
                        return changed
                    moved = False
                    # Replicas the offloading/bursting rules placed may only go back to
                    # the preferred cluster, e.g. once a swap made room there.
                    pinned = src in m.pinned
                    targets = [m.preferred] if pinned and m.preferred is not None else [] if pinned else self.candidates(m)
                    before = self.local(m)
                    for dst in targets:
                        if dst == src or src not in m.target:
                            continue
                        outcome = self.try_relocate(m, src, dst, before)
                        if outcome == "moved":
                            changed.add(c.key)
                            improved = moved = True
                            break
                        # A swap can pay even where the move alone would not: the other
                        # component may gain from the exchange too.
                        other = self.try_swap(m, src, dst)
                        if other is not None:
                            changed.update((c.key, other))
                            improved = moved = True
                            break
                    if moved:
                        break
            if not improved:
                break
        return changed
