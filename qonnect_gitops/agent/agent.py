"""The agent loop, one pass as named phases (as Flux's kustomize-controller reads):

fetch → load inventory → read → trust → guards → apply → prune → settle.

``Agent.sync(full=...)`` is one pass and returns a ``SyncResult``; every phase either
hands on to the next or ends the pass through ``_stall`` (the one refusal helper: it
records the refusals within the report's limits, counts, logs, observes what runs, and
sets ``Stalled`` with a reason from ``model.status``). ``Agent.run()`` repeats passes on
the poll interval (with jitter), runs a full dry-run comparison on the drift interval,
and syncs at once when a lead says a newer generation exists or a verified push webhook
arrives. A lead's answer may name the branch head the leader published (``commit``): while
it names the commit the agent fetched last, a pass reads that commit from the local cache
instead of asking Git, for at most ``git_poll_max_interval``; a different commit makes the
agent ask Git at once (at most one such early poll per report interval). The answer is only
a hint: what is applied is always what the agent itself fetched from Git.

Reports do not wait for passes. Every pass ends with a report, and a heartbeat thread
reports at least every report interval whatever a pass is doing, from what the agent
knows in memory only (it never waits on the API server or Git): the last pass's result;
``Reconciling/Progressing`` with how long while a pass has run longer than a report
interval (a refusal of the last pass stands until a pass ends otherwise); and
``Stalled/ApiUnavailable`` whenever the API server is known not to answer (``Kube``).
Capacity, Prometheus and Cluster API signals are read at the end of each pass and, between
passes, by a signal thread every report interval (bounded calls); reports carry the latest
values read. The signal thread also asks a silent API server once per report interval
whether it answers again, and starts a pass at once when it does.
Nothing here knows whether the API server is a real cluster or the simulation.
"""

from __future__ import annotations

import random
import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import Enum
from typing import Any

from qonnect_gitops.agent import capacity, capi, drift, prometheus
from qonnect_gitops.agent.config import INVENTORY_NAME, AgentConfig
from qonnect_gitops.agent.health import (
    CHECKS,
    DEGRADED,
    HEALTHY,
    POD_TEMPLATE_KINDS,
    Health,
    PodIndex,
    group_kind,
    health_of,
    needs_pods,
    pod_verdict,
    rollup,
)
from qonnect_gitops.agent.inventory import (
    Inventory,
    InventoryStore,
    ObjKey,
    PassPhase,
    PassRecord,
    describe,
    identity,
    in_namespaces,
    key_of,
    system_object,
)
from qonnect_gitops.agent.kube import Kube, KubeError, api_client_from
from qonnect_gitops.agent.lineage import allowance
from qonnect_gitops.agent.metrics import Metrics, serve
from qonnect_gitops.agent.prune import (
    GuardRefusal,
    PruneResult,
    PruneRules,
    assess,
    check_guards,
    prune,
    removal_candidates,
)
from qonnect_gitops.agent.report import WARNING_REPEAT_SECONDS, Reporter
from qonnect_gitops.agent.source import Revision, SourceError, fetch, read_revision
from qonnect_gitops.agent.sync import (
    ObjectResult,
    Syncer,
    normalise_namespaces,
)
from qonnect_gitops.agent.verify import TrustedKeys
from qonnect_gitops.logs import get_logger
from qonnect_gitops.model.pool import POOL_APP, ClusterApiStatus
from qonnect_gitops.model.report import (
    MAX_REFUSALS,
    AgentReport,
    AppliedCommit,
    ComponentHealth,
    Latency,
    NodeCapacity,
    Traffic,
)
from qonnect_gitops.model.status import (
    CHANGED_ACTIONS,
    MAX_MESSAGE,
    Action,
    HealthReason,
    Refusal,
    RefusalReason,
    SyncReason,
    SyncState,
    SyncStatus,
)

log = get_logger(__name__)

EXIT_OK, EXIT_FAILED, EXIT_UNHEALTHY = 0, 1, 2
_COMMIT = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")  # SHA-1 or SHA-256 object id, as Git prints it
_COMPONENT = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_REFUSED_ON_APPLY = frozenset({RefusalReason.INVALID_MANIFEST, RefusalReason.OWNERSHIP_CONFLICT,
                               RefusalReason.PROTECTED_NAMESPACE, RefusalReason.SYSTEM_OBJECT})


@dataclass
class SyncResult:
    """What one pass did and found."""

    commit: str | None = None  # the branch head attempted
    generation: int | None = None
    term: int | None = None
    applied: AppliedCommit | None = None  # what the cluster runs after this pass
    state: SyncState = SyncState.RECONCILING
    reason: str = SyncReason.PROGRESSING
    message: str = ""
    objects: list[ObjectResult] = field(default_factory=list)
    pruned: PruneResult = field(default_factory=PruneResult)
    refusals: list[Refusal] = field(default_factory=list)
    health: list[tuple[dict[str, Any], Health]] = field(default_factory=list)
    # Machine reasons beside some health verdicts (unschedulable pods, Service endpoints).
    health_reasons: dict[ObjKey, HealthReason] = field(default_factory=dict)
    source_stale: bool = False
    skipped_apply: bool = False
    drift_report_only: bool = False
    seconds: float = 0.0

    @property
    def failed(self) -> bool:
        return self.state == SyncState.STALLED

    @property
    def healthy(self) -> bool:
        return all(h[0] == HEALTHY for _, h in self.health)

    @property
    def exit_code(self) -> int:
        if self.failed and self.reason != SyncReason.HEALTH_CHECK_FAILED:
            return EXIT_FAILED
        return EXIT_OK if self.healthy and self.state == SyncState.READY else EXIT_UNHEALTHY

    def status(self) -> SyncStatus:
        return SyncStatus(state=self.state, reason=self.reason, message=self.message[:MAX_MESSAGE])

    def refuse(self, refusals: Iterable[Refusal]) -> None:
        """Record refusals within the report's bound (``MAX_REFUSALS``; later ones are dropped)."""
        for refusal in refusals:
            if len(self.refusals) < MAX_REFUSALS:
                self.refusals.append(refusal)


