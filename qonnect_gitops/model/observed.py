"""What the fleet looks like right now: the frozen snapshot the planner reads.

The Knowledge Base builds it from agent reports; ``qonnect plan --observed FILE``
reads it from YAML. Anything not observed falls back to what the goals declare.
"""

from __future__ import annotations

import functools
from datetime import datetime

from pydantic import Field, model_validator

from qonnect_gitops.model.base import Arch, Name, Timestamp, UserModel
from qonnect_gitops.model.errors import GoalsError, Problem
from qonnect_gitops.model.goals import Goals
from qonnect_gitops.model.limits import MAX_LATENCY_MS, MAX_REPLICAS, MAX_RPS
from qonnect_gitops.model.pool import ClusterApiStatus
from qonnect_gitops.model.quantity import Bytes, MilliCPU
from qonnect_gitops.model.status import ClusterState, WorkloadState
from qonnect_gitops.model.yamlpos import parse_yaml, validate_document


class Capacity(UserModel):
    cpu: MilliCPU
    memory: Bytes


class ObservedNode(UserModel):
    """One node as its cluster's agent saw it: free = allocatable minus requested."""

    name: str
    arch: Arch = "amd64"
    ready: bool = True
    allocatable: Capacity | None = None
    free: Capacity


_REASON = r"^[A-Z][A-Za-z0-9]{0,63}$"


class ObservedCluster(UserModel):
    """A cluster as last reported. Every field may be omitted; declared values apply.

    ``healthy: false`` means the cluster is gone: its replicas fail over. ``state`` is the
    health model's judgement (``kb.health``); a healthy cluster whose state is ``Degraded``,
    ``Stalled`` or ``Silent`` (silent, but evictions held back by the storm guard), or that
    is ``recovering``, is cordoned: what runs there stays, no new replica is placed there.
    Without ``state`` (hand-written files) the planner judges silence from
    ``heartbeatAgeSeconds`` and the fleet's grace."""

    healthy: bool = True
    state: ClusterState | None = Field(
        None, description="The leads' health model: Ready, Degraded, Stalled or Silent.")
    reason: str | None = Field(
        None, pattern=_REASON, description="Why the cluster is in its state, CamelCase "
        "(`ApiUnavailable`, `PruneLimitExceeded`, `EvictionsPaused`, ...).")
    recovering: bool = Field(
        False, description="Back from a failover (silence or a sustained degradation) and not "
        "yet Ready for the fleet's recoverySeconds: keeps what runs, takes no new replicas.")
    heartbeat_age_seconds: float | None = Field(
        None, ge=0, description="Seconds since the last report; absent means fresh."
    )
    free: Capacity | None = Field(None, description="Free capacity of the whole cluster.")
    nodes: tuple[ObservedNode, ...] | None = Field(
        None, description="Per-node capacity; when given it replaces the declared node shapes."
    )


    @property
    def cordoned(self) -> bool:
        """Keeps what runs, takes no new replicas: trouble short of failover, or a cluster
        back from one that has not been Ready long enough yet."""
        return self.healthy and (self.recovering or self.state not in (None, ClusterState.READY))


class ObservedWorkload(UserModel):
    """What a cluster runs of one component, judged on its agent's reports (``kb``).

    Pairs of the current placement without an entry count as running (a plan made without
    observations)."""

    component: str = Field(pattern=r"^[a-z0-9-]+/[a-z0-9-]+$")
    cluster: Name
    state: WorkloadState
    ready_replicas: int = Field(0, ge=0, le=MAX_REPLICAS)
    reason: str | None = Field(
        None, pattern=_REASON, description="Why it is not running, CamelCase "
        "(`ProgressDeadlineExceeded`, `PruneLimitExceeded`, `CrashLoopBackOff`, ...).")


class ObservedLatency(UserModel):
    """A measured latency; overrides the declared one for this pair (both directions)."""

    from_: Name = Field(alias="from")
    to: Name
    ms: float = Field(ge=0, le=MAX_LATENCY_MS, description="Milliseconds; at most 600,000 (ten minutes), "
                      "as latency goals and network.yaml.")


