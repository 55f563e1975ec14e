"""What a cloud cluster's bootstrap does in the demo: when the simulated Cluster API
provider writes a new cluster's kubeconfig, start that cluster's agent; when the cluster
is deleted, stop it.

The agent's token is issued by the leader (``POST /v1/clusters/<name>/token`` with an
admin token, as the operator's bootstrap would ask); docs/cloud-bursting.md says how to do
the same against a real management cluster.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request

from qonnect_gitops.demo.stack import Stack
from qonnect_gitops.gitstore.daemon import free_ports
from qonnect_gitops.lead.tokens import ADMIN, create_token
from qonnect_gitops.sim.fleet import write_atomic

PERIOD = 0.2


class PoolAgents:
    """Watches the sim's kubeconfig folder for clusters the fleet created (a thread)."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.started: dict[str, float] = {}  # cluster -> when its agent started (monotonic)
        self.stopped: dict[str, float] = {}
        self.admin_token: str | None = None  # the bootstrap's: it asks the leader for tokens
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pool-agents", daemon=True)

    def start(self) -> PoolAgents:
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(PERIOD):
            self.poll()

    def poll(self) -> None:
        """Start agents of new pool clusters; stop those whose cluster is gone."""
        fixed = set(self.stack.clusters)
        present = set()
        for path in sorted(self.stack.kube.glob("*.endpoints.json")):
            name = path.name.removesuffix(".endpoints.json")
            if name in fixed:
                continue
            present.add(name)
            if name in self.started and self.stack.procs.children[f"agent-{name}"].alive():
                continue
            try:
                endpoints = json.loads(path.read_text())
            except (OSError, ValueError):
                continue  # being written
            token = self._issue(name)
            if token is None:
                continue  # the leads do not know it as a pool cluster yet: next poll
            (port,) = free_ports(1)
            webhook = f"http://127.0.0.1:{port}"
            self._announce(name, webhook)
            self.stack.start_agent(name, token, endpoints["prometheus"], webhook)
            self.started[name] = time.monotonic()
        for name in sorted(set(self.started) - present):
            self._announce(name, None)
            child = self.stack.procs.children.get(f"agent-{name}")
            if child is not None and child.alive():
                self.stack.procs.kill(f"agent-{name}")
                self.stopped[name] = time.monotonic()

    def _issue(self, cluster: str) -> str | None:
        """The agent token the leader issues for a pool cluster (None: not yet)."""
        if self.admin_token is None:
            self.admin_token = create_token(self.stack.tokens_file, ADMIN)
        for lead in self.stack.leads:
            request = urllib.request.Request(f"{lead.url}/v1/clusters/{cluster}/token", data=b"{}",
                                             method="POST", headers={
                                                 "Authorization": f"Bearer {self.admin_token}",
                                                 "Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=5) as resp:
                    return str(json.loads(resp.read())["token"])
            except (OSError, ValueError, KeyError):
                continue
        return None

    def _announce(self, cluster: str, webhook: str | None) -> None:
        """Tell the goals repository's post-receive hook where the agent listens, so a push
        to its branch wakes it (as for the fixed clusters' agents)."""
        path = self.stack.root / "hook.json"
        config = json.loads(path.read_text())
        if webhook is None:
            config["agents"].pop(cluster, None)
        else:
            config["agents"][cluster] = webhook
        write_atomic(path, json.dumps(config))
