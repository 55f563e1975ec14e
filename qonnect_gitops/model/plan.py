"""Plans: where every component runs, and why.

``placement.plan()`` produces a ``Plan``; ``render`` turns it into per-cluster
files; the leader stores it and the next cycle reads it back as the
``CurrentPlacement``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from qonnect_gitops.model.base import Arch, Timestamp
from qonnect_gitops.model.errors import GoalsError
from qonnect_gitops.model.goals import Goals
from qonnect_gitops.model.limits import MAX_REPLICAS
from qonnect_gitops.model.quantity import Bytes, MilliCPU
from qonnect_gitops.model.yamlpos import parse_yaml, validate_document

# ``initial``: the first placement, when nothing ran before.
DecisionReason = Literal["initial", "goals-changed", "failover", "rescheduling", "scaling"]
MoveReason = Literal["new", "failover", "rescheduling", "scaling", "goals-changed", "removed"]
# The hard goals a plan can fail to meet (``Plan.unmet``). ``availability`` is
# ``minClusters``; ``spread`` is ``availability.spread``; taints and tolerations count as
# ``selector`` (they select clusters too); ``scaling`` is a scaling bound or target.
GoalKind = Literal[
    "capacity", "health", "latency", "availability", "spread", "tier", "selector",
    "architecture", "cost", "scaling",
]
GOAL_KINDS: tuple[GoalKind, ...] = (
    "capacity", "health", "latency", "availability", "spread", "tier", "selector",
    "architecture", "cost", "scaling",
)


class PlanModel(BaseModel):
    """Base of plan models: immutable, camelCase in JSON, unknown fields refused."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Assignment(PlanModel):
    """Replicas of one component on one cluster."""

    cluster: str
    replicas: int = Field(ge=0)
    reason: str = Field(description="Why this cluster, in one short sentence.")
    score: float | None = Field(None, description="Total weighted cost; lower is better.")
    breakdown: dict[str, float] = Field(
        default_factory=dict, description="Normalised objective terms behind the score."
    )


class Draining(PlanModel):
    """Make before break: replicas that stay where they were until their replacement is
    healthy, after which a later plan removes them."""

    cluster: str
    replicas: int = Field(ge=1)
    reason: str
    goal: GoalKind | None = Field(
        None, description="The hard goal they leave their cluster for; None: an optimisation "
        "(rescheduling) whose replacement does not run yet.")


class ReplicaRequest(PlanModel):
    """The per-replica request a placement was sized at (quantities, as in the goals), and
    the CPU architectures its images were built for then."""

    cpu: MilliCPU
    memory: Bytes
    architectures: tuple[Arch, ...] | None = Field(
        None, description="Absent in plans written before it was recorded.")


class ComponentPlan(PlanModel):
    component: str  # app/name
    kind: str
    assignments: tuple[Assignment, ...]  # sorted by cluster name
    draining: tuple[Draining, ...] = ()
    request: ReplicaRequest | None = Field(
        None, description="Per-replica CPU and memory the placement was sized at: the next "
        "cycle re-checks running replicas when the goals change them."
    )

    def replicas_by_cluster(self, include_draining: bool = True) -> dict[str, int]:
        """Replicas to run per cluster; while draining, the old ones count too."""
        result = {a.cluster: a.replicas for a in self.assignments if a.replicas > 0}
        if include_draining:
            for d in self.draining:
                result[d.cluster] = result.get(d.cluster, 0) + d.replicas
        return dict(sorted(result.items()))


class Unplaced(PlanModel):
    """Replicas that fit nowhere, with what a provisioner would need to add."""

    component: str
    replicas: int = Field(ge=1)
    reason: str
    cpu: str = Field(description="Per-replica CPU the missing capacity must offer.")
    memory: str = Field(description="Per-replica memory.")
    architectures: tuple[str, ...]
    near: str | None = Field(None, description="Where the capacity is wanted: a region or cluster.")


class Unmet(PlanModel):
    """A hard goal the plan does not meet; the best partial placement is still made."""

    component: str
    goal: GoalKind
    message: str


class Move(PlanModel):
    component: str
    source: str | None = Field(None, alias="from")
    target: str | None = Field(None, alias="to")
    replicas: int = Field(ge=1)
    reason: MoveReason
    detail: str
    goal: GoalKind | None = Field(
        None, description="The hard goal that made the replicas leave their cluster (`health`: "
        "it failed, is gone or they do not run there; `capacity`: they no longer fit there); "
        "None for a new component, a count change, a removal or an optimisation.")


ProvisionPhase = Literal["provisioning", "joined", "draining"]
ProvisionAction = Literal["provision", "scale", "joined", "idle", "drain", "remove", "failed", "wait"]


class DynamicCluster(PlanModel):
    """A cluster the fleet created from a ``ClusterPool`` (``placement.provision``).

    ``provisioning``: Cluster API objects are on the management branch, the cluster is not
    ready or its agent has not reported yet; ``joined``: a fleet member the planner places
    on; ``draining``: unneeded past the linger time, its replicas move off under the
    stability rules. Once empty it leaves the state, and with it its objects leave the
    management branch."""

    name: str
    pool: str
    nodes: int = Field(ge=1, description="Worker nodes (the MachineDeployment's replicas).")
    phase: ProvisionPhase
    requested_at: AwareDatetime = Field(alias="requestedAt")
    since: AwareDatetime = Field(description="When the cluster entered its phase.")
    idle_since: AwareDatetime | None = Field(None, alias="idleSince")
    reason: str


