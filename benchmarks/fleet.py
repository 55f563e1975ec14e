"""One benchmark for the whole fleet: what each cycle and each poll costs at N clusters.

    PYTHONPATH=. nice python benchmarks/fleet.py --clusters 1000 [--clusters 3000] [--json]
        [--poll 30] [--report 10] [--git-poll-max-interval 300] [--ingest-seconds 10]

Generated goals: N clusters over eight regions, apps of 10 components (10 N
components, fewer where that passes the goals tree's limit of 20,000 files: 5 N at
3,000 clusters, about 9,000 at 10,000, where the cluster files take half the limit),
one Deployment manifest each, and a network.yaml with every cluster's latency to every
region (to its own region only where the table would pass the 1 MiB document limit:
10,000 clusters). Everything runs on loopback in this process, except the
Git server (``git daemon``) and, with ``--ingest-seconds``, a group of three leads.

Figures per size (``--json`` prints ``{"sizes": {"<N>": {...}}}``):

* ``goals_load_s``: the goals parsed and validated from nothing (a new leader);
  ``goals_one_changed_s``: the same after one cluster file changed, with the lead's
  parse cache (only that blob is parsed again).
* ``first_cycle_s``: a new leader's first cycle with the goals loaded (fetch, plan,
  render, write every branch, push); ``fanout_push_s``: its write and push alone,
  ``fanout_publish_s`` the push alone, ``fanout_write_cpu_s`` the CPU time of the write
  (user and system: writing refs is mostly system time).
* ``idle_cycle_s``: a leader cycle with nothing changed, as the lead's loop runs it (a
  v2 ``ls-refs`` of main, plan and proposals; the decision memo recalls the plan and its
  rendering; nothing written): the median of ``IDLE_CYCLES`` in a row, and
  ``idle_cycle_max_s`` the longest of them (one sample moved between 0.21 and 0.37 s at
  10,000 from run to run); ``idle_cycle_first_s``: the first such cycle after a decision
  (the plan in force is new: it plans, renders and compares);
  ``idle_cycle_replan_s``: a rescheduling cycle (plan afresh, find the decision in
  force again, take the rendering its commit is known to hold, write nothing), once per
  rescheduling interval and after a report that changed the picture. The garbage collector runs as in a lead
  (its thresholds, and what is alive frozen when a new goals commit is recorded): with
  Python's defaults a full collection of the whole fleet's goals (1.1 s at 10,000)
  lands in whichever cycle its allocation count falls.
* ``one_changed_s``: a goals push changing one manifest, from fetch to every branch
  pushed; ``one_changed_write_push_s``: its write and push alone, ``one_changed_publish_s``
  the push alone, ``one_changed_write_cpu_s`` the CPU time of the write (which other load
  on the machine inflates far less than the wall-clock figures),
  ``one_changed_branches``: how many cluster branches moved and ``one_changed_pushes``
  in how many pushes (one atomic push; two with ``--two-pushes``);
  ``one_changed_pack_bytes``: the pack of the objects that decision added (what its push
  sends, undeltified; the decision's files are in it when they changed). Measured on
  the second goals change after the initial decision: the first (``first_change_s``,
  ``first_change_pack_bytes``) also rewrites why every component is where it is (placed
  there -> kept there), once.
* ``one_scaled_s``: a goals push giving one component one replica more (its entry in
  the decision changes too), and its ``one_scaled_write_push_s``, ``one_scaled_publish_s``,
  ``one_scaled_write_cpu_s``, ``one_scaled_branches`` and ``one_scaled_pack_bytes``.
* ``failover_cycle_s``: a cycle after one hosting cluster failed (its components move,
  the rest of the decision stays), and its ``failover_write_push_s``,
  ``failover_publish_s``, ``failover_write_cpu_s``, ``failover_moves``,
  ``failover_branches`` and ``failover_pack_bytes``, as for one_changed.
* ``idle_cycle_jitter_s``: a cycle after every agent measured its latency again within
  +-3 %, the leader holding latencies through jitter (``lead/latency_hold.py``);
  ``idle_cycle_jitter_unheld_s``: the same without the hold (the planner sees new
  latency tables and decides the whole fleet again).
* ``agent_poll_bytes`` / ``agent_poll_server_cpu_ms``: an idle agent's poll, both
  directions, counted by a relay in front of the Git server, and the server's CPU per
  poll (``git daemon``'s children) with refs packed (``..._loose_refs``: as pushed;
  ``..._one_branch``: the same poll of a repository holding that branch alone, the
  server's cost per connection that no fleet size changes);
  ``agent_fetch_v0_bytes``: the same poll as a libgit2 fetch (protocol v0: every ref
  advertised), for comparison. ``server_upkeep_s``: the server's maintenance after the
  fan-out (pack refs, add a commit-graph layer), as a kept server runs it; the later
  pushes (``one_changed_...``) meet a server kept that way.
* ``new_leader_fetch_bytes``: a new leader's first fetch of the goals repository.
* ``kb_snapshot_s``: the leader's view of the fleet taken at the start of every cycle,
  from one report per cluster (the cycles above observe through it, as a lead does);
  ``kb_snapshot_first_s``: the first one after the reports arrived.
* ``plan_full_s`` / ``plan_steady_s`` / ``plan_failover_s``: the planner alone, from
  nothing; the next cycle with nothing changed (the first after a decision plans every
  component again, once); then the cycle after that, one hosting cluster failed: a
  failover as a running fleet meets it.
* ``reports_per_s``: committed reports per second by three leads, from 1,000 keep-alive
  connections in two client processes (``benchmarks/lead.py``'s ingest; ``--ingest-seconds``;
  ``null`` when not run).

The cost model below the table turns these into what a fleet of N agents polling every
``--poll`` seconds and reporting every ``--report`` seconds asks of the Git server
and the leads. The ``..._with_answers`` figures are for idle agents whose report answers
name the commit they have (every lead's answers do): they ask Git only every
``--git-poll-max-interval`` seconds, and a goals change reaches them at their next report
rather than their next poll; ``lead_answer_bytes_per_s_added`` is what the ``commit``
field adds to the leads' answers (``benchmarks/branch_heads.py`` measures the share of
answers that name it and what recording the heads costs the leads).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pygit2

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from qonnect_gitops.agent import source
from qonnect_gitops.gitstore import gitcli
from qonnect_gitops.gitstore.daemon import GitDaemon
from qonnect_gitops.gitstore.remote import Mirror
from qonnect_gitops.gitstore.tree import build_tree
from qonnect_gitops.kb import (
    KnowledgeBase,
    ReportEntry,
    ReportRecord,
    heartbeat_from_goals,
    inventory_from_goals,
    workloads_from_goals,
)
from qonnect_gitops.lead import reconcile
from qonnect_gitops.lead.latency_hold import LatencyHold, latency_envelopes
from qonnect_gitops.lead.memo import DecisionMemo
from qonnect_gitops.lead.raft.collector import GC_THRESHOLDS, freeze_long_lived
from qonnect_gitops.lead.reconcile import CycleHooks, reconcile_once
from qonnect_gitops.model import (
    CurrentPlacement,
    Goals,
    Observed,
    ParseCache,
    load_goals,
)
from qonnect_gitops.model.limits import MAX_DOCUMENT_BYTES, MAX_TREE_FILES
from qonnect_gitops.model.observed import ObservedLatency, empty_observation
from qonnect_gitops.model.report import AgentReport
from qonnect_gitops.placement import plan as make_plan
from tests.gitstore.helpers import CountingProxy

REGIONS = 8
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
POLLS = 50  # idle polls averaged (CPU time comes in 10 ms ticks)
IDLE_CYCLES = 5  # idle cycles in a row: their median is idle_cycle_s
APP_SIZE = 10


def cluster_name(i: int) -> str:
    """The name of generated cluster ``i`` (its tier in the name, as operators do)."""
    tier = ("cloud", "fog", "edge")[0 if i % 10 == 0 else 1 if i % 10 < 4 else 2]
    return f"{tier}-{i:05d}"


def fleet_goals(clusters: int, components_per_cluster: int = 10) -> dict[str, bytes]:
    """A goals tree: ``clusters`` Cluster files and ``clusters * components_per_cluster``
    components in apps of ``APP_SIZE``, each with one Deployment manifest."""
    regions = [f"region-{r}" for r in range(REGIONS)]
    files: dict[str, bytes] = {}
    files["qonnect.yaml"] = (
        "apiVersion: qonnect.io/v1alpha1\nkind: Fleet\nmetadata:\n  name: bench\nspec:\n"
        "  review:\n    mode: auto\n  mesh: none\n  regions: [" + ", ".join(regions) + "]\n"
    ).encode()
    links = []
    for i in range(clusters):
        name = cluster_name(i)
        tier = name.split("-", 1)[0]
        region = regions[i % REGIONS]
        count, cpu, memory = {"cloud": (6, "16", "64Gi"), "fog": (3, "8", "32Gi"), "edge": (2, "4", "8Gi")}[tier]
        files[f"clusters/{name}.yaml"] = (
            f"apiVersion: qonnect.io/v1alpha1\nkind: Cluster\nmetadata:\n  name: {name}\n"
            f"  labels:\n    zone: z{i % 3}\nspec:\n  tier: {tier}\n  distribution: k8s\n"
            f"  region: {region}\n  nodes:\n    - {{count: {count}, cpu: \"{cpu}\", memory: {memory}, arch: amd64}}\n"
            f"  cost:\n    cpuHour: 0.0{3 + i % 5}\n    memoryGiBHour: 0.005\n"
            f"  energy:\n    wattsPerCpu: 9\n    carbonIntensity: {100 + i % 300}\n"
        ).encode()
        base = {"cloud": 8, "fog": 4, "edge": 1}[tier]
        for r, other in enumerate(regions):
            links.append(f"    - {{from: {name}, to: {other}, ms: {base + 10 * abs(r - i % REGIONS)}}}\n")
    files["network.yaml"] = (
        "apiVersion: qonnect.io/v1alpha1\nkind: Network\nmetadata:\n  name: bench\nspec:\n"
        "  latencies:\n" + "".join(links)
    ).encode()
    total = clusters * components_per_cluster
    for a in range(0, total, APP_SIZE):
        app = f"app-{a // APP_SIZE:05d}"
        lines = [(f"apiVersion: qonnect.io/v1alpha1\nkind: QoSApp\nmetadata:\n  name: {app}\nspec:\n"
                  f"  namespace: {app}\n  defaults:\n    qos:\n      objective: cost\n  components:\n")]
        for k in range(min(APP_SIZE, total - a)):
            lines.append(f"    - name: c{k}\n      manifests: [manifests/c{k}.yaml]\n")
            if k % 3 == 0:
                region = regions[(a // APP_SIZE) % REGIONS]
                lines.append(f"      qos:\n        latency:\n          - {{region: {region}, maxMs: 60}}\n")
            files[f"apps/{app}/manifests/c{k}.yaml"] = (
                f"apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: c{k}\n  labels:\n    app: c{k}\n"
                f"spec:\n  replicas: {1 + k % 2}\n  selector:\n    matchLabels:\n      app: c{k}\n"
                f"  template:\n    metadata:\n      labels:\n        app: c{k}\n    spec:\n      containers:\n"
                f"        - name: main\n          image: registry.example.org/{app}/c{k}:1.0.{k}\n"
                f"          resources:\n            requests:\n              cpu: {100 + 50 * (k % 4)}m\n"
                f"              memory: {64 * (1 + k % 4)}Mi\n"
            ).encode()
        files[f"apps/{app}/app.yaml"] = "".join(lines).encode()
    return files


_LINK = re.compile(rb"from: [a-z]+-(\d+), to: region-(\d+),")


def within_limits(files: dict[str, bytes]) -> dict[str, bytes]:
    """``files`` within the goals' limits: less whole apps from the last, until the tree is
    within ``MAX_TREE_FILES`` (at 10,000 clusters one component per cluster is already past
    it), and, where network.yaml would be one document past ``MAX_DOCUMENT_BYTES``, with
    each cluster's latency to its own region only (every region is still measured)."""
    apps = sorted({p.split("/")[1] for p in files if p.startswith("apps/")})
    while len(files) > MAX_TREE_FILES:
        gone = f"apps/{apps.pop()}/"
        files = {p: b for p, b in files.items() if not p.startswith(gone)}
    if len(files["network.yaml"]) > 2 * MAX_DOCUMENT_BYTES:  # 3,000 clusters: 1.1 MB, within
        lines = files["network.yaml"].splitlines(keepends=True)
        files["network.yaml"] = b"".join(
            line for line in lines
            if (m := _LINK.search(line)) is None or int(m.group(1)) % REGIONS == int(m.group(2)))
    return files


