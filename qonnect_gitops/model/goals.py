"""The loaded goals repository: validated documents resolved into what the planner and the
renderer use (effective QoS, per-replica resources, the workload of each component).

These are plain frozen dataclasses built by ``loader.load_goals``; nothing here parses.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

from qonnect_gitops.model.app import QoS, QoSApp
from qonnect_gitops.model.cluster import Cluster
from qonnect_gitops.model.errors import Problem
from qonnect_gitops.model.fleet import Fleet
from qonnect_gitops.model.network import Network
from qonnect_gitops.model.pool import ClusterPool

WorkloadKind = Literal["Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob"]
WORKLOAD_KINDS: tuple[WorkloadKind, ...] = (
    "Deployment",
    "StatefulSet",
    "DaemonSet",
    "Job",
    "CronJob",
)


@dataclass(frozen=True)
class Manifest:
    """One manifest file of a component, as the user wrote it."""

    path: str  # repository-relative, e.g. apps/bookinfo/manifests/details.yaml
    raw: bytes
    objects: tuple[Mapping[str, Any], ...]  # plain dicts in the user's field order
    encrypted: bool  # a SOPS-encrypted file: rendered through untouched
    namespaced: tuple[bool, ...] = ()  # per object: lives in a namespace (from the 1.37 API or a CRD)

    def is_namespaced(self, index: int) -> bool:
        """Whether ``objects[index]`` lives in a namespace (namespaced when unknown)."""
        return self.namespaced[index] if index < len(self.namespaced) else True


@dataclass(frozen=True)
class StabilityRules:
    """The effective migration guardrails of one component (fleet defaults + overrides)."""

    cooldown_seconds: float
    min_improvement: float
    disruption_budget: int
    allow_stateful: bool


@dataclass(frozen=True)
class Component:
    """A placeable unit: one workload plus the objects that travel with it."""

    app: str
    name: str
    namespace: str
    kind: WorkloadKind
    workload: Mapping[str, Any]
    manifests: tuple[Manifest, ...]
    replicas: int  # DaemonSets: 1 (one per chosen cluster); Jobs: 1 (placed once)
    cpu: int  # millicores per replica
    memory: int  # bytes per replica
    architectures: frozenset[str]
    calls: tuple[str, ...]  # qualified keys of the components it calls, sorted
    qos: QoS  # effective: component qos overlaid on the app defaults
    stability: StabilityRules

    @cached_property
    def key(self) -> str:
        """``<app>/<component>``: how plans, reports and traffic name a component."""
        return f"{self.app}/{self.name}"

    @property
    def movable(self) -> bool:
        """Whether rescheduling and failover may move it (StatefulSets only when opted in)."""
        return self.kind != "StatefulSet" or self.stability.allow_stateful


@dataclass(frozen=True)
class App:
    name: str
    namespace: str
    document: QoSApp
    components: tuple[Component, ...]


@dataclass(frozen=True)
class Goals:
    """Everything a goals repository declares, validated and cross-checked."""

    fleet: Fleet
    clusters: Mapping[str, Cluster]  # sorted by name
    network: Network | None
    apps: Mapping[str, App]  # sorted by name
    latencies: Mapping[tuple[str, str], float] = field(default_factory=dict)
    warnings: tuple[Problem, ...] = ()  # worth knowing, not wrong: e.g. custom resources not checked
    pools: Mapping[str, ClusterPool] = field(default_factory=dict)  # sorted by name (cloud bursting)

    def components(self) -> Iterator[Component]:
        """Every component of every app, in app then component order."""
        for app in self.apps.values():
            yield from app.components

    def component(self, key: str) -> Component:
        app, _, name = key.partition("/")
        for component in self.apps[app].components:
            if component.name == name:
                return component
        raise KeyError(key)

    def declared_latency(self, source: str, target: str) -> float | None:
        """Latency in ms from a cluster to a cluster or region per network.yaml, if declared."""
        if source == target:
            return 0.0
        return self.latencies.get((source, target))
