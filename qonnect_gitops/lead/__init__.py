"""The lead process: a Raft node holding the Knowledge Base, and its HTTP API.

``qonnect lead`` runs ``run_lead(config)``; see ``docs/operations-leads.md``.

The names below are imported on first use, not with the package, so a light module of it
(``lead.httpd``, ``lead.tokens``) costs that module alone (``qonnect --help`` reads its
option defaults there).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# name -> the module of the package that defines it
_EXPORTS = {"run_lead": "process", "LeadConfig": "service", "LeadService": "service"}

if TYPE_CHECKING:  # what type checkers and the import contracts read; at run time __getattr__
    from qonnect_gitops.lead.process import run_lead
    from qonnect_gitops.lead.service import LeadConfig, LeadService
else:
    def __getattr__(name: str) -> Any:
        """Import the module that defines ``name`` on first use (PEP 562)."""
        module = _EXPORTS.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
        globals()[name] = value  # the next lookup is a plain attribute
        return value

__all__ = ["LeadConfig", "LeadService", "run_lead"]