def _commit_goals(repo: pygit2.Repository, files: dict[str, bytes], message: str, when: int) -> str:
    """Commit ``files`` on main of the served repository (as an operator's push would)."""
    sig = pygit2.Signature("op", "op@example.org", when, 0)
    parents = [repo.references["refs/heads/main"].target] if "refs/heads/main" in repo.references else []
    return str(repo.create_commit("refs/heads/main", sig, sig, message, build_tree(repo, files), parents))


def _stat(pid: int) -> list[str]:
    """The fields of /proc/<pid>/stat after the command name (so field 4, ppid, is [1])."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def _daemon_pid(pid: int) -> int:
    """``git daemon`` runs ``git-daemon`` as its child: the process whose children serve."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int(_stat(int(entry.name))[1]) == pid:
                    return int(entry.name)
            except (OSError, IndexError, ValueError):
                continue
    return pid


def _children_cpu_s(pid: int) -> float:
    """CPU seconds of the reaped children of ``pid`` (git daemon's upload-packs)."""
    fields = _stat(pid)
    return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


class _WriteTimer:
    """Times the decision write and the publish of a mirror (the fan-out and push), and
    counts the pushes."""

    def __init__(self, mirror: Mirror) -> None:
        self.seconds = 0.0
        self.publish_seconds = 0.0  # the push alone (``seconds`` has the write too)
        self.write_cpu_seconds = 0.0  # this process's CPU in the write (robust to other load)
        self.pushes = 0
        mirror.store.write_decision = self._wrap(mirror.store.write_decision)  # type: ignore[method-assign]
        mirror.publish = self._wrap(mirror.publish, publish=True)  # type: ignore[method-assign]

    def _wrap(self, fn: Callable[..., Any], publish: bool = False) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start, cpu = time.perf_counter(), time.process_time()
            try:
                out = fn(*args, **kwargs)
                if publish:
                    self.pushes += out.pushes
                return out
            finally:
                elapsed = time.perf_counter() - start
                self.seconds += elapsed
                if publish:
                    self.publish_seconds += elapsed
                else:
                    self.write_cpu_seconds += time.process_time() - cpu
        return timed