class PoolBackoff(PlanModel):
    """A pool whose last provisioning failed: not used again before ``retryAt``."""

    pool: str
    failures: int = Field(ge=1)
    retry_at: AwareDatetime = Field(alias="retryAt")
    reason: str


class ProvisionEvent(PlanModel):
    """One provisioning decision of this cycle, explained."""

    action: ProvisionAction
    pool: str
    cluster: str | None = None
    nodes: int | None = None
    detail: str


class Provisioning(PlanModel):
    """The provisioner's state, carried from plan to plan on the plan branch (the fenced
    source of truth: a new leader resumes it and neither provisions twice nor forgets a
    cluster)."""

    unplaced_since: AwareDatetime | None = Field(
        None, alias="unplacedSince", description="Since when some replicas fit nowhere.")
    clusters: tuple[DynamicCluster, ...] = ()  # sorted by name
    backoff: tuple[PoolBackoff, ...] = ()  # sorted by pool
    requested: int = Field(0, ge=0, description="Clusters requested so far: names are never "
                           "reused (a failed cluster's objects may still be deleted).")
    events: tuple[ProvisionEvent, ...] = ()

    def cluster(self, name: str) -> DynamicCluster | None:
        """The dynamic cluster called ``name``, if any."""
        return next((c for c in self.clusters if c.name == name), None)


class Plan(PlanModel):
    """A complete placement decision."""

    reason: DecisionReason
    components: dict[str, ComponentPlan]  # keyed app/name, sorted
    unplaced: tuple[Unplaced, ...] = ()
    unmet: tuple[Unmet, ...] = ()  # sorted by component, then goal
    moves: tuple[Move, ...] = ()
    last_moved: dict[str, AwareDatetime] = Field(default_factory=dict, alias="lastMoved")
    provisioning: Provisioning | None = Field(
        None, description="Clusters created from cluster pools, and why (absent without pools).")

    def requests(self) -> dict[str, ReplicaRequest]:
        """``{component: request}``: what each component's placement was sized at."""
        return {key: cp.request for key, cp in sorted(self.components.items()) if cp.request is not None}

    def current(self) -> CurrentPlacement:
        """The placement in force once this plan runs, as the next cycle's input."""
        return CurrentPlacement(
            placements=self.placements(),
            last_moved=self.last_moved,
            requests=self.requests(),
            draining={
                key: {d.cluster: d.replicas for d in cp.draining}
                for key, cp in sorted(self.components.items())
                if cp.draining
            },
        )

    def placements(self) -> dict[str, dict[str, int]]:
        """``{component: {cluster: replicas}}`` of the target placement (without draining)."""
        return {
            key: cp.replicas_by_cluster(include_draining=False)
            for key, cp in sorted(self.components.items())
        }

    def clusters_of(self, component: str) -> dict[str, int]:
        """What a cluster branch must run for a component, draining replicas included."""
        return self.components[component].replicas_by_cluster(include_draining=True)


Replicas = Annotated[int, Field(ge=0, le=MAX_REPLICAS)]
"""Replicas of a component on one cluster: as bounded as the goals bound a component's."""


class CurrentPlacement(PlanModel):
    """The placement in force, as the planner's ``current`` input: the ``placements`` map of
    an earlier plan plus when each component last moved."""

    placements: dict[str, dict[str, Replicas]] = Field(default_factory=dict)
    last_moved: dict[str, Timestamp] = Field(default_factory=dict, alias="lastMoved")
    requests: dict[str, ReplicaRequest] = Field(
        default_factory=dict, description="Per-replica request each placement was sized at; "
        "absent for plans written before it was recorded (then taken as unchanged)."
    )
    draining: dict[str, dict[str, Replicas]] = Field(
        default_factory=dict, description="Replicas the plan in force keeps running while "
        "they are replaced (make before break)."
    )


def load_current(path: str, raw: bytes, goals: Goals) -> CurrentPlacement:
    """Parse an earlier plan's ``placements`` (and ``lastMoved``, ``requests``); JSON is read
    as YAML so errors get positions. Other keys of a plan's JSON output are ignored."""
    doc = parse_yaml(path, raw)[0]
    if not isinstance(doc.data, dict):
        raise GoalsError([doc.problem((), "expected a mapping with placements and lastMoved")])
    data = {k: v for k, v in doc.data.items() if k in ("placements", "lastMoved", "requests", "draining")}
    current = validate_document(CurrentPlacement, type(doc)(doc.path, data, doc.node, doc.start_line))
    # A cluster no longer declared is not an error: its replicas fail over (docs/placement.md).
    problems = [
        doc.problem((section, key), f"{sum(where.values()):,} replicas in all; expected at most {MAX_REPLICAS:,} "
                    "per component, as the goals allow")
        for section, table in (("placements", current.placements), ("draining", current.draining))
        for key, where in table.items()
        if sum(where.values()) > MAX_REPLICAS
    ]
    if problems:
        raise GoalsError(problems)
    return current
