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
* ``store``     objects, resourceVersions, the watch log, indexes and virtual collections
                (node pools) (one lock per cluster);
* ``api``       ``ApiCore``: the verbs with the API's semantics, no HTTP;
* ``admission`` service accounts, LimitRanges, priorities, default storage class, quotas;
* ``authz``     tokens, users, impersonation, RBAC and the review kinds;
* ``crdvalidation`` custom resources against their CRD's schema;
* ``subresources`` eviction, binding, tokens, logs, reviews, APIServices, namespace defaults;
* ``bootstrap`` what a new cluster holds (kubernetes Service, default classes, RBAC roles);
* ``generated`` resource metrics and component statuses, computed when read;
* ``wire``      protobuf bodies from the upstream ``.proto`` definitions (shipped as data);
* ``printers``  Table responses;
* ``openapi``   discovery and OpenAPI v2/v3 documents;
* ``server``    the HTTP layer.

Part 2 (see docs/simulated-clusters.md): ``nodes`` (a Cluster file's shapes as pools of
nodes generated on read), ``scheduling`` (filters and the scheduler's messages),
``control`` (event-driven controllers, scheduler, kubelet, volumes, Services, Events:
one thread per cluster),
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
