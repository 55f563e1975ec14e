"""``apps/<app>/app.yaml``: an application and the QoS goals of its components (kind ``QoSApp``)."""

from __future__ import annotations

import functools
from typing import Annotated, Any, Literal, TypeVar

from pydantic import AfterValidator, Field, GetJsonSchemaHandler, model_validator
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

from qonnect_gitops.model.base import Arch, Header, Metadata, Name, Tier, UserModel
from qonnect_gitops.model.limits import (
    MAX_COST_CAP,
    MAX_DISRUPTION_BUDGET,
    MAX_LATENCY_MS,
    MAX_MIN_CLUSTERS,
    MAX_NODE_CPU,
    MAX_NODE_MEMORY,
    MAX_REPLICAS,
    MAX_RPS,
    MAX_SECONDS,
    MAX_WEIGHT,
    RESERVED_NAMESPACES,
)
from qonnect_gitops.model.quantity import (
    Bytes,
    MilliCPU,
    at_most,
    format_bytes,
    format_millicores,
)


class LatencyGoal(UserModel):
    """Requests from ``region`` must reach the component within ``maxMs``."""

    region: Name
    max_ms: float = Field(gt=0, le=MAX_LATENCY_MS)
    serve: Literal["all", "nearest"] = Field(
        "all",
        description="`all`: every replica within `maxMs` of the region. `nearest`: at least one "
        "replica within `maxMs` of it, each replica near one of the component's `nearest` "
        "regions (serve each region from nearby).",
    )


# (latency, cost, energy) weights when neither the component nor its app sets an objective.
DEFAULT_OBJECTIVE = (0.6, 0.3, 0.1)


class Objective(UserModel):
    """Relative weights of what the planner minimises. Written as a mapping of weights or,
    for a single objective, just its name (``objective: cost``)."""

    latency: float = Field(0.0, ge=0, le=MAX_WEIGHT)
    cost: float = Field(0.0, ge=0, le=MAX_WEIGHT)
    energy: float = Field(0.0, ge=0, le=MAX_WEIGHT)

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        if isinstance(value, str):
            if value not in ("latency", "cost", "energy"):
                raise ValueError(
                    f"unknown objective '{value}'; expected latency, cost or energy, "
                    "or a mapping of their weights"
                )
            return {value: 1.0}
        return value

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        # Editors must accept the shorthand too, not only the mapping.
        mapping = handler.resolve_ref_schema(handler(schema))
        return {
            "anyOf": [{"type": "string", "enum": ["latency", "cost", "energy"]}, mapping],
            "description": cls.__doc__,
        }

    @model_validator(mode="after")
    def _some_weight(self) -> Objective:
        if self.latency + self.cost + self.energy <= 0:
            raise ValueError("at least one of latency, cost and energy needs a weight above 0")
        return self


class Availability(UserModel):
    min_clusters: int = Field(1, ge=1, le=MAX_MIN_CLUSTERS, description="Run on at least this many clusters.")
    spread: bool = Field(
        False, description="Distribute replicas as evenly as possible over the chosen clusters."
    )


class Placement(UserModel):
    policy: Literal["auto", "affinity", "best-fit", "worst-fit", "traffic"] = Field(
        "auto",
        description="`auto` scores by the objective; `affinity` prefers the named `clusters`; "
        "`best-fit` packs onto the fullest clusters, `worst-fit` onto the emptiest; "
        "`traffic` follows where the component's requests come from.",
    )
    clusters: tuple[Name, ...] = Field((), description="With `affinity`: the clusters to use.")

    @model_validator(mode="after")
    def _clusters_with_affinity(self) -> Placement:
        if self.policy == "affinity" and not self.clusters:
            raise ValueError("policy 'affinity' needs at least one cluster in 'clusters'")
        if self.policy != "affinity" and self.clusters:
            raise ValueError(f"'clusters' applies only to policy 'affinity', not '{self.policy}'")
        return self


class SelectorRequirement(UserModel):
    key: str = Field(min_length=1)
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _values_match_operator(self) -> SelectorRequirement:
        if self.operator in ("In", "NotIn") and not self.values:
            raise ValueError(f"operator {self.operator} needs at least one value")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"operator {self.operator} takes no values")
        return self


