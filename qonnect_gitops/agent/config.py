"""Settings of one agent (from flags or ``QONNECT_*`` environment variables)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from qonnect_gitops.agent.prometheus import Queries, check_window, plain
from qonnect_gitops.model.limits import AGENT_NAMESPACE, RESERVED_NAMESPACES

FIELD_MANAGER = "qonnect-agent"
DEFAULT_NAMESPACE = AGENT_NAMESPACE
INVENTORY_NAME = "qonnect-inventory"
# Labels and annotations: qonnect_gitops.model.labels.

# Kinds never pruned unless a person annotates the live object qonnect.io/prune: enabled.
DEFAULT_PROTECTED_KINDS = frozenset({("", "Namespace"), ("", "PersistentVolumeClaim"), ("", "PersistentVolume"),
                                     ("apiextensions.k8s.io", "CustomResourceDefinition")})

DriftMode = Literal["heal", "report"]


@dataclass
class AgentConfig:
    """Everything an ``Agent`` needs; ``kubeconfig`` is a dict, a file path, or None (in-cluster)."""

    cluster: str
    repo: str
    branch: str = ""
    kubeconfig: dict[str, Any] | str | None = None
    namespace: str = DEFAULT_NAMESPACE
    cache_dir: Path = field(default_factory=lambda: Path("/tmp/qonnect-agent"))
    leads: tuple[str, ...] = ()
    token: str | None = None
    # The token's file: re-read when it changes (a rotated Secret needs no restart).
    token_file: Path | None = None
    # CA bundle to verify https:// leads (default: the system store).
    lead_ca: Path | None = None
    prometheus: str | None = None
    latency_metric: str = "qonnect_network_latency_ms"
    traffic_metric: str = "qonnect_component_requests_per_second"
    # PromQL templates ($cluster, $window; agent/prometheus.py); None: a plain selector of
    # the metric above. prometheus_window: the range of rate() in them.
    latency_query: str | None = None
    traffic_query: str | None = None
    prometheus_window: str = "1m"
    interval: float = 30.0
    jitter: float = 0.1
    drift_interval: float = 300.0
    drift: DriftMode = "heal"
    report_interval: float = 15.0
    # Longest time without asking Git while every lead answer names the commit the agent
    # has (the answer is a hint; 0: poll Git every interval regardless).
    git_poll_max_interval: float = 300.0
    prune_fraction: float = 0.5
    wait_timeout: float = 60.0
    ready_timeout: float = 30.0
    # Seconds a pod may stay unschedulable before its workload is Degraded/Unschedulable
    # (room for a cluster autoscaler to add a node).
    unschedulable_grace: float = 120.0
    api_retries: int = 6
    api_backoff: float = 0.2
    api_backoff_max: float = 5.0
    # Longest one call to the cluster's API server may take, retries included; a call that
    # gets no answer in that time marks the API server as not answering (agent/kube.py).
    api_timeout: float = 30.0
    workers: int = 8
    metrics_addr: str | None = None
    webhook_addr: str | None = None
    webhook_secret: bytes | None = None
    git_credentials: Any = None
    # What the agent protects whatever its branch says (a branch cannot switch these off).
    protected_namespaces: frozenset[str] = RESERVED_NAMESPACES  # the agent's own namespace is added
    protected_kinds: frozenset[tuple[str, str]] = DEFAULT_PROTECTED_KINDS  # (group, kind)
    # The cluster's own RBAC objects (system:*, cluster-admin, bootstrap roles) the agent may
    # adopt, change and prune: (kind, namespace or "", name). None by default.
    system_objects: frozenset[tuple[str, str, str]] = frozenset()
    prune_workers: int = 16
    # The keys a branch commit must be signed by (an allowed-signers file, agent.verify).
    # Without it the agent refuses to start, unless allow_unsigned (trials only).
    trusted_keys: Path | None = None
    allow_unsigned: bool = False

    @property
    def queries(self) -> Queries:
        """The latency and traffic queries this agent asks its Prometheus."""
        fallback = plain(self.latency_metric, self.traffic_metric)
        return Queries(self.latency_query or fallback.latency, self.traffic_query or fallback.traffic)

    @property
    def reserved_namespaces(self) -> frozenset[str]:
        """Namespaces the agent never applies to or deletes from: the protected ones and its own."""
        return frozenset(self.protected_namespaces) | {self.namespace}

    def __post_init__(self) -> None:
        if not self.branch:
            self.branch = f"cluster/{self.cluster}"
        if not 0 < self.prune_fraction <= 1:
            raise ValueError("prune fraction must be in (0, 1]")
        if self.trusted_keys is None and not self.allow_unsigned:
            raise ValueError("no trusted keys: give the keys whose signatures the agent accepts "
                             "(--trusted-keys), or allow unsigned commits for a trial (--allow-unsigned)")
        check_window(self.prometheus_window)
        if not 0 <= self.git_poll_max_interval < float("inf"):
            raise ValueError("git poll max interval must be 0 (off) or a finite number of seconds")
        if not 0 < self.api_timeout < float("inf"):
            raise ValueError("api timeout must be a positive, finite number of seconds")
