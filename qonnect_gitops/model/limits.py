"""Every bound qonnect puts on what it reads from outside, in one place.

Goals files and cluster-branch files are parsed through ``model.parsing`` with the
size limits below; goal documents declare their numeric ranges with the bounds below.
``docs/qos-reference.md`` lists them for users; change both together.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

MiB: Final = 1024 * 1024

# -- files and trees (goals repositories and cluster branches) -------------------------------

MAX_FILE_BYTES: Final = 4 * MiB
"""Largest file that is parsed (a manifest file may hold several objects)."""
MAX_DOCUMENT_BYTES: Final = 1 * MiB
"""Largest YAML document (one object) once aliases are expanded: scalar bytes plus one byte
per node. Kubernetes stores at most about 1.5 MiB per object, and qonnect adds labels."""
MAX_TREE_FILES: Final = 20_000
"""Most files in one goals tree or one cluster branch."""
MAX_TREE_BYTES: Final = 64 * MiB
"""Most bytes in one goals tree or one cluster branch, all files together."""


@dataclass(frozen=True)
class TreeLimits:
    """How much one whole tree may hold. Cluster branches always get the defaults. For the
    goals tree of a large fleet (10,000 clusters with a component file each pass 20,000
    files) whoever runs the lead, ``qonnect validate`` or ``qonnect preview`` may raise
    them on the command line; nothing in a goals tree can. Every file and document keeps
    its own limits either way."""

    files: int = MAX_TREE_FILES
    bytes: int = MAX_TREE_BYTES


DEFAULT_TREE_LIMITS: Final = TreeLimits()
"""The limits of every cluster branch, and of a goals tree unless raised."""
GOALS_LIMIT_OPTIONS: Final = ("--goals-max-files", "--goals-max-bytes")
"""The command-line options that set ``TreeLimits`` for a goals tree (named in refusals)."""


MAX_DEPTH: Final = 100
"""Deepest nesting of mappings and sequences in one YAML document, counted as the data is
once aliases are expanded (an alias nests its anchor's content where it stands), and as the
scanner reads flow collections (``[``, ``{``), before any event is built from them."""
MAX_FILE_NODES: Final = 1_000_000
"""Most nodes (scalars, mappings, sequences) of one YAML file once aliases are expanded: what
building and validating it costs. A 4 MiB manifest file of ordinary objects holds about a
quarter of that."""
PARSE_CPU_SECONDS: Final = 1.0
"""CPU time reading any one YAML file may take, plus ``PARSE_CPU_SECONDS_PER_MIB`` per MiB of it.
The structural limits above refuse every hostile shape known in milliseconds; this is the
backstop for the ones not known yet. Reading ordinary YAML costs far less (the goals of a
10,000-cluster fleet: a few milliseconds per file)."""
PARSE_CPU_SECONDS_PER_MIB: Final = 20.0
"""The CPU allowance per MiB of a YAML file on top of ``PARSE_CPU_SECONDS``. The slowest
ordinary reading (ruamel, for files with anchors, tags or merge keys) takes about 6 s per MiB
on a shared 2-core machine, so a machine three times slower still has room; libyaml's scan
takes about 0.2 s per MiB."""


def parse_cpu_seconds(size: int) -> float:
    """The CPU time one read of a YAML file of ``size`` bytes may take."""
    return PARSE_CPU_SECONDS + PARSE_CPU_SECONDS_PER_MIB * size / MiB

# -- numbers in goals ---------------------------------------------------------------------------

MAX_NODES_PER_GROUP: Final = 10_000
"""Nodes in one node group (``spec.nodes[].count``)."""
MAX_NODES_PER_CLUSTER: Final = 10_000
"""Nodes of one cluster, all groups together (Kubernetes supports 5,000)."""
MAX_NODE_GROUPS: Final = 100
MAX_NODE_CPU: Final = 4096 * 1000
"""Allocatable CPU of one node, in millicores (4,096 cores)."""
MAX_NODE_MEMORY: Final = 64 * 1024**4
"""Allocatable memory of one node, in bytes (64 TiB)."""
MAX_PODS_PER_NODE: Final = 10_000
MAX_REPLICAS: Final = 100_000
"""Replicas of one component (and ``scaling.maxReplicas``)."""
MAX_MIN_CLUSTERS: Final = 1_000
MAX_LATENCY_MS: Final = 600_000.0
"""Latency goals and measured or declared latencies: at most ten minutes."""
MAX_PRICE: Final = 1e6
"""A price per CPU hour or GiB hour, in the fleet's currency."""
MAX_COST_CAP: Final = 1e9
"""``maxCostPerHour`` of a component."""
MAX_WATTS_PER_CPU: Final = 10_000.0
MAX_CARBON_INTENSITY: Final = 10_000.0
"""gCO2 per kWh (the dirtiest grids are near 1,000)."""
MAX_WEIGHT: Final = 1e6
"""An objective weight."""
MAX_RPS: Final = 1e9
"""``targetRpsPerReplica``."""
MAX_SECONDS: Final = 365 * 24 * 3600.0
"""Any duration in goals (cooldowns, heartbeat, poll interval): at most a year."""
MAX_DISRUPTION_BUDGET: Final = MAX_REPLICAS
EARLIEST_TIME: Final = datetime(1970, 1, 1, tzinfo=UTC)
LATEST_TIME: Final = datetime(9999, 1, 1, tzinfo=UTC)
"""Timestamps a plan or an observation may carry (``now``, ``lastMoved``): a cooldown or a
grace of at most a year after them still has a date."""
MAX_QUANTITY: Final = 2**63 - 1
"""Largest Kubernetes quantity in base units (millicores, bytes): the API's int64."""

# -- namespaces ----------------------------------------------------------------------------------

AGENT_NAMESPACE: Final = "qonnect-system"
"""The agent's own namespace (its inventory lives there) unless configured otherwise."""
RESERVED_NAMESPACES: Final = frozenset({"kube-system", "kube-public", "kube-node-lease", "default",
                                        AGENT_NAMESPACE})
"""Namespaces goals may not target and agents never touch."""


RBAC_GROUP: Final = "rbac.authorization.k8s.io"
RBAC_KINDS: Final = frozenset({"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"})


def system_rbac_name(group: str, kind: str, name: str) -> bool:
    """Whether an object is part of a cluster's own RBAC by its name: a ClusterRole,
    ClusterRoleBinding, Role or RoleBinding named ``system:...`` or ``cluster-admin``.
    Agents never adopt, change or delete one unless their own configuration lists it."""
    return group == RBAC_GROUP and kind in RBAC_KINDS and (name.startswith("system:") or name == "cluster-admin")
