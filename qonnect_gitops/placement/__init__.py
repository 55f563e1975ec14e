"""The placement engine: QoS goals to concrete placements (pure, deterministic).

``plan(goals, observed, current) -> Plan`` is the whole public surface; filters and
scores are plugins under ``placement.plugins``.
"""

from qonnect_gitops.placement.evaluate import desired_replicas
from qonnect_gitops.placement.planner import plan

__all__ = ["desired_replicas", "plan"]
