"""The lead process: a Raft node holding the Knowledge Base, and its HTTP API.

``qonnect lead`` runs ``run_lead(config)``; see ``docs/operations-leads.md``.

The names below are imported on first use, not with the package, so a light module of it
(``lead.httpd``, ``lead.tokens``) costs that module alone (``qonnect --help`` reads its
option defaults there).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from qonnect_gitops._lazy import exports

# name -> the module of the package that defines it
_EXPORTS = {"run_lead": "process", "LeadConfig": "service", "LeadService": "service"}

if TYPE_CHECKING:  # what type checkers and the import contracts read; at run time __getattr__
    from qonnect_gitops.lead.process import run_lead
    from qonnect_gitops.lead.service import LeadConfig, LeadService
else:
    __getattr__ = exports(__name__, _EXPORTS)

__all__ = ["LeadConfig", "LeadService", "run_lead"]
