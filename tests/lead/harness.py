"""Real lead processes on loopback, for tests and ``benchmarks/lead.py``.

``LeadGroup`` starts ``python -m qonnect_gitops lead`` subprocesses on free
ports, each with its own data dir and log file, and always kills what it
started (``stop()``), so a failing test leaves no orphans behind.
"""

from __future__ import annotations

import json
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pygit2

from qonnect_gitops.lead.raft.secret import new_secret
from qonnect_gitops.lead.tokens import ADMIN, create_token, create_tokens, read_only_subject
from tests.load import scaled
from tests.ports import free_ports

ROOT = Path(__file__).resolve().parents[2]

FLEET = """apiVersion: qonnect.io/v1alpha1
kind: Fleet
metadata: {{name: test-fleet}}
spec:
  heartbeat: {{intervalSeconds: {interval}, graceSeconds: {grace}}}
  regions: [eu-central]
"""

CLUSTER = """apiVersion: qonnect.io/v1alpha1
kind: Cluster
metadata: {{name: {name}}}
spec:
  tier: edge
  region: eu-central
  nodes: [{{count: 2, cpu: "4", memory: 8Gi}}]
  cost: {{cpuHour: 0.05}}
  energy: {{wattsPerCpu: 5, carbonIntensity: 100}}
"""


# Its components want cloud clusters, and the test fleet has only edge ones: the
# leader's loop never places them, so the plans tests write (POST /v1/plan) stay.
SHOP_APP = """apiVersion: qonnect.io/v1alpha1
kind: QoSApp
metadata: {name: shop}
spec:
  namespace: shop
  defaults:
    qos: {tiers: [cloud]}
  components:
    - {name: web, manifests: [manifests/web.yaml], replicas: 2}
    - {name: db, manifests: [manifests/db.yaml]}
    - {name: migrate, manifests: [manifests/migrate.yaml]}
"""

SHOP_WEB = """apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
        - name: web
          image: nginx:1.27
          resources: {requests: {cpu: 100m, memory: 64Mi}}
"""

SHOP_MIGRATE = """apiVersion: batch/v1
kind: Job
metadata: {name: migrate}
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
        - name: migrate
          image: example/migrate:{tag}
          resources: {requests: {cpu: 100m, memory: 64Mi}}
"""


def goals_files(clusters: list[str], grace: float = 30.0, interval: float = 1.0,
                shop: bool = False, job_tag: str = "1") -> dict[str, bytes]:
    """A minimal valid goals tree: the fleet file and one file per cluster; with ``shop``
    also an app ``shop`` with Deployments ``shop/web`` and ``shop/db`` and a Job
    ``shop/migrate`` (none of which the planner can place on the edge-only fleet)."""
    files = {"qonnect.yaml": FLEET.format(interval=interval, grace=grace).encode()}
    for name in clusters:
        files[f"clusters/{name}.yaml"] = CLUSTER.format(name=name).encode()
    if shop:
        files["apps/shop/app.yaml"] = SHOP_APP.encode()
        files["apps/shop/manifests/web.yaml"] = SHOP_WEB.encode()
        files["apps/shop/manifests/db.yaml"] = SHOP_WEB.replace("web", "db").encode()
        files["apps/shop/manifests/migrate.yaml"] = SHOP_MIGRATE.replace("{tag}", job_tag).encode()
    return files


def _tree(repo: pygit2.Repository, files: dict[str, bytes]) -> pygit2.Oid:
    builder = repo.TreeBuilder()
    subdirs: dict[str, dict[str, bytes]] = {}
    for path, data in files.items():
        head, _, rest = path.partition("/")
        if rest:
            subdirs.setdefault(head, {})[rest] = data
        else:
            builder.insert(head, repo.create_blob(data), pygit2.GIT_FILEMODE_BLOB)
    for name, sub in subdirs.items():
        builder.insert(name, _tree(repo, sub), pygit2.GIT_FILEMODE_TREE)
    return builder.write()


def commit_goals(repo_path: Path, files: dict[str, bytes], message: str = "goals") -> str:
    """Commit ``files`` as the whole tree of ``main`` in the bare repo (created if absent)."""
    if (repo_path / "HEAD").exists():
        repo = pygit2.Repository(str(repo_path))
    else:
        repo = pygit2.init_repository(str(repo_path), bare=True, initial_head="main")
    sig = pygit2.Signature("test", "test@example.org")
    ref = repo.references.get("refs/heads/main")
    parents = [ref.target] if ref is not None else []
    oid = repo.create_commit("refs/heads/main", sig, sig, message, _tree(repo, files), parents)
    return str(oid)



