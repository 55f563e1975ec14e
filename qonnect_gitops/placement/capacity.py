"""Free capacity per node, consumed as replicas are placed.

A replica needs one node of a supported architecture with enough free CPU, memory and
pod slots, and the cluster's total free capacity must cover it too (an observed cluster
may report only a total). Nodes are tried in a fixed order (first fit) so the result
never depends on anything but the inputs.

Identical nodes are a pool with a count: a declared shape of a million nodes is one
``Pool`` until replicas land on it, and then only the nodes that took replicas are
split off it (first fit fills nodes in order, so the untouched ones stay identical).
The work per cluster therefore follows the replicas placed, never the node count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from qonnect_gitops.model.goals import Goals
from qonnect_gitops.model.observed import Observed
from qonnect_gitops.placement.fleet import StaticFleet

UNLIMITED = 1 << 62

# A node: [free cpu, free memory, free pod slots, arch] (mutable: consumed in place).
Node = list[Any]


@dataclass(slots=True)
class Pool:
    """``count`` identical nodes that no replica was put on yet in this cycle."""

    cpu: int
    memory: int
    pods: int
    arch: str
    count: int

    def per_node(self, cpu: int, memory: int) -> int:
        """Replicas of this size one node of the pool holds."""
        return min(
            self.cpu // cpu if cpu else UNLIMITED,
            self.memory // memory if memory else UNLIMITED,
            self.pods,
        )


@dataclass(slots=True)
class Segment:
    """One declared node shape (or a cluster's observed nodes): the nodes replicas were
    put on, in first-fit order, followed by the untouched rest as a pool."""

    nodes: list[Node]
    pool: Pool | None = None

    def copy(self) -> Segment:
        pool = self.pool
        return Segment(
            [node[:] for node in self.nodes],
            None if pool is None else Pool(pool.cpu, pool.memory, pool.pods, pool.arch, pool.count),
        )


class Take(NamedTuple):
    """Replicas charged to one node, so that they can be given back exactly (a named
    tuple: a large plan creates tens of thousands)."""

    cluster: int
    segment: int
    node: int
    replicas: int


class Running(NamedTuple):
    """Replicas of a component that run on a cluster now, to be charged at today's size."""

    key: str
    cpu: int
    memory: int
    archs: frozenset[str]
    replicas: int
    # The size they run at when it differs from today's (the goals changed it), else None.
    old_cpu: int | None = None
    old_memory: int | None = None


def settle_order(r: Running) -> tuple[int, bool, int, int, str]:
    """The order running replicas are put back on a cluster's nodes: those that run on
    fewer architectures first (a multi-arch replica packed first would take the only
    node an arm64- or amd64-only one can use, which the planner never did), then those
    whose size the goals did not change (a resize must not evict a neighbour that did not
    change: the resized replicas are the ones that may no longer fit), then biggest
    first (first fit decreasing packs the most)."""
    return (len(r.archs), r.old_cpu is not None, -r.cpu, -r.memory, r.key)


@dataclass(frozen=True)
class Settled:
    """A declared cluster after its running replicas were put on its nodes."""

    segments: tuple[Segment, ...]
    free_cpu: float
    free_memory: float
    fitted: dict[tuple[int, str], int]
    takes: dict[tuple[int, str], tuple[Take, ...]]  # the nodes each component's replicas were put on


@dataclass(frozen=True)
class DeclaredCapacity:
    """What a fleet's declared nodes offer, per cluster, before anything runs: the same
    for every cycle of the same ``StaticFleet`` (kept in its ``fleet_memo``), so a cycle
    starts its ledger by copying arrays instead of walking every cluster's nodes. Read
    only: a ledger copies what it changes."""

    pools: tuple[tuple[tuple[int, int, int, str, int], ...], ...]  # per cluster: (cpu, memory, pods, arch, count)
    shapes: tuple[tuple[tuple[str, int, int], ...], ...]
    archs: tuple[frozenset[str], ...]
    total_cpu: np.ndarray  # at least 1 (a divisor)
    free_cpu: np.ndarray  # every declared node empty
    free_memory: np.ndarray

    @staticmethod
    def of(static: StaticFleet) -> DeclaredCapacity:
        pools = []
        shapes = []
        archs = []
        n = len(static.clusters)
        total_cpu, free_cpu, free_memory = np.zeros(n), np.zeros(n), np.zeros(n)
        for i, cluster in enumerate(static.clusters):
            nodes = cluster.spec.nodes
            pools.append(tuple((shape.cpu, shape.memory, shape.pods, shape.arch, shape.count) for shape in nodes))
            sizes = {(shape.arch, shape.cpu, shape.memory) for shape in nodes}
            shapes.append(tuple(sorted(sizes)))
            archs.append(frozenset(arch for arch, _, _ in sizes))
            total = sum(shape.cpu * shape.count for shape in nodes)
            total_cpu[i] = max(total, 1)
            free_cpu[i] = total
            free_memory[i] = sum(shape.memory * shape.count for shape in nodes)
        for array in (total_cpu, free_cpu, free_memory):
            array.setflags(write=False)
        return DeclaredCapacity(tuple(pools), tuple(shapes), tuple(archs), total_cpu, free_cpu, free_memory)


class _DeclaredSegments(dict[int, list[Segment]]):
    """A ledger's segments per cluster: a cluster's declared node pools, untouched, are
    made the first time the cycle asks for them (a cycle that looks at few clusters
    does not make ten thousand)."""

    def __init__(self, pools: tuple[tuple[tuple[int, int, int, str, int], ...], ...]) -> None:
        super().__init__()
        self.pools = pools

    def __missing__(self, cluster: int) -> list[Segment]:
        segments = self[cluster] = [Segment([], Pool(*pool)) for pool in self.pools[cluster]]
        return segments


class Ledger:
    """Node-level and cluster-level free capacity of the whole fleet."""

    def __init__(
        self,
        static: StaticFleet,
        goals: Goals,
        observed: Observed,
        settled: dict[tuple[int, tuple[Running, ...]], Settled] | None = None,
        settled_last: dict[int, tuple[tuple[Running, ...], Settled]] | None = None,
        declared: DeclaredCapacity | None = None,
    ) -> None:
        """``declared``: ``DeclaredCapacity.of(static)`` kept from an earlier cycle of the
        same fleet (made anew without it)."""
        n = len(static.names)
        # Settlements of declared clusters from earlier cycles of the same goals: the
        # same running replicas on the same declared nodes settle the same way.
        self.settled = settled if settled is not None else {}
        # Per cluster, the entry of ``settled`` last stored or found for it: a cycle that
        # charges a cluster the very same ``Running`` objects finds it by identity, without
        # hashing every replica group of the fleet (kept in step with ``settled``).
        self.settled_last = settled_last if settled_last is not None else {}
        # Per replica shape (cpu, memory, architectures): clusters where ``fits`` found no
        # room for one replica, until room comes back there (a release, a settlement).
        # Distribution skips them in one vector step instead of asking each again.
        self.full: dict[tuple[int, int, frozenset[str]], np.ndarray] = {}
        # True where the free capacity was observed, i.e. already net of what runs there.
        self.observed_usage = np.zeros(n, dtype=bool)
        # Replicas already running, charged to the cluster totals but not yet to nodes.
        self.pending: dict[int, list[Running]] = {}
        # (cluster, component) -> how many of its running replicas fit at today's size.
        self.fitted: dict[tuple[int, str], int] = {}
        # Per observed cluster: each ready node's allocatable (cpu, memory), in node order.
        self.allocatable: dict[int, list[tuple[int, int]]] = {}
        # Per cluster whose nodes are reported: how many of them are not ready.
        self.not_ready: dict[int, int] = {}
        # Per cluster, (cluster, component) -> the nodes its running replicas were put on
        # when settled, so that replicas given up this cycle (a scale-down) give their room
        # back there. Shared with the settlement memo: replaced, never changed in place.
        self.running_takes: dict[int, dict[tuple[int, str], tuple[Take, ...]]] = {}
        self._shape_table: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None
        self.all_settled = False
        # Counts the times capacity came back anywhere (``_roomier``): between two changes of
        # it free capacity only shrinks, so a cluster once seen without room stays so.
        self.generation = 0
        # Walks of a fleet order (``distribute._walk``): how far the clusters without room
        # for a shape reach from the start, at a generation.
        self.walk_starts: dict[tuple[int, int, int, int, frozenset[str]], tuple[object, object, int, int]] = {}
        # Clusters where this cycle took capacity (a take or restore), and where capacity
        # came back (a release), after the set-up charged what runs: elsewhere the ledger
        # is as the cycle found it.
        self.taken = np.zeros(n, dtype=bool)
        self.returned = np.zeros(n, dtype=bool)
        # Observed clusters: what their ready nodes offer in all, and what the placement in
        # force puts there (at today's size). Reports lag behind decisions (replicas a plan
        # put there may not run yet, so they are not in the free capacity reported): the
        # free capacity counted is never more than the first minus the second.
        self.planned_cpu = np.zeros(n)
        self.planned_memory = np.zeros(n)
        self.running_on: dict[int, list[Running]] = {}  # observed clusters: what the plan runs there
        self.segments_observed: set[int] = set()  # clusters whose nodes were reported
        # What the goals declare, the same every cycle of this fleet: copied, and the
        # declared nodes made into segments only for the clusters a cycle looks at.
        base = declared if declared is not None else DeclaredCapacity.of(static)
        self.n = n
        self.segments: dict[int, list[Segment]] = _DeclaredSegments(base.pools)
        # Per cluster: the allocatable (arch, cpu, memory) of each distinct node shape, to
        # tell "no node is ever large enough" from "no node has room left".
        self.shapes = list(base.shapes)
        self.archs = list(base.archs)
        self.total_cpu: np.ndarray = base.total_cpu.copy()
        self.free_cpu: np.ndarray = base.free_cpu.copy()
        self.free_memory: np.ndarray = base.free_memory.copy()
        self.capacity_cpu: np.ndarray = base.free_cpu.copy()
        self.capacity_memory: np.ndarray = base.free_memory.copy()
        index = static.index
        reported = sorted((i, oc) for name, oc in observed.clusters.items() if (i := index.get(name)) is not None)
        for i, oc in reported:
            if oc.nodes is not None:
                ready = [nd for nd in oc.nodes if nd.ready]
                self.segments[i] = [Segment([[nd.free.cpu, nd.free.memory, UNLIMITED, nd.arch] for nd in ready])]
                self.allocatable[i] = [
                    (nd.allocatable.cpu, nd.allocatable.memory) if nd.allocatable else (nd.free.cpu, nd.free.memory)
                    for nd in ready
                ]
                # What the cluster's nodes are (architectures, sizes) does not change while a
                # node is not ready; what they offer now (capacity) does.
                sizes = {(nd.arch, *(
                    (nd.allocatable.cpu, nd.allocatable.memory) if nd.allocatable else (nd.free.cpu, nd.free.memory)
                )) for nd in oc.nodes}
                self.not_ready[i] = len(oc.nodes) - len(ready)
                total = sum((nd.allocatable.cpu if nd.allocatable else nd.free.cpu) for nd in oc.nodes)
                self.observed_usage[i] = True
                self.free_cpu[i] = sum(nd.free.cpu for nd in ready)
                self.free_memory[i] = sum(nd.free.memory for nd in ready)
                self.segments_observed.add(i)
                self.capacity_cpu[i] = sum(c for c, _ in self.allocatable[i])
                self.capacity_memory[i] = sum(m for _, m in self.allocatable[i])
                if sizes:  # an agent that reports no node at all: the declared ones say what they are
                    self.shapes[i] = tuple(sorted(sizes))
                    self.archs[i] = frozenset(arch for arch, _, _ in sizes)
                self.total_cpu[i] = max(total, 1)
            if oc.free is not None:
                self.free_cpu[i], self.free_memory[i] = oc.free.cpu, oc.free.memory
                self.observed_usage[i] = True

    # ----- questions ------------------------------------------------------------------------

    def utilisation(self) -> np.ndarray:
        """Used fraction of each cluster's CPU, in [0, 1]."""
        used: np.ndarray = np.clip(1.0 - self.free_cpu / self.total_cpu, 0.0, 1.0)
        return used

    def holds_vector(self, cpu: int, memory: int, archs: frozenset[str]) -> np.ndarray:
        """Per cluster: whether an empty node of it could hold one replica of this size."""
        if self._shape_table is None:
            rows = [(i, arch, c, m) for i, shapes in enumerate(self.shapes) for arch, c, m in shapes]
            self._shape_table = (
                np.array([r[0] for r in rows], dtype=np.int64),
                np.array([r[1] for r in rows]),
                np.array([r[2] for r in rows], dtype=np.int64),
                np.array([r[3] for r in rows], dtype=np.int64),
            )
        cluster, arch, c, m = self._shape_table
        ok = (c >= cpu) & (m >= memory) & np.isin(arch, sorted(archs))
        return np.bincount(cluster[ok], minlength=len(self.shapes)) > 0

    def fits(self, cluster: int, cpu: int, memory: int, archs: frozenset[str], count: int) -> int:
        """How many of ``count`` replicas fit on the cluster now (without consuming)."""
        if count <= 0:
            return 0
        if cluster in self.pending:
            self._settle(cluster)
        total = self._total_room(cluster, cpu, memory, count)
        if total <= 0:
            self._full(cluster, cpu, memory, archs)
            return 0
        placed = 0
        for segment in self.segments[cluster]:
            for node_cpu, node_mem, pods, arch in segment.nodes:
                if arch not in archs:
                    continue
                k: int = min(
                    total - placed,
                    node_cpu // cpu if cpu else UNLIMITED,
                    node_mem // memory if memory else UNLIMITED,
                    pods,
                )
                if k > 0:
                    placed += k
                    if placed >= total:
                        return placed
            pool = segment.pool
            if pool is not None and pool.count and pool.arch in archs:
                per = pool.per_node(cpu, memory)
                if per > 0:
                    placed += min(total - placed, per * pool.count)
                    if placed >= total:
                        return placed
        if not placed:
            self._full(cluster, cpu, memory, archs)
        return placed

    def full_for(self, cpu: int, memory: int, archs: frozenset[str]) -> np.ndarray | None:
        """Clusters known to have no room for one replica of this shape (read only)."""
        return self.full.get((cpu, memory, archs))

    def _full(self, cluster: int, cpu: int, memory: int, archs: frozenset[str]) -> None:
        vector = self.full.get((cpu, memory, archs))
        if vector is None:
            vector = self.full[(cpu, memory, archs)] = np.zeros(self.n, dtype=bool)
        vector[cluster] = True

    def _roomier(self, cluster: int) -> None:
        """Capacity came back on the cluster: no shape is known not to fit there now."""
        self.generation += 1
        for vector in self.full.values():
            vector[cluster] = False

    # ----- changes ----------------------------------------------------------------------------

    def take(
        self,
        cluster: int,
        cpu: int,
        memory: int,
        archs: frozenset[str],
        count: int,
        record: list[Take] | None = None,
    ) -> int:
        """Consume up to ``count`` replicas on the cluster, first fit; returns how many.
        With ``record``, appends a ``Take`` per node charged so they can be released."""
        total = self.fits(cluster, cpu, memory, archs, count)
        if total:
            self.taken[cluster] = True
        for take in self._first_fit(cluster, cpu, memory, archs, total):
            if record is not None:
                record.append(take)
        self.free_cpu[cluster] -= total * cpu
        self.free_memory[cluster] -= total * memory
        return total

    def release(self, record: list[Take], cpu: int, memory: int) -> None:
        """Give back what ``take`` recorded (and empty the record)."""
        for take in record:
            self._charge(take, cpu, memory, -1)
        record.clear()

    def restore(self, take: Take, cpu: int, memory: int) -> None:
        """Charge exactly the node of a released ``Take`` again (rolling back a release)."""
        self._charge(take, cpu, memory, 1)

    def occupy(self, cluster: int, running: Running) -> None:
        """Account for replicas that already run on a cluster.

        Cluster totals are charged now; the nodes only when something asks about that
        cluster, so a replan that touches few clusters does little work. On a cluster
        whose free capacity was observed the replicas are already counted in it, unless
        the goals changed their size: then they are re-fitted at today's size."""
        if self.observed_usage[cluster]:
            self.planned_cpu[cluster] += running.replicas * running.cpu
            self.planned_memory[cluster] += running.replicas * running.memory
            if running.old_cpu is None:
                self.running_on.setdefault(cluster, []).append(running)
                if cluster not in self.segments_observed:
                    # Only a free total is reported: nothing to check them against.
                    self.fitted[(cluster, running.key)] = running.replicas
                    return
        else:
            self.free_cpu[cluster] -= running.replicas * running.cpu
            self.free_memory[cluster] -= running.replicas * running.memory
        self.pending.setdefault(cluster, []).append(running)

    def occupy_all(self, cluster: int, runs: list[Running], sums: tuple[int, int] | None = None) -> None:
        """``occupy`` for each of ``runs`` in turn (one step per cluster where it can);
        ``sums``: their CPU and memory (replicas x request), when known already."""
        if self.observed_usage[cluster]:
            for r in runs:
                self.occupy(cluster, r)
            return
        if sums is None:
            sums = held(runs)
        # Integral sums: the same float totals as one subtraction per replica group.
        self.free_cpu[cluster] -= sums[0]
        self.free_memory[cluster] -= sums[1]
        self.pending.setdefault(cluster, []).extend(runs)

    def settle_all(self) -> None:
        """Settle every cluster with running replicas (then ``fitted`` is complete), and
        cap the free capacity of observed clusters by what the placement in force puts
        there (see ``planned_cpu``). Once per cycle: a second call only settles what was
        occupied since."""
        if self.all_settled:
            for cluster in sorted(self.pending):
                self._settle(cluster)
            return
        self.all_settled = True
        observed = self.observed_usage
        # A report that does not show yet all the plan in force put on the cluster (the
        # replicas are not scheduled yet, or the report predates them): that share of
        # each component's replicas is put on the reported nodes too, first fit, so that
        # the nodes are not taken for emptier than they will be.
        used_cpu = self.capacity_cpu - self.free_cpu
        used_memory = self.capacity_memory - self.free_memory
        for cluster in np.flatnonzero(observed).tolist():
            share = max(
                (self.planned_cpu[cluster] - used_cpu[cluster]) / self.planned_cpu[cluster]
                if self.planned_cpu[cluster] > 0 else 0.0,
                (self.planned_memory[cluster] - used_memory[cluster]) / self.planned_memory[cluster]
                if self.planned_memory[cluster] > 0 else 0.0,
            )
            if share > 0 and cluster in self.segments_observed:
                for r in sorted(self.running_on.get(cluster, ()), key=settle_order):
                    self._first_fit(cluster, r.cpu, r.memory, r.archs, math.ceil(r.replicas * min(share, 1.0)))
        for cluster in sorted(self.pending):
            self._settle(cluster)
        self.free_cpu[observed] = np.minimum(self.free_cpu, self.capacity_cpu - self.planned_cpu)[observed]
        self.free_memory[observed] = np.minimum(self.free_memory, self.capacity_memory - self.planned_memory)[observed]

    def release_running(self, cluster: int, key: str, cpu: int, memory: int, count: int) -> None:
        """Give back the room of ``count`` running replicas of a component (``key``, charged
        by ``occupy`` at today's size) that the cycle gives up, a scale-down: they leave
        the nodes they were settled on, so the room is usable in this same cycle."""
        if cluster in self.pending:
            self._settle(cluster)
        count = min(count, self.fitted.get((cluster, key), 0))
        if count <= 0:
            return
        self._roomier(cluster)
        self.returned[cluster] = True
        left = count
        here = self.running_takes.get(cluster, {})
        recorded = here.get((cluster, key))
        takes = list(recorded) if recorded is not None else None
        while left > 0 and takes:
            take = takes[-1]
            k = min(left, take.replicas)
            node = self.segments[cluster][take.segment].nodes[take.node]
            node[0] += k * cpu
            node[1] += k * memory
            node[2] += k
            if k == take.replicas:
                takes.pop()
            else:
                takes[-1] = take._replace(replicas=take.replicas - k)
            left -= k
        if takes is not None:
            self.running_takes[cluster] = {**here, (cluster, key): tuple(takes)}
        if self.observed_usage[cluster]:
            if cluster in self.segments_observed and takes is None:
                # In the reported free capacity: give it back where the nodes are used.
                for node, (alloc_cpu, alloc_mem) in zip(self.segments[cluster][0].nodes,
                                                         self.allocatable.get(cluster, [])):
                    if left <= 0:
                        break
                    k = min(left, (alloc_cpu - node[0]) // cpu if cpu else left,
                            (alloc_mem - node[1]) // memory if memory else left)
                    if k > 0:
                        node[0] += k * cpu
                        node[1] += k * memory
                        left -= k
            self.planned_cpu[cluster] -= count * cpu
            self.planned_memory[cluster] -= count * memory
        self.free_cpu[cluster] += count * cpu
        self.free_memory[cluster] += count * memory
        self.fitted[(cluster, key)] -= count

    def running_fit(self, cluster: int, key: str) -> int:
        """How many of a component's running replicas on the cluster fit at today's size."""
        if cluster in self.pending:
            self._settle(cluster)
        return self.fitted.get((cluster, key), 0)

    # ----- internals --------------------------------------------------------------------------

    def _total_room(self, cluster: int, cpu: int, memory: int, count: int) -> int:
        return min(
            count,
            int(self.free_cpu[cluster] // cpu) if cpu else count,
            int(self.free_memory[cluster] // memory) if memory else count,
        )

    def _charge(self, take: Take, cpu: int, memory: int, sign: int) -> None:
        """Charge (sign 1) or refund (sign -1) one recorded take."""
        k = sign * take.replicas
        if k < 0:
            self.returned[take.cluster] = True
            self._roomier(take.cluster)
        else:
            self.taken[take.cluster] = True
        node = self.segments[take.cluster][take.segment].nodes[take.node]
        node[0] -= k * cpu
        node[1] -= k * memory
        node[2] -= k
        self.free_cpu[take.cluster] -= k * cpu
        self.free_memory[take.cluster] -= k * memory

    def _settle(self, cluster: int) -> None:
        """Put the running replicas recorded by ``occupy`` on the cluster's nodes at
        today's size, biggest first (first fit decreasing packs the most).

        Declared capacity is a model and the packing that placed the replicas (in the
        order of earlier decisions) is not recorded, so a replica first fit decreasing
        cannot put on a node still counts as fitting while the cluster's totals hold
        everything and the component's replicas alone fit its nodes; otherwise only as
        many as fit count (the rest must run elsewhere). Observed capacity is real: a
        replica re-fitted at a new size there fits only where first fit finds room."""
        waiting = self.pending.pop(cluster, None)
        if not waiting:
            return
        self._roomier(cluster)
        observed = bool(self.observed_usage[cluster])
        runs = tuple(waiting)
        memo_key = (cluster, runs)
        if not observed:
            last = self.settled_last.get(cluster)
            if last is not None and len(last[0]) == len(runs) and all(a is b for a, b in zip(last[0], runs)):
                done: Settled | None = last[1]  # what ``settled`` holds for this key
            else:
                done = self.settled.get(memo_key)
                if done is not None:
                    self.settled_last[cluster] = (runs, done)
            if done is not None:
                self.segments[cluster] = [segment.copy() for segment in done.segments]
                self.free_cpu[cluster], self.free_memory[cluster] = done.free_cpu, done.free_memory
                self.fitted.update(done.fitted)
                self.running_takes[cluster] = done.takes
                return
        fitted_here: dict[tuple[int, str], int] = {}
        takes_here: dict[tuple[int, str], list[Take]] = {}
        results: list[tuple[Running, int]] = []
        reported = cluster in self.segments_observed
        nodes = self._ready_nodes(cluster) if reported else []
        for r in sorted(waiting, key=settle_order):
            if observed and r.old_cpu is None:
                # Reported nodes: these replicas are in the free capacity already (net of
                # what runs); they still run only if the ready nodes' allocatable holds
                # them (a node pool shrank, a node is not ready).
                results.append((r, _first_fit_on(nodes, r, r.replicas)))
                continue
            if observed:
                # Observed free capacity is net of the replicas at their old size: give
                # that back (to the nodes in order, as far as they are used) and fit
                # them again at the new size.
                self._credit(cluster, r)
                self.free_cpu[cluster] -= r.replicas * r.cpu
                self.free_memory[cluster] -= r.replicas * r.memory
            takes = self._first_fit(cluster, r.cpu, r.memory, r.archs, r.replicas)
            takes_here[(cluster, r.key)] = takes
            results.append((r, sum(t.replicas for t in takes)))
        if reported:
            # Packing order is a model there too: what first fit cannot put back still
            # counts while the ready nodes hold everything and the component alone fits.
            allocatable = self.allocatable[cluster]
            totals_hold = (sum(r.replicas * r.cpu for r in waiting) <= sum(c for c, _ in allocatable)
                           and sum(r.replicas * r.memory for r in waiting) <= sum(m for _, m in allocatable))
        else:
            totals_hold = not observed and self.free_cpu[cluster] >= 0 and self.free_memory[cluster] >= 0
        for r, fitted in results:
            if fitted < r.replicas and totals_hold and (not observed or r.old_cpu is None):
                if observed:
                    alone = _first_fit_on(self._ready_nodes(cluster), r, r.replicas)
                else:
                    alone = self._fits_empty(cluster, r)
                fitted = max(fitted, min(alone, r.replicas))
            if observed and r.old_cpu is None:
                # They do not run: the placement in force no longer puts them there.
                self.planned_cpu[cluster] -= (r.replicas - fitted) * r.cpu
                self.planned_memory[cluster] -= (r.replicas - fitted) * r.memory
            else:
                # The totals were charged for every running replica: refund those that do
                # not fit (they will run elsewhere or nowhere).
                self.free_cpu[cluster] += (r.replicas - fitted) * r.cpu
                self.free_memory[cluster] += (r.replicas - fitted) * r.memory
            fitted_here[(cluster, r.key)] = fitted
        self.fitted.update(fitted_here)
        taken = {k: tuple(v) for k, v in takes_here.items()}
        self.running_takes[cluster] = taken
        if not observed:
            if len(self.settled) > 2 * self.n + 16:
                self.settled.clear()  # bounded: stale settlements go with the rest
                self.settled_last.clear()
            done = self.settled[memo_key] = Settled(
                tuple(segment.copy() for segment in self.segments[cluster]),
                float(self.free_cpu[cluster]), float(self.free_memory[cluster]), fitted_here, taken,
            )
            self.settled_last[cluster] = (runs, done)

    def _ready_nodes(self, cluster: int) -> list[Node]:
        """A reported cluster's ready nodes, empty: [allocatable cpu, memory, pods, arch]."""
        return [[cpu, memory, UNLIMITED, node[3]]
                for (cpu, memory), node in zip(self.allocatable[cluster], self.segments[cluster][0].nodes)]

    def _fits_empty(self, cluster: int, r: Running) -> int:
        """How many replicas of this size the cluster's declared nodes hold when empty."""
        held = 0
        for segment in self.segments[cluster]:
            pool = segment.pool
            if pool is None or pool.arch not in r.archs:
                continue
            held += pool.per_node(r.cpu, r.memory) * (pool.count + len(segment.nodes))
        return held

    def _credit(self, cluster: int, r: Running) -> None:
        """Give back what replicas running at their old size hold. Reports say how much of
        each node is used, not by whom: the replicas are taken to use the nodes in order,
        as far as each node's used part holds them (an estimate, deterministic)."""
        self._roomier(cluster)
        old_cpu = r.old_cpu or 0
        old_mem = r.old_memory or 0
        left = r.replicas
        allocatable = self.allocatable.get(cluster, [])
        for node, (alloc_cpu, alloc_mem) in zip(self.segments[cluster][0].nodes, allocatable):
            if left <= 0:
                break
            if node[3] not in r.archs:
                continue
            k = min(
                left,
                (alloc_cpu - node[0]) // old_cpu if old_cpu else left,
                (alloc_mem - node[1]) // old_mem if old_mem else left,
            )
            if k > 0:
                node[0] += k * old_cpu
                node[1] += k * old_mem
                left -= k
        # Only what the nodes' used parts could hold comes back (a stale or hostile
        # ``requests`` entry cannot create capacity).
        given = r.replicas - left
        self.free_cpu[cluster] += given * old_cpu
        self.free_memory[cluster] += given * old_mem

    def _first_fit(self, cluster: int, cpu: int, memory: int, archs: frozenset[str], count: int) -> list[Take]:
        """Charge up to ``count`` replicas to the cluster's nodes in order, each node taking
        as many as it holds; untouched pool nodes are split off only as they fill."""
        placed: list[Take] = []
        left = count
        for s, segment in enumerate(self.segments[cluster]):
            if left <= 0:
                break
            nodes = segment.nodes
            for n, node in enumerate(nodes):
                if left <= 0:
                    break
                if node[3] not in archs:
                    continue
                k = min(
                    left,
                    node[0] // cpu if cpu else UNLIMITED,
                    node[1] // memory if memory else UNLIMITED,
                    node[2],
                )
                if k > 0:
                    node[0] -= k * cpu
                    node[1] -= k * memory
                    node[2] -= k
                    left -= k
                    placed.append(Take(cluster, s, n, k))
            pool = segment.pool
            if left <= 0 or pool is None or not pool.count or pool.arch not in archs:
                continue
            per = pool.per_node(cpu, memory)
            if per <= 0:
                continue
            while left > 0 and pool.count:
                k = min(left, per)
                nodes.append([pool.cpu - k * cpu, pool.memory - k * memory, pool.pods - k, pool.arch])
                pool.count -= 1
                left -= k
                placed.append(Take(cluster, s, len(nodes) - 1, k))
        return placed


def _first_fit_on(nodes: list[Node], r: Running, count: int) -> int:
    """How many of ``count`` replicas of ``r`` first fit puts on ``nodes`` (consumed)."""
    left = count
    for node in nodes:
        if left <= 0:
            break
        if node[3] not in r.archs:
            continue
        k = min(left, node[0] // r.cpu if r.cpu else left, node[1] // r.memory if r.memory else left)
        if k > 0:
            node[0] -= k * r.cpu
            node[1] -= k * r.memory
            left -= k
    return count - left


def held(runs: list[Running]) -> tuple[int, int]:
    """The CPU and memory ``runs`` hold (replicas x request, summed)."""
    return sum(r.replicas * r.cpu for r in runs), sum(r.replicas * r.memory for r in runs)
