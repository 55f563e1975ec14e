"""``SimCluster``: one simulated Kubernetes API server, started and stopped as a library object."""

from __future__ import annotations

import itertools
import socket
import socketserver
import threading
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, Self

import yaml

from qonnect_gitops.logs import get_logger
from qonnect_gitops.model.cluster import Cluster, NodeShape, Taint
from qonnect_gitops.model.labels import APP_LABEL, COMPONENT_LABEL
from qonnect_gitops.sim.admin import admin_route
from qonnect_gitops.sim.api import ApiCore
from qonnect_gitops.sim.bootstrap import bootstrap
from qonnect_gitops.sim.control import Controllers
from qonnect_gitops.sim.faults import Faults
from qonnect_gitops.sim.nodes import NodePool, build_node, node_ready
from qonnect_gitops.sim.server import SimHTTPServer, serve
from qonnect_gitops.sim.signals import JsonHTTPServer, Signals, prometheus_route
from qonnect_gitops.sim.store import NODES, Store

log = get_logger(__name__)

# How often an idle server loop wakes to check for shutdown. Long, so 27 idle servers (nine
# clusters) cost next to nothing; shutdown_now() wakes a loop at once when it must stop.
POLL_INTERVAL = 2.0
STATUS_NODES = 1000  # nodes listed in the admin status (a pool may hold millions)


def shutdown_now(server: socketserver.BaseServer) -> None:
    """``server.shutdown()`` without waiting for the serve loop's next poll.

    ``serve_forever`` checks for a shutdown request only when its select returns; a
    connection makes it return, so connect until the loop has noticed.
    """
    stopper = threading.Thread(target=server.shutdown, daemon=True)
    stopper.start()
    address: Any = server.server_address  # an AF_INET server: (host, port)
    host, port = address[0], address[1]
    while stopper.is_alive():
        try:
            socket.create_connection((str(host), int(port)), timeout=0.5).close()
        except OSError:
            pass
        stopper.join(timeout=0.02)


