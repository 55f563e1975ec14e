"""Models of everything users write and everything the planner exchanges (pure).

Loading: ``load_goals(read_directory(path))`` or ``load_goals(files_at_commit)``.

The names below are imported from their modules on first use, not with the package:
importing a light module of it (``model.limits``, ``model.errors``) then costs that module
alone, not pydantic and every model (``qonnect --help`` reads its defaults from there).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from qonnect_gitops._lazy import exports

# name -> the module of the package that defines it
_EXPORTS = {
    "QoS": "app",
    "QoSApp": "app",
    "Cluster": "cluster",
    "GoalsError": "errors",
    "Problem": "errors",
    "Fleet": "fleet",
    "App": "goals",
    "Component": "goals",
    "Goals": "goals",
    "Manifest": "goals",
    "StabilityRules": "goals",
    "ParseCache": "loader",
    "load_goals": "loader",
    "Network": "network",
    "Observed": "observed",
    "CurrentPlacement": "plan",
    "Plan": "plan",
    "read_directory": "source",
}

if TYPE_CHECKING:  # what type checkers and the import contracts read; at run time __getattr__
    from qonnect_gitops.model.app import QoS, QoSApp
    from qonnect_gitops.model.cluster import Cluster
    from qonnect_gitops.model.errors import GoalsError, Problem
    from qonnect_gitops.model.fleet import Fleet
    from qonnect_gitops.model.goals import App, Component, Goals, Manifest, StabilityRules
    from qonnect_gitops.model.loader import ParseCache, load_goals
    from qonnect_gitops.model.network import Network
    from qonnect_gitops.model.observed import Observed
    from qonnect_gitops.model.plan import CurrentPlacement, Plan
    from qonnect_gitops.model.source import read_directory
else:
    __getattr__ = exports(__name__, _EXPORTS)

__all__ = [
    "App",
    "Cluster",
    "Component",
    "CurrentPlacement",
    "Fleet",
    "Goals",
    "GoalsError",
    "Manifest",
    "Network",
    "Observed",
    "ParseCache",
    "Plan",
    "Problem",
    "QoS",
    "QoSApp",
    "StabilityRules",
    "load_goals",
    "read_directory",
]
