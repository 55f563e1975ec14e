"""What a resource agent sends the leads: ``POST /v1/clusters/{name}/report``.

The body is JSON in camelCase. Unknown fields are refused, every list is
bounded and every number is finite and bounded, so a broken or hostile agent
can neither grow the replicated state without limit nor hand the planner a
value its arithmetic cannot take (sums of bounded values stay far inside a
64-bit integer or a float). Quantities use the Kubernetes notation
(``"3500m"``, ``"8Gi"``).

What a report *says* is only an observation of its own cluster: the lead keeps
component health, completion and traffic only for components the plan places
on the reporting cluster (see ``kb.state``).
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import (
    AwareDatetime,
    BeforeValidator,
    Field,
    PlainSerializer,
    model_validator,
)

from qonnect_gitops.model.base import Arch, Name, UserModel
from qonnect_gitops.model.pool import ClusterApiStatus
from qonnect_gitops.model.quantity import (
    format_bytes,
    format_millicores,
    parse_quantity,
)
from qonnect_gitops.model.status import HealthReason, Refusal, SyncStatus

# Bounds on what one report may carry. Generous for real clusters; they exist so
# one report stays well under the HTTP body limit and the Raft batch size.
MAX_NODES = 500
MAX_COMPONENTS = 1000
MAX_LATENCIES = 256
MAX_TRAFFIC = 1000
MAX_REFUSALS = 32
# Bounds on the values: a node of 10,000 cores and 1 PiB, a latency of 10 minutes,
# a billion requests per second. 500 nodes of the largest size sum to 2^59 bytes.
MAX_NODE_MILLICORES = 10_000_000
MAX_NODE_BYTES = 2**50
MAX_LATENCY_MS = 600_000.0
MAX_RPS = 1e9
MAX_REPLICAS = 1_000_000
MAX_GENERATION = 2**53
_MAX_QUANTITY_CHARS = 40


def _bounded_quantity(scale: int, limit: int, what: str) -> Any:
    """A quantity validator that checks the size before any arithmetic: the text is
    short, the exponent small, and the value at most ``limit`` base units."""

    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise ValueError(f"expected a Kubernetes quantity such as '500m' or '8Gi', got {value!r}")  # noqa: TRY004 - pydantic
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError("expected a finite quantity")
        text = str(value).strip()
        if len(text) > _MAX_QUANTITY_CHARS:
            raise ValueError(f"quantity of {len(text)} characters; at most {_MAX_QUANTITY_CHARS}")
        return _quantity_units(text, scale, limit, what)

    return check


@functools.lru_cache(maxsize=4096)
def _quantity_units(text: str, scale: int, limit: int, what: str) -> int:
    """``text`` (at most ``_MAX_QUANTITY_CHARS``) in whole base units times ``scale``,
    rounded up; ValueError beyond ``limit``. Cached because agents send the same few
    quantities (``4``, ``8Gi``) in every report and the decimal arithmetic was half of a
    report's validation; the cache is bounded, so a flood of distinct values only misses
    it (errors are never cached: they are raised again each time)."""
    try:
        number = parse_quantity(text) * scale
    except ArithmeticError:  # decimal overflow of a huge exponent
        raise ValueError(f"'{text}' is out of range; at most {limit} {what}") from None
    if not number.is_finite() or number > limit:
        raise ValueError(f"'{text}' is out of range; at most {limit} {what}")
    return int(number.to_integral_value(rounding="ROUND_CEILING"))


node_millicores = _bounded_quantity(1000, MAX_NODE_MILLICORES, "millicores")
"""A node's CPU quantity in a report as whole millicores; ValueError beyond the bounds."""
node_bytes = _bounded_quantity(1, MAX_NODE_BYTES, "bytes")
"""A node's memory quantity in a report as whole bytes; ValueError beyond the bounds."""

