"""The agent loop: fetch → trust → guards → apply → inventory → prune → health → report.

``Agent.sync(full=...)`` is one pass and returns a ``SyncResult``; ``Agent.run()``
repeats it on the poll interval (with jitter), runs a full dry-run comparison on
the drift interval, and syncs at once when a lead says a newer generation exists
or a verified push webhook arrives. Nothing here knows whether the API server is
a real cluster or the simulation.
"""

from __future__ import annotations

import random
import re
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from qonnect_gitops.agent import capacity, drift, prometheus
from qonnect_gitops.agent.config import INVENTORY_NAME, AgentConfig
from qonnect_gitops.agent.health import (
    CHECKS,
    DEGRADED,
    HEALTHY,
    Health,
    health_of,
    rollup,
)
from qonnect_gitops.agent.inventory import (
    Inventory,
    InventoryStore,
    ObjKey,
    describe,
    key_of,
)
from qonnect_gitops.agent.kube import Kube, KubeError, api_client_from
from qonnect_gitops.agent.metrics import Metrics, serve
from qonnect_gitops.agent.prune import (
    PruneResult,
    check_guards,
    prune,
    removal_candidates,
)
from qonnect_gitops.agent.report import Reporter
from qonnect_gitops.agent.source import Revision, SourceError, fetch, read_revision
from qonnect_gitops.agent.sync import (
    CHANGED,
    ObjectResult,
    Syncer,
    normalise_namespaces,
)
from qonnect_gitops.logs import get_logger
from qonnect_gitops.model.report import AgentReport, AppliedCommit, ComponentHealth
from qonnect_gitops.model.status import Refusal, SyncStatus

log = get_logger(__name__)

EXIT_OK, EXIT_FAILED, EXIT_UNHEALTHY = 0, 1, 2
_COMPONENT = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@dataclass
class SyncResult:
    """What one pass did and found."""

    commit: str | None = None  # the branch head attempted
    generation: int | None = None
    term: int | None = None
    applied: AppliedCommit | None = None  # what the cluster runs after this pass
    state: str = "Reconciling"
    reason: str = "Progressing"
    message: str = ""
    objects: list[ObjectResult] = field(default_factory=list)
    pruned: PruneResult = field(default_factory=PruneResult)
    refusals: list[Refusal] = field(default_factory=list)
    health: list[tuple[dict[str, Any], Health]] = field(default_factory=list)
    source_stale: bool = False
    skipped_apply: bool = False
    drift_report_only: bool = False
    seconds: float = 0.0

    @property
    def failed(self) -> bool:
        return self.state == "Stalled"

    @property
    def healthy(self) -> bool:
        return all(h[0] == HEALTHY for _, h in self.health)

    @property
    def exit_code(self) -> int:
        if self.failed and self.reason != "HealthCheckFailed":
            return EXIT_FAILED
        return EXIT_OK if self.healthy and self.state == "Ready" else EXIT_UNHEALTHY

    def status(self) -> SyncStatus:
        return SyncStatus(state=self.state, reason=self.reason, message=self.message[:1024])  # type: ignore[arg-type]


