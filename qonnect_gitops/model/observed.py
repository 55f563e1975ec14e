"""What the fleet looks like right now: the frozen snapshot the planner reads.

The Knowledge Base builds it from agent reports; ``qonnect plan --observed FILE``
reads it from YAML. Anything not observed falls back to what the goals declare.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import AwareDatetime, Field

from qonnect_gitops.model.base import Arch, Name, UserModel
from qonnect_gitops.model.errors import GoalsError, Problem
from qonnect_gitops.model.goals import Goals
from qonnect_gitops.model.pool import ClusterApiStatus
from qonnect_gitops.model.quantity import Bytes, MilliCPU
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


class ObservedCluster(UserModel):
    """A cluster as last reported. Every field may be omitted; declared values apply."""

    healthy: bool = True
    heartbeat_age_seconds: float | None = Field(
        None, ge=0, description="Seconds since the last report; absent means fresh."
    )
    free: Capacity | None = Field(None, description="Free capacity of the whole cluster.")
    nodes: tuple[ObservedNode, ...] | None = Field(
        None, description="Per-node capacity; when given it replaces the declared node shapes."
    )


class ObservedLatency(UserModel):
    """A measured latency; overrides the declared one for this pair (both directions)."""

    from_: Name = Field(alias="from")
    to: Name
    ms: float = Field(ge=0)


class ObservedTraffic(UserModel):
    """Requests per second arriving for a component from a user region."""

    component: str = Field(pattern=r"^[a-z0-9-]+/[a-z0-9-]+$")
    region: Name
    rps: float = Field(ge=0)


class Observed(UserModel):
    """The planner's view of the live fleet, frozen at ``now``."""

    now: AwareDatetime
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

    def cluster(self, name: str) -> ObservedCluster:
        """What is known of a cluster; one never observed counts as healthy and fresh."""
        return self.clusters.get(name) or ObservedCluster()


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
    for i, key in enumerate(observed.completed_jobs):
        if key not in components:
            problems.append(doc.problem(("completedJobs", i), f"unknown component '{key}'"))
    if problems:
        raise GoalsError(problems)
    return observed