def http(method: str, url: str, body: Any = None, token: str | None = None,
         timeout: float = 5.0, raw: bytes | None = None,
         headers: dict[str, str] | None = None,
         context: ssl.SSLContext | None = None) -> tuple[int, dict[str, str], Any]:
    """One HTTP(S) request; returns (status, headers, parsed JSON or text)."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    hdrs = {"Content-Type": "application/json", **(headers or {})}
    if token:
        hdrs["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, data=data, headers=hdrs, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=context) as resp:
            status, rhdrs, payload = resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as exc:
        status, rhdrs, payload = exc.code, dict(exc.headers), exc.read()
    ctype = rhdrs.get("Content-Type", "")
    return status, rhdrs, json.loads(payload) if "json" in ctype and payload else payload.decode()


def report(cluster: str, agent_time: float | None = None, nodes: int = 2,
           ready: bool = True) -> dict[str, Any]:
    """A valid agent report for ``cluster``."""
    when = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(agent_time or time.time()))
    frac = f"{(agent_time or time.time()) % 1:.6f}"[1:]
    return {
        "cluster": cluster,
        "agentTime": when + frac + "Z",
        "applied": {"commit": "a" * 40, "generation": 0},
        "sync": {"state": "Ready", "reason": "ApplySucceeded", "message": "all applied"},
        "nodes": [
            {"name": f"{cluster}-n{i}", "ready": ready, "allocatableCpu": "4",
             "allocatableMemory": "8Gi", "freeCpu": "2500m", "freeMemory": "6Gi"}
            for i in range(nodes)
        ],
        "components": [{"component": "shop/web", "healthy": True, "readyReplicas": 2,
                        "desiredReplicas": 2}],
        "latencies": [{"to": "eu-central", "ms": 12.5}],
        "traffic": [{"component": "shop/web", "region": "eu-central", "rps": 40.0}],
    }


@dataclass
class Lead:
    """One lead process and its addresses."""

    node_id: str
    raft: str
    http: str
    data_dir: Path
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    # Run under this prefix (e.g. ``ip netns exec NS``), with these extra args and env.
    prefix: list[str] = field(default_factory=list)
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    tls: bool = False

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.http}"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


@dataclass
class LeadGroup:
    """A group of lead processes sharing one goals repo and one tokens file."""

    root: Path
    size: int = 3
    clusters: list[str] = field(default_factory=lambda: ["edge-1", "edge-2", "edge-3"])
    grace: float = 30.0
    # Declare the app ``shop`` (see goals_files): plans and reports may name its components.
    shop: bool = True
    extra_args: list[str] = field(default_factory=list)
    # A goals repository served elsewhere (e.g. ``tests.goals_repo``); None: a local bare
    # repo with ``goals_files(clusters)`` is created under ``root``.
    repo_url: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    # Serve the API over HTTPS with a certificate of a CA made for the group.
    tls: bool = False
    # Run with the tokens file (False: a local trial, where reads are open).
    use_tokens: bool = True
    leads: list[Lead] = field(default_factory=list)
    tokens: dict[str, str] = field(default_factory=dict)
    admin_token: str = ""
    read_token: str = ""
    client_context: ssl.SSLContext | None = None

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        if self.tls:
            from tests.lead.tls import make_certificates

            self.certs = make_certificates(self.root / "tls")
            self.client_context = ssl.create_default_context(cafile=str(self.certs.ca))
        self.repo_path = self.root / "goals.git"
        if self.repo_url is None:
            self.goals_commit = commit_goals(self.repo_path,
                                             goals_files(self.clusters, self.grace, shop=self.shop))
        # The group's Raft secret: every frame between the leads is sealed with it.
        self.raft_secret_file = self.root / "raft-secret"
        if not self.raft_secret_file.exists():
            self.raft_secret_file.write_text(new_secret() + "\n")
            self.raft_secret_file.chmod(0o600)
        self.tokens_file = self.root / "tokens"
        self.tokens.update(zip(self.clusters, create_tokens(self.tokens_file, self.clusters)))
        self.admin_token = create_token(self.tokens_file, ADMIN)
        self.read_token = create_token(self.tokens_file, read_only_subject("tests"))
        for i in range(self.size):
            self.leads.append(self.new_lead(f"lead-{i + 1}"))

    def new_lead(self, node_id: str) -> Lead:
        """Addresses and dirs for a lead (not started)."""
        raft_port, http_port = free_ports(2)
        return Lead(node_id, f"127.0.0.1:{raft_port}", f"127.0.0.1:{http_port}",
                    self.root / node_id, self.root / f"{node_id}.log", tls=self.tls)

    def command(self, lead: Lead, peers: list[str]) -> list[str]:
        return [
            sys.executable, "-m", "qonnect_gitops", "lead",
            "--id", lead.node_id, "--raft", lead.raft, "--http", lead.http,
            "--peers", ",".join(p for p in peers if p != lead.raft),
            "--repo", self.repo_url or str(self.repo_path), "--data-dir", str(lead.data_dir),
            "--raft-secret-file", str(self.raft_secret_file),
            *(["--tokens-file", str(self.tokens_file)] if self.use_tokens else []),
            "--poll-seconds", "0.5",
            *self.tls_args(), *self.extra_args, *lead.args,
        ]

    def tls_args(self) -> list[str]:
        if not self.tls:
            return []
        return ["--tls-cert", str(self.certs.cert), "--tls-key", str(self.certs.key),
                "--tls-ca", str(self.certs.ca)]

    def get(self, lead: Lead, path: str, token: str | None = None,
            timeout: float = 5.0) -> tuple[int, dict[str, str], Any]:
        """GET ``path`` from a lead with the read-only token (or ``token``)."""
        return http("GET", lead.url + path, token=token or self.read_token, timeout=timeout,
                    context=self.client_context)

    def post(self, lead: Lead, path: str, body: Any = None, token: str | None = None,
             raw: bytes | None = None, headers: dict[str, str] | None = None,
             timeout: float = 5.0) -> tuple[int, dict[str, str], Any]:
        """POST to a lead (HTTPS when the group uses TLS)."""
        return http("POST", lead.url + path, body, token=token, raw=raw, headers=headers,
                    timeout=timeout, context=self.client_context)

    def start(self, lead: Lead, peers: list[str] | None = None) -> None:
        """Start (or restart) one lead process, appending to its log."""
        peers = peers if peers is not None else [member.raft for member in self.leads]
        env = {**os.environ, "PYTHONPATH": str(ROOT), **self.env, **lead.env}
        with open(lead.log_path, "ab") as log:
            lead.proc = subprocess.Popen(lead.prefix + self.command(lead, peers), stdout=log, stderr=log,
                                         env=env, cwd=str(ROOT))

    def start_all(self) -> None:
        for lead in self.leads:
            self.start(lead)

    def kill(self, lead: Lead, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` and wait for the process to exit."""
        if lead.alive():
            assert lead.proc is not None
            lead.proc.send_signal(sig)
            lead.proc.wait(timeout=10)

    def stop(self) -> None:
        """Kill every process we started (SIGTERM, then SIGKILL)."""
        for lead in self.leads:
            if lead.alive():
                assert lead.proc is not None
                lead.proc.terminate()
        deadline = time.monotonic() + 5
        for lead in self.leads:
            if lead.proc is not None:
                try:
                    lead.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    lead.proc.kill()
                    lead.proc.wait(timeout=5)

    def status(self, lead: Lead, timeout: float = 2.0) -> dict[str, Any] | None:
        """``/v1/status`` of one lead (read with the admin token), or None if it does not
        answer."""
        try:
            code, _, body = http("GET", lead.url + "/v1/status", timeout=timeout,
                                 token=self.admin_token, context=self.client_context)
        except (OSError, urllib.error.URLError):
            return None
        return body if code == 200 else None

    def wait_leader(self, timeout: float = 15.0, among: list[Lead] | None = None,
                    agreed: bool = True) -> Lead:
        """Wait until a live lead believes it leads and (if ``agreed``) every live lead
        in ``among`` names it; returns it."""
        among = [m for m in (among or self.leads) if m.alive()]
        timeout = scaled(timeout)
        deadline = time.monotonic() + timeout
        last: list[Any] = []
        while time.monotonic() < deadline:
            statuses = [self.status(m, timeout=1.0) for m in among]
            last = statuses
            # A leader counts once its term is recorded in the log: only then does the
            # KB refuse older terms' plans, and only then does its reconcile loop run.
            leaders = [m for m, st in zip(among, statuses)
                       if st and st["self"]["state"] == "leader" and st["leader"]
                       and st["leader"]["raft"] == m.raft and st.get("leaderRecord")
                       and st["leaderRecord"]["term"] == st["term"]]
            if len(leaders) == 1:
                leader = leaders[0]
                named = [st and st["leader"] and st["leader"]["raft"] == leader.raft
                         for st in statuses]
                if not agreed or all(named):
                    return leader
            time.sleep(0.05)
        raise AssertionError(f"no agreed leader within {timeout}s: "
                             f"{[(s or {}).get('leader') for s in last]}\n{self.log_tails()}")

    def wait_until(self, predicate: Any, timeout: float = 15.0, what: str = "condition") -> Any:
        """Poll ``predicate()`` until it returns something truthy (the deadline stretches
        with the machine's load)."""
        deadline = time.monotonic() + scaled(timeout)
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what}\n{self.log_tails()}")

    def log_tails(self, lines: int = 15) -> str:
        """The last lines of every lead's log, for failure messages."""
        out = []
        for lead in self.leads:
            try:
                text = lead.log_path.read_text(errors="replace").splitlines()[-lines:]
            except FileNotFoundError:
                text = ["(no log)"]
            out.append(f"--- {lead.node_id} ({'alive' if lead.alive() else 'dead'})\n"
                       + "\n".join(text))
        return "\n".join(out)
