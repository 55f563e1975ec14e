"""Settings of one agent (from flags or ``QONNECT_*`` environment variables)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

FIELD_MANAGER = "qonnect-agent"
DEFAULT_NAMESPACE = "qonnect-system"
INVENTORY_NAME = "qonnect-inventory"

MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "qonnect"
APP_LABEL = "qonnect.io/app"
COMPONENT_LABEL = "qonnect.io/component"
RECONCILE_ANNOTATION = "qonnect.io/reconcile"
PRUNE_ANNOTATION = "qonnect.io/prune"
RECREATE_ANNOTATION = "qonnect.io/recreate"

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
    interval: float = 30.0
    jitter: float = 0.1
    drift_interval: float = 300.0
    drift: DriftMode = "heal"
    report_interval: float = 15.0
    prune_fraction: float = 0.5
    wait_timeout: float = 60.0
    ready_timeout: float = 30.0
    api_retries: int = 6
    api_backoff: float = 0.2
    api_backoff_max: float = 5.0
    workers: int = 8
    metrics_addr: str | None = None
    webhook_addr: str | None = None
    webhook_secret: bytes | None = None
    git_credentials: Any = None

    def __post_init__(self) -> None:
        if not self.branch:
            self.branch = f"cluster/{self.cluster}"
        if not 0 < self.prune_fraction <= 1:
            raise ValueError("prune fraction must be in (0, 1]")
