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

import heapq
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from qonnect_gitops.model.goals import Component
from qonnect_gitops.placement.capacity import Ledger, Take
from qonnect_gitops.placement.fleet import ClusterLatency

EPSILON = 1e-9
CANDIDATES = 6  # best clusters by static score tried per replica, plus neighbours' clusters
GROUP_SIZE = 6  # components moved together at most
SWAP_PARTNERS = 8  # components on a full cluster tried for a swap or an ejection


@dataclass
class Movable:
    """One freshly placed component, as the local search sees it."""

    component: Component
    replicas: int
    target: dict[int, int]  # cluster -> replicas, changed in place
    taken: list[Take]  # what it holds in the ledger
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
    latency: ClusterLatency,
    scale: float,
) -> float:
    """Closeness cost of caller -> callee: each caller replica to the nearest callee."""
    src = placement.get(caller)
    dst = placement.get(callee)
    if not src or not dst:
        return 0.0
    n = max(replicas(caller), 1)
    if len(dst) == 1:
        row = latency[next(iter(dst))]  # symmetric matrix: a row is a column
        cost = sum(k * row[a] for a, k in src.items())
    else:
        targets = sorted(dst)
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
    latency: ClusterLatency,
    scale: float,
) -> float:
    """The terms of the objective that involve one component, were it placed at
    ``target`` (the shared ``placement`` map is restored before returning)."""
    saved = placement.get(key)
    placement[key] = target  # type: ignore[assignment]  # read only while evaluating
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
        latency: ClusterLatency,
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
        for m in self.movables:
            # The shared map holds each movable's own target dict: moves update it in place.
            self.placement[m.key] = m.target
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

    def _release_one(self, m: Movable, cluster: int) -> Take:
        for i, take in enumerate(m.taken):
            if take.cluster == cluster:
                if take.replicas == 1:
                    del m.taken[i]
                else:
                    m.taken[i] = Take(take.cluster, take.segment, take.node, take.replicas - 1)
                one = Take(take.cluster, take.segment, take.node, 1)
                self.ledger.release([one], m.component.cpu, m.component.memory)
                return one
        raise ValueError("no recorded replica on that cluster")

    def _take_one(self, m: Movable, cluster: int) -> bool:
        c = m.component
        return self.ledger.take(cluster, c.cpu, c.memory, c.architectures, 1, m.taken) == 1

    def _restore(self, m: Movable, released: Take) -> None:
        """Take back exactly what a release gave up (same node, same count)."""
        self.ledger.restore(released, m.component.cpu, m.component.memory)
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

    def try_swap(self, m: Movable, src: int, dst: int, eject: bool) -> str | None:
        """Make room for one replica of m on dst by moving one replica of another fresh
        component from dst, either into m's place on src (a swap) or to a cluster of
        its own choice with room (an ejection, tried when ``eject``: the move alone
        would pay but dst is full); returns the other component when that lowers the
        objective."""
        if not self._availability_ok(m, src, dst):
            return None
        # A busy cluster may hold hundreds of components: try those that lose least by
        # leaving it (by static score towards src) first, and only a few of them.
        by_key = self.by_key
        partners = heapq.nsmallest(  # as sorted(...)[:SWAP_PARTNERS], without sorting them all
            SWAP_PARTNERS, self.on.get(dst, ()),
            key=lambda k: (float(by_key[k].static[src] - by_key[k].static[dst]), k),
        )
        for other_key in partners:
            other = self.by_key[other_key]
            oc = other.component
            if other is m or dst not in other.target or oc.qos.availability.spread or oc.kind == "DaemonSet":
                continue
            if dst in other.pinned:
                places = [other.preferred] if other.preferred is not None else []
            else:
                places = [src] + ([c for c in self.candidates(other) if c != src] if eject else [])
            for place in places:
                if place == dst or not other.allowed[place] or not self._availability_ok(other, dst, place):
                    continue
                self.evaluations += 1
                before = self.group_cost([m, other])
                self._shift(m, src, dst)
                self._shift(other, dst, place)
                after = self.group_cost([m, other])
                if after < before - EPSILON:
                    mine = self._release_one(m, src)
                    theirs = self._release_one(other, dst)
                    if self._take_one(m, dst):
                        if self._take_one(other, place):
                            return other_key
                        self._release_one(m, dst)
                    self._restore(other, theirs)
                    self._restore(m, mine)
                self._shift(other, place, dst)
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
                        other = self.try_swap(m, src, dst, eject=outcome == "full")
                        if other is not None:
                            changed.update((c.key, other))
                            improved = moved = True
                            break
                        # Components that talk to each other may only pay off moving
                        # together: each alone would lose its closeness to the others.
                        group = self.try_group(m, src, dst)
                        if group:
                            changed.update(group)
                            improved = moved = True
                            break
                    if moved:
                        break
            if not improved:
                break
        return changed

    def group_of(self, m: Movable, src: int) -> list[Movable]:
        """m and the fresh components it talks to (transitively) that run only on src,
        up to GROUP_SIZE of them, in a fixed order."""
        group = [m]
        seen = {m.key}
        for member in group:
            if len(group) >= GROUP_SIZE:
                break
            near = (*self.calls.get(member.key, ()), *self.callers.get(member.key, ()))
            for key in sorted(set(near)):
                other = self.by_key.get(key)
                if other is None or key in seen or set(other.target) != {src}:
                    continue
                c = other.component
                if c.kind == "DaemonSet" or c.qos.availability.spread or src in other.pinned:
                    continue
                seen.add(key)
                group.append(other)
                if len(group) >= GROUP_SIZE:
                    break
        return group

    def group_cost(self, group: list[Movable]) -> float:
        """Static terms of the group plus every closeness term touching it, once each."""
        keys = {g.key for g in group}
        total = 0.0
        pairs: set[tuple[str, str]] = set()
        for g in group:
            total += sum(k * float(g.static[a]) for a, k in g.target.items()) / max(g.replicas, 1)
            pairs.update((g.key, j) for j in self.calls.get(g.key, ()))
            pairs.update((k, g.key) for k in self.callers.get(g.key, ()))
        for caller, callee in sorted(pairs):
            if caller in keys or callee in keys:
                total += pair_cost(self.placement, caller, callee, self.replicas, self.latency, self.scale)
        return total

    def try_group(self, m: Movable, src: int, dst: int) -> list[str]:
        """Move m and its co-located neighbours from src to dst together if that pays."""
        if set(m.target) != {src} or src in m.pinned:
            return []
        group = self.group_of(m, src)
        if len(group) < 2 or not all(g.allowed[dst] for g in group):
            return []
        self.evaluations += 1
        before = self.group_cost(group)
        saved = [(g, dict(g.target)) for g in group]
        for g in group:
            g.target.clear()
            g.target[dst] = g.replicas
        after = self.group_cost(group)
        if after < before - EPSILON:
            released = []
            for g, _ in saved:
                released.append((g, list(g.taken)))
                self.ledger.release(g.taken, g.component.cpu, g.component.memory)
            ok = True
            for g in group:
                c = g.component
                if self.ledger.take(dst, c.cpu, c.memory, c.architectures, g.replicas, g.taken) != g.replicas:
                    ok = False
                    break
            if ok:
                for g, old in saved:
                    for a in old:
                        self.on[a].discard(g.key)
                    self.on.setdefault(dst, set()).add(g.key)
                return [g.key for g in group]
            for g in group:  # roll back: give dst back, put the old nodes back exactly
                self.ledger.release(g.taken, g.component.cpu, g.component.memory)
            for g, records in released:
                for record in records:
                    self._restore(g, record)
        for g, old in saved:
            g.target.clear()
            g.target.update(old)
        return []

    def make_room(self, needy: Component, cluster: int, limit: int) -> str | None:
        """Move one replica of a fresh component off ``cluster`` to another cluster that
        has room, so that one replica of ``needy`` fits there; returns who moved. Tried
        in a fixed order: components that lose least by leaving first, their best
        other clusters first; at most ``limit`` evaluated moves."""
        keys = sorted(
            self.on.get(cluster, ()),
            key=lambda k: (float(self.by_key[k].static[cluster]) * -1.0, k),
        )
        for key in keys[:SWAP_PARTNERS]:
            other = self.by_key[key]
            oc = other.component
            if cluster in other.pinned or oc.kind == "DaemonSet" or oc.qos.availability.spread:
                continue
            for place in self.candidates(other):
                if limit <= 0:
                    return None
                if place == cluster or not self._availability_ok(other, cluster, place):
                    continue
                limit -= 1
                self.evaluations += 1
                released = self._release_one(other, cluster)
                if self.ledger.fits(cluster, needy.cpu, needy.memory, needy.architectures, 1) and self._take_one(other, place):
                    self._shift(other, cluster, place)
                    return key
                self._restore(other, released)
        return None
