"""The leader's reconcile loop: when to run a cycle, and the fencing around its writes.

One ``BackgroundScheduler`` per lead, paused unless this lead leads with a quorum.
Everything that may change the decision only *triggers* a cycle; triggers coalesce
(one cycle runs at a time, and any number of triggers during it cause exactly one
more). Triggers:

* ``elected``: this lead just became leader (resume from the plan branch and the KB);
* ``poll`` every ``poll_seconds`` and ``webhook`` on a verified push to the goals repo;
* ``deadline``: the earliest moment a fresh cluster would pass the heartbeat grace
  (failover without waiting for the next poll);
* ``report``: a report changed the picture (fewer ready nodes, capacity lost, a
  latency crossing an envelope; a breach also re-triggers once the latency window
  has passed, when the KB's sustained value shows whether it held);
* ``rescheduling`` every ``reschedule_seconds``: the planner's stability rules
  (cooldown, minimum improvement, disruption budget) decide whether anything moves.

A cycle whose inputs are the last cycle's (the same goals commit, plan commit and
observation, heartbeat ages aside) reuses that decision instead of planning and
rendering the fleet again (``lead/memo.py``); ``rescheduling``, ``provisioning``,
``elected`` and ``manual`` always plan afresh.

* ``retry``: a cycle that failed (Git unreachable, an unexpected error) is tried
  again after a short backoff, so failover never waits for the next poll.

Fencing: a cycle records its decision in the KB through Raft (refused for a stale
term) and re-checks leadership and term immediately before publishing; losing
leadership pauses the scheduler and aborts a cycle in flight before its push. The
push itself is a compare-and-swap on every ref, so a write from a deposed leader
that slipped past both checks is refused by the Git server.

Branch heads: after each cycle the leader records in the KB the cluster branch heads its
mirror knows from the remote (fetched or accepted by a push, never a local write) where
they differ from the recorded ones, so every lead's report answer names them
(``_record_heads``; docs/git-layout.md).

Degraded planning: when planning with everything the agents measured fails (a bug,
or a value the planner cannot take), the cycle plans again from liveness alone
(health and heartbeat ages, declared capacity and latency), so failover of the
other clusters goes on; ``/v1/status`` shows the error under ``loop.degraded``.

The loop gets only what it uses: the Raft node (proposals, leadership), a
``KBReader`` (typed reads), the metrics registry and ``LoopConfig`` (the goals
repository). It owns the goals fetch status; the service only shows it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler  # type: ignore[import-untyped]

from qonnect_gitops.gitstore import GitStoreError, StaleRef
from qonnect_gitops.gitstore.remote import Mirror, credentials_from_env
from qonnect_gitops.gitstore.signing import KeyFile
from qonnect_gitops.kb import (
    PLAN_BASE_MOVED,
    KBReader,
    ReportEntry,
    ReportRecord,
    ReportVerdict,
    heartbeat_from_goals,
    inventory_from_goals,
    placement_changes,
    workloads_from_goals,
)
from qonnect_gitops.kb.health import report_condition
from qonnect_gitops.lead.faults import armed, fault_point
from qonnect_gitops.lead.latency_hold import LatencyHold, envelopes_broken, latency_envelopes
from qonnect_gitops.lead.memo import DecisionMemo
from qonnect_gitops.lead.metrics import Metrics
from qonnect_gitops.lead.raft.errors import ProposalError
from qonnect_gitops.lead.raft.node import RaftNode
from qonnect_gitops.lead.raft.state import BRANCH_HEADS_VERSION, PLAN_CHANGES_VERSION
from qonnect_gitops.lead.reconcile import (
    CycleHooks,
    CycleResult,
    Fenced,
    open_mirror_for_goals,
    plan_in_force,
    reconcile_once,
    unmet_of,
)
from qonnect_gitops.lead.review import TICK_SECONDS as REVIEW_TICK_SECONDS
from qonnect_gitops.lead.review import ReviewBridge, ReviewConfig
from qonnect_gitops.logs import get_logger, redact, redact_url
from qonnect_gitops.model import Goals, GoalsError, Observed, Plan
from qonnect_gitops.model.limits import DEFAULT_TREE_LIMITS, TreeLimits
from qonnect_gitops.model.observed import ObservedCluster
from qonnect_gitops.placement.provision import fleet_record, next_deadline
from qonnect_gitops.render.describe import plan_markdown

log = get_logger(__name__)
# APScheduler logs every job run at INFO; our own events say what a cycle did.
logging.getLogger("apscheduler").setLevel(logging.WARNING)

MIRROR_DIR = "goals-mirror.git"
ATTEMPTS = 3  # a lost compare-and-swap is retried from a fresh fetch, then left to the next trigger
DEADLINE_SLACK = 0.05  # fire just after the grace has passed, never just before
_UNKNOWN = "unknown"  # no plan head seen yet in this term
RETRY_FIRST = 0.5  # seconds before the first retry of a failed cycle; doubles up to the poll
UNHEALTHY_AFTER = 3  # consecutive failed cycles after which /readyz says the loop is unhealthy
# A branch-heads entry stays well below pysyncobj's 64 KiB append size (``ReportBatcher``):
# about 45 KiB of names and commit ids, some 700 clusters with short names; every head of
# 10,000 clusters is 15 entries (benchmarks/branch_heads.py).
HEADS_ENTRY_BYTES = 45 * 1024
VERSION_PROBE_SECONDS = 30.0  # how often a leader asks the members for their code version
# Triggers that exist for rules acting on time alone: they always get a fresh plan.
FRESH_PLAN = frozenset({"rescheduling", "provisioning", "elected", "manual"})


@dataclass(frozen=True)
class LoopConfig:
    """The goals repository and the loop's periods."""

    repo: str
    mirror_dir: Path
    poll_seconds: float = 10.0
    reschedule_seconds: float = 60.0
    api_url: str | None = None  # this lead's advertised API URL (links in forge statuses)
    goals_limits: TreeLimits = DEFAULT_TREE_LIMITS  # how large a goals tree is accepted
    review: ReviewConfig = field(default_factory=ReviewConfig)  # the lead's forges and the limits of a preview
    signing_key: Path | None = None  # signs every commit the leader writes (re-read when replaced)