@dataclass(frozen=True)
class Signals:
    """What reports carry beside a pass's result, as last read: node capacity, Prometheus
    latency and traffic, Cluster API clusters. ``read_at``: when (monotonic) they were read."""

    nodes: tuple[NodeCapacity, ...] = ()
    latencies: tuple[Latency, ...] = ()
    traffic: tuple[Traffic, ...] = ()
    cluster_api: tuple[ClusterApiStatus, ...] = ()
    read_at: float = -1e9


def heartbeat_status(last: SyncStatus | None, running_for: float | None, phase: str,
                     unanswered: str | None, unanswered_for: float) -> SyncStatus:
    """What a heartbeat says of the sync (pure): ``last``, the last pass's status;
    ``running_for``, seconds the current pass has run when that is longer than a report
    interval (else None); ``unanswered``, the error of the call that found the API server
    not answering, ``unanswered_for`` seconds ago (None while it answers).

    The API server known not to answer is said first (``ApiUnavailable``, the leads' sign of
    a Degraded cluster). A long pass is ``Reconciling/Progressing`` with its age, unless the
    last pass ended in a refusal: that stands until a pass ends otherwise, so the leads do
    not take a refusing cluster for a healthy one while it tries again."""
    running = f"sync pass running for {running_for:.0f} s ({phase})" if running_for is not None else ""
    if unanswered is not None:
        message = f"the API server has not answered for {unanswered_for:.0f} s ({unanswered})"
        return SyncStatus(state=SyncState.STALLED, reason=SyncReason.API_UNAVAILABLE,
                          message=(f"{message}; {running}" if running else message)[:MAX_MESSAGE])
    if running and last is not None and last.state == SyncState.STALLED \
            and last.reason != SyncReason.API_UNAVAILABLE:
        return SyncStatus(state=last.state, reason=last.reason,
                          message=f"{running}; the last pass: {last.message}"[:MAX_MESSAGE])
    if running:
        return SyncStatus(state=SyncState.RECONCILING, reason=SyncReason.PROGRESSING, message=running)
    assert last is not None
    return last


def refusal(reason: RefusalReason, message: str, commit: str | None) -> Refusal:
    """A refusal with its message cut to the report's limit."""
    return Refusal(reason=reason, message=message[:MAX_MESSAGE], commit=commit)


class Observe(Enum):
    """Which health a stalled pass reports."""

    NOTHING = "nothing"  # the cluster could not be read: no health
    KEEP = "keep"  # what this pass observed already
    RUNNING = "running"  # the revision the cluster runs (or the inventory's objects)
    INVENTORY = "inventory"  # the inventory's objects
    BRANCH = "branch"  # the objects of the branch head


@dataclass
class _Pass:
    """What one pass has found so far: each phase reads what the earlier ones left."""

    full: bool
    result: SyncResult = field(default_factory=SyncResult)
    head: str | None = None
    inv: Inventory = field(default_factory=Inventory)
    rev: Revision | None = None
    desired: list[dict[str, Any]] = field(default_factory=list)
    keys: set[ObjKey] = field(default_factory=set)
    before: frozenset[ObjKey] = frozenset()  # the inventory's objects before this pass
    known: frozenset[tuple[str, str, str, str]] = frozenset()  # their identities


Phase = Callable[[_Pass], SyncResult | None]


