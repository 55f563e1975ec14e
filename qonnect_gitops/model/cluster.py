"""``clusters/<name>.yaml``: one member cluster of the fleet (kind ``Cluster``)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, HttpUrl, model_validator

from qonnect_gitops.model.base import Arch, Header, Metadata, Name, Tier, UserModel
from qonnect_gitops.model.labels import CLUSTER_LABEL, DISTRIBUTION_LABEL, REGION_LABEL, TIER_LABEL
from qonnect_gitops.model.limits import (
    MAX_CARBON_INTENSITY,
    MAX_NODE_CPU,
    MAX_NODE_GROUPS,
    MAX_NODE_MEMORY,
    MAX_NODES_PER_CLUSTER,
    MAX_NODES_PER_GROUP,
    MAX_PODS_PER_NODE,
    MAX_PRICE,
    MAX_SECONDS,
    MAX_WATTS_PER_CPU,
)
from qonnect_gitops.model.quantity import (
    Bytes,
    MilliCPU,
    at_most,
    format_bytes,
    format_millicores,
)

NodeCPU = Annotated[MilliCPU, at_most(MAX_NODE_CPU, format_millicores, "per-node CPU")]
NodeMemory = Annotated[Bytes, at_most(MAX_NODE_MEMORY, format_bytes, "per-node memory")]



class NodeShape(UserModel):
    """``count`` identical nodes. A replica must fit on one node."""

    count: int = Field(ge=1, le=MAX_NODES_PER_GROUP, description="How many such nodes (at most 10,000).")
    cpu: NodeCPU = Field(description="Allocatable CPU of one node, e.g. `4` or `3500m` (at most 4096).")
    memory: NodeMemory = Field(description="Allocatable memory of one node, e.g. `8Gi` (at most 64Ti).")
    pods: int = Field(110, ge=1, le=MAX_PODS_PER_NODE, description="Most pods one node runs.")
    arch: Arch = "amd64"


class Taint(UserModel):
    """A cluster-level taint: components need a matching toleration to land there."""

    key: str = Field(min_length=1)
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"


class Cost(UserModel):
    """Prices in the fleet's currency."""

    cpu_hour: float = Field(ge=0, le=MAX_PRICE, description="Price of one CPU core for one hour.")
    memory_gib_hour: float = Field(
        0.0, ge=0, le=MAX_PRICE, alias="memoryGiBHour", description="Price of one GiB for one hour."
    )


class Energy(UserModel):
    """What running here costs the planet."""

    watts_per_cpu: float = Field(
        ge=0, le=MAX_WATTS_PER_CPU, description="Power drawn per busy CPU core, in watts."
    )
    carbon_intensity: float = Field(
        ge=0, le=MAX_CARBON_INTENSITY,
        description="Grid carbon intensity where the cluster runs, in gCO2/kWh.",
    )


class AgentEndpoint(UserModel):
    """How this cluster's agent can be reached; agents pull, so all of it is optional."""

    webhook_url: HttpUrl | None = Field(
        None, description="The agent's optional push-event endpoint."
    )
    poll_seconds: float = Field(
        30.0, gt=0, le=MAX_SECONDS, description="How often the agent polls its branch."
    )


class ClusterSpec(UserModel):
    """What a cluster is and what it offers."""

    tier: Tier
    distribution: Literal["k8s", "k3s"] = "k8s"
    region: Name = Field(description="Where the cluster is, e.g. `eu-central`.")
    taints: tuple[Taint, ...] = ()
    nodes: tuple[NodeShape, ...] = Field(min_length=1, max_length=MAX_NODE_GROUPS)
    cost: Cost
    energy: Energy
    agent: AgentEndpoint = Field(default_factory=AgentEndpoint)

    @model_validator(mode="after")
    def _node_total(self) -> ClusterSpec:
        total = sum(group.count for group in self.nodes)
        if total > MAX_NODES_PER_CLUSTER:
            raise ValueError(f"{total:,} nodes in all; expected at most {MAX_NODES_PER_CLUSTER:,} "
                             "per cluster (Kubernetes supports 5,000)")
        return self


class Cluster(Header):
    """The ``clusters/<name>.yaml`` document."""

    kind: Literal["Cluster"]
    metadata: Metadata
    spec: ClusterSpec

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def architectures(self) -> frozenset[str]:
        """The CPU architectures of the cluster's nodes."""
        return frozenset(node.arch for node in self.spec.nodes)

    @property
    def selector_labels(self) -> dict[str, str]:
        """User labels plus the implicit ``qonnect.io/*`` ones that selectors may match."""
        return {
            **self.metadata.labels,
            CLUSTER_LABEL: self.name,
            TIER_LABEL: self.spec.tier,
            REGION_LABEL: self.spec.region,
            DISTRIBUTION_LABEL: self.spec.distribution,
        }
