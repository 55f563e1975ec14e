"""The replicated Knowledge Base of the lead group (pure: imports only ``model``).

``KnowledgeBase`` holds the state and its deterministic transitions; the lead
process wraps it in a Raft state machine (``qonnect_gitops.lead.raft``).
"""

from qonnect_gitops.kb.state import (
    KnowledgeBase,
    ReportEntry,
    heartbeat_from_goals,
    inventory_from_goals,
    iso,
)

__all__ = ["KnowledgeBase", "ReportEntry", "heartbeat_from_goals", "inventory_from_goals", "iso"]