class ClusterSelector(UserModel):
    """Selects clusters by label, as a Kubernetes label selector selects objects."""

    match_labels: dict[str, str] = Field(default_factory=dict)
    match_expressions: tuple[SelectorRequirement, ...] = ()

    def matches(self, labels: dict[str, str]) -> bool:
        """Whether a cluster with these labels is selected."""
        if any(labels.get(k) != v for k, v in self.match_labels.items()):
            return False
        for req in self.match_expressions:
            present = req.key in labels
            if req.operator == "Exists" and not present:
                return False
            if req.operator == "DoesNotExist" and present:
                return False
            if req.operator == "In" and labels.get(req.key) not in req.values:
                return False
            if req.operator == "NotIn" and present and labels[req.key] in req.values:
                return False
        return True


class Toleration(UserModel):
    """Lets a component land on a cluster with a matching taint."""

    key: str | None = None
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None

    @model_validator(mode="after")
    def _as_kubernetes_validates(self) -> Toleration:
        if self.key is None and self.operator != "Exists":
            raise ValueError("a toleration without a key must use operator Exists")
        if self.operator == "Exists" and self.value:
            raise ValueError("operator Exists takes no value")
        return self

    def tolerates(self, key: str, value: str, effect: str) -> bool:
        if self.effect is not None and self.effect != effect:
            return False
        if self.key is None:  # an empty key with Exists tolerates everything
            return self.operator == "Exists"
        if self.key != key:
            return False
        return self.operator == "Exists" or self.value == value


class Scaling(UserModel):
    """Replicas follow the observed load: ``ceil(rps / targetRpsPerReplica)`` within bounds."""

    min_replicas: int = Field(1, ge=0, le=MAX_REPLICAS)
    max_replicas: int = Field(ge=1, le=MAX_REPLICAS)
    target_rps_per_replica: float = Field(gt=0, le=MAX_RPS)

    @model_validator(mode="after")
    def _bounds(self) -> Scaling:
        if self.min_replicas > self.max_replicas:
            raise ValueError(
                f"minReplicas ({self.min_replicas}) exceeds maxReplicas ({self.max_replicas})"
            )
        return self


class Migration(UserModel):
    """Per-component overrides of the fleet's stability settings."""

    cooldown_seconds: float | None = Field(None, ge=0, le=MAX_SECONDS)
    min_improvement: float | None = Field(None, ge=0, le=1)
    disruption_budget: int | None = Field(None, ge=1, le=MAX_DISRUPTION_BUDGET)
    progress_deadline_seconds: float | None = Field(None, gt=0, le=MAX_SECONDS)
    allow_stateful: bool = Field(
        False,
        description="Let rescheduling and failover move a StatefulSet or a `stateful` component "
        "(its data does not move).",
    )


_Part = TypeVar("_Part", bound=UserModel)


@functools.cache
def _shared_default(model: type[_Part]) -> _Part:
    """One instance of a frozen model's defaults for every field that leaves it out: a fleet's
    goals hold tens of thousands of components, most with the default QoS."""
    return model()


@functools.cache
def _default_objective() -> Objective:
    return Objective(latency=DEFAULT_OBJECTIVE[0], cost=DEFAULT_OBJECTIVE[1], energy=DEFAULT_OBJECTIVE[2])


