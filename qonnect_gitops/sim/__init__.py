"""A simulated Kubernetes cluster that speaks the real API, with nodes, a fake kubelet, faults and signals.

Entry point: ``SimCluster(name=...)`` with ``start()`` (base URL), ``stop()``,
``kubeconfig()`` / ``kubeconfig_yaml()`` and use as a context manager.

Layers, each usable on its own:

* ``schema``    the Kubernetes 1.37 definitions (from ``kubernetes-validate``), loaded once
                per process, turned into ``TypeInfo`` (fields, list types, keys, patch strategy);
* ``fieldpath`` field sets in the ``FieldsV1`` encoding;
* ``typed``     schema-aware merge, compare, removal, unknown-field checks;
* ``ssa``       field ownership: server-side apply and ``Update`` managers;
* ``patch``     JSON patch, JSON merge patch, strategic merge patch;
* ``store``     objects, resourceVersions, the watch log (one lock per cluster);
* ``api``       ``ApiCore``: the verbs with the API's semantics, no HTTP;
* ``openapi``   discovery and OpenAPI v2/v3 documents;
* ``server``    the HTTP layer.

Part 2 (see docs/simulated-clusters.md): ``nodes`` (Node objects from a Cluster
file's shapes), ``scheduling`` (filters and the scheduler's messages), ``controllers``
(workload controllers, scheduler, kubelet, endpoints: one thread per cluster),
``faults`` (errors and latency), ``signals`` (the Prometheus query API), ``admin``
(the ``/_sim/`` endpoint) and ``fleet`` (``SimFleet``: one sim per Cluster file).

For in-process extensions (fake kubelet, controllers, faults, Prometheus): in-process components
call ``cluster.core`` (``ApiCore``) directly — ``core.registry.find(group, version,
plural)`` gives the ``ResourceType``; ``create/replace/patch/apply/delete/list/watch``
take ``WriteOptions(field_manager=...)`` and record ownership like any client.
``core.watch(...)`` is a generator of watch events; ``core.store.changed`` is the
condition writers notify. ``cluster.server.hooks`` is a list of callables
``(handler, method, path) -> bool`` run before routing; a hook that answers the
request (an error Status, a delay then ``False``, a dropped connection) returns
``True``. ``stop()``/``start()`` take the cluster down and back on the same port.
"""

from qonnect_gitops.sim.api import ApiCore, WriteOptions
from qonnect_gitops.sim.cluster import SimCluster
from qonnect_gitops.sim.errors import ApiError
from qonnect_gitops.sim.fleet import SimFleet
from qonnect_gitops.sim.store import Store

__all__ = ["ApiCore", "ApiError", "SimCluster", "SimFleet", "Store", "WriteOptions"]