class Agent:
    def __init__(self, cfg: AgentConfig, kube: Kube | None = None) -> None:
        self.cfg = cfg
        self.kube = kube or Kube(api_client_from(cfg.kubeconfig), retries=cfg.api_retries,
                                 backoff=cfg.api_backoff, backoff_max=cfg.api_backoff_max,
                                 timeout=cfg.api_timeout)
        self.cache = cfg.cache_dir / f"{cfg.cluster}.git"
        self.trust = TrustedKeys(cfg.trusted_keys) if cfg.trusted_keys is not None else None
        self.store = InventoryStore(self.kube, cfg.namespace)
        self.syncer = Syncer(self.kube, workers=cfg.workers, ready_timeout=cfg.ready_timeout,
                             reserved=frozenset({("", "v1", "ConfigMap", cfg.namespace, INVENTORY_NAME)}),
                             protected_namespaces=cfg.reserved_namespaces, system_objects=cfg.system_objects)
        self.prune_rules = PruneRules(protected_kinds=frozenset(cfg.protected_kinds),
                                      protected_namespaces=cfg.reserved_namespaces,
                                      system_objects=cfg.system_objects,
                                      workers=cfg.prune_workers, backoff=cfg.api_backoff)
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
        # What the heartbeat reads (no I/O): the pass under way (its start, monotonic, and
        # its result so far) and its phase, the latest signals, the components of the last
        # result, and when a report was last handed to the reporter.
        self._running: tuple[float, SyncResult] | None = None
        self._phase = ""
        self.signals = Signals()
        self._components: tuple[SyncResult, tuple[ComponentHealth, ...]] | None = None
        self._submitted = -1e9
        self._beat = threading.Event()  # wakes the heartbeat thread (interval changed, stopping)
        self._reporting = threading.Lock()  # a pass's report and a heartbeat are handed over in order
        self._announced: int | None = None  # newest generation a lead announced
        # Git polls and the leads' hints (see the module docstring): the head the last
        # successful poll returned and when (monotonic), the latest valid hint and when it
        # came, the hint an early poll was last made for, and whether a poll is due now.
        self._git_head: str | None = None
        self._git_at = 0.0
        self._hint: tuple[str, float] | None = None
        self._hint_polled: tuple[str | None, float] = (None, -1e9)
        self._git_due = threading.Event()
        self._hint_warned = -1e9
        self.phases: tuple[Phase, ...] = (self._fetch, self._load_inventory, self._read, self._trust,
                                          self._guards, self._apply, self._prune)

    # ------------------------------------------------------------ one pass

    def sync(self, *, full: bool = True, wait: float = 0.0) -> SyncResult:
        """One pass. ``full``: compare every object even if the head did not move (drift check).
        ``wait``: seconds to wait for health after applying."""
        with self._lock:
            start = time.monotonic()
            self._running, self._phase = (start, SyncResult()), "start"
            try:
                if self.kube.unanswered is not None:
                    self.kube.probe()  # one bounded question: does it answer again?
                result = self._sync(full)
                if wait > 0 and not result.failed:
                    self._phase = "health"
                    self._wait_health(result, wait)
                self._phase = "report"
                report = self._finish(result)
                result.seconds = time.monotonic() - start
                self.metrics.set("qonnect_agent_sync_duration_seconds", result.seconds)
                with self._reporting:  # a heartbeat built before this result must not be sent after it
                    self.last, self._running = result, None
                    if report is not None:
                        self._submit(report)
            finally:
                self._running = None
            return result

    def _sync(self, full: bool) -> SyncResult:
        p = _Pass(full)
        if self._running is not None:
            self._running = (self._running[0], p.result)  # heartbeats name its commit once known
        for phase in self.phases:
            self._phase = phase.__name__.strip("_").replace("_", " ")
            ended = phase(p)
            if ended is not None:
                return self._unanswered(p, ended)
        return self._unanswered(p, self._settle(p.result))

    # -- phases: each returns None to go on, or the pass's result ---------------------------

    def _fetch(self, p: _Pass) -> SyncResult | None:
        """Fetch only our branch; on failure keep what runs (the read phase says so). While
        the leads' answers name the commit fetched last, Git is not asked (``_git_skippable``)."""
        if self._git_skippable():
            p.head = self._git_head
            self.metrics.inc("qonnect_agent_git_polls_skipped_total")
            return None
        self._git_due.clear()
        self.metrics.inc("qonnect_agent_git_polls_total")
        try:
            p.head = fetch(self.cache, self.cfg.repo, self.cfg.branch, self.cfg.git_credentials)
            self._git_head, self._git_at = p.head, time.monotonic()
            self.source_error, self.source_stale_since = None, None
        except SourceError as exc:
            self.source_error = str(exc)
            self.source_stale_since = self.source_stale_since or time.time()
            self.metrics.inc("qonnect_agent_errors_total", kind="fetch")
            log.warning("fetch_failed", branch=self.cfg.branch, error=str(exc))
        return None

    def _load_inventory(self, p: _Pass) -> SyncResult | None:
        """What runs now: the inventory kept in the cluster."""
        try:
            p.inv = self.store.load()
        except KubeError as exc:
            return self._stall(p, SyncReason.API_UNAVAILABLE, f"cannot read the inventory: {exc}", kind="apply")
        except (ValueError, TypeError) as exc:
            return self._stall(p, SyncReason.INVENTORY_UNREADABLE, f"the inventory ConfigMap "
                               f"{self.cfg.namespace}/{INVENTORY_NAME} is not what the agent wrote ({exc}); "
                               "refusing to apply or prune without it", kind="apply")
        p.before = frozenset(p.inv.objects)
        p.known = frozenset(identity(k) for k in p.inv.objects)
        p.result.applied = _applied(p.inv)
        pending = p.inv.pending
        if pending is not None and (self.last is None or self.last.commit != pending.commit):
            log.info("pass_unfinished", commit=pending.commit[:12], phase=pending.phase,
                     applied=(p.inv.commit or "")[:12], arriving=len(p.inv.arriving), leaving=len(p.inv.leaving))
        return None

    def _read(self, p: _Pass) -> SyncResult | None:
        """Parse the fetched head within the parsing limits; an unreadable head changes nothing."""
        if p.head is None:
            p.result.source_stale = True
            return self._stall(p, SyncReason.SOURCE_UNAVAILABLE,
                               f"cannot fetch {self.cfg.branch}: {self.source_error}; keeping "
                               f"{(p.inv.commit or 'nothing')[:12]} running",
                               [refusal(RefusalReason.BRANCH_UNREADABLE, self.source_error or "", None)],
                               observe=Observe.RUNNING, kind=None)
        p.result.commit = p.head
        try:
            p.rev = read_revision(self.cache, p.head, self.trust, applied=p.inv.commit)
        except SourceError as exc:  # unreadable, or not signed by a trusted key (agent.verify)
            return self._stall(p, SyncReason(exc.reason), f"{exc}; keeping "
                               f"{(p.inv.commit or 'nothing')[:12]} running",
                               [refusal(exc.reason, str(exc), p.head)], observe=Observe.RUNNING)
        p.result.generation, p.result.term = p.rev.generation, p.rev.term
        return None

    def _trust(self, p: _Pass) -> SyncResult | None:
        """The generation never goes backwards; then the objects as the API will name them."""
        inv, rev, head = p.inv, p.rev, p.head
        assert rev is not None and head is not None
        floor = inv.floor
        if floor is not None and (rev.generation is None or rev.generation < floor):
            started = inv.pending is not None and inv.pending.generation == floor and floor != inv.generation
            whose = (f"generation {floor} that an unfinished pass started to apply (commit "
                     f"{inv.pending.commit[:12]})" if started and inv.pending else
                     f"applied generation {inv.generation} (commit {(inv.commit or '')[:12]})")
            msg = (f"commit {head[:12]} has generation {rev.generation}, older than the {whose}; refusing a "
                   f"rollback (late write of a deposed leader?)")
            return self._stall(p, SyncReason.STALE_GENERATION, msg,
                               [refusal(RefusalReason.STALE_GENERATION, msg, head)], observe=Observe.INVENTORY)
        self.revision = rev
        try:
            p.desired = normalise_namespaces(self.kube, list(rev.objects))
        except KubeError as exc:
            return self._stall(p, SyncReason.API_UNAVAILABLE, f"discovery failed: {exc}", kind="apply")
        p.keys = {key_of(o) for o in p.desired}
        if not p.full and head == inv.commit and head == self.last_good_commit and inv.pending is None:
            # unchanged head: nothing to apply (drift runs on its own interval)
            p.result.skipped_apply = True
            self._observe(p.result, inv, rev)
            return self._settle(p.result)
        return None

    def _guards(self, p: _Pass) -> SyncResult | None:
        """Whole-commit guards: a refused commit applies nothing and deletes nothing."""
        assert p.rev is not None
        found = self._duplicates(p) or self._protected(p) or self._system(p)
        if found:
            reason, refusals, message = found
            return self._stall(p, SyncReason(reason), message, refusals, observe=Observe.INVENTORY)
        allowed = allowance(self.cache, p.rev.commit, p.rev.prune_limit, p.inv.commit)
        guard: GuardRefusal | None = check_guards(p.keys, p.inv, allow_empty=p.rev.allow_empty, allowance=allowed,
                                                  fraction=self.cfg.prune_fraction)
        if guard is not None and guard.removals:
            # Count only what would really go: read the counted objects and leave out those
            # the agent will not delete and those a person let go.
            try:
                spared = assess(self.kube, guard.removals, self.prune_rules)
            except KubeError as exc:
                return self._stall(p, SyncReason.API_UNAVAILABLE, f"cannot read the objects this commit "
                                   f"removes: {exc}", kind="apply")
            guard = check_guards(p.keys, p.inv, allow_empty=p.rev.allow_empty, allowance=allowed,
                                 fraction=self.cfg.prune_fraction, spared=spared)
        if guard is not None:
            return self._stall(p, SyncReason(guard.reason), guard.message,
                               [refusal(guard.reason, guard.message, p.head)], observe=Observe.INVENTORY)
        return None

    def _apply(self, p: _Pass) -> SyncResult | None:
        """Record what this pass may create, then dry-run and apply (report-only drift mode:
        compare only when the head is already applied)."""
        result, inv, head, rev = p.result, p.inv, p.head, p.rev
        assert head is not None and rev is not None
        apply = drift.should_apply(self.cfg.drift, head, inv.commit)
        result.drift_report_only = not apply
        record = PassRecord(head, rev.generation, rev.term, PassPhase.APPLY)
        arriving = p.keys - inv.objects
        if apply and (arriving or (head != inv.commit and inv.pending != record)):
            # Crash safety: the inventory lists every object before it can exist, so a pass
            # killed mid-apply leaves nothing a later commit cannot prune, and records the
            # pass (its commit, generation, and the objects it adds), so the next pass knows
            # them for this pass's own unfinished work. Commit and generation stay those of
            # what runs until the pass completes.
            intended = Inventory(inv.commit, inv.generation, inv.term, inv.objects | p.keys, set(inv.leaving),
                                 inv.arriving | arriving, record)
            try:
                self.store.save(intended)
            except KubeError as exc:
                return self._stall(p, SyncReason.API_UNAVAILABLE,
                                   f"cannot record the objects about to be applied: {exc}", kind="apply")
            p.inv = inv = intended
        result.objects = self.syncer.sync(p.desired, apply=apply, known=p.known)
        failed = [r for r in result.objects if r.action == Action.FAILED]
        found = drift.drifted(result.objects)
        changed = sum(r.action in CHANGED_ACTIONS for r in result.objects)
        self.metrics.inc("qonnect_agent_objects_applied_total", changed)
        healed = drift.corrections(result.objects, head, inv.commit, self.last_good_commit)
        if healed:
            self.metrics.inc("qonnect_agent_drift_corrections_total", len(healed))
            log.info("drift_corrected", objects=",".join(r.name for r in healed))
        self.metrics.set("qonnect_agent_drift_detected", len(found))
        for r in result.objects:
            if r.took_over:
                log.info("conflicts_taken_over", object=r.name, managers=",".join(r.took_over))
        if failed:
            # Never prune after a failed apply. What was created is in the inventory already;
            # objects this pass intended but never wrote, and that do not exist, leave it again.
            never = {r.key for r in failed if r.live is None and not r.wrote} - p.before
            if never:
                try:
                    self.store.save(Inventory(inv.commit, inv.generation, inv.term, inv.objects - never,
                                              inv.leaving - never, inv.arriving - never, inv.pending))
                    inv.objects -= never
                    inv.arriving -= never
                except KubeError as exc:
                    log.warning("inventory_save_failed", error=str(exc))
            refusals = [refusal(_apply_refusal(r.reason), f"{r.name}: {r.message}", head)
                        for r in failed if r.reason in _REFUSED_ON_APPLY or r.reason == "ImmutableField"]
            names = "; ".join(f"{r.name}: {r.message}" for r in failed[:5])
            return self._stall(p, SyncReason.APPLY_FAILED, f"{len(failed)} of {len(p.desired)} objects failed: "
                               f"{names}", refusals, observe=Observe.BRANCH, kind="apply", errors=len(failed))
        if not apply:
            self._observe(result, inv, rev)
            if found:
                result.state, result.reason = SyncState.RECONCILING, SyncReason.DRIFT_DETECTED
                result.message = drift.describe(found)
                log.warning("drift_detected", objects=",".join(r.name for r in found))
                return result
            return self._settle(result)
        return None

    def _prune(self, p: _Pass) -> SyncResult | None:
        """Inventory first (pending prunes stay listed), then prune, then the final inventory."""
        result, head, rev = p.result, p.head, p.rev
        assert head is not None and rev is not None
        candidates = removal_candidates(p.keys, p.inv.objects)
        keys = set(p.keys)
        try:
            if candidates:
                # The commit is applied; its removals are recorded as leaving before any runs,
                # so a pass killed now is finished by the next one, uncounted.
                self.store.save(Inventory(head, rev.generation, rev.term, keys | set(candidates), set(candidates),
                                          set(), PassRecord(head, rev.generation, rev.term, PassPhase.PRUNE)))
                result.pruned = prune(self.kube, candidates, self.prune_rules)
            remaining = result.pruned.remaining()
            new_inv = Inventory(head, rev.generation, rev.term, keys | remaining, remaining - keys)
            if new_inv != p.inv:
                self.store.save(new_inv)
        except KubeError as exc:
            return self._stall(p, SyncReason.API_UNAVAILABLE, f"inventory or prune failed: {exc}", kind="prune")
        self.metrics.inc("qonnect_agent_objects_pruned_total", len(result.pruned.deleted))
        result.refuse(refusal(why, _prune_refusal_message(key, why), head) for key, why in result.pruned.refused)
        result.applied = _applied(new_inv)
        self.last_good_commit = head
        self.metrics.set("qonnect_agent_last_applied_info", 1, replace=True, commit=head,
                         generation=str(rev.generation))
        self._observe(result, new_inv, rev)
        if result.pruned.errors:
            return self._stall(p, SyncReason.PRUNE_FAILED, "; ".join(f"{describe(k)}: {e}"
                                                                      for k, e in result.pruned.errors[:5]),
                               observe=Observe.KEEP, kind="prune", errors=len(result.pruned.errors))
        return None

    # -- guards on what the branch holds ---------------------------------------------------

    def _duplicates(self, p: _Pass) -> tuple[RefusalReason, list[Refusal], str] | None:
        """The same object (group, kind, namespace, name) in two files: which one wins would
        flip on every sync, so the commit is refused."""
        assert p.rev is not None
        first: dict[tuple[str, str, str, str], str] = {}
        refusals = []
        for obj, path in zip(p.desired, p.rev.paths, strict=True):
            ident = identity(key_of(obj))
            if ident in first:
                message = f"{describe(key_of(obj))} is defined in {first[ident]} and again in {path}"
                refusals.append(refusal(RefusalReason.DUPLICATE_OBJECT, message, p.head))
            first.setdefault(ident, path)
        if not refusals:
            return None
        return (RefusalReason.DUPLICATE_OBJECT, refusals,
                f"{len(refusals)} objects are defined more than once, e.g. {refusals[0].message}; nothing applied")

    def _protected(self, p: _Pass) -> tuple[RefusalReason, list[Refusal], str] | None:
        """Objects in (or of) a reserved namespace: refused whatever the branch says."""
        reserved = self.cfg.reserved_namespaces
        refusals = []
        for key in sorted(p.keys):
            if in_namespaces(key, reserved):
                message = (f"{describe(key)}: the namespace is reserved ({', '.join(sorted(reserved))}); "
                           "the agent never touches it")
                refusals.append(refusal(RefusalReason.PROTECTED_NAMESPACE, message, p.head))
        if not refusals:
            return None
        summary = f"{len(refusals)} objects are in or of a reserved namespace, e.g. {refusals[0].message}"
        return RefusalReason.PROTECTED_NAMESPACE, refusals, f"{summary}; nothing applied"

    def _system(self, p: _Pass) -> tuple[RefusalReason, list[Refusal], str] | None:
        """The cluster's own RBAC (``system:`` names, ``cluster-admin``) on the branch: refused
        unless the agent's configuration lists the object (``--allow-system-object``)."""
        refusals = [refusal(RefusalReason.SYSTEM_OBJECT, f"{describe(key)} is part of the cluster's own RBAC; the "
                            "agent never adopts, changes or deletes it unless its configuration allows it "
                            "(--allow-system-object)", p.head)
                    for key in sorted(p.keys) if system_object(key, None, self.cfg.system_objects)]
        if not refusals:
            return None
        return (RefusalReason.SYSTEM_OBJECT, refusals,
                f"{len(refusals)} objects are system objects, e.g. {refusals[0].message}; nothing applied")

    # -- endings -------------------------------------------------------------------------

    def _stall(self, p: _Pass, reason: SyncReason, message: str, refusals: Sequence[Refusal] = (), *,
               observe: Observe = Observe.NOTHING, kind: str | None = "refusal", errors: int = 1) -> SyncResult:
        """End the pass ``Stalled``: the one place refusals are recorded, counted and logged.
        Nothing was deleted; what runs keeps running."""
        result = p.result
        result.refuse(refusals)
        if kind is not None:
            self.metrics.inc("qonnect_agent_errors_total", errors, kind=kind)
        log.warning("refused" if refusals else "sync_stalled", reason=str(reason), commit=p.head,
                    refusals=len(refusals), message=message[:MAX_MESSAGE])
        if observe is Observe.NOTHING:
            result.health = []
        elif observe is Observe.RUNNING:
            self._observe(result, p.inv, self._running_revision(p.inv))
        elif observe is Observe.INVENTORY:
            self._observe(result, p.inv, None)
        elif observe is Observe.BRANCH:
            self._observe(result, p.inv, p.rev)
        result.state, result.reason, result.message = SyncState.STALLED, reason, message
        return result

    def _unanswered(self, p: _Pass, result: SyncResult) -> SyncResult:
        """A pass that ends while the API server is not answering ends ``ApiUnavailable``,
        whichever phase met it (the apply's failed objects, a prune's errors, health that
        could not be read): what it refused stays refused and what it did stays done."""
        err = self.kube.unanswered
        if err is None or (result.failed and result.reason == SyncReason.API_UNAVAILABLE):
            return result
        return self._stall(p, SyncReason.API_UNAVAILABLE, f"the API server is not answering ({err.message}); "
                           f"the pass ended {result.state}/{result.reason}", observe=Observe.KEEP, kind=None)

    def _running_revision(self, inv: Inventory) -> Revision | None:
        """The revision that runs (the inventory's commit), if it was read in this process;
        otherwise None and health is read from the inventory's object list."""
        rev = self.revision
        return rev if rev is not None and rev.commit == inv.commit else None

    def _settle(self, result: SyncResult) -> SyncResult:
        """Ready when every object is healthy, Reconciling while some progress, Stalled on Degraded."""
        bad = [(o, h) for o, h in result.health if h[0] != HEALTHY]
        commit = (result.commit or "")[:12]
        if any(h[0] == DEGRADED for _, h in bad):
            o, h = next((o, h) for o, h in bad if h[0] == DEGRADED)
            result.state, result.reason = SyncState.STALLED, SyncReason.HEALTH_CHECK_FAILED
            result.message = f"{o['kind']} {o['metadata']['name']}: {h[1]}"
        elif bad:
            result.state, result.reason = SyncState.RECONCILING, SyncReason.PROGRESSING
            result.message = f"applied {commit}; {len(bad)} objects not ready yet, e.g. " + \
                f"{bad[0][0]['kind']} {bad[0][0]['metadata']['name']}: {bad[0][1][1]}"
        else:
            pruned = len(result.pruned.deleted)
            result.state, result.reason = SyncState.READY, SyncReason.RECONCILIATION_SUCCEEDED
            result.message = (f"applied {commit} (generation {result.generation}); {len(result.health)} objects "
                              "healthy" + (f", {pruned} pruned" if pruned else ""))
        if result.refusals and result.state == SyncState.READY:
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
            result.health, result.health_reasons = self._pod_verdicts(out)
        except KubeError as exc:
            log.warning("health_failed", error=str(exc))

    def _pod_verdicts(self, checked: list[tuple[dict[str, Any], Health]]
                      ) -> tuple[list[tuple[dict[str, Any], Health]], dict[ObjKey, HealthReason]]:
        """Refine health with the pods beside each object: workloads whose pods stay
        unschedulable, Services with no ready backend or rendered for callers only. Pods are
        listed once per namespace that has something to check."""
        namespaces = sorted({(o.get("metadata") or {}).get("namespace") or "" for o, h in checked
                             if needs_pods(o, h)})
        if not namespaces:
            return checked, {}
        pods_res = self.kube.resource("v1", "Pod")
        pods = {ns: PodIndex(self.kube.list(pods_res, ns)) for ns in namespaces if ns}
        workloads = [o for o, _ in checked if group_kind(o) in POD_TEMPLATE_KINDS]
        now = time.time()
        out: list[tuple[dict[str, Any], Health]] = []
        reasons: dict[ObjKey, HealthReason] = {}
        for obj, h in checked:
            index = pods.get((obj.get("metadata") or {}).get("namespace") or "")
            here = index.candidates(obj) if index is not None else []
            verdict = pod_verdict(obj, h, workloads, here, now, self.cfg.unschedulable_grace)
            if verdict is None:
                out.append((obj, h))
            else:
                out.append((obj, verdict[0]))
                reasons[key_of(obj)] = verdict[1]
        return out, reasons

    def _wait_health(self, result: SyncResult, timeout: float) -> None:
        """Re-check health until every object is healthy, one is Degraded, or ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        while result.state == SyncState.RECONCILING and result.reason == SyncReason.PROGRESSING \
                and time.monotonic() < deadline and not self.stopping.is_set():
            time.sleep(min(0.5, max(0.05, deadline - time.monotonic())))
            self._observe(result, Inventory(), self.revision)
            self._settle(result)

    def _finish(self, result: SyncResult) -> AgentReport | None:
        """Count and log the pass; its report for the leads (None without leads)."""
        self.metrics.set("qonnect_agent_last_sync_timestamp_seconds", time.time())
        self.metrics.inc("qonnect_agent_syncs_total", result=result.reason)
        log.info("sync_done", cluster=self.cfg.cluster, commit=(result.commit or "")[:12], state=result.state,
                 reason=result.reason, applied=sum(r.action in CHANGED_ACTIONS for r in result.objects),
                 pruned=len(result.pruned.deleted), failed=sum(r.action == Action.FAILED for r in result.objects))
        if self.reporter is not None:
            try:
                return self.build_report(result)
            except Exception as exc:  # noqa: BLE001 - never let a report problem stop syncing
                log.error("report_build_failed", error=str(exc))
        return None

    # ------------------------------------------------------------ report

    def build_report(self, result: SyncResult) -> AgentReport:
        """The report of a pass: its result, with capacity, Prometheus and Cluster API signals
        read now (bounded calls; see ``read_signals``)."""
        self.read_signals(result)
        return self._report(result, _status_of(result, self.source_stale_since), result.applied, result.commit)

    def heartbeat_report(self) -> AgentReport | None:
        """A heartbeat: what the agent knows now, from memory only (no call to the API server,
        Prometheus or Git, so it never waits on them); see ``heartbeat_status``. None before
        the first pass has ended or run for a report interval (nothing known yet)."""
        last, running, unanswered = self.last, self._running, self.kube.unanswered
        long_for = None
        current: SyncResult | None = None  # the pass under way, when the heartbeat speaks of it
        if running is not None and time.monotonic() - running[0] >= self.report_interval:
            long_for, current = time.monotonic() - running[0], running[1]
        if last is None and long_for is None and unanswered is None:
            return None
        status = heartbeat_status(_status_of(last, self.source_stale_since) if last else None, long_for,
                                  self._phase, unanswered.message if unanswered else None,
                                  self.kube.unanswered_for())
        # What runs and what is attempted: the pass under way knows them once it read the
        # inventory and the head; until then, the last pass's.
        applied = (current.applied if current else None) or (last.applied if last else None)
        attempted = (current.commit if current else None) or (last.commit if last else None)
        return self._report(last, status, applied, attempted)

    def _report(self, result: SyncResult | None, status: SyncStatus, applied: AppliedCommit | None,
                attempted: str | None) -> AgentReport:
        """A report of ``result`` (the components and refusals it found) and the latest
        signals, saying ``status``."""
        signals = self.signals
        return AgentReport(
            cluster=self.cfg.cluster, agent_time=datetime.now(UTC), applied=applied, attempted=attempted,
            sync=status, refusals=tuple(result.refusals[:MAX_REFUSALS]) if result else (),
            components=self._components_of(result) if result else (), nodes=signals.nodes,
            latencies=signals.latencies, traffic=signals.traffic, cluster_api=signals.cluster_api)

    def _components_of(self, result: SyncResult) -> tuple[ComponentHealth, ...]:
        """The components of ``result``'s health as a report carries them (kept for the
        heartbeats that repeat the same result)."""
        cached = self._components
        if cached is not None and cached[0] is result:
            return cached[1]
        comps = []
        for c in rollup(result.health, result.health_reasons):
            if c.component.startswith(POOL_APP + "/"):
                continue  # Cluster API objects: reported as cluster_api, not as a component
            if not _COMPONENT.match(c.component):  # a label the lead's model refuses must not sink the report
                log.warning("component_not_reported", component=c.component, why="labels are not RFC 1123 names")
                continue
            comps.append(ComponentHealth(component=c.component, healthy=c.status == HEALTHY, ready_replicas=c.ready,
                                         desired_replicas=c.desired, completed=c.completed, message=c.message,
                                         reason=c.reason))
        out = tuple(comps[:1000])
        self._components = (result, out)
        return out

    def _submit(self, report: AgentReport) -> None:
        assert self.reporter is not None
        self._submitted = time.monotonic()
        self.reporter.submit(report)

    def read_signals(self, result: SyncResult | None) -> None:
        """Read node capacity, Prometheus latency and traffic, and the Cluster API clusters of
        ``result`` into ``signals``. Every call is bounded (``--api-timeout``; Prometheus 5 s
        a query); a part that cannot be read keeps its last known value, and nothing is
        asked of an API server known not to answer."""
        old = self.signals
        if self.kube.unanswered is not None:
            return
        read_at = time.monotonic()
        nodes: tuple[NodeCapacity, ...] = old.nodes
        try:
            nodes = tuple(capacity.read_capacity(self.kube))
        except (KubeError, ValueError) as exc:
            log.warning("capacity_failed", error=str(exc))
        latencies, traffic = old.latencies, old.traffic
        if self.cfg.prometheus:
            # Workloads are mapped to components by the revision read last (agent/prometheus.py).
            reading = prometheus.read(self.cfg.prometheus, self.cfg.cluster, self.cfg.queries,
                                      self.cfg.prometheus_window, self.revision.objects if self.revision else ())
            if reading.problem is None:
                latencies, traffic = reading.latencies, reading.traffic
            else:
                self.metrics.inc("qonnect_agent_errors_total", kind="prometheus")
                log.warning("prometheus_failed", error=reading.problem)
        cluster_api = old.cluster_api
        if self.kube.unanswered is None:  # its reads fall back to what the pass saw: not while unanswered
            cluster_api = self._cluster_api(result) if result is not None else ()
        self.signals = Signals(nodes, latencies, traffic, cluster_api, read_at)

    def _cluster_api(self, result: SyncResult) -> tuple[ClusterApiStatus, ...]:
        """The Cluster API clusters this cluster runs (a management cluster: cloud bursting)."""
        try:
            return capi.statuses(self.kube, result.health)
        except (KubeError, ValueError) as exc:
            log.warning("capi_status_failed", error=str(exc))
            return self.signals.cluster_api

    def _git_skippable(self) -> bool:
        """Whether this pass may use the head fetched last without asking Git: no poll is
        due (webhook, announced generation, a hint naming another commit), the last poll
        succeeded, a lead answer received since then names that very commit, less than
        ``git_poll_max_interval`` passed since Git was last asked, and that commit is the
        one this agent applied last. A pass that would change the cluster always asks Git
        first: a commit fetched earlier and not applied (the API server was down) may have
        been superseded since, and an answer naming it may lag the leader's newest write
        (issue 31: a stale failover commit applied on recovery)."""
        hint, head = self._hint, self._git_head
        return (self.cfg.git_poll_max_interval > 0 and not self._git_due.is_set() and self.source_error is None
                and head is not None and head == self.last_good_commit
                and hint is not None and hint[0] == head and hint[1] >= self._git_at
                and time.monotonic() - self._git_at < self.cfg.git_poll_max_interval)

    def poll_git_now(self) -> None:
        """Make the next pass ask Git, and start it (a push webhook, a newer generation)."""
        self._git_due.set()
        self.wake.set()

    def _on_commit_hint(self, value: Any) -> None:
        """A lead's ``commit``: the head of our branch as the leader published it. Only a
        hint: a malformed one is ignored (with a warning, at most every 5 minutes); one that
        differs from what we fetched makes the agent ask Git now, once per hinted commit and
        at most once per report interval, so a lying lead can cause no more than that."""
        now = time.monotonic()
        if not isinstance(value, str) or not _COMMIT.fullmatch(value):
            if now - self._hint_warned >= WARNING_REPEAT_SECONDS:
                self._hint_warned = now
                log.warning("lead_commit_ignored", value=repr(value)[:80],
                            why="not a commit id (40 or 64 lower-case hex digits)")
            return
        self._hint = (value, now)
        polled_for, polled_at = self._hint_polled
        if value == self._git_head or value == polled_for:
            return
        if now - polled_at < max(self.report_interval, self.cfg.report_interval):
            return  # one early poll per report interval; the scheduled polls go on (no skipping)
        self._hint_polled = (value, now)
        log.info("lead_names_other_commit", commit=value[:12], fetched=(self._git_head or "")[:12])
        self.poll_git_now()

    def _on_lead_response(self, doc: dict[str, Any]) -> None:
        if "commit" in doc:
            self._on_commit_hint(doc["commit"])
        interval = doc.get("heartbeatIntervalSeconds")
        if isinstance(interval, (int, float)) and not isinstance(interval, bool) and interval > 0:
            # The fleet's heartbeat (qonnect.yaml) governs; --report-interval is the fallback.
            if float(interval) != self.report_interval:
                self.report_interval = float(interval)
                self._beat.set()  # the heartbeat thread may be sleeping on the old interval
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
        self.poll_git_now()

    # ------------------------------------------------------------ loop

    def run(self) -> None:
        """Sync until ``stopping`` is set; heartbeats and signals run on their own threads."""
        cfg = self.cfg
        servers = []
        if cfg.metrics_addr:
            # one address may serve both; a separate webhook address gets its own server
            same = cfg.webhook_addr in (None, cfg.metrics_addr)
            servers.append(serve(cfg.metrics_addr, self.metrics, cfg.webhook_secret if same else None,
                                 self.poll_git_now))
        if cfg.webhook_addr and cfg.webhook_addr != cfg.metrics_addr:
            servers.append(serve(cfg.webhook_addr, None, cfg.webhook_secret, self.poll_git_now))
        threads = [threading.Thread(target=self._signal_loop, name="signals", daemon=True)]
        if self.reporter:
            self.reporter.start()
            threads.append(threading.Thread(target=self._heartbeat_loop, name="heartbeat", daemon=True))
        for thread in threads:
            thread.start()
        next_drift = time.monotonic() + cfg.drift_interval
        failures = 0
        full = True  # the first pass after a start compares everything
        try:
            while not self.stopping.is_set():
                try:
                    result = self.sync(full=full)
                    full = False
                    unhealthy_source = result.source_stale or result.reason == SyncReason.API_UNAVAILABLE
                except Exception as exc:
                    log.error("sync_crashed", exc_info=True, error=str(exc))  # noqa: G201 - EventLogger API
                    self.metrics.inc("qonnect_agent_errors_total", kind="internal")
                    unhealthy_source = True
                failures = failures + 1 if unhealthy_source else 0
                interval = cfg.interval
                if failures:
                    interval = min(cfg.interval * 2 ** min(failures - 1, 5), max(cfg.interval, 300.0))
                interval *= 1 + random.uniform(-cfg.jitter, cfg.jitter)
                now = time.monotonic()
                # Sleep until the next poll or drift check, or until woken (a lead's newer
                # generation, a webhook, the API server answering again).
                if now < next_drift and self.wake.wait(max(0.01, min(now + interval, next_drift) - now)):
                    self.wake.clear()
                if time.monotonic() >= next_drift:
                    full = True
                    next_drift = time.monotonic() + cfg.drift_interval
        finally:
            self._beat.set()
            for thread in threads:
                thread.join(timeout=2.0)  # daemons: one mid-read (bounded by --api-timeout) is left to end
            if self.reporter:
                self.reporter.stop()
            for server in servers:
                server.shutdown()
                server.server_close()

    def _heartbeat_loop(self) -> None:
        """Report at least every report interval, whatever a pass is doing. Builds reports from
        memory only (``heartbeat_report``): nothing here waits on the cluster or Git."""
        while not self.stopping.is_set():
            due = self._submitted + self.report_interval
            now = time.monotonic()
            if now < due:
                self._beat.wait(due - now)
                self._beat.clear()
                continue
            with self._reporting:
                try:
                    report = self.heartbeat_report()
                except Exception as exc:  # noqa: BLE001 - the heartbeat must outlive any bad state
                    log.error("heartbeat_failed", error=str(exc))
                    report = None
                if report is None:
                    self._submitted = now  # nothing known yet: look again in an interval
                    continue
                self._submit(report)
            self.metrics.inc("qonnect_agent_heartbeats_total")

    def _signal_loop(self) -> None:
        """Between passes, read the signals reports carry every report interval; while the API
        server does not answer, ask it once per interval instead, and start a pass as soon as
        it answers again (the passes back off while it is away)."""
        while not self.stopping.wait(self.report_interval):
            try:
                self.metrics.set("qonnect_agent_api_answering", 0.0 if self.kube.unanswered else 1.0)
                if self.kube.unanswered is not None:
                    last = self.last
                    if self.kube.probe() and last is not None and last.reason == SyncReason.API_UNAVAILABLE:
                        log.info("api_answering_again", cluster=self.cfg.cluster)
                        self.wake.set()
                    continue
                if self._running is None and time.monotonic() - self.signals.read_at >= self.report_interval:
                    self.read_signals(self.last)
            except Exception as exc:  # noqa: BLE001 - a bad read must not end the signals
                log.error("signals_failed", error=str(exc))

    def stop(self) -> None:
        self.stopping.set()
        self.wake.set()
        self._beat.set()


def _status_of(result: SyncResult, source_stale_since: float | None) -> SyncStatus:
    """The sync status a report gives ``result``: a stale source says for how long."""
    status = result.status()
    if result.source_stale and source_stale_since:
        age = int(time.time() - source_stale_since)
        status = SyncStatus(state=status.state, reason=SyncReason.SOURCE_UNAVAILABLE,
                            message=f"source stale for {age}s: {status.message}"[:MAX_MESSAGE])
    return status


def _applied(inv: Inventory) -> AppliedCommit | None:
    if inv.commit is None:
        return None
    return AppliedCommit(commit=inv.commit, generation=inv.generation or 0)


def describe_keys(keys: list[ObjKey]) -> str:
    return ", ".join(describe(k) for k in keys)


def _apply_refusal(reason: str) -> RefusalReason:
    """The refusal an object that failed to apply is reported under."""
    return RefusalReason(reason) if reason in _REFUSED_ON_APPLY else RefusalReason.INVALID_MANIFEST


def _prune_refusal_message(key: ObjKey, why: RefusalReason) -> str:
    if why == RefusalReason.PROTECTED_NAMESPACE:
        return f"{describe(key)} left the branch but is in (or is) a reserved namespace; it stays"
    return (f"{describe(key)} left the branch but is a protected kind; a person may annotate it "
            f"qonnect.io/prune: enabled to let the agent delete it")
