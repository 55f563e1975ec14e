"""Bring up the whole system on loopback: Git, the simulated fleet, three leads, nine agents.

Every long-running piece is a separate process in its own process group (``Processes``):
``git daemon`` (with the post-receive hook), one ``qonnect sim`` for the nine clusters,
one ``prometheus`` scraping them when the binary is installed (``demo.prometheus``), three
``qonnect lead`` and nine ``qonnect agent``. ``stop()`` ends them all.

Signals: with Prometheus the agents ask it, the latency from the probes (gauges, so the
scenarios judge by the latencies the goals declare) and the traffic with the Istio preset
(``rate()`` of the sims' ``istio_requests_total``); without it, each agent asks its sim's
own query subset. ``signals`` says which, and the demo prints it.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from qonnect_gitops.agent.prometheus import PRESETS
from qonnect_gitops.demo import prometheus
from qonnect_gitops.demo.procs import Processes
from qonnect_gitops.demo.template import PACKAGE, find_template
from qonnect_gitops.forge import ForgeSettings
from qonnect_gitops.gitstore.daemon import free_ports
from qonnect_gitops.gitstore.signing import new_key_file
from qonnect_gitops.lead.raft.secret import new_secret
from qonnect_gitops.lead.tokens import create_token, read_only_subject

FORGE_REPOSITORY = "demo/goals"
FORGE_NAME = "demo"
"""The fake forge as the leads' forges file names it, and the demo's goals select it."""


def git(*args: str | Path, cwd: Path | None = None) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "demo operator", "GIT_AUTHOR_EMAIL": "operator@example.org",
           "GIT_COMMITTER_NAME": "demo operator", "GIT_COMMITTER_EMAIL": "operator@example.org"}
    run = subprocess.run(["git", *map(str, args)], cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if run.returncode != 0:
        raise RuntimeError(f"git {' '.join(map(str, args))}: {run.stderr.strip()}")
    return run.stdout


def get_json(url: str, timeout: float = 1.0, token: str | None = None) -> Any:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout) as resp:
            return json.loads(resp.read())
    except (OSError, ValueError, urllib.error.URLError):
        return None


@dataclass
class LeadInfo:
    node_id: str
    raft: str
    http: str

    @property
    def url(self) -> str:
        return f"http://{self.http}"


@dataclass
class Settings:
    startup_delay: float = 1.0       # sim: seconds from binding a Pod to Running
    poll_seconds: float = 5.0        # leads: poll of main (webhooks make it rarely matter)
    agent_interval: float = 10.0     # agents: poll of their branch
    report_interval: float = 2.0     # agents: heartbeat (the template's intervalSeconds)
    reschedule_seconds: float = 10.0  # leads: periodic rescheduling pass (stability rules decide)
    use_prometheus: bool = True      # a real Prometheus when the binary is installed
    scrape_seconds: float = 1.0      # its scrape interval
    prometheus_window: str = "10s"   # the agents' rate() range


@dataclass
class Stack:
    root: Path
    settings: Settings = field(default_factory=Settings)
    clusters: list[str] = field(default_factory=list)
    leads: list[LeadInfo] = field(default_factory=list)
    endpoints: dict[str, dict[str, str]] = field(default_factory=dict)
    agent_hooks: dict[str, str] = field(default_factory=dict)
    template: Path | None = None  # the goals to start from (default: repo-template)
    sim_args: list[str] = field(default_factory=list)  # e.g. --capi for cloud bursting

    def __post_init__(self) -> None:
        self.procs = Processes(cwd=self.root)
        self.srv = self.root / "srv"
        self.bare = self.srv / "goals.git"
        self.work = self.root / "operator"
        self.kube = self.root / "kube"
        self.logs = self.root / "logs"
        self.secret_file = self.root / "webhook-secret"
        self.raft_secret_file = self.root / "raft-secret"  # the leads seal Raft frames with it
        self.tokens_file = self.root / "tokens"
        self.read_token = ""  # set once the tokens file is written (start)
        self.forge_token_file = self.root / "forge-token"
        self.forges_file = self.root / "forges.yaml"  # the leads' --forges
        # The leads sign every decision with this key; the agents trust only its public half.
        self.signing_key = self.root / "signing-key"
        self.trusted_keys = self.root / "trusted-keys"
        self.forge_url = ""  # the fake forge (GitHub dialect) the review scenario reviews on
        self.git_port = 0
        self.prometheus_url = ""  # the real Prometheus, when one runs
        self.scraped: set[str] = set()  # the clusters it scrapes
        self.signals = "the simulated clusters' own query API"
        self.env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(PACKAGE.parent), os.environ.get("PYTHONPATH")])),
                    "PYTHONUNBUFFERED": "1"}

    # ------------------------------------------------------------------ urls
    @property
    def repo_url(self) -> str:
        return f"git://127.0.0.1:{self.git_port}/goals.git"

    def kubeconfig(self, cluster: str) -> Path:
        return self.kube / f"{cluster}.yaml"

    # ------------------------------------------------------------------ start
    def start(self, on_step: Any = print) -> None:
        for d in (self.srv, self.kube, self.logs):
            d.mkdir(parents=True, exist_ok=True)
        self.secret_file.write_text(secrets.token_hex(16))
        self.secret_file.chmod(0o600)
        self.raft_secret_file.write_text(new_secret() + "\n")
        self.raft_secret_file.chmod(0o600)
        lead_key = new_key_file(self.signing_key, "qonnect-demo-leads")
        self.trusted_keys.write_text(f"qonnect@localhost {lead_key.public.openssh} qonnect-demo-leads\n")
        template = self.template or find_template()
        self.clusters = sorted(p.stem for p in (template / "clusters").glob("*.yaml"))
        ports = free_ports(1 + 2 * 3 + len(self.clusters) + 1)
        self.git_port = ports[0]
        self.leads = [LeadInfo(f"lead-{i + 1}", f"127.0.0.1:{ports[1 + 2 * i]}", f"127.0.0.1:{ports[2 + 2 * i]}")
                      for i in range(3)]
        self.agent_hooks = {c: f"http://127.0.0.1:{p}" for c, p in zip(self.clusters, ports[7:-1], strict=True)}

        # the goals repository: bare, served by git daemon, with the forge-like hook
        git("init", "-q", "--bare", "-b", "main", self.bare)
        git("-C", self.bare, "config", "receive.denyNonFastForwards", "true")
        hook_config = self.root / "hook.json"
        self.start_forge()
        hook_config.write_text(json.dumps({
            "secret_file": str(self.secret_file), "leads": [lead.url for lead in self.leads],
            "agents": self.agent_hooks, "log": str(self.logs / "hook.log"),
            "forge": self.forge_url, "forge_repository": FORGE_REPOSITORY}))
        hook = self.bare / "hooks" / "post-receive"
        hook.write_text(f"#!/bin/sh\nPYTHONPATH='{self.env['PYTHONPATH']}' exec '{sys.executable}' "
                        f"-m qonnect_gitops.demo.hook '{hook_config}'\n")
        hook.chmod(0o755)
        self.procs.start("git-daemon", [
            "git", "daemon", "--export-all", "--enable=receive-pack", "--reuseaddr", "--informative-errors",
            f"--base-path={self.srv}", "--listen=127.0.0.1", f"--port={self.git_port}", str(self.srv)],
            self.logs / "git-daemon.log")
        _wait_port(self.git_port, 10, "git daemon")
        git("clone", "-q", self.repo_url, self.work)
        git("checkout", "-q", "-B", "main", cwd=self.work)
        shutil.copytree(template, self.work, dirs_exist_ok=True)
        on_step(f"goals repository {self.repo_url} (from {template})")

        # simulated fleet: one process for the nine clusters
        self.procs.start("sim", self.cli("sim", "--clusters", str(self.work), "--kubeconfig-dir", str(self.kube),
                                         "--startup-delay", str(self.settings.startup_delay), *self.sim_args),
                         self.logs / "sim.log", self.env)
        # tokens and leads
        tokens = {c: create_token(self.tokens_file, c) for c in self.clusters}
        # The leads' reads need a token once they use a tokens file.
        self.read_token = create_token(self.tokens_file, read_only_subject("demo"))
        for lead in self.leads:
            self.start_lead(lead)
        self._wait(lambda: all((self.kube / f"{c}.endpoints.json").exists() for c in self.clusters), 60,
                   "simulated clusters", "sim")
        self.endpoints = {c: json.loads((self.kube / f"{c}.endpoints.json").read_text()) for c in self.clusters}
        on_step(f"{len(self.clusters)} simulated clusters up (kubeconfigs in {self.kube})")
        self.start_prometheus(ports[-1])
        on_step(f"signals: {self.signals}")
        for cluster in self.clusters:
            self.start_agent(cluster, tokens[cluster], self.endpoints[cluster]["prometheus"],
                             self.agent_hooks[cluster])
        self._wait(lambda: self.leader() is not None, 60, "an elected lead", "lead-1")
        on_step(f"3 leads up, leader {getattr(self.leader(), 'node_id', None)}; "
                f"{len(self.clusters)} agents started")

    def start_prometheus(self, port: int) -> None:
        """One real Prometheus scraping every cluster's sim, when the binary is installed; not
        waited for: until its first scrapes the agents report no signals, as after any start."""
        exe = prometheus.binary() if self.settings.use_prometheus else None
        if exe is None:
            return
        data = self.root / "prometheus"
        data.mkdir(parents=True, exist_ok=True)
        targets = {c: self.endpoints[c]["prometheus"] for c in self.clusters}
        (data / "prometheus.yml").write_text(prometheus.config(targets, self.settings.scrape_seconds))
        listen = f"127.0.0.1:{port}"
        self.procs.start("prometheus", prometheus.command(exe, data / "prometheus.yml", data / "tsdb", listen),
                         self.logs / "prometheus.log", self.env)
        self.prometheus_url, self.scraped = f"http://{listen}", set(targets)
        self.signals = (f"a real Prometheus ({exe}) at {self.prometheus_url}, scraping {len(targets)} clusters "
                        f"every {self.settings.scrape_seconds:g}s")

    def signal_args(self, cluster: str, sim_prometheus: str) -> list[str]:
        """The agent's Prometheus options: the real server for a cluster it scrapes, else the sim's own API."""
        if cluster not in self.scraped:
            return ["--prometheus", sim_prometheus]
        return ["--prometheus", self.prometheus_url, "--signals", "istio",
                "--latency-query", PRESETS["qonnect"].latency, "--prometheus-window", self.settings.prometheus_window]

    def start_agent(self, cluster: str, token: str, prometheus: str, webhook: str | None) -> None:
        """Start the agent of ``cluster`` with its token (also for a cluster a pool created)."""
        token_file = self.root / "agents" / cluster / "token"
        token_file.parent.mkdir(parents=True, exist_ok=True)
        token_file.write_text(token)
        token_file.chmod(0o600)
        hook = ["--webhook-addr", webhook.removeprefix("http://"),
                "--webhook-secret-file", str(self.secret_file)] if webhook else []
        self.procs.start(f"agent-{cluster}", self.cli(
            "agent", "--cluster", cluster, "--repo", self.repo_url, "--kubeconfig", str(self.kubeconfig(cluster)),
            "--lead", ",".join(lead.url for lead in self.leads), "--token-file", str(token_file),
            *self.signal_args(cluster, prometheus),
            "--cache-dir", str(token_file.parent / "cache"), "--trusted-keys", str(self.trusted_keys),
            "--interval", str(self.settings.agent_interval),
            "--report-interval", str(self.settings.report_interval), *hook),
            self.logs / f"agent-{cluster}.log", self.env, restart=True)  # as kubelet restarts it

    def start_forge(self) -> None:
        """The fake forge, hosting the goals repository as ``demo/goals`` and sending pull
        request webhooks to the leads (the first that accepts, as behind a load balancer)."""
        self.forge_token_file.write_text(secrets.token_hex(16))
        self.forge_token_file.chmod(0o600)
        url_file = self.root / "forge-url"
        config = self.root / "forge.json"
        config.write_text(json.dumps({
            "repositories": {FORGE_REPOSITORY: str(self.bare)}, "tokenFile": str(self.forge_token_file),
            "hooks": [{"url": ",".join(f"{lead.url}/v1/hooks/git" for lead in self.leads),
                       "secretFile": str(self.secret_file), "dialect": "github"}],
            "urlFile": str(url_file)}))
        self.procs.start("forge", self.cli_module("qonnect_gitops.forge.fake", str(config)),
                         self.logs / "forge.log", self.env)
        self._wait(url_file.exists, 30, "the fake forge", "forge")
        self.forge_url = url_file.read_text().strip()
        settings = self.forge_settings()
        self.forges_file.write_text(yaml.safe_dump({"forges": [{
            "name": settings.name, "type": settings.type, "url": settings.url, "repository": settings.repository,
            "tokenFile": str(settings.token_file)}]}))

    def forge_settings(self) -> ForgeSettings:
        """The fake forge as the leads are configured with it (``--forges``)."""
        return ForgeSettings(name=FORGE_NAME, type="github", url=self.forge_url, repository=FORGE_REPOSITORY,
                             token_file=self.forge_token_file)

    def cli_module(self, module: str, *args: str) -> list[str]:
        return [sys.executable, "-m", module, *args]

    def start_lead(self, lead: LeadInfo) -> None:
        self.procs.start(lead.node_id, self.cli(
            "lead", "--id", lead.node_id, "--raft", lead.raft, "--http", lead.http,
            "--peers", ",".join(other.raft for other in self.leads if other is not lead),
            "--repo", self.repo_url, "--data-dir", str(self.root / lead.node_id),
            "--raft-secret-file", str(self.raft_secret_file),
            "--tokens-file", str(self.tokens_file), "--webhook-secret-file", str(self.secret_file),
            "--forges", str(self.forges_file),
            "--signing-key", str(self.signing_key),
            "--poll-seconds", str(self.settings.poll_seconds),
            "--reschedule-seconds", str(self.settings.reschedule_seconds)),
            self.logs / f"{lead.node_id}.log", self.env)

    def cli(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "qonnect_gitops", *args]

    def stop(self) -> None:
        self.procs.stop_all()

    # ------------------------------------------------------------------ state
    def status(self, lead: LeadInfo) -> dict[str, Any] | None:
        if not self.procs.children.get(lead.node_id) or not self.procs.children[lead.node_id].alive():
            return None
        return get_json(lead.url + "/v1/status", token=self.read_token)  # type: ignore[no-any-return]

    def leader(self) -> LeadInfo | None:
        """The lead every live lead names, once its term is recorded (its loop runs)."""
        named = set()
        found = None
        for lead in self.leads:
            st = self.status(lead)
            if st is None:
                continue
            leader = st.get("leader") or {}
            named.add(leader.get("raft"))
            if (st["self"].get("state") == "leader" and leader.get("raft") == lead.raft
                    and st.get("leaderRecord") and st["leaderRecord"].get("term") == st.get("term")):
                found = lead
        return found if found is not None and named == {found.raft} else None

    def any_status(self) -> dict[str, Any] | None:
        for lead in self.leads:
            st = self.status(lead)
            if st is not None:
                return st
        return None

    def admin(self, cluster: str, action: str) -> None:
        url = self.endpoints[cluster]["admin"].rstrip("/")
        if not url.endswith("/_sim"):
            url += "/_sim"
        req = urllib.request.Request(f"{url}/{action}", data=b"{}", method="POST")
        with urllib.request.urlopen(req, timeout=5) as resp:
            resp.read()

    # ------------------------------------------------------------------ goals
    def push(self, path: str, old: str, new: str, message: str) -> str:
        """Edit one goals file as an operator would, commit and ``git push``; the commit."""
        target = self.work / path
        text = target.read_text()
        if text.count(old) != 1:
            raise ValueError(f"{path}: {old!r} occurs {text.count(old)} times")
        target.write_text(text.replace(old, new))
        return self.commit_push(message)

    def commit_push(self, message: str) -> str:
        git("add", "-A", cwd=self.work)
        git("commit", "-q", "-m", message, cwd=self.work)
        git("push", "-q", "origin", "main", cwd=self.work)
        return git("rev-parse", "HEAD", cwd=self.work).strip()

    def rev(self, ref: str) -> str | None:
        try:
            return git("-C", self.bare, "rev-parse", "--verify", "-q", ref).strip() or None
        except RuntimeError:
            return None

    def trailers(self, ref: str) -> dict[str, list[str]]:
        out = git("-C", self.bare, "log", "-1", "--format=%(trailers:only,unfold)", ref)
        result: dict[str, list[str]] = {}
        for line in out.splitlines():
            key, sep, value = line.partition(":")
            if sep:
                result.setdefault(key.strip(), []).append(value.strip())
        return result

    def _wait(self, pred: Any, timeout: float, what: str, log_of: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pred():
                return
            child = self.procs.children.get(log_of)
            if child is not None and not child.alive():
                break
            time.sleep(0.1)
        tail = ""
        child = self.procs.children.get(log_of)
        if child is not None and child.log_path.exists():
            tail = "\n".join(child.log_path.read_text(errors="replace").splitlines()[-20:])
        raise RuntimeError(f"timed out waiting for {what}; {log_of} log:\n{tail}")


def _wait_port(port: int, timeout: float, what: str) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on {port}")


def temp_root() -> Path:
    return Path(tempfile.mkdtemp(prefix="qonnect-demo-"))