def _pack_bytes(git_dir: str, refs: Any) -> int:
    """The size of the pack of what moving ``refs`` (RefChange) added: the objects a push
    of them sends to a remote that has the old commits (without deltas against them)."""
    revs = [r.new for r in refs if r.new] + [f"^{r.old}" for r in refs if r.old]
    pack = subprocess.run(["git", "-C", git_dir, "pack-objects", "--revs", "--stdout", "-q"],
                          input="\n".join(revs).encode() + b"\n", capture_output=True, check=True).stdout
    return len(pack)


def _observe(goals: Goals) -> Observed:
    return empty_observation(NOW)


def fleet_kb(goals: Goals) -> KnowledgeBase:
    """A leader's knowledge base with one fresh report from every cluster (its declared
    nodes, a quarter of each used, a latency to its region): what a cycle snapshots."""
    kb = KnowledgeBase()
    start = NOW.timestamp() - 5
    kb.apply_leader("bench-lead", 1, start)
    kb.apply_goals("0" * 40, inventory_from_goals(goals), heartbeat_from_goals(goals),
                   workloads_from_goals(goals), start)
    entries = []
    for name, cluster in goals.clusters.items():
        spec = cluster.spec
        nodes = [{"name": f"{name}-n{i}", "ready": True, "arch": group.arch,
                  "allocatableCpu": f"{group.cpu}m", "allocatableMemory": str(group.memory),
                  "freeCpu": f"{group.cpu * 3 // 4}m", "freeMemory": str(group.memory * 3 // 4)}
                 for group in spec.nodes for i in range(group.count)]
        body = {"cluster": name, "agentTime": (NOW - timedelta(seconds=2)).isoformat(),
                "sync": {"state": "Ready", "reason": "ApplySucceeded", "message": "applied"},
                "nodes": nodes, "latencies": [{"to": spec.region, "ms": 5.0}]}
        entries.append(ReportEntry(name, start + 3, ReportRecord.from_report(AgentReport.model_validate(body))))
    kb.apply_reports(entries)
    return kb


def components_per_cluster(clusters: int) -> int:
    """10, or fewer where 10 per cluster would pass the goals tree's file limit (each
    component has a manifest file of its own; apps of 10 add an app.yaml each)."""
    room = MAX_TREE_FILES - clusters - 100
    return max(1, min(10, room * APP_SIZE // ((APP_SIZE + 1) * clusters)))


def run(clusters: int, workdir: Path, two_pushes: bool = False) -> dict[str, Any]:
    """Every figure at one size."""
    per_cluster = components_per_cluster(clusters)
    out: dict[str, Any] = {"clusters": clusters}
    files = within_limits(fleet_goals(clusters, per_cluster))
    srv = workdir / "srv"
    srv.mkdir(parents=True)
    served = pygit2.init_repository(str(srv / "goals.git"), bare=True)
    _commit_goals(served, files, "goals", 1_700_000_000)

    cache = ParseCache()
    out["goals_load_s"], goals = _timed(lambda: load_goals(files, cache))
    out["components"] = sum(len(app.components) for app in goals.apps.values())
    edited = dict(files)
    name = f"clusters/{cluster_name(clusters // 2)}.yaml"
    edited[name] = edited[name].replace(b"carbonIntensity: ", b"carbonIntensity: 1")
    out["goals_one_changed_s"], _ = _timed(lambda: load_goals(edited, cache))
    out["goals_files"] = len(files)

    # The planner alone (it keeps what it derived from a Goals object between calls).
    out["plan_full_s"], first_plan = _timed(lambda: make_plan(goals, _observe(goals), CurrentPlacement()))
    hosting = sorted({a.cluster for c in first_plan.components.values() for a in c.assignments})
    failed = empty_observation(NOW).model_copy(update={"clusters": {
        hosting[0]: empty_observation(NOW).cluster(hosting[0]).model_copy(
            update={"healthy": False, "heartbeat_age_seconds": 3600.0})}})
    out["plan_steady_s"], steady_plan = _timed(lambda: make_plan(goals, _observe(goals), first_plan.current()))
    out["plan_failover_s"], _ = _timed(lambda: make_plan(goals, failed, steady_plan.current()))

    kb = fleet_kb(goals)
    out["kb_snapshot_first_s"], _ = _timed(lambda: kb.snapshot(NOW))
    out["kb_snapshot_s"], _ = _timed(lambda: kb.snapshot(NOW))  # what every later cycle pays

    def observe_now(goals: Goals) -> Observed:
        return kb.snapshot(NOW)

    def observe_later(goals: Goals) -> Observed:
        return kb.snapshot(NOW + timedelta(seconds=1))

    with GitDaemon(srv) as daemon, CountingProxy(daemon.port) as proxy:
        url = f"git://127.0.0.1:{proxy.port}/goals.git"
        reconcile._PARSED = cache  # the lead's cache, warm from the load above
        reconcile._GOALS.clear()
        mirror = Mirror(workdir / "lead.git", url, gc=False)
        before = proxy.total()
        mirror.fetch()
        out["new_leader_fetch_bytes"] = proxy.total() - before
        timer = _WriteTimer(mirror)
        memo = DecisionMemo()  # the leader's (lead/memo.py), as its loop passes it
        recorded: list[str] = []

        def record_goals(commit: str, goals: Goals) -> None:
            # The lead records a new goals commit through Raft, which moves what is alive
            # then out of the collector's reach (lead/raft/collector.py): the cycle's collections
            # here are then the lead's, not full walks of the whole fleet's goals.
            if recorded[-1:] != [commit]:
                recorded.append(commit)
                freeze_long_lived()

        hooks = CycleHooks(two_pushes=lambda: two_pushes, on_goals=record_goals)

        def cycle(observe: Callable[[Goals], Observed], now: datetime) -> Any:
            return reconcile_once(mirror, observe, now=now, memo=memo, hooks=hooks)

        # The goals at main are the unedited ones: reload them so the cycle finds them cached.
        load_goals(files, cache)
        out["first_cycle_s"], first = _timed(lambda: cycle(observe_now, NOW))
        out["fanout_push_s"] = timer.seconds
        out["fanout_publish_s"] = timer.publish_seconds
        out["fanout_write_cpu_s"] = timer.write_cpu_seconds
        out["branches_written"] = len(first.refs)

        branch = f"cluster/{hosting[0]}"
        agent = workdir / "agent.git"
        v0 = pygit2.init_repository(str(workdir / "agent-v0.git"), bare=True).remotes.create_anonymous(url)
        v0.fetch([f"+refs/heads/{branch}:refs/heads/{branch}"])
        before = proxy.total()
        v0.fetch([f"+refs/heads/{branch}:refs/heads/{branch}"])  # an idle poll as libgit2 fetches it
        out["agent_fetch_v0_bytes"] = proxy.total() - before
        source.fetch(agent, url, branch)  # the first poll fetches
        pid = _daemon_pid(daemon._proc.pid if daemon._proc is not None else 0)
        cpu, before = _children_cpu_s(pid), proxy.total()
        for _ in range(POLLS):
            source.fetch(agent, url, branch)
        time.sleep(0.2)  # let the daemon reap the last upload-pack
        out["agent_poll_bytes"] = (proxy.total() - before) / POLLS
        out["agent_poll_server_cpu_ms_loose_refs"] = 1000 * (_children_cpu_s(pid) - cpu) / POLLS
        # As a served repository should be kept (docs/git-layout.md): refs packed and a
        # commit-graph, which every push's connectivity check reads.
        out["server_upkeep_s"], _ = _timed(lambda: _server_upkeep(srv / "goals.git"))
        cpu = _children_cpu_s(pid)
        for _ in range(POLLS):
            source.fetch(agent, url, branch)
        time.sleep(0.2)
        out["agent_poll_server_cpu_ms"] = 1000 * (_children_cpu_s(pid) - cpu) / POLLS
        # The same poll of a served repository holding that one branch alone: what the
        # server spends per connection (git daemon starting upload-pack) whatever the fleet.
        subprocess.run(["git", "clone", "-q", "--bare", "--single-branch", "--branch", branch,
                        str(srv / "goals.git"), str(srv / "one-branch.git")], check=True)
        one_url = url.rsplit("/", 1)[0] + "/one-branch.git"
        source.fetch(workdir / "agent-one.git", one_url, branch)
        cpu = _children_cpu_s(pid)
        for _ in range(POLLS):
            source.fetch(workdir / "agent-one.git", one_url, branch)
        time.sleep(0.2)
        out["agent_poll_server_cpu_ms_one_branch"] = 1000 * (_children_cpu_s(pid) - cpu) / POLLS

        timer.seconds, timer.pushes = 0.0, 0
        # The first cycle after a decision plans again (the plan in force is new) and
        # warms the planner for it.
        out["idle_cycle_first_s"], idle = _timed(lambda: cycle(observe_now, NOW))
        idle_times = []
        for _ in range(IDLE_CYCLES):
            seconds, idle = _timed(lambda: cycle(observe_now, NOW))
            assert not idle.changed and not timer.seconds, "the idle cycle wrote something"
            idle_times.append(seconds)
        out["idle_cycle_s"] = statistics.median(idle_times)
        out["idle_cycle_max_s"] = max(idle_times)
        # What a rescheduling cycle costs (once per --reschedule-seconds): plan afresh,
        # find the same decision (its rendering is known), write nothing.
        memo.forget()
        out["idle_cycle_replan_s"], idle = _timed(lambda: cycle(observe_now, NOW))
        assert not idle.changed and not timer.seconds, "the rescheduling cycle wrote something"

        # The first decision after the initial one says anew why each component is where
        # it is (placed there -> kept there): every component's entry in the decision
        # changes, once. Measured apart; the one_changed figures are the next change's,
        # which is what every later one costs.
        pushed = dict(files)
        for app, when in (("apps/app-00001/manifests/c0.yaml", 1_700_000_090),
                          ("apps/app-00000/manifests/c0.yaml", 1_700_000_100)):
            pushed[app] = pushed[app].replace(b"image: registry.example.org/", b"image: mirror.example.org/")
            _commit_goals(served, pushed, f"{app} changed", when)
            if when == 1_700_000_090:
                out["first_change_s"], changed = _timed(lambda: cycle(observe_later, NOW + timedelta(seconds=1)))
                out["first_change_pack_bytes"] = _pack_bytes(mirror.repo.path, changed.refs)
        later = NOW + timedelta(seconds=2)

        def measured_write(prefix: str, cycle_key: str, run: Callable[[], Any]) -> Any:
            """A cycle that writes a decision: its time under ``cycle_key``, its write,
            push, branches and pack under ``prefix``."""
            timer.seconds, timer.pushes = 0.0, 0
            timer.publish_seconds = timer.write_cpu_seconds = 0.0
            out[cycle_key], result = _timed(run)
            out[f"{prefix}_write_push_s"] = timer.seconds
            out[f"{prefix}_publish_s"] = timer.publish_seconds
            out[f"{prefix}_write_cpu_s"] = timer.write_cpu_seconds
            out[f"{prefix}_pushes"] = timer.pushes
            out[f"{prefix}_branches"] = len([r for r in result.refs if "/cluster/" in r.ref])
            out[f"{prefix}_pack_bytes"] = _pack_bytes(mirror.repo.path, result.refs)
            return result

        measured_write("one_changed", "one_changed_s", lambda: cycle(observe_later, later))

        # Every agent measured its latency again, a little differently (within +-3 %):
        # with the lead's hold the planner sees last cycle's tables, without it new ones.
        hold, envelopes = LatencyHold(), latency_envelopes(goals)

        def observe_jittered(seed: int, held: bool) -> Callable[[Goals], Observed]:
            def observe(goals: Goals) -> Observed:
                measured = tuple(
                    ObservedLatency.model_validate({"from": name, "to": c.spec.region,
                                                    "ms": 5.0 * (1 + 0.003 * ((i * 7919 + seed * 31) % 21 - 10))})
                    for i, (name, c) in enumerate(sorted(goals.clusters.items())))
                seen = kb.snapshot(later).model_copy(update={"latencies": measured})
                return hold.apply(seen, envelopes) if held else seen
            return observe

        cycle(observe_jittered(0, True), later)  # measurements arrive
        out["idle_cycle_jitter_s"], _ = _timed(
            lambda: cycle(observe_jittered(1, True), later))
        out["idle_cycle_jitter_unheld_s"], _ = _timed(
            lambda: cycle(observe_jittered(2, False), later))

        # One component scaled (its manifest asks for one replica more): its entry in the
        # decision and the branches of the clusters running it change, nothing else.
        scaled = "apps/app-00002/manifests/c0.yaml"
        pushed[scaled] = pushed[scaled].replace(b"spec:\n  replicas: 1\n", b"spec:\n  replicas: 2\n")
        _commit_goals(served, pushed, f"{scaled} scaled", 1_700_000_110)
        measured_write("one_scaled", "one_scaled_s", lambda: cycle(observe_later, later + timedelta(seconds=1)))

        # A cluster fails: its components move (repair), the rest of the decision stays.
        def observe_failed(goals: Goals) -> Observed:
            seen = kb.snapshot(later)
            gone = seen.cluster(hosting[0]).model_copy(update={"healthy": False, "heartbeat_age_seconds": 3600.0})
            return seen.model_copy(update={"clusters": {**seen.clusters, hosting[0]: gone}})

        failover = measured_write("failover", "failover_cycle_s",
                                  lambda: cycle(observe_failed, later + timedelta(seconds=1)))
        out["failover_moves"] = len(failover.plan.moves)

    out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024  # of this process so far
    return out


def _server_upkeep(bare: Path) -> None:
    """What a self-hosted server's maintenance does (``git gc``/``git maintenance``): pack
    the refs the pushes wrote loose and add the new commits to the commit-graph."""
    subprocess.run(["git", "-C", str(bare), "pack-refs", "--all"], check=True)
    subprocess.run(["git", "-C", str(bare), "commit-graph", "write", "--reachable", "--split"], check=True)


# What ``"commit": "<40 hex>",`` adds to a report answer.
ANSWER_COMMIT_BYTES = len(', "commit": ""') + 40


def cost_model(fig: dict[str, Any], poll_s: float, report_s: float, max_s: float = 300.0) -> dict[str, Any]:
    """What N agents polling every ``poll_s`` and reporting every ``report_s`` ask for; the
    ``..._with_answers`` figures for idle agents told their commit in each answer, which
    ask Git every ``max_s`` (``--git-poll-max-interval``) instead."""
    n = fig["clusters"]
    polls = n / poll_s
    quiet_polls = n / max(max_s, poll_s)
    model = {
        "git_server_bytes_per_s": polls * fig["agent_poll_bytes"],
        "git_server_cpu_cores": polls * fig["agent_poll_server_cpu_ms"] / 1000,
        "git_server_bytes_per_s_v0": polls * fig["agent_fetch_v0_bytes"],
        "git_server_bytes_per_s_with_answers": quiet_polls * fig["agent_poll_bytes"],
        "git_server_cpu_cores_with_answers": quiet_polls * fig["agent_poll_server_cpu_ms"] / 1000,
        "lead_answer_bytes_per_s_added": n / report_s * ANSWER_COMMIT_BYTES,
        "reports_needed_per_s": n / report_s,
        "goals_push_to_branches_s": fig["one_changed_s"],
        "goals_push_to_agents_s": fig["one_changed_s"] + poll_s,
        "goals_push_to_agents_s_with_answers": fig["one_changed_s"] + min(poll_s, report_s),
    }
    if fig.get("reports_per_s"):
        model["report_headroom"] = fig["reports_per_s"] / model["reports_needed_per_s"]
    return model


def _ingest(seconds: float, clusters: int, workdir: Path) -> float:
    from benchmarks.lead import INGEST_CONNECTIONS_PER_PROCESS, ingest

    return float(ingest(seconds, clusters, 2, INGEST_CONNECTIONS_PER_PROCESS, workdir,
                        tls=False)["reports_per_s"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clusters", type=int, action="append", help="fleet size (repeatable; default 100)")
    parser.add_argument("--poll", type=float, default=30.0, help="agents' poll interval for the cost model (s)")
    parser.add_argument("--report", type=float, default=10.0, help="agents' report interval for the cost model (s)")
    parser.add_argument("--git-poll-max-interval", type=float, default=300.0,
                        help="agents' --git-poll-max-interval for the cost model (s)")
    parser.add_argument("--ingest-seconds", type=float, default=0.0,
                        help="also measure committed reports/s with three leads for this long (0: skip)")
    parser.add_argument("--libgit2", action="store_true",
                        help="the leader fetches and pushes with libgit2, not the git command line (to compare)")
    parser.add_argument("--two-pushes", action="store_true",
                        help="publish each decision in two pushes, plan first, not one atomic push (to compare)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if args.libgit2:
        gitcli.available = lambda credentials: False  # type: ignore[assignment]
    gc.set_threshold(*GC_THRESHOLDS)  # the collector as a lead runs it (lead/raft/collector.py)
    sizes: dict[str, Any] = {}
    for n in args.clusters or [100]:
        with tempfile.TemporaryDirectory(prefix="qonnect-fleet-") as tmp:
            fig = run(n, Path(tmp), args.two_pushes)
            fig["reports_per_s"] = _ingest(args.ingest_seconds, n, Path(tmp) / "ingest") \
                if args.ingest_seconds > 0 else None
        fig["cost_model"] = cost_model(fig, args.poll, args.report, args.git_poll_max_interval)
        sizes[str(n)] = fig
        print(json.dumps({"size": n, **fig}, sort_keys=True), file=sys.stderr, flush=True)  # survives a later failure
        if not args.json:
            _print(fig, args.poll, args.report)
    if args.json:
        print(json.dumps({"sizes": sizes}, indent=2, sort_keys=True))
    return 0


def _print(fig: dict[str, Any], poll_s: float, report_s: float) -> None:
    print(f"== {fig['clusters']} clusters, {fig['components']} components, {fig['goals_files']} goals files")
    for key, value in fig.items():
        if key in ("clusters", "components", "goals_files", "cost_model"):
            continue
        print(f"  {key:36} {value:.3f}" if isinstance(value, float) else f"  {key:36} {value}")
    print(f"  cost model: {fig['clusters']} agents polling every {poll_s:g} s, reporting every {report_s:g} s")
    for key, value in fig["cost_model"].items():
        print(f"    {key:36} {value:,.3f}")


if __name__ == "__main__":
    sys.exit(main())
