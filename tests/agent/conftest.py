"""Fixtures of the agent tests: a simulated cluster, a goals repository served by git
daemon whose cluster branch is written by ``GitStore`` (as the leader writes it), and
agents wired to both through the official client and a real Git transport."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pygit2
import pytest
import yaml
from kubernetes import client, config

from qonnect_gitops.agent.agent import Agent
from qonnect_gitops.agent.config import AgentConfig
from qonnect_gitops.gitstore import trailers as tr
from qonnect_gitops.gitstore.daemon import GitDaemon, free_port
from qonnect_gitops.gitstore.store import GitStore
from qonnect_gitops.gitstore.trailers import DecisionMeta
from qonnect_gitops.sim import SimCluster

CLUSTER = "edge-1"
LABELS = {"app.kubernetes.io/managed-by": "qonnect", "qonnect.io/app": "shop"}


def configmap(name: str, ns: str = "shop", component: str = "web", data: dict[str, str] | None = None,
              annotations: dict[str, str] | None = None, owned: bool = True) -> dict[str, Any]:
    labels = {**LABELS, "qonnect.io/component": component} if owned else {"team": "other"}
    meta: dict[str, Any] = {"name": name, "namespace": ns, "labels": labels}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data or {"k": name}}


def configmap_names(core: client.CoreV1Api, ns: str = "shop") -> set[str]:
    """ConfigMaps in ``ns``, leaving out ``kube-root-ca.crt`` (every namespace of a cluster has it)."""
    return {c.metadata.name for c in core.list_namespaced_config_map(ns).items if c.metadata.name != "kube-root-ca.crt"}


def namespace(name: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": dict(LABELS)}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


def deployment(name: str, ns: str = "shop", component: str | None = None, replicas: int = 2,
               image: str = "nginx:1.27") -> dict[str, Any]:
    comp = component or name
    labels = {**LABELS, "qonnect.io/component": comp}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [{"name": name, "image": image,
                                                       "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}}},
    }


def path_of(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    if obj["kind"] == "Namespace":
        return f"_cluster/namespace-{meta['name']}.yaml"
    if not meta.get("namespace"):
        return f"_cluster/{obj['kind'].lower()}-{meta['name']}.yaml"
    comp = (meta.get("labels") or {}).get("qonnect.io/component", "misc")
    return f"{meta['namespace']}/{comp}/{obj['kind'].lower()}-{meta['name']}.yaml"


@dataclass
class Branch:
    """The goals repository's ``cluster/edge-1`` branch, written the way the leader writes it."""

    store: GitStore
    daemon: GitDaemon
    bare: Path
    generation: int = 0
    clock: Iterator[int] = field(default_factory=lambda: itertools.count(1_700_000_000, 10))

    @property
    def url(self) -> str:
        return self.daemon.url(self.bare.name)

    def publish(self, objects: list[dict[str, Any]], prune_limit: int | None = None, term: int = 1) -> str:
        """A plan decision whose cluster subtree holds ``objects``; returns the cluster commit."""
        self.generation += 1
        files = {"placement.yaml": f"generation: {self.generation}\n".encode()}
        for obj in objects:
            files[f"clusters/{CLUSTER}/{path_of(obj)}"] = yaml.safe_dump(obj, sort_keys=False).encode()
        self.store.write_decision(
            files, summary=f"plan {self.generation}", body="test decision",
            meta=DecisionMeta(source="0" * 40, term=term, generation=self.generation, reason="goals-changed"),
            clusters=[CLUSTER], timestamp=next(self.clock),
            prune_limits={CLUSTER: prune_limit} if prune_limit is not None else None)
        head = self.store.cluster_head(CLUSTER)
        assert head is not None
        return head

    def raw_commit(self, objects: list[dict[str, Any]], generation: int | None, term: int = 1,
                   extra: list[tuple[str, str]] | None = None) -> str:
        """A cluster commit written directly (no GitStore checks): e.g. a deposed leader's
        late write with an older generation, or an empty tree without ``Qonnect-Allow-Empty``."""
        from qonnect_gitops.gitstore.tree import build_tree

        repo = self.store.repo
        tree = build_tree(repo, {path_of(o): yaml.safe_dump(o, sort_keys=False).encode() for o in objects})
        ref = f"refs/heads/cluster/{CLUSTER}"
        parent = repo.references[ref].target
        sig = pygit2.Signature("old leader", "old@example.org", next(self.clock), 0)
        trailers = [(tr.SOURCE, "0" * 40), (tr.TERM, str(term))]
        if generation is not None:
            trailers.append((tr.GENERATION, str(generation)))
        trailers += [(tr.REASON, "goals-changed"), *(extra or [])]
        oid = repo.create_commit(None, sig, sig, tr.format_message("raw write", "written by a test", trailers),
                                 tree, [parent])
        repo.references[ref].set_target(oid)
        return str(oid)


@pytest.fixture
def sim() -> Iterator[SimCluster]:
    with SimCluster(name=CLUSTER, bookmark_interval=0.3, namespace_delay=0.0) as cluster:
        yield cluster


@pytest.fixture
def api(sim: SimCluster) -> client.ApiClient:
    return config.new_client_from_config_dict(sim.kubeconfig())


@pytest.fixture
def core(api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


@pytest.fixture
def apps(api: client.ApiClient) -> client.AppsV1Api:
    return client.AppsV1Api(api)


@pytest.fixture
def branch(tmp_path: Path) -> Iterator[Branch]:
    srv = tmp_path / "srv"
    srv.mkdir()
    bare = srv / "goals.git"
    store = GitStore.init_bare(bare)
    with GitDaemon(srv, port=free_port()) as daemon:  # a fixed port: a stopped daemon comes back at the same URL
        yield Branch(store, daemon, bare)


@pytest.fixture
def make_agent(sim: SimCluster, branch: Branch, tmp_path: Path) -> Iterator[Any]:
    made: list[Agent] = []

    def make(**overrides: Any) -> Agent:
        settings: dict[str, Any] = dict(
            cluster=CLUSTER, repo=branch.url, kubeconfig=sim.kubeconfig(), cache_dir=tmp_path / "cache",
            api_backoff=0.01, api_backoff_max=0.1, interval=0.2, jitter=0.1, drift_interval=0.5,
            report_interval=0.3, wait_timeout=0.0, ready_timeout=5.0)
        settings.update(overrides)
        agent = Agent(AgentConfig(**settings))
        made.append(agent)
        return agent

    yield make
    for agent in made:
        agent.stop()


@dataclass
class Recorder:
    """A loopback stand-in for a lead: records report bodies and when each arrived
    (``times``, monotonic, one per accepted report), answers with ``response``."""

    server: Any
    reports: list[dict[str, Any]] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    auth: list[str] = field(default_factory=list)
    response: dict[str, Any] = field(default_factory=lambda: {"accepted": True, "generation": 0})
    status: int = 200

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    import json
    import threading
    import time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    rec: Recorder

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            rec.auth.append(self.headers.get("Authorization", ""))
            if rec.status == 200:
                rec.reports.append({"path": self.path, **body})
                rec.times.append(time.monotonic())
            data = json.dumps(rec.response if rec.status == 200 else {"message": "nope"}).encode()
            self.send_response(rec.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    rec = Recorder(server)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield rec
    server.shutdown()
    server.server_close()


def wait_for(predicate: Any, timeout: float = 10.0, what: str = "condition") -> Any:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
