"""``clusterPools/<name>.yaml``: where the fleet may create clusters when it is full (kind
``ClusterPool``).

A pool names a management cluster (a fleet member running the Cluster API controllers),
the Cluster API infrastructure provider and control plane to use, the shape of the
nodes it creates, what they cost, and the rules of the provisioner: how long replicas
must stay unplaced before a cluster is created, how many clusters and nodes at most, and
how long an unneeded cluster lingers before it is removed (``placement.provision``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from qonnect_gitops.model.base import Header, Metadata, Name, Tier, UserModel
from qonnect_gitops.model.cluster import Cost, Energy, NodeShape
from qonnect_gitops.model.limits import MAX_LATENCY_MS, MAX_SECONDS, RESERVED_NAMESPACES

MAX_POOL_CLUSTERS = 100
MAX_POOL_NODES = 1_000
MAX_DYNAMIC_NAME = 40  # room for "-md-0", "-control-plane" and "-kubeconfig" in 63 characters

POOL_APP = "qonnect-pools"  # the app label of every Cluster API object cloud bursting renders

ControlPlane = Literal["kubeadm", "k3s"]


class Infrastructure(UserModel):
    """The Cluster API infrastructure provider: the kinds of its cluster and machine
    template, and the provider-specific parts of their specs (copied as written)."""

    api_version: str = Field(
        "infrastructure.cluster.x-k8s.io/v1beta2", alias="apiVersion",
        pattern=r"^[a-z0-9.-]+/v[0-9a-z]+$",
        description="API version of the provider's kinds, e.g. "
        "`infrastructure.cluster.x-k8s.io/v1beta2`.",
    )
    cluster_kind: str = Field(
        "DevCluster", pattern=r"^[A-Z][A-Za-z0-9]{0,62}$",
        description="The infrastructure cluster kind, e.g. `DevCluster`, `AWSCluster`, "
        "`OpenStackCluster`.",
    )
    machine_template_kind: str = Field(
        "DevMachineTemplate", pattern=r"^[A-Z][A-Za-z0-9]{0,62}$",
        description="The machine template kind, e.g. `DevMachineTemplate`, "
        "`AWSMachineTemplate`, `OpenStackMachineTemplate`.",
    )
    cluster_spec: dict[str, Any] = Field(
        default_factory=dict, description="`spec` of the infrastructure cluster (provider fields)."
    )
    machine_spec: dict[str, Any] = Field(
        default_factory=dict, description="`spec.template.spec` of the machine template "
        "(provider fields: image, flavor or instance type matching `node`).",
    )


class PoolLatency(UserModel):
    """Declared round-trip latency from a cluster of this pool to a region or a fleet cluster."""

    to: Name
    ms: float = Field(ge=0, le=MAX_LATENCY_MS)


class PoolLimits(UserModel):
    """How far the pool may grow."""

    max_clusters: int = Field(1, ge=1, le=MAX_POOL_CLUSTERS,
                              description="Most clusters of this pool at a time.")
    max_nodes_per_cluster: int = Field(10, ge=1, le=MAX_POOL_NODES,
                                       description="Most worker nodes per cluster.")
    min_nodes_per_cluster: int = Field(1, ge=1, le=MAX_POOL_NODES,
                                       description="Fewest worker nodes of a cluster.")


class ScaleUp(UserModel):
    """When a pool is used."""

    unplaced_seconds: float = Field(
        30.0, ge=0, le=MAX_SECONDS,
        description="Replicas must have been unplaced this long before a cluster is created.",
    )
    headroom_nodes: int = Field(0, ge=0, le=MAX_POOL_NODES,
                                description="Extra nodes beyond the demand.")


class ClusterPoolSpec(UserModel):
    """What a pool creates and under which rules."""

    management_cluster: Name = Field(
        description="The fleet cluster that runs the Cluster API controllers; its branch "
        "receives the Cluster API objects."
    )
    namespace: Name = Field(
        "qonnect-pools", description="Namespace of the management cluster holding the objects."
    )
    infrastructure: Infrastructure = Field(default_factory=Infrastructure)
    control_plane: ControlPlane = Field("kubeadm", description="`kubeadm` or `k3s`.")
    control_plane_replicas: int = Field(1, ge=1, le=7)
    kubernetes_version: str = Field("v1.33.0", pattern=r"^v[0-9]+\.[0-9]+\.[0-9]+([-+][0-9A-Za-z.+-]+)?$")
    region: Name
    tier: Tier = "cloud"
    node: NodeShape = Field(description="Shape of one worker node; `count` is ignored "
                            "(the provisioner sizes clusters).")
    cost: Cost
    energy: Energy
    latencies: tuple[PoolLatency, ...] = Field(
        (), max_length=1000,
        description="Declared latency from the new clusters to regions or fleet clusters.",
    )
    limits: PoolLimits = Field(default_factory=PoolLimits)
    scale_up: ScaleUp = Field(default_factory=ScaleUp)
    linger_seconds: float = Field(
        300.0, ge=0, le=MAX_SECONDS,
        description="How long a cluster nothing needs stays before it is removed.",
    )
    provisioning_timeout_seconds: float = Field(
        900.0, gt=0, le=MAX_SECONDS,
        description="A cluster not ready after this long counts as failed.",
    )
    retry_seconds: float = Field(
        60.0, gt=0, le=MAX_SECONDS,
        description="Wait after a failed provisioning; doubles with each failure.",
    )

    @field_validator("namespace")
    @classmethod
    def _not_reserved(cls, value: str) -> str:
        if value in RESERVED_NAMESPACES:
            raise ValueError(f"'{value}' is a reserved namespace; expected a namespace of its own "
                             "for the Cluster API objects, e.g. qonnect-pools")
        return value

    @model_validator(mode="after")
    def _node_bounds(self) -> ClusterPoolSpec:
        if self.limits.min_nodes_per_cluster > self.limits.max_nodes_per_cluster:
            raise ValueError("limits.minNodesPerCluster is above limits.maxNodesPerCluster")
        return self


class ClusterPool(Header):
    """The ``clusterPools/<name>.yaml`` document."""

    kind: Literal["ClusterPool"]
    metadata: Metadata
    spec: ClusterPoolSpec

    @field_validator("metadata")
    @classmethod
    def _short_name(cls, value: Metadata) -> Metadata:
        # A pool's clusters are named <pool>-<n>: it must leave room for the suffixes.
        if len(value.name) > MAX_DYNAMIC_NAME - 4:
            raise ValueError(f"a pool name has at most {MAX_DYNAMIC_NAME - 4} characters "
                             "(its clusters are named <pool>-<n>)")
        return value

    @property
    def name(self) -> str:
        return self.metadata.name


ClusterApiPhase = Literal["Pending", "Provisioning", "Provisioned", "Deleting", "Failed", "Unknown"]


class ClusterApiStatus(UserModel):
    """A Cluster API ``Cluster`` as the management cluster's agent saw it."""

    name: Name
    namespace: Name
    phase: ClusterApiPhase = "Unknown"
    control_plane_ready: bool = False
    kubeconfig: bool = Field(False, description="The `<name>-kubeconfig` Secret exists.")
    message: str = Field("", max_length=512, description="Why it failed, when it did.")

    @property
    def ready(self) -> bool:
        """Cluster API says the cluster can be used: control plane up, kubeconfig written."""
        return self.phase == "Provisioned" and self.control_plane_ready and self.kubeconfig