class ObservedTraffic(UserModel):
    """Requests per second arriving for a component from a user region."""

    component: str = Field(pattern=r"^[a-z0-9-]+/[a-z0-9-]+$")
    region: Name
    rps: float = Field(ge=0, le=MAX_RPS)


class Observed(UserModel):
    """The planner's view of the live fleet, frozen at ``now``."""

    now: Timestamp
    clusters: dict[Name, ObservedCluster] = Field(default_factory=dict)
    latencies: tuple[ObservedLatency, ...] = ()
    traffic: tuple[ObservedTraffic, ...] = ()
    completed_jobs: tuple[str, ...] = Field(
        (), description="Components (`app/name`) whose Job has completed: never placed again."
    )
    cluster_api: dict[Name, tuple[ClusterApiStatus, ...]] = Field(
        default_factory=dict, description="Per management cluster, the Cluster API clusters "
        "its agent reports (cloud bursting)."
    )
    workloads: tuple[ObservedWorkload, ...] = Field(
        (), description="Per component and cluster of the placement in force, whether it "
        "runs there (placed, applied and ready), sorted by component then cluster.")

    @model_validator(mode="after")
    def _one_workload_per_pair(self) -> Observed:
        pairs = [(w.component, w.cluster) for w in self.workloads]
        if len(set(pairs)) != len(pairs):
            raise ValueError("workloads: a component and cluster appear twice")
        return self

    def cluster(self, name: str) -> ObservedCluster:
        """What is known of a cluster; one never observed counts as healthy and fresh."""
        return self.clusters.get(name) or ObservedCluster()

    @functools.cached_property
    def workload_index(self) -> dict[tuple[str, str], ObservedWorkload]:
        """``{(component, cluster): workload}`` of ``workloads``."""
        return {(w.component, w.cluster): w for w in self.workloads}

    def workload(self, component: str, cluster: str) -> ObservedWorkload | None:
        """What ``cluster`` runs of ``component``; None where nothing was observed."""
        return self.workload_index.get((component, cluster))


def empty_observation(now: datetime) -> Observed:
    """A snapshot in which nothing has been observed: every cluster as declared."""
    return Observed(now=now)


def load_observed(path: str, raw: bytes, goals: Goals) -> Observed:
    """Parse and check an observed snapshot; GoalsError names file, line and field."""
    doc = parse_yaml(path, raw)[0]
    if not isinstance(doc.data, dict):
        raise GoalsError([doc.problem((), "expected a mapping with now, clusters, latencies, traffic")])
    observed = validate_document(Observed, doc)
    regions = {c.spec.region for c in goals.clusters.values()} | set(goals.fleet.spec.regions)
    components = {c.key for c in goals.components()}
    problems: list[Problem] = []
    for name in observed.clusters:
        if name not in goals.clusters:
            problems.append(doc.problem(("clusters", name), f"unknown cluster '{name}'", key=True))
    for i, lat in enumerate(observed.latencies):
        for field, end in (("from", lat.from_), ("to", lat.to)):
            if end not in goals.clusters and end not in regions:
                problems.append(doc.problem(("latencies", i, field), f"unknown cluster or region '{end}'"))
    for i, t in enumerate(observed.traffic):
        if t.component not in components:
            problems.append(doc.problem(("traffic", i, "component"), f"unknown component '{t.component}'"))
        if t.region not in regions:
            problems.append(doc.problem(("traffic", i, "region"), f"unknown region '{t.region}'"))
    for i, w in enumerate(observed.workloads):
        if w.component not in components:
            problems.append(doc.problem(("workloads", i, "component"), f"unknown component '{w.component}'"))
        if w.cluster not in goals.clusters:
            problems.append(doc.problem(("workloads", i, "cluster"), f"unknown cluster '{w.cluster}'"))
    for i, key in enumerate(observed.completed_jobs):
        if key not in components:
            problems.append(doc.problem(("completedJobs", i), f"unknown component '{key}'"))
    if problems:
        raise GoalsError(problems)
    return observed