@dataclass
class FetchStatus:
    """The last goals fetch as ``/v1/status`` shows it (URL and error redacted)."""

    repo: str
    last_fetch_at: float | None = None
    last_fetch_error: str | None = None


class ReconcileLoop:
    """Runs reconcile cycles on the leader; see the module docstring."""

    def __init__(self, node: RaftNode, kb: KBReader, metrics: Metrics, config: LoopConfig) -> None:
        self.node = node
        self.kb = kb
        self.metrics = metrics
        # Whether this lead could not take reports lately (its API refused connections for
        # want of room): silence is then no evidence, and no silent cluster fails over.
        # The service sets it once its API server runs (``lead.http.serve``).
        self.observer_impaired: Callable[[], bool] = lambda: False
        self.config = config
        self.poll_seconds = config.poll_seconds
        self.reschedule_seconds = config.reschedule_seconds
        self.fetch = FetchStatus(redact_url(config.repo))
        self.failures = 0  # consecutive failed cycles
        self.degraded: str | None = None  # why the last cycle planned from liveness alone
        self._mirror: Mirror | None = None
        self.signer = KeyFile(config.signing_key) if config.signing_key is not None else None
        if self.signer is None:
            log.warning("decisions_unsigned", why="no --signing-key: agents that verify refuse these commits")
        self._seen_head: str | None = _UNKNOWN  # plan head at the end of the last cycle
        self._branches: tuple[str, str, str] | None = None
        self._lock = threading.Lock()
        self._cycle_lock = threading.Lock()
        self._dirty: list[str] = []
        self._running = False
        self._leading = False
        self._leading_term = 0
        # Per cluster, the last report's coarse picture (see _signature).
        self._signatures: dict[str, tuple[Any, ...]] = {}
        # Per region, the sorted latency envelopes (ms) of every component's goals.
        self._envelopes: dict[str, list[float]] = {}
        self._goals: Goals | None = None  # the goals of the last cycle (pool rules)
        self._dynamic: set[str] = set()  # pool clusters of the last decision
        # The generation and placement of the last decision this leader recorded in the KB
        # in this term (``_record_plan``); None when unknown.
        self._recorded: tuple[int, dict[str, dict[str, int]]] | None = None
        # The last decision, reused while its inputs hold (lead/memo.py); time-driven rules
        # get a fresh plan at least every rescheduling interval.
        self.memo = DecisionMemo(max_age_seconds=config.reschedule_seconds)
        # Measured latencies as the planner saw them, held through jitter (lead/latency_hold.py).
        self.latency_hold = LatencyHold()
        self._heads_probe_at = 0.0  # monotonic: when to ask the members again (enable_code_version)
        self.cycles = 0
        self.last_cycle: dict[str, Any] | None = None
        self.last_error: str | None = None
        self.scheduler = BackgroundScheduler(
            timezone=UTC,
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": 30},
        )
        self.scheduler.start(paused=True)
        self.scheduler.add_job(self.trigger, "interval", seconds=config.poll_seconds, args=["poll"],
                               id="poll")
        self.scheduler.add_job(self.trigger, "interval", seconds=config.reschedule_seconds,
                               args=["rescheduling"], id="reschedule")
        # Forge review (pull requests, previews, commit statuses): lead/review.py.
        self.review = ReviewBridge(node, kb, self)
        self.scheduler.add_job(self.review.tick, "interval", seconds=REVIEW_TICK_SECONDS, id="review")

    # ----------------------------------------------------------- leadership

    def set_leading(self, leading: bool, term: int) -> None:
        """Called by the leadership watcher every few tens of milliseconds."""
        if leading and (not self._leading or term != self._leading_term):
            if self._mirror is not None:
                # another leader may have written since we last did (first: report answers
                # must not show this lead's old heads once it leads again)
                self._mirror.distrust()
            self._leading, self._leading_term = True, term
            self._signatures.clear()  # judge reports afresh: another lead saw the ones before
            self._recorded = None  # other leaders recorded decisions meanwhile
            self.memo.forget()
            self.latency_hold.refresh()
            self._seen_head = _UNKNOWN
            self.scheduler.resume()
            log.info("loop_resumed", term=term)
            self.trigger("elected")
        elif not leading and self._leading:
            self._leading = False
            self.scheduler.pause()
            log.warning("loop_paused", term=term)

    def published_head(self, cluster: str) -> str | None:
        """The head of ``cluster``'s branch as this leader last pushed or fetched it, for
        report answers (a hint: agents fetch and verify before applying); None when this
        lead does not lead or has not fetched in this term (``Mirror.distrust`` clears it)."""
        mirror = self._mirror
        return mirror.published_head(cluster) if self._leading and mirror is not None else None

    def may_write(self, term: int) -> bool:
        """The fence: still leader with a quorum, in the term the cycle started in."""
        return self._leading and self.node.is_leader() and self.node.term() == term

    # --------------------------------------------------------------- triggers

    def trigger(self, why: str) -> None:
        """Ask for a cycle; coalesces with one running or queued."""
        if not self._leading:
            return
        with self._lock:
            self._dirty.append(why)
            if self._running:
                return
            self._running = True
        self.scheduler.add_job(self._drain, id="cycle", replace_existing=True,
                               next_run_time=datetime.now(tz=UTC))

    def trigger_at(self, when: float, why: str, job_id: str) -> None:
        """A trigger at Unix time ``when`` (replacing the earlier one of ``job_id``)."""
        if not self._leading:
            return
        self.scheduler.add_job(self.trigger, "date", run_date=datetime.fromtimestamp(when, tz=UTC),
                               args=[why], id=job_id, replace_existing=True)

    def on_reports(self, entries: Sequence[ReportEntry], verdicts: Sequence[ReportVerdict]) -> None:
        """Called on the Raft thread after a batch of reports was applied: must be cheap."""
        if not self._leading:
            return
        signatures, envelopes = self._signatures, self._envelopes
        for entry, verdict in zip(entries, verdicts):
            if not verdict.stored:
                continue
            cluster = entry.cluster
            signature = report_signature(entry.record, envelopes)
            before = signatures.get(cluster)
            signatures[cluster] = signature
            if before == signature:
                continue  # the everyday report
            if before is None:
                if cluster in self._dynamic:
                    self.trigger(f"joined:{cluster}")  # a pool cluster's agent speaks: it may join
                continue
            self.trigger(f"report:{cluster}")
            if signature[3] > before[3]:
                # A new breach: once it has held through the latency window the KB's
                # sustained value shows it; look again then.
                window = self.kb.latency_window()
                self.trigger_at(entry.received_at + window + DEADLINE_SLACK, f"sustained:{cluster}",
                                f"sustained-{cluster}")

    # ------------------------------------------------------------------ cycle

    def _drain(self) -> None:
        """Run cycles until no trigger is left (the scheduler's ``cycle`` job)."""
        while True:
            with self._lock:
                if not self._dirty or not self._leading:
                    self._dirty.clear()
                    self._running = False
                    return
                reasons, self._dirty = self._dirty, []
            try:
                self.cycle(sorted(set(reasons)))
            except Exception as exc:  # the loop must survive any one cycle
                self._failed(f"{type(exc).__name__}: {exc}")
                log.error("cycle_failed", error=exc, exc_info=True)

    def _failed(self, error: str) -> None:
        """Record a failed cycle and try again soon: failover must not wait for a poll."""
        self.last_error = redact(error)
        self.failures += 1
        delay = min(self.poll_seconds, RETRY_FIRST * 2 ** min(self.failures - 1, 10))
        self.trigger_at(time.time() + delay, "retry", "retry")

    def healthy(self) -> bool:
        """False after ``UNHEALTHY_AFTER`` failed cycles in a row, or while planning is
        degraded (what ``/readyz`` reports for the leader)."""
        return self.failures < UNHEALTHY_AFTER and self.degraded is None

    def cycle(self, why: Sequence[str] = ("manual",)) -> CycleResult | None:
        """One fenced cycle with CAS retries; returns what it did (None when it stopped)."""
        with self._cycle_lock:  # one mirror, one cycle at a time (scheduler or direct call)
            return self._cycle(why)

    def _cycle(self, why: Sequence[str]) -> CycleResult | None:
        term = self.node.term()
        if not self.may_write(term):
            return None
        start = time.perf_counter()
        now = datetime.now(tz=UTC)
        hooks = CycleHooks(on_goals=lambda c, g: self._record_goals(c, g, term),
                           before_publish=lambda r: self._fence_and_record(r, term, now),
                           between_pushes=lambda: self._between_pushes(term),
                           two_pushes=lambda: armed("between-pushes"),
                           may_propose=self.review.may_propose)
        if FRESH_PLAN.intersection(why):
            self.memo.forget()  # these triggers exist for rules that act on time alone
            self.latency_hold.refresh()
        result = None
        for attempt in range(1, ATTEMPTS + 1):
            self.metrics.inc("qonnect_goals_fetches_total")  # one fetch per attempt
            try:
                mirror = self._open_mirror()
                result = reconcile_once(mirror, self._observe(now), now=now, term=term,
                                        hooks=hooks, describe=plan_markdown,
                                        fallback=self._liveness(now), memo=self.memo,
                                        goals_limits=self.config.goals_limits,
                                        trusted_goals=self.kb.last_good_commit())
                break
            except GoalsError as exc:
                self._record_failure(exc, term)
                return None
            except Fenced as exc:
                log.warning("cycle_fenced", term=term, why=",".join(why), detail=str(exc))
                return None
            except StaleRef as exc:
                # Someone else (a newer leader, a merge) moved a ref: re-read and re-plan.
                log.warning("cycle_lost_race", attempt=attempt, refs=",".join(exc.refs))
                if not self.may_write(term):
                    return None
            except (GitStoreError, OSError, RuntimeError) as exc:
                # Shown in /v1/status (loop.lastError, goalsSource.lastFetchError); the
                # plan in force stays, a retry comes after a short backoff.
                self.fetch.last_fetch_error = redact(str(exc))
                self._failed(str(exc))
                self.metrics.inc("qonnect_goals_fetch_errors_total")
                log.error("cycle_git_error", error=exc)
                return None
        if result is None:
            return None
        self._record_heads(term)  # first: agents learn of the push through the answers
        self._sync_kb(term, result)
        self.review.after_cycle(self._open_mirror(), result, term)
        self.cycles += 1
        self.failures = 0
        self.last_error = None
        self.degraded = result.degraded
        if result.degraded:
            self.metrics.inc("qonnect_cycles_degraded_total")
            log.error("cycle_degraded", error=result.degraded)
        seconds = time.perf_counter() - start
        # A cycle that moved no ref decided nothing: the label its discarded plan carries
        # ("goals-changed" for any replan without moves) would read as a change.
        self.last_cycle = {"at": time.time(), "why": list(why), "seconds": round(seconds, 4),
                           "goalsCommit": result.goals_commit, "decided": result.changed,
                           "reason": result.plan.reason if result.changed else None,
                           "generation": result.generation, "pushed": len(result.refs)}
        log.info("cycle_done", **{k: v for k, v in self.last_cycle.items() if k != "why" and v is not None},
                 why=",".join(why))
        self._schedule_deadline(now.timestamp())
        self._dynamic = set(fleet_record(result.plan.provisioning, self._goals)) if self._goals else set()
        if self._goals is not None:
            due = next_deadline(self._goals, result.plan.provisioning, now)
            if due is not None:
                self.trigger_at(due.timestamp() + DEADLINE_SLACK, "provisioning", "provisioning")
        return result

    def _open_mirror(self) -> Mirror:
        if self._mirror is None:
            self._mirror = open_mirror_for_goals(self.config.mirror_dir, self.config.repo,
                                                 credentials_from_env(), self.config.goals_limits,
                                                 signer=self.signer)
        return self._mirror

    def _observe(self, now: datetime) -> Any:
        def observe(goals: Goals) -> Observed:
            return self.latency_hold.apply(self._snapshot(now), self._envelopes)
        return observe

    def _liveness(self, now: datetime) -> Any:
        def observe(goals: Goals) -> Observed:
            return liveness_only(self._snapshot(now))
        return observe

    def _snapshot(self, now: datetime) -> Observed:
        impaired = self.observer_impaired()
        if impaired:
            log.warning("evictions_paused", why="this lead refused connections for want of room lately")
        return self.kb.snapshot(now, observer_impaired=impaired)

    # -------------------------------------------------------- KB records

    def _record_goals(self, commit: str, goals: Goals, term: int) -> None:
        """Valid goals: record the inventory (once per commit) before the KB is read."""
        self.review.on_goals(goals)
        branches = goals.fleet.spec.branches
        names = (branches.plan, branches.cluster_prefix, branches.proposal_prefix)
        if self._branches is not None and names != self._branches:
            self._mirror = None  # the fleet renamed its branches: reopen with the new names
            self._branches = names
            raise Fenced("branch names changed; the next cycle uses the new ones")
        self._branches = names
        self._envelopes = latency_envelopes(goals)
        self._goals = goals
        self.fetch.last_fetch_at, self.fetch.last_fetch_error = time.time(), None
        if self.kb.last_good_commit() == commit:
            return
        if not self.may_write(term):
            raise Fenced("lost leadership before recording goals")
        try:
            self.node.commands.record_goals(commit, inventory_from_goals(goals), heartbeat_from_goals(goals),
                                            workloads_from_goals(goals), time.time())
        except ProposalError as exc:
            raise Fenced(f"goals not recorded: {exc.reason}") from exc
        log.info("goals_accepted", commit=commit, clusters=len(goals.clusters))

    def _record_failure(self, exc: GoalsError, term: int) -> None:
        """Invalid goals: record the problems (file:line) once; nothing is written to Git."""
        mirror = self._open_mirror()
        commit = mirror.main_commit() or "unknown"
        errors = [str(problem) for problem in exc.problems]
        if self.kb.last_failed_commit() == commit or not self.may_write(term):
            return
        try:
            self.node.commands.record_goals_failure(commit, errors, time.time())
        except ProposalError as err:
            log.warning("goals_failure_not_recorded", reason=err.reason)
            return
        log.warning("goals_rejected", commit=commit, problems=len(errors))
        self.review.after_invalid_goals(commit, errors)

    def _fence_and_record(self, result: CycleResult, term: int, now: datetime) -> None:
        """Before any push: record the decision in the KB, then re-check the fence."""
        if not self.may_write(term):
            raise Fenced("not leader with a quorum in the cycle's term")
        if result.written is not None and result.written.plan_commit is not None:
            try:
                generation = self._record_plan(result.plan, result.goals_commit, term, now, result.generation)
            except ProposalError as exc:
                raise Fenced(f"decision not recorded: {exc.reason}") from exc
            if generation == -1:
                raise Fenced(f"the KB refused a decision from term {term}")
            self._record_dynamic(result, now)
        # Decided, recorded in the KB, committed locally, not pushed: the crash tests'
        # fault point (a no-op unless QONNECT_FAULT_FILE arms it).
        if fault_point("before-publish"):
            return
        if not self.may_write(term):
            raise Fenced("lost leadership while recording the decision")

    def _record_plan(self, plan: Plan, goals_commit: str, term: int, now: datetime, written: int) -> int:
        """Record a decision in the KB; returns the new generation (-1: refused, stale term).
        ``written``: the generation of the plan commit that carries it (the KB follows the
        plan branch's numbering).

        Recorded as what it changed against the decision this leader recorded last
        (``plan_changes``: one moved component among 100,000 is a few hundred bytes where
        the whole placement is megabytes pickled, compressed, sent and applied on every
        lead's Raft thread), unless that is not the one in force any more (an operator's
        plan, a merged proposal, a proposal that timed out and committed later: the KB
        refuses the change) or the group runs code without that entry; then whole."""
        placements = plan.placements()
        reasons: dict[str, str] = {move.component: move.reason for move in plan.moves}
        commands, at, unmet = self.node.commands, now.timestamp(), unmet_of(plan)
        recorded, self._recorded = self._recorded, None  # unknown until the KB answers
        generation, form = PLAN_BASE_MOVED, "whole"
        if recorded is not None and self.node.code_version() >= PLAN_CHANGES_VERSION:
            base, before = recorded
            changed, removed = placement_changes(before, placements)
            generation = commands.record_plan_changes(base, changed, removed, reasons, plan.reason,
                                                      goals_commit, term, at, unmet, written)
            form = "changes"
        if generation == PLAN_BASE_MOVED:
            generation, form = commands.record_plan(placements, reasons, plan.reason, goals_commit,
                                                    term, at, unmet, written), "whole"
        self.metrics.inc("qonnect_decisions_recorded_total", form=form)
        if generation >= 0:
            self._recorded = (generation, placements)
        return int(generation)

    def _record_dynamic(self, result: CycleResult, now: datetime) -> None:
        """The pool clusters of the decision, in the KB before the push: their agents may
        report from then on (cloud bursting)."""
        goals = self._goals
        if goals is None:
            return
        record = fleet_record(result.plan.provisioning, goals)
        if record == self.kb.dynamic_clusters():
            return
        try:
            self.node.commands.record_pool_clusters(record, now.timestamp())
        except ProposalError as exc:
            raise Fenced(f"pool clusters not recorded: {exc.reason}") from exc
        self._dynamic = set(record)

    def _between_pushes(self, term: int) -> None:
        """After the plan branch was pushed: stop before the fan-out if deposed (the next
        leader's cycle finishes it from the plan commit)."""
        fault_point("between-pushes")
        if not self.may_write(term):
            raise Fenced("lost leadership between the plan push and the fan-out")

    def _record_heads(self, term: int) -> None:
        """After a cycle (it fetched, and pushed what it decided): record in the KB the
        cluster branch heads the remote holds where they differ from the recorded ones, so
        every lead answers reports with them. The mirror knows only what the remote showed
        or accepted, never a local write, so nothing unpublished is recorded; a head this
        leader no longer knows (a refused push) is withdrawn."""
        if self.node.code_version() < BRANCH_HEADS_VERSION:
            if time.monotonic() < self._heads_probe_at:
                return
            self._heads_probe_at = time.monotonic() + VERSION_PROBE_SECONDS
            if self.node.enable_code_version() < BRANCH_HEADS_VERSION:
                return
        mirror = self._mirror
        if mirror is None or not self.may_write(term):
            return
        changes = heads_changes(self.kb.branch_heads(), mirror.published_heads())
        for chunk in heads_chunks(changes):
            try:
                self.node.commands.record_branch_heads(chunk, term)
            except ProposalError as exc:
                log.warning("branch_heads_not_recorded", reason=exc.reason, clusters=len(chunk))
                return
        if changes:
            log.info("branch_heads_recorded", clusters=len(changes), term=term)

    def _sync_kb(self, term: int, result: CycleResult) -> None:
        """Record in the KB a plan commit someone else put on the plan branch (a merged
        proposal, ``qonnect approve``), so the KB describes what is in force. Also fills
        an empty KB (a group rebuilt from scratch) at its first cycle. A head this
        leader already saw is left alone: the KB record of our own decisions was made
        before publishing, and an operator's ``POST /v1/plan`` is not overridden."""
        mirror = self._open_mirror()
        head = mirror.store.plan_head()
        seen, self._seen_head = self._seen_head, head
        if head is None or head == seen:
            return
        if result.written is not None and result.written.plan_commit == head:
            return  # our own decision, recorded before it was pushed
        if seen is _UNKNOWN and not self.kb.is_empty():
            return  # a new leader: the KB already holds what the group recorded
        in_force = plan_in_force(mirror, head)
        placements = in_force.placements()
        recorded = (self.kb.placements(), self.kb.unmet())
        if recorded == (placements, unmet_of(in_force)) or not self.may_write(term):
            return
        meta = mirror.store.decision_of(head)
        try:
            generation = self.node.commands.record_plan(placements, {}, meta.reason, meta.source, term,
                                                        time.time(), unmet_of(in_force), meta.generation)
            self._recorded = (generation, placements) if generation >= 0 else None
        except ProposalError as exc:
            self._seen_head = seen  # try again next cycle
            log.warning("kb_sync_failed", reason=exc.reason)
            return
        log.info("kb_synced_with_plan_branch", plan=head, generation=meta.generation)

    def _schedule_deadline(self, seen_at: float) -> None:
        """Act on time without waiting for a poll: wake when the health model's judgement of
        a cluster or a placed component next changes after ``seen_at`` (the cycle's snapshot
        time): a cluster falls silent, a degradation lasts long enough to fail over, a
        recovery ends, the storm guard releases an eviction, a progress deadline passes. A
        report before then only makes the wake-up early; a moment already past (it changed
        while the cycle ran) triggers at once."""
        due = self.kb.next_health_change(seen_at)
        if due is None:
            return
        when = due + DEADLINE_SLACK
        if when <= time.time():
            self.trigger("deadline")
        else:
            self.trigger_at(when, "deadline", "deadline")

    def on_webhook(self, headers: dict[str, str], body: bytes) -> None:
        """A verified webhook: goals pull requests go to the review bridge for a preview;
        pushes and proposal pull request changes trigger a cycle."""
        if self.review.on_webhook(headers, body):
            self.trigger("webhook")

    def status(self) -> dict[str, Any]:
        """The loop's part of ``/v1/status``."""
        return {"leading": self._leading, "cycles": self.cycles, "lastCycle": self.last_cycle,
                "lastError": self.last_error, "failures": self.failures,
                "degraded": self.degraded, "healthy": self.healthy(),
                "pollSeconds": self.poll_seconds, "rescheduleSeconds": self.reschedule_seconds,
                "review": self.review.status()}

    def close(self) -> None:
        """Stop the scheduler without waiting for a cycle in flight."""
        self._leading = False
        self.review.close()
        self.scheduler.shutdown(wait=False)


