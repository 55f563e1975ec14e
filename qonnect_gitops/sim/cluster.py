"""``SimCluster``: one simulated Kubernetes API server, started and stopped as a library object."""

from __future__ import annotations

import threading
from types import TracebackType
from typing import Any, Self

import yaml

from qonnect_gitops.logs import get_logger
from qonnect_gitops.sim.api import ApiCore
from qonnect_gitops.sim.server import SimHTTPServer, serve
from qonnect_gitops.sim.store import Store

log = get_logger(__name__)


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
    """

    def __init__(self, name: str = "sim", host: str = "127.0.0.1", port: int = 0,
                 bookmark_interval: float = 10.0, namespace_delay: float = 0.2, history: int = 1000) -> None:
        self.name = name
        self.bookmark_interval = bookmark_interval
        self.host = host
        self.port = port
        self.core = ApiCore(name, store=Store(history=history), namespace_delay=namespace_delay)
        self.server: SimHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The base URL (``http://127.0.0.1:PORT``); known once started (and kept while stopped)."""
        if self.server is None and not self.port:
            raise RuntimeError(f"sim cluster {self.name} was never started")
        return f"http://{self.host}:{self.port}"

    def start(self) -> str:
        """Start serving in a background thread; returns the base URL."""
        if self.server is not None:
            return self.url
        self.core.store.closed = False
        # After a stop, come back on the same port so kubeconfigs handed out stay valid
        # (a cluster that was "down" returns at the same address).
        self.server = serve(self.core, self.host, self.port)
        self.port = self.server.server_address[1]
        self.server.bookmark_interval = self.bookmark_interval
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1},
                                        name=f"sim-{self.name}", daemon=True)
        self._thread.start()
        log.info("sim_cluster_started", cluster=self.name, url=self.url)
        return self.url

    def stop(self) -> None:
        """Stop serving: open watches end, the port is released. The store is kept; ``start()`` resumes on the same port."""
        if self.server is None:
            return
        self.core.store.close()
        self.server.shutdown()
        self.server.server_close()
        self.server.drop_connections()
        if self._thread is not None:
            self._thread.join(timeout=5)
        log.info("sim_cluster_stopped", cluster=self.name)
        self.server, self._thread = None, None

    def kubeconfig(self, namespace: str = "default") -> dict[str, Any]:
        """A kubeconfig for this cluster (plain HTTP, a static token the sim accepts)."""
        return {
            "apiVersion": "v1", "kind": "Config", "preferences": {},
            "clusters": [{"name": self.name, "cluster": {"server": self.url}}],
            "users": [{"name": f"{self.name}-admin", "user": {"token": f"sim-{self.name}"}}],
            "contexts": [{"name": self.name, "context": {"cluster": self.name, "user": f"{self.name}-admin",
                                                          "namespace": namespace}}],
            "current-context": self.name,
        }

    def kubeconfig_yaml(self, namespace: str = "default") -> str:
        """``kubeconfig()`` as YAML, for ``kubectl --kubeconfig``."""
        return yaml.safe_dump(self.kubeconfig(namespace), sort_keys=False)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
