"""Drive ``plan_with_pools`` cycle by cycle, as the leader does (pure: no processes)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from qonnect_gitops.model import CurrentPlacement, Goals
from qonnect_gitops.model.observed import Observed, ObservedCluster
from qonnect_gitops.model.plan import Plan
from qonnect_gitops.model.pool import ClusterApiStatus
from qonnect_gitops.placement.provision import plan_with_pools

T0 = datetime(2026, 1, 1, tzinfo=UTC)


class Fleet:
    """The plan in force and the clock; ``ready`` marks Cluster API clusters ready, and
    ``reporting`` the dynamic clusters whose agent reports."""

    def __init__(self, goals: Goals) -> None:
        self.goals = goals
        self.plan: Plan | None = None
        self.capi: dict[str, ClusterApiStatus] = {}
        self.reporting: set[str] = set()

    def cycle(self, seconds: float, goals: Goals | None = None) -> Plan:
        """Plan at T0 + ``seconds`` from the plan in force."""
        if goals is not None:
            self.goals = goals
        current = self.plan.current() if self.plan else CurrentPlacement()
        previous = self.plan.provisioning if self.plan else None
        observed = Observed(
            now=T0 + timedelta(seconds=seconds),
            clusters={name: ObservedCluster(healthy=True, heartbeat_age_seconds=1.0)
                      for name in sorted(self.reporting)},
            cluster_api={"cloud-1": tuple(self.capi[n] for n in sorted(self.capi))} if self.capi else {},
        )
        self.plan = plan_with_pools(self.goals, observed, current, previous)
        return self.plan

    def set_capi(self, name: str, phase: str, ready: bool = False, message: str = "") -> None:
        self.capi[name] = ClusterApiStatus(name=name, namespace="qonnect-pools", phase=phase,  # type: ignore[arg-type]
                                           control_plane_ready=ready, kubeconfig=ready, message=message)

    def actions(self) -> list[tuple[str, str | None]]:
        assert self.plan is not None and self.plan.provisioning is not None
        return [(e.action, e.cluster) for e in self.plan.provisioning.events]

    def phases(self) -> dict[str, tuple[str, int]]:
        assert self.plan is not None and self.plan.provisioning is not None
        return {c.name: (c.phase, c.nodes) for c in self.plan.provisioning.clusters}