def heads_changes(recorded: dict[str, str], published: dict[str, str]) -> dict[str, str | None]:
    """What makes the ``recorded`` branch heads equal the ``published`` ones: each cluster
    whose head differs, with its new head, or None where none is published."""
    changes: dict[str, str | None] = {c: h for c, h in published.items() if recorded.get(c) != h}
    changes.update((c, None) for c in recorded if c not in published)
    return dict(sorted(changes.items()))


def heads_chunks(changes: dict[str, str | None], max_bytes: int = HEADS_ENTRY_BYTES) -> list[dict[str, str | None]]:
    """``changes`` cut into entries of at most about ``max_bytes`` (names and ids, plus a
    little pickling overhead each), at least one change per entry."""
    chunks: list[dict[str, str | None]] = []
    current: dict[str, str | None] = {}
    size = 0
    for cluster, commit in changes.items():
        cost = len(cluster) + len(commit or "") + 16
        if current and size + cost > max_bytes:
            chunks.append(current)
            current, size = {}, 0
        current[cluster] = commit
        size += cost
    if current:
        chunks.append(current)
    return chunks


def report_signature(record: ReportRecord, envelopes: dict[str, list[float]]) -> tuple[Any, ...]:
    """Coarse features of a report whose change is worth a cycle: ready nodes, node
    count, free CPU in quarters of the ready nodes' allocatable, the total number of
    latency envelopes broken, and per target how many envelopes its latency breaks.
    Cheap on purpose: it runs on the Raft thread for every report applied (one pass over
    the nodes, no list or generator built for the usual report)."""
    ready = alloc = free = 0
    for node in record.nodes:
        if node.ready:
            ready += 1
            alloc += node.allocatable_cpu
            free += node.free_cpu
    latencies = record.latencies
    if latencies:
        pairs = [(lat.to, envelopes_broken(envelopes, lat.to, lat.ms)) for lat in latencies]
        pairs.sort()
        breaches = tuple(pairs)
        broken = sum(count for _, count in pairs)
    else:
        breaches, broken = (), 0
    capi = tuple((c.name, c.phase, c.ready) for c in record.cluster_api) if record.cluster_api else ()
    # What runs: the cluster's condition (Ready, Degraded, Stalled and why) and each
    # component's readiness; a replacement turning ready ends its drain at once.
    running = tuple((c.component, c.healthy or c.completed, c.ready_replicas) for c in record.components)
    return (ready, len(record.nodes), int(4 * free / (alloc or 1)), broken, breaches, capi,
            report_condition(record), running)


def liveness_only(observed: Observed) -> Observed:
    """The snapshot without anything agents measured: the health model's judgements and
    what runs stay (failover, cordons, replacements), capacity, latency and traffic fall
    back to what the goals declare."""
    return observed.model_copy(update={
        "clusters": {name: ObservedCluster(healthy=c.healthy, state=c.state, reason=c.reason,
                                           recovering=c.recovering,
                                           heartbeat_age_seconds=c.heartbeat_age_seconds)
                     for name, c in observed.clusters.items()},
        "latencies": (),
        "traffic": (),
    })
