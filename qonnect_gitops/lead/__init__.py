"""The lead process: a Raft node holding the Knowledge Base, and its HTTP API.

``qonnect lead`` runs ``run_lead(config)``; see ``docs/operations-leads.md``.
"""

from qonnect_gitops.lead.process import run_lead
from qonnect_gitops.lead.service import LeadConfig, LeadService

__all__ = ["LeadConfig", "LeadService", "run_lead"]
