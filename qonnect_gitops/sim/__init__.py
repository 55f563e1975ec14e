"""A simulated Kubernetes cluster that speaks the real API (part 1: the API server).

``SimCluster`` is the entry point; ``ApiCore`` the in-process API; ``Store`` the
objects. Layers: ``schema`` (1.37 definitions, type metadata), ``typed`` /
``ssa`` / ``patch`` (merging and ownership), ``store``, ``api`` (verbs),
``openapi`` (discovery and OpenAPI), ``server`` (HTTP).
"""

from qonnect_gitops.sim.api import ApiCore, WriteOptions
from qonnect_gitops.sim.cluster import SimCluster
from qonnect_gitops.sim.errors import ApiError
from qonnect_gitops.sim.store import Store

__all__ = ["ApiCore", "ApiError", "SimCluster", "Store", "WriteOptions"]
