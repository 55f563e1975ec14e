"""Free capacity per node, consumed as replicas are placed.

A replica needs one node of a supported architecture with enough free CPU, memory and
pod slots, and the cluster's total free capacity must cover it too (an observed cluster
may report only a total). Nodes are tried in a fixed order (first fit) so the result
never depends on anything but the inputs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from qonnect_gitops.model.goals import Goals
from qonnect_gitops.model.observed import Observed
from qonnect_gitops.placement.fleet import StaticFleet

UNLIMITED = 1 << 62


class Ledger:
    """Node-level and cluster-level free capacity of the whole fleet."""

    def __init__(self, static: StaticFleet, goals: Goals, observed: Observed) -> None:
        n = len(static.names)
        # Per cluster: list of [cpu, memory, pods, arch] per node (mutable: consumed).
        self.nodes: list[list[list[Any]]] = []
        self.free_cpu = np.zeros(n)
        self.free_memory = np.zeros(n)
        self.total_cpu = np.zeros(n)
        # True where the free capacity was observed, i.e. already net of what runs there.
        self.observed_usage = np.zeros(n, dtype=bool)
        # Replicas already running on declared clusters, not yet put on nodes.
        self.pending: dict[int, list[tuple[int, int, frozenset[str], int]]] = {}
        for i, cluster in enumerate(static.clusters):
            oc = observed.clusters.get(static.names[i])
            nodes: list[list[Any]]
            if oc is not None and oc.nodes is not None:
                nodes = [[nd.free.cpu, nd.free.memory, UNLIMITED, nd.arch] for nd in oc.nodes if nd.ready]
                total = sum(
                    (nd.allocatable.cpu if nd.allocatable else nd.free.cpu) for nd in oc.nodes
                )
                self.observed_usage[i] = True
            else:
                nodes = [
                    [shape.cpu, shape.memory, shape.pods, shape.arch]
                    for shape in cluster.spec.nodes
                    for _ in range(shape.count)
                ]
                total = sum(shape.cpu * shape.count for shape in cluster.spec.nodes)
            self.nodes.append(nodes)
            self.total_cpu[i] = max(total, 1)
            if oc is not None and oc.free is not None:
                self.free_cpu[i] = oc.free.cpu
                self.free_memory[i] = oc.free.memory
                self.observed_usage[i] = True
            else:
                self.free_cpu[i] = sum(nd[0] for nd in nodes)
                self.free_memory[i] = sum(nd[1] for nd in nodes)

    def utilisation(self) -> np.ndarray:
        """Used fraction of each cluster's CPU, in [0, 1]."""
        return np.clip(1.0 - self.free_cpu / self.total_cpu, 0.0, 1.0)

    def fits(self, cluster: int, cpu: int, memory: int, archs: frozenset[str], count: int) -> int:
        """How many of ``count`` replicas fit on the cluster now (without consuming)."""
        if count <= 0:
            return 0
        if cluster in self.pending:
            self._settle(cluster)
        total = min(
            count,
            int(self.free_cpu[cluster] // cpu) if cpu else count,
            int(self.free_memory[cluster] // memory) if memory else count,
        )
        if total <= 0:
            return 0
        placed = 0
        for node_cpu, node_mem, pods, arch in self.nodes[cluster]:
            if arch not in archs:
                continue
            k = min(
                total - placed,
                node_cpu // cpu if cpu else UNLIMITED,
                node_mem // memory if memory else UNLIMITED,
                pods,
            )
            if k > 0:
                placed += k
                if placed >= total:
                    break
        return placed

    def take(
        self,
        cluster: int,
        cpu: int,
        memory: int,
        archs: frozenset[str],
        count: int,
        record: list[tuple[int, int, int]] | None = None,
    ) -> int:
        """Consume up to ``count`` replicas on the cluster, first fit; returns how many.
        With ``record``, appends (cluster, node, replicas) so they can be released."""
        total = self.fits(cluster, cpu, memory, archs, count)
        for n, k in self._first_fit(cluster, cpu, memory, archs, total):
            if record is not None:
                record.append((cluster, n, k))
        self.free_cpu[cluster] -= total * cpu
        self.free_memory[cluster] -= total * memory
        return total

    def release(self, record: list[tuple[int, int, int]], cpu: int, memory: int) -> None:
        """Give back what ``take`` recorded."""
        for cluster, n, k in record:
            node = self.nodes[cluster][n]
            node[0] += k * cpu
            node[1] += k * memory
            node[2] += k
            self.free_cpu[cluster] += k * cpu
            self.free_memory[cluster] += k * memory
        record.clear()

    def occupy(self, cluster: int, cpu: int, memory: int, archs: frozenset[str], count: int) -> None:
        """Account for replicas that already run on a cluster whose capacity is declared
        (not observed): they hold capacity even when the node maths says they cannot fit.

        Cluster totals are charged now; the nodes only when something asks about that
        cluster's nodes, so a replan that touches few clusters does little work."""
        if self.observed_usage[cluster]:
            return
        self.pending.setdefault(cluster, []).append((cpu, memory, archs, count))
        self.free_cpu[cluster] -= count * cpu
        self.free_memory[cluster] -= count * memory

    def _settle(self, cluster: int) -> None:
        """Put the replicas recorded by ``occupy`` on the cluster's nodes, first fit, in
        the order they were recorded."""
        waiting = self.pending.pop(cluster, None)
        if not waiting:
            return
        for cpu, memory, archs, count in waiting:
            self._first_fit(cluster, cpu, memory, archs, count)

    def _first_fit(
        self, cluster: int, cpu: int, memory: int, archs: frozenset[str], count: int
    ) -> list[tuple[int, int]]:
        """Charge up to ``count`` replicas to the cluster's nodes in order, each node taking
        as many as it holds; returns (node, replicas) for each node charged."""
        placed: list[tuple[int, int]] = []
        left = count
        for n, node in enumerate(self.nodes[cluster]):
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
                placed.append((n, k))
        return placed