class SimCluster:
    """A simulated cluster serving the Kubernetes API over HTTP on 127.0.0.1.

    ``SimCluster(name="edge-1")`` builds the store; ``start()`` binds an OS-chosen
    port (or ``port``) and returns the base URL; ``stop()`` ends watches and the
    server. ``core`` is the in-process API (for fake kubelets and controllers),
    ``server`` the HTTP server (``server.hooks`` lets fault injection intercept
    requests). ``bookmark_interval`` spaces watch bookmarks; ``namespace_delay`` is
    how long a deleted namespace stays Terminating before its contents go (0: at once);
    ``history`` is how many events watches can resume from (older: 410 Expired).
    Usable as a context manager.

    Part 2: ``nodes`` (node shapes of a Cluster file) become Node objects, and with
    them the controllers, scheduler and fake kubelet run (``controllers`` forces them
    on or off); bound Pods turn Ready ``startup_delay`` seconds after binding.
    ``region``, ``taints`` and ``distribution`` shape the nodes. ``latencies``
    (target -> ms) seed the Prometheus signals; ``peers`` are the targets that are clusters
    of the mesh (see ``signals``). ``prometheus_port`` and
    ``admin_port`` (0: the OS picks) are the ports of the Prometheus query API and
    the admin endpoint. ``SimCluster.from_cluster(cluster)`` builds all of this from
    a ``Cluster`` model.
    """

    def __init__(self, name: str = "sim", host: str = "127.0.0.1", port: int = 0,
                 bookmark_interval: float = 10.0, namespace_delay: float = 0.2, history: int = 1000, *,
                 nodes: Sequence[NodeShape] | None = None, region: str = "local", taints: Sequence[Taint] = (),
                 distribution: str = "k8s", startup_delay: float = 1.0, controllers: bool | None = None,
                 latencies: Mapping[str, float] | None = None, prometheus_port: int = 0,
                 admin_port: int = 0, peers: Sequence[str] = ()) -> None:
        self.name = name
        self.bookmark_interval = bookmark_interval
        self.host = host
        self.port = port
        self.region = region
        self.core = ApiCore(name, store=Store(history=history), namespace_delay=namespace_delay)
        bootstrap(self.core, distribution)
        self.server: SimHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.faults = Faults(name)
        self.signals = Signals(name, peers=frozenset(peers), workload_of=self.workload_of)
        for target, ms in (latencies or {}).items():
            self.signals.set_latency(target, ms)
        self.prometheus_port, self.admin_port = prometheus_port, admin_port
        self._side: dict[str, tuple[JsonHTTPServer, threading.Thread]] = {}
        self._lock = threading.RLock()  # start/stop/down/up from the admin port and the library at once
        self.controllers: Controllers | None = None
        self.pool: NodePool | None = None
        if controllers if controllers is not None else nodes is not None:
            self.controllers = Controllers(self.core, startup_delay)
        if nodes:
            self._create_nodes(nodes, taints, distribution)

    @classmethod
    def from_cluster(cls, cluster: Cluster, startup_delay: float = 1.0,
                     latencies: Mapping[str, float] | None = None, **kwargs: Any) -> SimCluster:
        """A sim with the nodes, region and taints of a ``Cluster`` file (``latencies``: target -> ms)."""
        return cls(name=cluster.name, nodes=cluster.spec.nodes, region=cluster.spec.region,
                   taints=cluster.spec.taints, distribution=cluster.spec.distribution,
                   startup_delay=startup_delay, latencies=latencies, **kwargs)

    def _create_nodes(self, shapes: Sequence[NodeShape], taints: Sequence[Taint], distribution: str) -> None:
        """The shapes' nodes as one pool: generated when read, stored only once something changes them."""
        rt = self.core.registry.find("", "v1", "nodes")
        assert rt is not None
        pool = NodePool(self.name, self.region, taints, distribution)
        for shape in shapes:
            obj, status = build_node(self.name, self.region, shape, pool.total, taints, distribution)
            pool.add_shape(shape, self.core.render_stored(rt, obj, status, "kubelet"))
        with self.core.store.lock:
            self.core.store.virtual[NODES] = pool
            self.pool = pool

    def workload_of(self, app: str, component: str) -> tuple[str, str] | None:
        """(namespace, name) of a Deployment, StatefulSet or DaemonSet running ``app``/``component``
        (its qonnect labels), for the mesh's labels on the requests it serves."""
        want = {APP_LABEL: app, COMPONENT_LABEL: component}
        with self.core.store.lock:
            for resource in ("deployments", "statefulsets", "daemonsets"):
                for obj in self.core.store.list(("apps", resource)):
                    labels = obj["metadata"].get("labels") or {}
                    if all(labels.get(k) == v for k, v in want.items()):
                        return obj["metadata"].get("namespace", ""), obj["metadata"]["name"]
        return None

    @property
    def url(self) -> str:
        """The base URL (``http://127.0.0.1:PORT``); known once started (and kept while stopped)."""
        if self.server is None and not self.port:
            raise RuntimeError(f"sim cluster {self.name} was never started")
        return f"http://{self.host}:{self.port}"

    @property
    def prometheus_url(self) -> str:
        """Base URL of the Prometheus query API (``/api/v1/query``); known once started."""
        return f"http://{self.host}:{self.prometheus_port}"

    @property
    def admin_url(self) -> str:
        """Base URL of the admin endpoint (routes under ``/_sim/``); known once started."""
        return f"http://{self.host}:{self.admin_port}"

    @property
    def is_up(self) -> bool:
        """Whether the Kubernetes API is listening."""
        return self.server is not None

    def start(self) -> str:
        """Start serving (API, Prometheus, admin) and the controllers; returns the API's base URL."""
        with self._lock:
            self._start_side()
            if self.controllers is not None:
                self.controllers.start()
            return self._start_api()

    def _start_api(self) -> str:
        if self.server is not None:
            return self.url
        self.core.store.closed = False
        # After a stop, come back on the same port so kubeconfigs handed out stay valid
        # (a cluster that was "down" returns at the same address).
        self.server = serve(self.core, self.host, self.port)
        self.server.hooks.append(self.faults.hook)
        self.port = self.server.server_address[1]
        self.server.bookmark_interval = self.bookmark_interval
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": POLL_INTERVAL},
                                        name=f"sim-{self.name}", daemon=True)
        self._thread.start()
        log.info("sim_cluster_started", cluster=self.name, url=self.url)
        return self.url

    def _start_side(self, kinds: tuple[str, ...] = ("prometheus", "admin")) -> None:
        for kind, route in (("prometheus", prometheus_route(self.signals)), ("admin", admin_route(self))):
            if kind in self._side or kind not in kinds:
                continue
            port = self.prometheus_port if kind == "prometheus" else self.admin_port
            server = JsonHTTPServer((self.host, port), route)
            thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": POLL_INTERVAL},
                                      name=f"sim-{kind}-{self.name}", daemon=True)
            thread.start()
            self._side[kind] = (server, thread)
            if kind == "prometheus":
                self.prometheus_port = server.server_address[1]
            else:
                self.admin_port = server.server_address[1]

    def stop(self) -> None:
        """Stop everything: open watches end, ports are released. The store is kept; ``start()`` resumes on the same ports."""
        with self._lock:
            self._stop_servers(("prometheus", "admin"))
            if self.controllers is not None:
                self.controllers.stop()

    def _stop_servers(self, side: tuple[str, ...]) -> None:
        """Stop the API server and the named side servers."""
        servers = [(kind, *self._side[kind]) for kind in side if kind in self._side]
        for _, server, _ in servers:
            shutdown_now(server)
        self._stop_api()
        for kind, server, thread in servers:
            server.server_close()
            thread.join(timeout=5)
            del self._side[kind]

    def _stop_api(self) -> None:
        if self.server is None:
            return
        self.core.store.close()
        shutdown_now(self.server)
        self.server.server_close()
        self.server.drop_connections()
        if self._thread is not None:
            self._thread.join(timeout=5)
        log.info("sim_cluster_stopped", cluster=self.name)
        self.server, self._thread = None, None

    # ------------------------------------------------------------------ faults

    def down(self) -> None:
        """The whole cluster becomes unreachable: its API and its Prometheus refuse connections.

        Pods keep their state; the admin endpoint stays up (it is how a cluster is brought back).
        """
        with self._lock:
            self._stop_servers(("prometheus",))
            log.info("sim_cluster_down", cluster=self.name)

    def up(self) -> None:
        """The cluster's API and Prometheus listen again, on the same ports."""
        with self._lock:
            self._start_side(("prometheus",))
            self._start_api()
            log.info("sim_cluster_up", cluster=self.name)

    def fail_node(self, node: str) -> None:
        """The node goes NotReady (Ready Unknown, unreachable taints); its Pods are evicted at once."""
        if self.controllers is None:
            raise RuntimeError(f"sim cluster {self.name} runs no kubelet (no nodes)")
        self.controllers.fail_node(node)

    def recover_node(self, node: str) -> None:
        """The node is Ready again and schedulable."""
        if self.controllers is None:
            raise RuntimeError(f"sim cluster {self.name} runs no kubelet (no nodes)")
        self.controllers.recover_node(node)

    def node_names(self, limit: int | None = None) -> list[str]:
        """Names of the cluster's nodes in natural order (the first ``limit`` of them)."""
        with self.core.store.lock:
            scan = self.core.store.scan(NODES)
            return [o["metadata"]["name"] for _, o in itertools.islice(scan, limit)]

    def node_count(self) -> int:
        """How many nodes the cluster has (pool nodes included)."""
        return self.core.store.size(NODES)

    def status(self) -> dict[str, Any]:
        """Where the cluster listens and what is injected (the admin endpoint's status body).

        ``nodes`` lists the first ``STATUS_NODES`` nodes; ``nodeCount`` says how many there are.
        """
        with self.core.store.lock:
            listed = [o for _, o in itertools.islice(self.core.store.scan(NODES), STATUS_NODES)]
        nodes = [{"name": n["metadata"]["name"], "ready": node_ready(n),
                  "arch": (n["metadata"].get("labels") or {}).get("kubernetes.io/arch")} for n in listed]
        return {"name": self.name, "up": self.is_up, "api": self.url if self.port else None,
                "prometheus": self.prometheus_url if self.prometheus_port else None,
                "admin": self.admin_url + "/_sim/" if self.admin_port else None,
                "faults": self.faults.describe(), "nodes": nodes, "nodeCount": self.node_count(),
                "signals": self.signals.describe()}

    def add_user(self, name: str, groups: Sequence[str] = ()) -> str:
        """A restricted user: its token (the same on every call); RBAC objects in the cluster decide what it may do."""
        if not name or name.startswith("system:"):
            raise ValueError(f"invalid user name {name!r}")
        return self.core.users.add(name, tuple(groups))

    def kubeconfig(self, namespace: str = "default", user: str | None = None) -> dict[str, Any]:
        """A kubeconfig for this cluster (plain HTTP, a static token the sim accepts).

        Without ``user`` it is the cluster's admin; with ``user`` it is that restricted
        user (see ``add_user``), whose requests RBAC authorises.
        """
        user_name = f"{self.name}-{user}" if user else f"{self.name}-admin"
        token = self.add_user(user) if user else self.core.users.admin_token
        return {
            "apiVersion": "v1", "kind": "Config", "preferences": {},
            "clusters": [{"name": self.name, "cluster": {"server": self.url}}],
            # kubectl sends no bearer token over plain HTTP: ``as`` makes it impersonate the user instead.
            "users": [{"name": user_name, "user": {"token": token, **({"as": user} if user else {})}}],
            "contexts": [{"name": self.name, "context": {"cluster": self.name, "user": user_name,
                                                          "namespace": namespace}}],
            "current-context": self.name,
        }

    def kubeconfig_yaml(self, namespace: str = "default", user: str | None = None) -> str:
        """``kubeconfig()`` as YAML, for ``kubectl --kubeconfig``."""
        return yaml.safe_dump(self.kubeconfig(namespace, user), sort_keys=False)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
