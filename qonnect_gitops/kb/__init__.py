"""The replicated Knowledge Base of the lead group (pure: imports only ``model``).

``KnowledgeBase`` holds the state and its deterministic transitions; the lead
process wraps it in a Raft state machine (``qonnect_gitops.lead.raft``) and reads
it through a ``KBReader``. ``kb.records`` holds the typed records reports travel as.
"""

from qonnect_gitops.kb.reader import KBReader
from qonnect_gitops.kb.records import (
    ReportEntry,
    ReportRecord,
    ReportVerdict,
    WorkloadRecord,
)
from qonnect_gitops.kb.state import (
    PLAN_BASE_MOVED,
    KnowledgeBase,
    heartbeat_from_goals,
    inventory_from_goals,
    iso,
    placement_changes,
    workloads_from_goals,
)

__all__ = ["PLAN_BASE_MOVED", "KBReader", "KnowledgeBase", "ReportEntry", "ReportRecord", "ReportVerdict",
           "WorkloadRecord", "heartbeat_from_goals", "inventory_from_goals", "iso",
           "placement_changes", "workloads_from_goals"]
