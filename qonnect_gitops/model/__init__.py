"""Models of everything users write and everything the planner exchanges (pure).

Loading: ``load_goals(read_directory(path))`` or ``load_goals(files_at_commit)``.
"""

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