class QoS(UserModel):
    """The QoS goals of a component. Every field is optional; ``spec.defaults.qos`` fills
    in what a component leaves out, field by field."""

    latency: tuple[LatencyGoal, ...] = ()
    tiers: tuple[Tier, ...] = Field(
        (),
        description="Preferred tiers, best first; when given, tiers not listed are not used. "
        "Empty means any tier, with no preference.",
    )
    objective: Objective = Field(
        default_factory=_default_objective,
        description="Without one, latency 0.6, cost 0.3, energy 0.1: a component with no latency "
        "goal and no traffic is still placed on the cheapest, cleanest cluster, not by name order.",
    )
    availability: Availability = Field(default_factory=lambda: _shared_default(Availability))
    max_cost_per_hour: float | None = Field(
        None, gt=0, le=MAX_COST_CAP, description="Cap on what all replicas of the component cost per hour."
    )
    placement: Placement = Field(default_factory=lambda: _shared_default(Placement))
    cluster_selector: ClusterSelector = Field(default_factory=lambda: _shared_default(ClusterSelector))
    tolerations: tuple[Toleration, ...] = ()
    bursting: bool = Field(
        True, description="Send replicas that do not fit the best cluster to its neighbours."
    )
    offloading: bool = Field(
        True, description="Move the work to the nearest feasible cluster when the preferred "
        "one lacks capacity.",
    )
    scaling: Scaling | None = None
    migration: Migration = Field(default_factory=lambda: _shared_default(Migration))

    @model_validator(mode="after")
    def _unique_tiers(self) -> QoS:
        if len(set(self.tiers)) != len(self.tiers):
            raise ValueError("a tier is listed twice in 'tiers'")
        return self

    def overlaid_on(self, defaults: QoS) -> QoS:
        """This QoS with every field it does not set taken from ``defaults``."""
        if not self.model_fields_set:
            return defaults  # frozen: shared, not copied
        return defaults.model_copy(update={f: getattr(self, f) for f in self.model_fields_set})


ReplicaCPU = Annotated[MilliCPU, at_most(MAX_NODE_CPU, format_millicores, "per-replica CPU")]
ReplicaMemory = Annotated[Bytes, at_most(MAX_NODE_MEMORY, format_bytes, "per-replica memory")]


class Resources(UserModel):
    cpu: ReplicaCPU
    memory: ReplicaMemory


class ComponentSpec(UserModel):
    """One deployable part of an app: a workload and what travels with it."""

    name: Name
    manifests: tuple[str, ...] = Field(
        min_length=1, description="Kubernetes YAML files, relative to the app folder."
    )
    replicas: int | None = Field(
        None, ge=0, le=MAX_REPLICAS,
        description="Total replicas; defaults to the workload's `spec.replicas`.",
    )
    resources: Resources | None = Field(
        None, description="Per replica; defaults to the workload's container requests."
    )
    architectures: tuple[Arch, ...] = Field(
        ("amd64",), min_length=1, description="CPU architectures its images are built for."
    )
    calls: tuple[str, ...] = Field(
        (), description="Components it sends requests to: `name` in this app or `app/name`."
    )
    colocate_with: tuple[str, ...] = Field(
        (), description="Components it must run beside (`name` in this app or `app/name`): it goes "
        "only to clusters where all of them run, and follows them when they move.",
    )
    stateful: bool | None = Field(
        None, description="Its replicas keep data where they run (e.g. a Deployment with state in "
        "an emptyDir): placed once and then pinned like a StatefulSet, unless "
        "`qos.migration.allowStateful`. Default: true for StatefulSets only.",
    )
    qos: QoS = Field(default_factory=lambda: _shared_default(QoS))


class AppDefaults(UserModel):
    qos: QoS = Field(default_factory=lambda: _shared_default(QoS))


def _not_reserved(namespace: str) -> str:
    if namespace in RESERVED_NAMESPACES:
        raise ValueError(f"namespace '{namespace}' is reserved (one of {', '.join(sorted(RESERVED_NAMESPACES))}); "
                         "agents never touch it; expected a namespace of the app's own")
    return namespace


AppNamespace = Annotated[Name, AfterValidator(_not_reserved)]


class QoSAppSpec(UserModel):
    namespace: AppNamespace = Field(
        description="The Kubernetes namespace the app runs in everywhere; not a reserved one "
        "(kube-system, kube-public, kube-node-lease, default, qonnect-system)."
    )
    adopt_namespace: bool = Field(
        False,
        description="Let agents take over the app's Namespace where it already exists without "
        "having been created by qonnect (otherwise they refuse it: `OwnershipConflict`).",
    )
    defaults: AppDefaults = Field(default_factory=AppDefaults)
    allow_plain_secrets: bool = Field(
        False,
        description="Allow `Secret` objects with plain data in manifests; they would be "
        "written unencrypted to every cluster branch. Prefer SOPS-encrypted files.",
    )
    components: tuple[ComponentSpec, ...] = Field(min_length=1)


class QoSApp(Header):
    """The ``apps/<app>/app.yaml`` document."""

    kind: Literal["QoSApp"]
    metadata: Metadata
    spec: QoSAppSpec
