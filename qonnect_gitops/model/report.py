"""What a resource agent sends the leads: ``POST /v1/clusters/{name}/report``.

The body is JSON in camelCase. Unknown fields are refused and every list is
bounded, so a broken or hostile agent cannot grow the replicated state
without limit. Quantities use the Kubernetes notation (``"3500m"``, ``"8Gi"``).
"""

from __future__ import annotations

from pydantic import AwareDatetime, Field, model_validator

from qonnect_gitops.model.base import Arch, Name, UserModel
from qonnect_gitops.model.quantity import Bytes, MilliCPU
from qonnect_gitops.model.status import Refusal, SyncStatus

# Bounds on what one report may carry. Generous for real clusters; they exist so
# one report stays well under the HTTP body limit and the Raft batch size.
MAX_NODES = 500
MAX_COMPONENTS = 1000
MAX_LATENCIES = 256
MAX_TRAFFIC = 1000
MAX_REFUSALS = 32

_COMMIT = r"^[0-9a-f]{7,64}$"
_COMPONENT = r"^[a-z0-9-]+/[a-z0-9-]+$"


class NodeCapacity(UserModel):
    """One node: allocatable, and free = allocatable minus what pods request."""

    name: str = Field(min_length=1, max_length=253)
    arch: Arch = "amd64"
    ready: bool = True
    allocatable_cpu: MilliCPU
    allocatable_memory: Bytes
    free_cpu: MilliCPU
    free_memory: Bytes

    @model_validator(mode="after")
    def _free_within_allocatable(self) -> NodeCapacity:
        if self.free_cpu > self.allocatable_cpu or self.free_memory > self.allocatable_memory:
            raise ValueError(f"node '{self.name}': free capacity exceeds allocatable")
        return self


class ComponentHealth(UserModel):
    """One component (``app/name``) as it runs on this cluster."""

    component: str = Field(pattern=_COMPONENT)
    healthy: bool
    ready_replicas: int = Field(ge=0)
    desired_replicas: int = Field(ge=0)
    completed: bool = Field(False, description="A Job that ran to completion.")
    message: str = Field("", max_length=512)


class Latency(UserModel):
    """Measured round-trip latency from this cluster to a cluster or user region."""

    to: Name
    ms: float = Field(ge=0, le=600_000)


class Traffic(UserModel):
    """Requests per second this cluster serves for a component, by user region."""

    component: str = Field(pattern=_COMPONENT)
    region: Name
    rps: float = Field(ge=0)


class AppliedCommit(UserModel):
    """The branch commit the cluster runs, and the plan generation it belongs to."""

    commit: str = Field(pattern=_COMMIT)
    generation: int = Field(ge=0)


class AgentReport(UserModel):
    """One status report from the agent of ``cluster``."""

    cluster: Name
    agent_time: AwareDatetime = Field(description="The agent's clock when it wrote this.")
    applied: AppliedCommit | None = Field(None, description="Last commit fully applied.")
    attempted: str | None = Field(None, pattern=_COMMIT, description="Last commit tried.")
    sync: SyncStatus
    refusals: tuple[Refusal, ...] = Field((), max_length=MAX_REFUSALS)
    components: tuple[ComponentHealth, ...] = Field((), max_length=MAX_COMPONENTS)
    nodes: tuple[NodeCapacity, ...] = Field((), max_length=MAX_NODES)
    latencies: tuple[Latency, ...] = Field((), max_length=MAX_LATENCIES)
    traffic: tuple[Traffic, ...] = Field((), max_length=MAX_TRAFFIC)

    @model_validator(mode="after")
    def _unique_keys(self) -> AgentReport:
        for label, keys in (
            ("nodes", [n.name for n in self.nodes]),
            ("components", [c.component for c in self.components]),
            ("latencies", [lat.to for lat in self.latencies]),
            ("traffic", [(t.component, t.region) for t in self.traffic]),
        ):
            if len(set(keys)) != len(keys):
                raise ValueError(f"{label}: duplicate entries")
        return self