class Agent:
    def __init__(self, cfg: AgentConfig, kube: Kube | None = None) -> None:
        self.cfg = cfg
        self.kube = kube or Kube(api_client_from(cfg.kubeconfig), retries=cfg.api_retries,
                                 backoff=cfg.api_backoff, backoff_max=cfg.api_backoff_max)
        self.cache = cfg.cache_dir / f"{cfg.cluster}.git"
        self.store = InventoryStore(self.kube, cfg.namespace)
        self.syncer = Syncer(self.kube, workers=cfg.workers, ready_timeout=cfg.ready_timeout,
                             reserved=frozenset({("", "v1", "ConfigMap", cfg.namespace, INVENTORY_NAME)}))
        self.metrics = Metrics()
        self.wake = threading.Event()
        self.stopping = threading.Event()
        self.last: SyncResult | None = None
        self.last_good_commit: str | None = None  # head last applied without errors
        self.revision: Revision | None = None  # last revision read (kept when Git is unreachable)
        self.source_error: str | None = None
        self.source_stale_since: float | None = None
        self.reporter: Reporter | None = None
        self.report_interval = cfg.report_interval  # until a lead says the fleet's
        if cfg.leads:
            self.reporter = Reporter.from_config(cfg, on_response=self._on_lead_response)
        self._lock = threading.Lock()  # one sync at a time
        self._announced: int | None = None  # newest generation a lead announced

    # ------------------------------------------------------------ one pass

    def sync(self, *, full: bool = True, wait: float = 0.0) -> SyncResult:
        """One pass. ``full``: compare every object even if the head did not move (drift check).
        ``wait``: seconds to wait for health after applying."""
        with self._lock:
            start = time.monotonic()
            result = self._sync(full)
            if wait > 0 and not result.failed:
                self._wait_health(result, wait)
            self._finish(result)
            result.seconds = time.monotonic() - start
            self.metrics.set("qonnect_agent_sync_duration_seconds", result.seconds)
            self.last = result
            return result

    def _sync(self, full: bool) -> SyncResult:
        cfg = self.cfg
        result = SyncResult()
        # 1. fetch (only our branch); on failure keep what runs and say the source is stale
        try:
            head = fetch(self.cache, cfg.repo, cfg.branch, cfg.git_credentials)
            self.source_error, self.source_stale_since = None, None
        except SourceError as exc:
            self.source_error = str(exc)
            self.source_stale_since = self.source_stale_since or time.time()
            self.metrics.inc("qonnect_agent_errors_total", kind="fetch")
            log.warning("fetch_failed", branch=cfg.branch, error=str(exc))
            head = None
        # 2. what runs now (the inventory in the cluster)
        try:
            inv = self.store.load()
        except KubeError as exc:
            self.metrics.inc("qonnect_agent_errors_total", kind="apply")
            return self._stalled(result, "ApiUnavailable", f"cannot read the inventory: {exc}")
        result.applied = _applied(inv)
        if head is None:
            result.source_stale = True
            result.refusals.append(Refusal(reason="BranchUnreadable", commit=None,
                                           message=(self.source_error or "")[:1024]))
            self._observe(result, inv, self._running(inv))
            return self._stalled(result, "SourceUnavailable",
                                 f"cannot fetch {cfg.branch}: {self.source_error}; keeping "
                                 f"{(inv.commit or 'nothing')[:12]} running", keep_health=True)
        result.commit = head
        try:
            rev = read_revision(self.cache, head)
        except SourceError as exc:
            result.refusals.append(Refusal(reason="BranchUnreadable", message=str(exc)[:1024], commit=head))
            self._observe(result, inv, self._running(inv))
            return self._stalled(result, "BranchUnreadable", str(exc), keep_health=True)
        result.generation, result.term = rev.generation, rev.term
        # 3. trust: the generation never goes backwards from what was applied
        if inv.generation is not None and (rev.generation is None or rev.generation < inv.generation):
            msg = (f"commit {head[:12]} has generation {rev.generation}, older than the applied "
                   f"generation {inv.generation} (commit {(inv.commit or '')[:12]}); refusing a rollback "
                   f"(late write of a deposed leader?)")
            result.refusals.append(Refusal(reason="StaleGeneration", message=msg, commit=head))
            self.metrics.inc("qonnect_agent_errors_total", kind="refusal")
            log.warning("refused", reason="StaleGeneration", commit=head, generation=rev.generation,
                        applied_generation=inv.generation)
            self._observe(result, inv, None)
            return self._stalled(result, "StaleGeneration", msg, keep_health=True)
        self.revision = rev
        try:
            desired = normalise_namespaces(self.kube, list(rev.objects))
        except KubeError as exc:
            return self._stalled(result, "ApiUnavailable", f"discovery failed: {exc}")
        desired_keys = {key_of(o) for o in desired}
        # 4. unchanged head: nothing to apply (drift runs on its own interval)
        if not full and head == inv.commit and head == self.last_good_commit:
            result.skipped_apply = True
            self._observe(result, inv, rev)
            return self._settle(result)
        # 5. whole-commit guards
        refusal = check_guards(desired_keys, inv, allow_empty=rev.allow_empty, prune_limit=rev.prune_limit,
                               fraction=cfg.prune_fraction)
        if refusal is not None:
            result.refusals.append(Refusal(reason=refusal.reason, message=refusal.message[:1024], commit=head))  # type: ignore[arg-type]
            self.metrics.inc("qonnect_agent_errors_total", kind="refusal")
            log.warning("refused", reason=refusal.reason, commit=head, message=refusal.message)
            self._observe(result, inv, None)
            return self._stalled(result, refusal.reason, refusal.message, keep_health=True)
        # 6. dry-run and apply (report-only drift mode: compare only when the head is already applied)
        apply = drift.should_apply(cfg.drift, head, inv.commit)
        result.drift_report_only = not apply
        result.objects = self.syncer.sync(desired, apply=apply)
        applied_now = [r for r in result.objects if r.action in CHANGED]
        failed = [r for r in result.objects if r.action == "failed"]
        found = drift.drifted(result.objects)
        self.metrics.inc("qonnect_agent_objects_applied_total", len(applied_now))
        healed = drift.corrections(result.objects, head, inv.commit, self.last_good_commit)
        if healed:
            self.metrics.inc("qonnect_agent_drift_corrections_total", len(healed))
            log.info("drift_corrected", objects=",".join(r.name for r in healed))
        self.metrics.set("qonnect_agent_drift_detected", len(found))
        for r in result.objects:
            if r.took_over:
                log.info("conflicts_taken_over", object=r.name, managers=",".join(r.took_over))
        if failed:
            # never prune after a failed apply; remember what was created so it can be pruned later
            self.metrics.inc("qonnect_agent_errors_total", len(failed), kind="apply")
            inv.objects |= {r.key for r in result.objects if r.action != "failed" and r.live is not None}
            try:
                self.store.save(inv)
            except KubeError as exc:
                log.warning("inventory_save_failed", error=str(exc))
            for r in failed:
                if r.reason in ("InvalidManifest", "ImmutableField") and len(result.refusals) < 32:
                    result.refusals.append(Refusal(reason="InvalidManifest", message=f"{r.name}: {r.message}"[:1024],
                                                   commit=head))
            self._observe(result, inv, rev)
            names = "; ".join(f"{r.name}: {r.message}" for r in failed[:5])
            return self._stalled(result, "ApplyFailed", f"{len(failed)} of {len(desired)} objects failed: {names}",
                                 keep_health=True)
        if not apply:
            self._observe(result, inv, rev)
            if found:
                result.state, result.reason = "Reconciling", "DriftDetected"
                result.message = drift.describe(found)
                log.warning("drift_detected", objects=",".join(r.name for r in found))
                return result
            return self._settle(result)
        # 7. inventory first (pending prunes stay listed), then prune, then the final inventory
        candidates = removal_candidates(desired_keys, inv)
        new_inv = Inventory(head, rev.generation, rev.term, set(desired_keys) | set(candidates))
        try:
            self.store.save(new_inv)
            result.pruned = prune(self.kube, candidates)
            new_inv.objects = set(desired_keys) | result.pruned.remaining()
            self.store.save(new_inv)
        except KubeError as exc:
            self.metrics.inc("qonnect_agent_errors_total", kind="prune")
            return self._stalled(result, "ApiUnavailable", f"inventory or prune failed: {exc}")
        self.metrics.inc("qonnect_agent_objects_pruned_total", len(result.pruned.deleted))
        for key in result.pruned.protected:
            if len(result.refusals) < 32:
                result.refusals.append(Refusal(reason="ProtectedKind", commit=head, message=(
                    f"{describe(key)} left the branch but is a protected kind; annotate it "
                    f"qonnect.io/prune: enabled to let the agent delete it")[:1024]))
        result.applied = _applied(new_inv)
        self.last_good_commit = head
        self.metrics.set("qonnect_agent_last_applied_info", 1, replace=True, commit=head,
                         generation=str(rev.generation))
        self._observe(result, new_inv, rev)
        if result.pruned.errors:
            self.metrics.inc("qonnect_agent_errors_total", len(result.pruned.errors), kind="prune")
            return self._stalled(result, "PruneFailed", "; ".join(f"{describe(k)}: {e}" for k, e in result.pruned.errors[:5]),
                                 keep_health=True)
        return self._settle(result)

    def _running(self, inv: Inventory) -> Revision | None:
        """The revision that runs (the inventory's commit), if it was read in this process;
        otherwise None and health is read from the inventory's object list."""
        rev = self.revision
        return rev if rev is not None and rev.commit == inv.commit else None

    def _stalled(self, result: SyncResult, reason: str, message: str, keep_health: bool = False) -> SyncResult:
        result.state, result.reason, result.message = "Stalled", reason, message
        if not keep_health:
            result.health = []
        return result

    def _settle(self, result: SyncResult) -> SyncResult:
        """Ready when every object is healthy, Reconciling while some progress, Stalled on Degraded."""
        bad = [(o, h) for o, h in result.health if h[0] != HEALTHY]
        commit = (result.commit or "")[:12]
        if any(h[0] == DEGRADED for _, h in bad):
            o, h = next((o, h) for o, h in bad if h[0] == DEGRADED)
            result.state, result.reason = "Stalled", "HealthCheckFailed"
            result.message = f"{o['kind']} {o['metadata']['name']}: {h[1]}"
        elif bad:
            result.state, result.reason = "Reconciling", "Progressing"
            result.message = f"applied {commit}; {len(bad)} objects not ready yet, e.g. " + \
                f"{bad[0][0]['kind']} {bad[0][0]['metadata']['name']}: {bad[0][1][1]}"
        else:
            pruned = len(result.pruned.deleted)
            result.state, result.reason = "Ready", "ReconciliationSucceeded"
            result.message = f"applied {commit} (generation {result.generation}); {len(result.health)} objects healthy" + \
                (f", {pruned} pruned" if pruned else "")
        if result.refusals and result.state == "Ready":
            result.reason = "ReconciliationSucceeded"
            result.message += f"; {len(result.refusals)} refusals"
        return result

    def _observe(self, result: SyncResult, inv: Inventory, rev: Revision | None) -> None:
        """Health of what should run: the revision's objects, or the inventory's when none.

        Objects of kinds with a health function are read fresh; where several share a kind
        and namespace they are read with one list instead of one GET each."""
        try:
            targets: list[tuple[ObjKey, dict[str, Any] | None]]
            if rev is not None:
                targets = [(key_of(o), o) for o in normalise_namespaces(self.kube, list(rev.objects))]
            else:
                targets = [(k, None) for k in sorted(inv.objects)]
            known = {r.key: r.live for r in result.objects if r.live is not None}
            fresh = {key for key, _ in targets if key not in known or (key[0], key[2]) in CHECKS}
            groups: dict[tuple[str, str, str, str], list[ObjKey]] = {}
            for key in fresh:
                groups.setdefault((key[0], key[1], key[2], key[3]), []).append(key)
            live_of: dict[ObjKey, dict[str, Any] | None] = {k: v for k, v in known.items() if k not in fresh}
            for (group, version, kind, ns), keys in groups.items():
                try:
                    res = self.kube.resource(f"{group}/{version}" if group else version, kind)
                except KubeError as exc:
                    if not exc.not_found:
                        raise
                    continue  # kind not served: its objects count as missing
                if len(keys) > 3:
                    # items of a list carry no apiVersion/kind (as in a real API server); health
                    # and the roll-up read both, so they are filled in from the list's kind
                    api_version = f"{group}/{version}" if group else version
                    items = {i["metadata"]["name"]: {**i, "apiVersion": api_version, "kind": kind}
                             for i in self.kube.list(res, ns or None)}
                    for key in keys:
                        live_of[key] = items.get(key[4])
                else:
                    for key in keys:
                        live_of[key] = self.kube.get(res, ns or None, key[4])
            out = []
            for key, obj in targets:
                live = live_of.get(key)
                if live is None:
                    stub = obj or {"apiVersion": f"{key[0]}/{key[1]}" if key[0] else key[1], "kind": key[2],
                                   "metadata": {"name": key[4], **({"namespace": key[3]} if key[3] else {})}}
                    out.append((stub, health_of(None)))
                else:
                    out.append((live, health_of(live)))
            result.health = out
        except KubeError as exc:
            log.warning("health_failed", error=str(exc))

    def _wait_health(self, result: SyncResult, timeout: float) -> None:
        """Re-check health until every object is healthy, one is Degraded, or ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        while result.state == "Reconciling" and result.reason == "Progressing" \
                and time.monotonic() < deadline and not self.stopping.is_set():
            time.sleep(min(0.5, max(0.05, deadline - time.monotonic())))
            self._observe(result, Inventory(), self.revision)
            self._settle(result)

    def _finish(self, result: SyncResult) -> None:
        self.metrics.set("qonnect_agent_last_sync_timestamp_seconds", time.time())
        self.metrics.inc("qonnect_agent_syncs_total", result=result.reason)
        log.info("sync_done", cluster=self.cfg.cluster, commit=(result.commit or "")[:12], state=result.state,
                 reason=result.reason, applied=sum(r.action in CHANGED for r in result.objects),
                 pruned=len(result.pruned.deleted), failed=sum(r.action == "failed" for r in result.objects))
        if self.reporter is not None:
            try:
                self.reporter.submit(self.build_report(result))
            except Exception as exc:  # noqa: BLE001 - never let a report problem stop syncing
                log.error("report_build_failed", error=str(exc))

    # ------------------------------------------------------------ report

    def build_report(self, result: SyncResult) -> AgentReport:
        comps = []
        for c in rollup(result.health):
            if not _COMPONENT.match(c.component):  # a label the lead's model refuses must not sink the report
                log.warning("component_not_reported", component=c.component, why="labels are not RFC 1123 names")
                continue
            comps.append(ComponentHealth(component=c.component, healthy=c.status == HEALTHY, ready_replicas=c.ready,
                                         desired_replicas=c.desired, completed=c.completed, message=c.message))
        nodes: list[Any] = []
        try:
            nodes = capacity.read_capacity(self.kube)
        except (KubeError, ValueError) as exc:
            log.warning("capacity_failed", error=str(exc))
        latencies: list[Any] = []
        traffic: list[Any] = []
        if self.cfg.prometheus:
            try:
                latencies = prometheus.latencies(self.cfg.prometheus, self.cfg.cluster, self.cfg.latency_metric)
                traffic = prometheus.traffic(self.cfg.prometheus, self.cfg.traffic_metric)
            except (OSError, ValueError) as exc:
                log.warning("prometheus_failed", error=str(exc))
        status = result.status()
        if result.source_stale and self.source_stale_since:
            age = int(time.time() - self.source_stale_since)
            status = SyncStatus(state=status.state, reason="SourceUnavailable",
                                message=f"source stale for {age}s: {status.message}"[:1024])
        return AgentReport(
            cluster=self.cfg.cluster, agent_time=datetime.now(UTC), applied=result.applied,
            attempted=result.commit, sync=status, refusals=tuple(result.refusals[:32]),
            components=tuple(comps[:1000]), nodes=tuple(nodes), latencies=tuple(latencies),
            traffic=tuple(traffic))

    def _on_lead_response(self, doc: dict[str, Any]) -> None:
        interval = doc.get("heartbeatIntervalSeconds")
        if isinstance(interval, (int, float)) and not isinstance(interval, bool) and interval > 0:
            # The fleet's heartbeat (qonnect.yaml) governs; --report-interval is the fallback.
            if float(interval) != self.report_interval:
                self.report_interval = float(interval)
                self.wake.set()  # the loop may be sleeping on the old interval
        newest = doc.get("generation")
        last = self.last
        running = last.applied.generation if last and last.applied else None
        if not isinstance(newest, int) or (running is not None and newest <= running):
            return
        # Wake once per announced generation: if that commit is refused or not fetchable yet,
        # every later response says the same, and waking on each would spin sync → report → sync.
        if self._announced is not None and newest <= self._announced:
            return
        self._announced = newest
        log.info("newer_generation_announced", generation=newest, running=running)
        self.wake.set()

    # ------------------------------------------------------------ loop

    def run(self) -> None:
        """Sync until ``stopping`` is set."""
        cfg = self.cfg
        servers = []
        if cfg.metrics_addr:
            # one address may serve both; a separate webhook address gets its own server
            same = cfg.webhook_addr in (None, cfg.metrics_addr)
            servers.append(serve(cfg.metrics_addr, self.metrics, cfg.webhook_secret if same else None, self.wake.set))
        if cfg.webhook_addr and cfg.webhook_addr != cfg.metrics_addr:
            servers.append(serve(cfg.webhook_addr, None, cfg.webhook_secret, self.wake.set))
        if self.reporter:
            self.reporter.start()
        next_drift = time.monotonic() + cfg.drift_interval
        last_report = 0.0
        failures = 0
        full = True  # the first pass after a start compares everything
        try:
            while not self.stopping.is_set():
                try:
                    result = self.sync(full=full)
                    full = False
                    unhealthy_source = result.source_stale or result.reason == "ApiUnavailable"
                except Exception as exc:
                    log.error("sync_crashed", exc_info=True, error=str(exc))  # noqa: G201 - EventLogger API
                    self.metrics.inc("qonnect_agent_errors_total", kind="internal")
                    unhealthy_source = True
                last_report = time.monotonic()
                failures = failures + 1 if unhealthy_source else 0
                interval = cfg.interval
                if failures:
                    interval = min(cfg.interval * 2 ** min(failures - 1, 5), max(cfg.interval, 300.0))
                interval *= 1 + random.uniform(-cfg.jitter, cfg.jitter)
                deadline = time.monotonic() + interval
                while not self.stopping.is_set():
                    now = time.monotonic()
                    if now >= next_drift:
                        full = True
                        next_drift = now + cfg.drift_interval
                        break
                    if now >= deadline:
                        break
                    if now - last_report >= self.report_interval and self.reporter and self.last:
                        self.reporter.submit(self.build_report(self.last))  # heartbeat
                        last_report = now
                    until = min(deadline, next_drift)
                    if self.reporter:
                        until = min(until, last_report + self.report_interval)
                    if self.wake.wait(max(0.01, until - now)):
                        self.wake.clear()
                        break
        finally:
            if self.reporter:
                self.reporter.stop()
            for server in servers:
                server.shutdown()
                server.server_close()

    def stop(self) -> None:
        self.stopping.set()
        self.wake.set()


def _applied(inv: Inventory) -> AppliedCommit | None:
    if inv.commit is None:
        return None
    return AppliedCommit(commit=inv.commit, generation=inv.generation or 0)


def describe_keys(keys: list[ObjKey]) -> str:
    return ", ".join(describe(k) for k in keys)
