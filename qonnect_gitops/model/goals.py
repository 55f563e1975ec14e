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
    progress_deadline_seconds: float = 600.0  # placed but not ready after this long: not running


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
    stateful: bool | None = None  # as the goals say; None: only StatefulSets keep state
    colocate_with: tuple[str, ...] = ()  # qualified keys of the components it runs beside, sorted

    @property
    def keeps_state(self) -> bool:
        """Whether its replicas hold data where they run (a StatefulSet, or ``stateful: true``)."""
        return self.kind == "StatefulSet" if self.stateful is None else self.stateful

    @cached_property
    def key(self) -> str:
        """``<app>/<component>``: how plans, reports and traffic name a component."""
        return f"{self.app}/{self.name}"

    @cached_property
    def pod_labels(self) -> Mapping[str, Any]:
        """The labels of the workload's pod template (what Service selectors match)."""
        spec = self.workload.get("spec") or {}
        if self.kind == "CronJob":
            spec = ((spec.get("jobTemplate") or {}).get("spec")) or {}
        return ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}

    @cached_property
    def references(self) -> frozenset[tuple[str, str]]:
        """``(kind, name)`` of the namespaced objects its pods need: ServiceAccount,
        ConfigMaps, Secrets and PersistentVolumeClaims named by volumes, env, envFrom and
        imagePullSecrets."""
        return frozenset(pod_references(pod_template_spec(self.workload, self.kind)))

    @property
    def movable(self) -> bool:
        """Whether rescheduling and failover may move it (what keeps state only when opted in)."""
        return not self.keeps_state or self.stability.allow_stateful


@dataclass(frozen=True)
class App:
    name: str
    namespace: str
    document: QoSApp
    components: tuple[Component, ...]

    def selected_by(self, service: Mapping[str, Any]) -> set[str]:
        """Keys of the app's components whose pods the Service's selector matches (none
        for a Service without a selector)."""
        selector = (service.get("spec") or {}).get("selector") or {}
        if not selector:
            return set()
        return {c.key for c in self.components
                if all(c.pod_labels.get(k) == v for k, v in selector.items())}


def pod_template_spec(workload: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    """The spec of a workload's pod template (empty when it has none)."""
    spec = workload.get("spec") or {}
    if kind == "CronJob":
        spec = ((spec.get("jobTemplate") or {}).get("spec")) or {}
    return ((spec.get("template") or {}).get("spec")) or {}


def pod_references(spec: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """``(kind, name)`` of every object a pod spec names (see ``Component.references``)."""
    account = spec.get("serviceAccountName") or spec.get("serviceAccount")
    if isinstance(account, str) and account:
        yield "ServiceAccount", account
    for secret in spec.get("imagePullSecrets") or []:
        if isinstance(secret, Mapping) and secret.get("name"):
            yield "Secret", str(secret["name"])
    for volume in spec.get("volumes") or []:
        if not isinstance(volume, Mapping):
            continue
        sources = [volume, *[s for s in ((volume.get("projected") or {}).get("sources") or [])
                             if isinstance(s, Mapping)]]
        for source in sources:
            if (source.get("configMap") or {}).get("name"):
                yield "ConfigMap", str(source["configMap"]["name"])
            secret = source.get("secret") or {}
            if secret.get("secretName") or secret.get("name"):
                yield "Secret", str(secret.get("secretName") or secret.get("name"))
        if (volume.get("persistentVolumeClaim") or {}).get("claimName"):
            yield "PersistentVolumeClaim", str(volume["persistentVolumeClaim"]["claimName"])
    for group in ("initContainers", "containers"):
        for container in spec.get(group) or []:
            if not isinstance(container, Mapping):
                continue
            for env in container.get("env") or []:
                source = (env.get("valueFrom") or {}) if isinstance(env, Mapping) else {}
                if (source.get("configMapKeyRef") or {}).get("name"):
                    yield "ConfigMap", str(source["configMapKeyRef"]["name"])
                if (source.get("secretKeyRef") or {}).get("name"):
                    yield "Secret", str(source["secretKeyRef"]["name"])
            for env_from in container.get("envFrom") or []:
                if not isinstance(env_from, Mapping):
                    continue
                if (env_from.get("configMapRef") or {}).get("name"):
                    yield "ConfigMap", str(env_from["configMapRef"]["name"])
                if (env_from.get("secretRef") or {}).get("name"):
                    yield "Secret", str(env_from["secretRef"]["name"])


def exposes_nodes(service: Mapping[str, Any]) -> bool:
    """Whether a Service opens a port on the nodes or a load balancer (LoadBalancer,
    NodePort): it belongs only where its backends run."""
    return (service.get("spec") or {}).get("type") in ("LoadBalancer", "NodePort")


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