ReportCPU = Annotated[
    int,
    BeforeValidator(node_millicores),
    PlainSerializer(format_millicores, return_type=str),
]
"""A node's CPU in a report: whole millicores, at most ``MAX_NODE_MILLICORES``."""

ReportBytes = Annotated[
    int,
    BeforeValidator(node_bytes),
    PlainSerializer(format_bytes, return_type=str),
]
"""A node's memory in a report: whole bytes, at most ``MAX_NODE_BYTES``."""

# The report's text rules, once: the careful model anchors them with ``^...$``, the lead's
# fast decoder (lead/report_fast.py) with ``^...\Z``.
COMMIT_CHARS = r"[0-9a-f]{7,64}"
COMPONENT_CHARS = r"[a-z0-9-]+/[a-z0-9-]+"
_COMMIT = rf"^{COMMIT_CHARS}$"
_COMPONENT = rf"^{COMPONENT_CHARS}$"


class NodeCapacity(UserModel):
    """One node: allocatable, and free = allocatable minus what pods request."""

    name: str = Field(min_length=1, max_length=253)
    arch: Arch = "amd64"
    ready: bool = True
    allocatable_cpu: ReportCPU
    allocatable_memory: ReportBytes
    free_cpu: ReportCPU
    free_memory: ReportBytes

    @model_validator(mode="after")
    def _free_within_allocatable(self) -> NodeCapacity:
        if self.free_cpu > self.allocatable_cpu or self.free_memory > self.allocatable_memory:
            raise ValueError(f"node '{self.name}': free capacity exceeds allocatable")
        return self


class ComponentHealth(UserModel):
    """One component (``app/name``) as it runs on this cluster."""

    component: str = Field(pattern=_COMPONENT)
    healthy: bool
    ready_replicas: int = Field(ge=0, le=MAX_REPLICAS)
    desired_replicas: int = Field(ge=0, le=MAX_REPLICAS)
    completed: bool = Field(False, description="A Job that ran to completion (a CronJob never completes).")
    message: str = Field("", max_length=512)
    # Left out when None: a lead from before this field refuses unknown fields, even null ones.
    reason: HealthReason | None = Field(
        None, exclude_if=lambda v: v is None,
        description="Why it is unhealthy where a machine must tell (e.g. `Unschedulable`).")


class Latency(UserModel):
    """Measured round-trip latency from this cluster to a cluster or user region."""

    to: Name
    ms: float = Field(ge=0, le=MAX_LATENCY_MS, allow_inf_nan=False)


class Traffic(UserModel):
    """Requests per second this cluster serves for a component, by user region."""

    component: str = Field(pattern=_COMPONENT)
    region: Name
    rps: float = Field(ge=0, le=MAX_RPS, allow_inf_nan=False)


class AppliedCommit(UserModel):
    """The branch commit the cluster runs, and the plan generation it belongs to."""

    commit: str = Field(pattern=_COMMIT)
    generation: int = Field(ge=0, le=MAX_GENERATION)


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
    cluster_api: tuple[ClusterApiStatus, ...] = Field(
        (), max_length=100, description="Cluster API clusters this (management) cluster runs.")

    @model_validator(mode="after")
    def _unique_keys(self) -> AgentReport:
        for label, field, key in _UNIQUE_KEYS:
            items = getattr(self, field)
            if len(items) > 1:  # one entry cannot repeat (most lists of most reports)
                keys = [key(item) for item in items]
                if len(set(keys)) != len(keys):
                    raise ValueError(f"{label}: duplicate entries")
        return self


# What identifies an entry of each list of a report: no two entries may share it.
_UNIQUE_KEYS: tuple[tuple[str, str, Callable[[Any], Any]], ...] = (
    ("nodes", "nodes", operator.attrgetter("name")),
    ("components", "components", operator.attrgetter("component")),
    ("latencies", "latencies", operator.attrgetter("to")),
    ("traffic", "traffic", operator.attrgetter("component", "region")),
    ("clusterApi", "cluster_api", operator.attrgetter("namespace", "name")),
)
