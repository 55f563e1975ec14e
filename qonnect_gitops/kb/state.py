"""The Knowledge Base: the lead group's replicated state (pure, deterministic).

Every ``apply_*`` method is a state transition the Raft log replays on every
replica, in the same order, so they obey three rules:

* time comes in as an argument (``now``, Unix seconds from the proposing lead's
  clock); nothing here reads a clock, a file or a random source;
* the inputs are plain JSON-like values or the small frozen records of
  ``kb.records`` (what went through the Raft log); a full dump is a plain dict;
* they are small: the Raft tick thread runs them, and a slow one stalls
  heartbeats for the whole group;
* they replace the values they change, never change them in place: every container
  the state holds maps to immutable records or to plain values no transition edits
  afterwards. So ``capture`` copies only the top-level containers, and a full dump is
  built from that copy on another thread while the Raft thread applies the next entries.

Reads (``snapshot``, ``current_placement``, ``status``) never change state.

A report speaks only for its own cluster: component health, completion and
traffic are kept only for components the plan in force places on the reporting
cluster, and completion only for Job components; other claims are
dropped and counted (``ignored_claims``). Reports are ordered by the receiving
lead's clock, never the agent's.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from qonnect_gitops.kb.health import (
    ClusterJudgement,
    ClusterTrack,
    HealthSettings,
    Storm,
    component_ready,
    earliest_change,
    judge_fleet,
    judge_workload,
    track_report,
)
from qonnect_gitops.kb.records import (
    CompletedJob,
    ComponentRecord,
    NodeRecord,
    ReportEntry,
    ReportRecord,
    ReportVerdict,
    StoredReport,
    WorkloadRecord,
)
from qonnect_gitops.model.goals import Goals
from qonnect_gitops.model.observed import (
    Capacity,
    Observed,
    ObservedCluster,
    ObservedLatency,
    ObservedNode,
    ObservedTraffic,
    ObservedWorkload,
)
from qonnect_gitops.model.plan import CurrentPlacement
from qonnect_gitops.model.pool import ClusterApiStatus
from qonnect_gitops.model.report import MAX_RPS
from qonnect_gitops.model.status import ClusterState

STATE_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)
_OBJECT_ID = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")  # SHA-1 or SHA-256, as Git prints it
LatencySamples = tuple[tuple[float, float], ...]  # ((receivedAt, ms), ...) oldest first
Unready = tuple[float, int]  # (not ready since, generation the agent must report applied; 0: none)
MAX_UNMET = 1000  # unmet goals kept with the plan in force (one per component and goal)
# ``apply_plan_changes``: the placement in force is no longer the one the change was made
# against (-1 is a stale term).
PLAN_BASE_MOVED = -2
DECISION_LOG_LIMIT = 256
MAX_LOGGED_MOVES = 100  # moves a logged decision lists (``movesTotal`` counts them all)
DEFAULT_GRACE_SECONDS = 20.0
DEFAULT_PROGRESS_DEADLINE = 600.0  # a component's, where the goals in force do not say
DEFAULT_INTERVAL_SECONDS = 5.0
MAX_GOALS_ERRORS = 100
LATENCY_WINDOW_REPORTS = 3
MAX_REJECTED_PROPOSALS = 256


def iso(ts: float | None) -> str | None:
    """Unix seconds as an RFC 3339 UTC string (None stays None)."""
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, tz=UTC).isoformat().replace("+00:00", "Z")


def inventory_from_goals(goals: Goals) -> dict[str, dict[str, Any]]:
    """The cluster inventory the KB keeps, from validated goals: plain values only."""
    inventory: dict[str, dict[str, Any]] = {}
    for name, cluster in sorted(goals.clusters.items()):
        spec = cluster.spec
        inventory[name] = {
            "tier": spec.tier,
            "region": spec.region,
            "distribution": spec.distribution,
            "nodes": sum(shape.count for shape in spec.nodes),
            "cpuMillis": sum(shape.count * shape.cpu for shape in spec.nodes),
            "memoryBytes": sum(shape.count * shape.memory for shape in spec.nodes),
        }
    return inventory


def workloads_from_goals(goals: Goals) -> dict[str, WorkloadRecord]:
    """Per component, its workload kind, a digest of its workload object and its progress
    deadline: the KB accepts completion only for Jobs, forgets a completion when the workload
    changes (a new image of a Job runs again), and judges what runs by the deadline."""
    out: dict[str, WorkloadRecord] = {}
    for component in goals.components():
        text = json.dumps(component.workload, sort_keys=True, default=str, separators=(",", ":"))
        out[component.key] = WorkloadRecord(component.kind,
                                            hashlib.sha256(text.encode("utf-8")).hexdigest()[:16],
                                            float(component.stability.progress_deadline_seconds))
    return dict(sorted(out.items()))


def heartbeat_from_goals(goals: Goals) -> dict[str, float]:
    """The heartbeat settings the KB needs to judge freshness (``kb.health``)."""
    hb = goals.fleet.spec.heartbeat
    return {
        "intervalSeconds": float(hb.interval_seconds),
        "graceSeconds": float(hb.grace_seconds),
        "degradedSeconds": float(hb.effective_degraded_seconds),
        "recoverySeconds": float(hb.effective_recovery_seconds),
        "unhealthyShare": float(hb.unhealthy_share),
        "stormEvictionSeconds": float(hb.storm_eviction_seconds),
        # A latency breach counts once it held through three reports in a row.
        "latencyWindowSeconds": LATENCY_WINDOW_REPORTS * float(hb.interval_seconds),
    }


def placement_changes(before: Mapping[str, Mapping[str, int]], after: Mapping[str, Mapping[str, int]],
                      ) -> tuple[dict[str, dict[str, int]], list[str]]:
    """What ``apply_plan_changes`` needs to go from the placement ``before`` to ``after``:
    the components whose replicas differ (with their new map) and those ``after`` leaves
    out."""
    changed = {comp: dict(where) for comp, where in after.items() if before.get(comp) != where}
    removed = sorted(comp for comp in before if comp not in after)
    return changed, removed


def _placed(clusters: Mapping[str, int]) -> dict[str, int]:
    """A component's replicas per cluster as the KB keeps them: clusters in name order,
    none with zero replicas."""
    return {cl: int(n) for cl, n in sorted(clusters.items()) if int(n) > 0}


class KnowledgeBase:
    """Replicated state of the lead group. See the module docstring for the rules."""

    def __init__(self, decision_log_limit: int = DECISION_LOG_LIMIT) -> None:
        self.decision_log_limit = decision_log_limit
        # Inventory and heartbeat settings from the last good goals commit.
        self.inventory: dict[str, dict[str, Any]] = {}
        # When each cluster entered the inventory: its agent could not report before (a
        # report from an undeclared cluster is refused), so silence counts from then.
        self.declared_since: dict[str, float] = {}
        self.heartbeat: dict[str, float] = {
            "intervalSeconds": DEFAULT_INTERVAL_SECONDS,
            "graceSeconds": DEFAULT_GRACE_SECONDS,
        }
        # Per component of the last good goals: its kind and digest (workloads_from_goals).
        self.workloads: dict[str, WorkloadRecord] = {}
        self.last_good: dict[str, Any] | None = None  # {commit, at}
        self.last_failed: dict[str, Any] | None = None  # {commit, at, errors}
        # Latest report per cluster, as received by a lead (its clock, not the agent's).
        self.reports: dict[str, StoredReport] = {}
        self.stale_reports = 0
        # Per cluster, claims its reports made about components not placed there (or
        # completion of a component that is no Job): dropped, counted here.
        self.ignored_claims: dict[str, int] = {}
        # Jobs that ran to completion on a cluster the plan placed them on; kept while
        # the workload is unchanged and declared.
        self.completed_jobs: dict[str, CompletedJob] = {}
        # Measured latencies per cluster and target, ((receivedAt, ms), ...) oldest first,
        # trimmed to the latency window: the planner sees the lowest value of the window,
        # so only a sustained breach moves anything (one slow sample does not). A report
        # replaces its cluster's dict (``capture`` shares them); the dump stores lists.
        self.latency_history: dict[str, dict[str, LatencySamples]] = {}
        # Per cluster, what its reports said over time as the health model needs it
        # (``kb.health.ClusterTrack``: condition and since when, report rhythm, recovery).
        self.cluster_tracks: dict[str, ClusterTrack] = {}
        # Per cluster, the components placed there that are not ready there: since when (their
        # placement, or the first report that showed them not ready) and the plan generation
        # the agent must report applied before they can count as ready (0: none; the
        # generation that placed them or raised their count). What judges them Progressing
        # or NotRunning. A cluster's dict is replaced, never edited.
        self.unready_since: dict[str, dict[str, Unready]] = {}
        # Placement in force.
        self.generation = 0
        self.placements: dict[str, dict[str, int]] = {}
        self.last_moved: dict[str, dict[str, Any]] = {}  # component -> {at, reason, detail}
        self.cluster_generations: dict[str, int] = {}
        self.goals_commit_of_plan: str | None = None
        # Goals the plan in force cannot meet: [{component, goal, message}] (Plan.unmet).
        self.unmet: list[dict[str, str]] = []
        # Leadership as the log saw it: who took office, in which term, when.
        self.leader: dict[str, Any] | None = None  # {id, term, since}
        self.members: dict[str, dict[str, str]] = {}  # id -> {raft, http}
        # Proposals a reviewer closed without merging, by lead.review.rejection_key (goals
        # commit, plan in force, decision): the same decision is not proposed again for them.
        self.rejected_proposals: dict[str, dict[str, Any]] = {}
        # Bounded decision log, oldest first; seq numbers survive trimming.
        self.decisions: list[dict[str, Any]] = []
        self.decision_seq = 0
        # Clusters created from cluster pools (cloud bursting), from the plan in force:
        # name -> {pool, phase, nodes, tier, region}. Their agents may report like
        # declared clusters'; the planner sees them once they joined (placement.provision).
        self.dynamic: dict[str, dict[str, Any]] = {}
        # Agent tokens the leader issued to pool clusters: cluster -> SHA-256 of the token.
        self.pool_tokens: dict[str, str] = {}
        # Per cluster, the commit its branch holds on the Git server, recorded by the leader
        # once a push of it succeeded or a fetch showed it (``apply_branch_heads``): what
        # every lead's answer to a report names, so an idle agent need not ask Git.
        self.branch_heads: dict[str, str] = {}
        self.branch_heads_term = 0  # the term of the leader that recorded them last
        # Derived (not dumped): cluster -> components the plan in force places there.
        self._placed_on: dict[str, frozenset[str]] = {}

    # ---------------------------------------------------------------- helpers

    def _log(self, now: float, kind: str, summary: str, **details: Any) -> None:
        self.decision_seq += 1
        entry = {"seq": self.decision_seq, "at": now, "kind": kind, "summary": summary}
        entry.update(details)
        self.decisions.append(entry)
        overflow = len(self.decisions) - self.decision_log_limit
        if overflow > 0:
            del self.decisions[:overflow]

    @property
    def grace_seconds(self) -> float:
        return float(self.heartbeat["graceSeconds"])

    @property
    def interval_seconds(self) -> float | None:
        """The fleet's report interval, once goals were loaded."""
        value = self.heartbeat.get("intervalSeconds")
        return None if value is None else float(value)

    @property
    def leader_term(self) -> int:
        return int(self.leader["term"]) if self.leader else 0

    @property
    def health_settings(self) -> HealthSettings:
        """The heartbeat settings as the health model takes them."""
        return HealthSettings.from_heartbeat(self.heartbeat)

    # -------------------------------------------------------- state changes

    def apply_reports(self, entries: Sequence[ReportEntry]) -> list[ReportVerdict]:
        """Store a batch of reports; one verdict per entry, in order.

        Reports are ordered by the receiving lead's clock: one received before the
        report stored is dropped (batches from different leads may commit out of
        order) and its verdict says so, so the lead never answers it 200. A cluster
        that left the goals between the HTTP check and the commit is refused too.
        """
        result: list[ReportVerdict] = []
        # Looked up once per batch: this runs on the Raft thread for every report.
        reports, generations = self.reports, self.cluster_generations
        gated = self.last_good is not None
        inventory, dynamic = self.inventory, self.dynamic
        window = self.latency_window if any(e.record.latencies for e in entries) else 0.0
        settings, tracks = self.health_settings, self.cluster_tracks
        for entry in entries:
            cluster = entry.cluster
            generation = generations.get(cluster, 0)
            current = reports.get(cluster)
            if gated and cluster not in inventory and cluster not in dynamic:
                result.append(ReportVerdict(False, generation, refused="undeclared"))
                continue
            if current is not None and entry.received_at < current.received_at:
                self.stale_reports += 1
                result.append(ReportVerdict(False, generation, refused="superseded"))
                continue
            record, ignored = self._own_claims(entry.record)
            if ignored:
                self.ignored_claims[cluster] = self.ignored_claims.get(cluster, 0) + len(ignored)
            tracks[cluster] = track_report(tracks.get(cluster), self._heard_since(cluster), record,
                                           entry.received_at, settings)
            self._track_readiness(cluster, record, entry.received_at)
            reports[cluster] = StoredReport(
                record=record,
                received_at=entry.received_at,
                count=current.count + 1 if current else 1,
                skew_seconds=entry.skew_seconds,
            )
            self._record_latencies(cluster, record, entry.received_at, window)
            if record.components:
                self._record_completions(record, entry.received_at)
            result.append(ReportVerdict(True, generation, tuple(ignored)))
        return result

    def _own_claims(self, record: ReportRecord) -> tuple[ReportRecord, list[str]]:
        """The record with only what the cluster may say about components: health and
        traffic of components placed on it, completion of those that are Jobs."""
        placed = self._placed_on.get(record.cluster, frozenset())
        ignored: list[str] = []
        components = []
        for comp in record.components:
            if comp.component not in placed:
                ignored.append(comp.component)
                continue
            workload = self.workloads.get(comp.component)
            if comp.completed and (workload is None or not workload.completable):
                ignored.append(comp.component)
                # Built directly: dataclasses.replace walks the fields in Python, and
                # this runs on the Raft thread for every report.
                comp = ComponentRecord(comp.component, comp.healthy, comp.ready_replicas,
                                       comp.desired_replicas, False, comp.message, comp.reason)
            components.append(comp)
        traffic = []
        for item in record.traffic:
            if item.component in placed:
                traffic.append(item)
            else:
                ignored.append(item.component)
        if not ignored:
            return record, ignored
        return ReportRecord(record.cluster, record.agent_time, record.sync, record.applied,
                            record.attempted, record.refusals, tuple(components), record.nodes,
                            record.latencies, tuple(traffic), record.cluster_api), ignored

    def _track_readiness(self, cluster: str, record: ReportRecord, now: float) -> None:
        """Note which components placed on ``cluster`` its report shows not ready (from when),
        and forget those it shows ready."""
        placed = self._placed_on.get(cluster)
        before = self.unready_since.get(cluster)
        if not placed:
            if before is not None:
                del self.unready_since[cluster]
            return
        before = before or {}
        after = self._unready_after(cluster, placed, before, record, now)
        if after != before:
            if after:
                self.unready_since[cluster] = after
            else:
                del self.unready_since[cluster]

    def _unready_after(self, cluster: str, placed: frozenset[str], before: Mapping[str, Unready],
                       record: ReportRecord, now: float) -> dict[str, Unready]:
        """The placed components the report shows not ready on ``cluster``: not applied at
        the generation that placed them yet, or applied and not ready."""
        reported = {c.component: c for c in record.components}
        applied = record.applied.generation if record.applied is not None else -1
        after: dict[str, Unready] = {}
        workloads, placements = self.workloads, self.placements
        for comp in placed:
            since, awaiting = before.get(comp, (now, 0))
            if awaiting and applied >= awaiting:
                awaiting = 0  # the agent runs the generation that placed it
            workload = workloads.get(comp)
            kind = workload.kind if workload is not None else "Deployment"
            if awaiting or not component_ready(reported.get(comp), placements[comp][cluster], kind):
                after[comp] = (since, awaiting)
        return after

    def _record_completions(self, record: ReportRecord, now: float) -> None:
        for comp in record.components:
            workload = self.workloads.get(comp.component)
            if comp.completed and workload is not None and comp.component not in self.completed_jobs:
                self.completed_jobs[comp.component] = CompletedJob(record.cluster, now, workload.digest)
                self._log(now, "job-completed",
                          f"{comp.component} completed on {record.cluster}",
                          component=comp.component, cluster=record.cluster)

    @property
    def latency_window(self) -> float:
        default = LATENCY_WINDOW_REPORTS * float(self.heartbeat["intervalSeconds"])
        return float(self.heartbeat.get("latencyWindowSeconds", default))

    def _record_latencies(self, cluster: str, record: ReportRecord, now: float,
                          window: float) -> None:
        """Add the report's latency samples; ``window``: ``latency_window`` (looked up once
        per batch by the caller). The cluster's history is replaced by a new dict of new
        tuples, never changed in place: ``capture`` shares it. A target the report does not
        measure is dropped: the declared value applies again."""
        history = self.latency_history.get(cluster)
        if not record.latencies:
            if history is None or history:
                self.latency_history[cluster] = {}
            return
        start = now - window
        before = history or {}
        after: dict[str, LatencySamples] = {}
        for lat in record.latencies:
            target = lat.to
            samples = (*(after[target] if target in after else before.get(target, ())), (now, lat.ms))
            # Keep the samples inside the window plus the one in force at its start.
            drop = 0
            while len(samples) - drop > 1 and samples[drop + 1][0] <= start:
                drop += 1
            after[target] = samples[drop:] if drop else samples
        self.latency_history[cluster] = after

    def sustained_latency(self, cluster: str, target: str, now: float,
                          window: float | None = None) -> float | None:
        """The lowest latency ``cluster`` measured to ``target`` over the window before
        ``now`` (the value in force at the window's start included). None while the
        measurement is younger than the window: until then the declared latency holds,
        so a first slow sample after silence is no more a breach than any other."""
        samples = self.latency_history.get(cluster, {}).get(target)
        start = now - (self.latency_window if window is None else window)
        if not samples or samples[0][0] > start:
            return None
        values = [ms for i, (at, ms) in enumerate(samples)
                  if at > start or i + 1 == len(samples) or samples[i + 1][0] > start]
        return min(values)

    def apply_goals(
        self,
        commit: str,
        inventory: Mapping[str, Mapping[str, Any]],
        heartbeat: Mapping[str, float],
        workloads: Mapping[str, WorkloadRecord],
        now: float,
    ) -> bool:
        """Make ``commit`` the last good goals commit; False if it already was."""
        if self.last_good is not None and self.last_good["commit"] == commit:
            return False
        added = sorted(set(inventory) - set(self.inventory))
        removed = sorted(set(self.inventory) - set(inventory))
        self.inventory = {name: dict(value) for name, value in sorted(inventory.items())}
        self.declared_since = {name: self.declared_since.get(name, now) for name in self.inventory}
        self.heartbeat = {k: float(v) for k, v in heartbeat.items()}
        self.workloads = dict(sorted(workloads.items()))
        self.last_good = {"commit": commit, "at": now}
        # A completion stands while the Job is unchanged and still declared.
        for key in [k for k, done in self.completed_jobs.items()
                    if k not in self.workloads or self.workloads[k].digest != done.digest]:
            del self.completed_jobs[key]
        # Reports of clusters no longer declared are forgotten: nothing may be planned there.
        for name in removed:
            self._forget_cluster(name)
        summary = f"goals {commit[:12]} accepted: {len(inventory)} clusters"
        if added:
            summary += f", added {', '.join(added)}"
        if removed:
            summary += f", removed {', '.join(removed)}"
        self._log(now, "goals", summary, commit=commit)
        return True

    def apply_dynamic(self, clusters: Mapping[str, Mapping[str, Any]], now: float) -> bool:
        """The clusters cloud bursting created, as the plan in force has them; False if
        unchanged. A cluster that left forgets its reports (it is being deleted)."""
        new = {name: dict(value) for name, value in sorted(clusters.items())}
        if new == self.dynamic:
            return False
        changes = []
        for name in sorted(set(new) | set(self.dynamic)):
            before, after = self.dynamic.get(name), new.get(name)
            if after is None:
                self._forget_cluster(name)
                self.pool_tokens.pop(name, None)  # its agent may no longer report
                changes.append(f"{name} removed")
            elif before is None or before.get("phase") != after.get("phase"):
                changes.append(f"{name} {after.get('phase')}")
        self.dynamic = new
        if changes:
            self._log(now, "provisioning", "pool clusters: " + ", ".join(changes))
        return True

    def _forget_cluster(self, name: str) -> None:
        """Drop what the cluster's reports told (it left the goals or the pool)."""
        self.reports.pop(name, None)
        self.latency_history.pop(name, None)
        self.cluster_tracks.pop(name, None)
        self.unready_since.pop(name, None)

    def apply_pool_token(self, cluster: str, digest: str, now: float) -> bool:
        """Record the hash of the agent token issued to a pool cluster (replacing an earlier
        one); False when the cluster is no pool cluster."""
        if cluster not in self.dynamic:
            return False
        self.pool_tokens[cluster] = digest
        self._log(now, "provisioning", f"agent token issued to pool cluster {cluster}")
        return True

    def pool_token_owner(self, digest: str) -> str | None:
        """The pool cluster a token hash was issued to, if any."""
        return next((name for name, d in self.pool_tokens.items() if d == digest), None)

    def apply_goals_failure(self, commit: str, errors: Sequence[str], now: float) -> bool:
        """Record an invalid goals commit; the last good one stays in force."""
        if self.last_failed is not None and self.last_failed["commit"] == commit:
            return False
        kept = list(errors[:MAX_GOALS_ERRORS])
        self.last_failed = {"commit": commit, "at": now, "errors": kept, "total": len(errors)}
        self._log(
            now,
            "goals-failed",
            f"goals {commit[:12]} rejected: {len(errors)} problem(s); last good stays in force",
            commit=commit,
        )
        return True

    def apply_plan(
        self,
        placements: Mapping[str, Mapping[str, int]],
        reasons: Mapping[str, str],
        reason: str,
        goals_commit: str | None,
        term: int,
        now: float,
        unmet: Sequence[Mapping[str, str]] = (),
        generation: int = 0,
    ) -> int:
        """Put a placement in force; returns the new generation.

        Returns the current generation unchanged when nothing differs (no decision is
        logged), and -1 when ``term`` is older than the newest leader's: a deposed
        leader's decision is refused by the log itself. ``unmet``: the goals the
        decision cannot meet (kept even when the placement did not change).
        """
        if self._stale_plan(term, now):
            return -1
        self._set_unmet(unmet)
        # A component with no replica anywhere is not placed: it is left out, so a plan
        # that places nothing equals the empty placement. Work grows with what changed:
        # a component placed as before keeps its (normalised) map, so a decision that
        # moves one of 100,000 components costs a comparison each, not a rebuild of every
        # per-cluster view on every lead's Raft thread (1.25 s CPU at 10,000 clusters).
        old = self.placements
        new: dict[str, dict[str, int]] = {}
        changed: list[str] = []
        for comp in sorted(placements):
            clusters = placements[comp]
            kept = old.get(comp)
            if kept is not None and clusters == kept:
                new[comp] = kept
                continue
            where = _placed(clusters)
            if where:
                new[comp] = where
            if where != (kept or {}):
                changed.append(comp)
        # Left out of the plan (one placed nowhere was counted above, once).
        changed.extend(comp for comp in old if comp not in placements)
        return self._put_in_force(new, changed, reasons, reason, goals_commit, term, now, generation)

    def apply_plan_changes(
        self,
        base: int,
        changed: Mapping[str, Mapping[str, int]],
        removed: Sequence[str],
        reasons: Mapping[str, str],
        reason: str,
        goals_commit: str | None,
        term: int,
        now: float,
        unmet: Sequence[Mapping[str, str]] = (),
        generation: int = 0,
    ) -> int:
        """Put a decision in force given as what it changes in the placement at generation
        ``base``: the components placed anew or elsewhere (``changed``) and those no longer
        placed (``removed``). The same outcome as ``apply_plan`` of the whole placement, at
        the cost of the change: a leader's entry for one moved component among 100,000 is
        a few hundred bytes instead of megabytes pickled, compressed, sent and applied on
        every lead.

        Returns -1 for a stale ``term`` (as ``apply_plan``), ``PLAN_BASE_MOVED`` when the
        placement in force is no longer at ``base`` (another decision or an operator's
        plan came first: the leader then proposes the whole placement), else as
        ``apply_plan``."""
        if self._stale_plan(term, now):
            return -1
        if base != self.generation:
            return PLAN_BASE_MOVED
        self._set_unmet(unmet)
        old = self.placements
        new = dict(old)  # a dict of its own: a capture may share the old one
        moved: list[str] = []
        for comp in sorted(changed):
            where = _placed(changed[comp])
            if where == old.get(comp, {}):
                continue
            if where:
                new[comp] = where
            else:
                new.pop(comp, None)
            moved.append(comp)
        for comp in sorted(set(removed) - changed.keys()):
            if new.pop(comp, None) is not None:
                moved.append(comp)
        return self._put_in_force(new, moved, reasons, reason, goals_commit, term, now, generation)

    def _stale_plan(self, term: int, now: float) -> bool:
        """Whether a plan from ``term`` comes from a deposed leader (logged as refused)."""
        if term >= self.leader_term:
            return False
        self._log(now, "plan-refused", f"plan from stale term {term} refused", term=term)
        return True

    def _set_unmet(self, unmet: Sequence[Mapping[str, str]]) -> None:
        self.unmet = [
            {"component": str(u["component"]), "goal": str(u["goal"]), "message": str(u["message"])}
            for u in unmet[:MAX_UNMET]
        ]

    def _put_in_force(self, new: dict[str, dict[str, int]], changed: list[str], reasons: Mapping[str, str],
                      reason: str, goals_commit: str | None, term: int, now: float, written: int = 0) -> int:
        """Make ``new`` the placement in force, given the components whose map differs from
        the one in force (``changed``): a new generation, logged with its moves, and the
        per-cluster views of those components only. Nothing changed: the generation stays.

        ``written``: the generation of the plan commit that carries the decision (0: unknown).
        Plan commits are numbered on the plan branch, which also takes commits that change no
        target replica (a drain ending, an unmet goal); the KB follows that numbering, so the
        generation it announces is the one agents apply (``Qonnect-Generation``)."""
        old = self.placements
        if not changed:
            return self.generation
        generation = max(self.generation + 1, written)
        moves: list[dict[str, Any]] = []
        joined: dict[str, set[str]] = {}  # cluster -> components with replicas there now
        left: dict[str, set[str]] = {}  # cluster -> components with none there any more
        unready: dict[str, dict[str, Unready]] = {}  # cluster -> its new unready_since dict
        for comp in sorted(changed):
            old_map = old.get(comp, {})
            new_map = new.get(comp, {})
            why = reasons.get(comp, reason)
            moves.append({"component": comp, "from": old_map, "to": new_map, "reason": why})
            if new_map:
                self.last_moved[comp] = {"at": now, "reason": why, "generation": generation}
            else:
                self.last_moved.pop(comp, None)
            for cluster in old_map.keys() | new_map.keys():
                was, wanted = old_map.get(cluster), new_map.get(cluster)
                if was == wanted:
                    continue
                (joined if cluster in new_map else left).setdefault(cluster, set()).add(comp)
                # Replicas placed anew are not ready until a report shows them; fewer replicas
                # than before are as ready as the ones that ran.
                if wanted is None or (was is not None and wanted < was):
                    if wanted is None and comp in self.unready_since.get(cluster, {}):
                        unready.setdefault(cluster, dict(self.unready_since[cluster])).pop(comp, None)
                else:
                    unready.setdefault(cluster, dict(self.unready_since.get(cluster, {})))[comp] = (now, generation)
        for cluster, since in unready.items():
            if since:
                self.unready_since[cluster] = since
            else:
                self.unready_since.pop(cluster, None)
        placed_on = dict(self._placed_on)  # a new dict: a capture may share the old one
        for cluster in sorted(joined.keys() | left.keys()):
            self.cluster_generations[cluster] = generation
            there = (placed_on.get(cluster, frozenset()) - left.get(cluster, set())) | joined.get(cluster, set())
            if there:
                placed_on[cluster] = frozenset(there)
            else:
                placed_on.pop(cluster, None)
        self.placements = new
        self._placed_on = placed_on
        self.generation = generation
        self.goals_commit_of_plan = goals_commit
        self._log(
            now,
            "plan",
            f"generation {generation} ({reason}): {len(moves)} component(s) changed",
            generation=generation,
            reason=reason,
            term=term,
            goalsCommit=goals_commit,
            # The log keeps the first moves (by component) and their count: a decision
            # that moves 100,000 components would otherwise put megabytes into every
            # dump and every status answer, 256 times over.
            moves=moves[:MAX_LOGGED_MOVES],
            movesTotal=len(moves),
        )
        return generation

    def apply_branch_heads(self, changes: Mapping[str, str | None], term: int) -> bool:
        """Record where cluster branches are on the Git server: ``changes`` maps a cluster to
        the commit its branch now holds there, or to None when it has none (or the leader no
        longer knows it). Only the leader proposes it, after its push succeeded or its fetch
        showed the heads, so nothing unpublished is ever recorded. Refused (False) from a
        term older than the newest leader's or than the last record's: a deposed leader's
        late entry never overwrites what its successor saw. A commit that is no object id is
        skipped. True when anything changed."""
        if term < self.leader_term or term < self.branch_heads_term:
            return False
        self.branch_heads_term = term
        heads = self.branch_heads
        changed = False
        for cluster, commit in changes.items():
            if commit is None:
                changed |= heads.pop(cluster, None) is not None
            elif isinstance(commit, str) and _OBJECT_ID.fullmatch(commit) and heads.get(cluster) != commit:
                heads[cluster] = commit
                changed = True
        return changed

    def apply_proposal_rejected(self, key: str, proposal_id: str, goals_commit: str, url: str,
                                now: float) -> bool:
        """Record that a reviewer closed proposal ``proposal_id`` without merging it."""
        if key in self.rejected_proposals:
            return False
        self.rejected_proposals[key] = {"proposal": proposal_id, "goalsCommit": goals_commit, "url": url,
                                        "at": now}
        while len(self.rejected_proposals) > MAX_REJECTED_PROPOSALS:
            oldest = min(self.rejected_proposals, key=lambda k: self.rejected_proposals[k]["at"])
            del self.rejected_proposals[oldest]
        self._log(now, "proposal-rejected", f"proposal {proposal_id} rejected on the forge ({url})",
                  proposal=proposal_id, goalsCommit=goals_commit)
        return True

    def apply_leader(self, node_id: str, term: int, now: float) -> bool:
        """Record that ``node_id`` became leader in ``term``; older terms are ignored."""
        if term <= self.leader_term:
            return False
        self.leader = {"id": node_id, "term": term, "since": now}
        self._log(now, "leader", f"{node_id} leads in term {term}", term=term, node=node_id)
        return True

    def apply_member(self, node_id: str, raft: str, http: str, url: str, now: float) -> bool:
        """Record a lead's addresses (so any lead can name the leader and its URL)."""
        entry = {"raft": raft, "http": http, "url": url}
        if self.members.get(node_id) == entry:
            return False
        # An address belongs to one lead: a renamed lead replaces the old entry.
        for other in [k for k, v in self.members.items() if v["raft"] == raft and k != node_id]:
            del self.members[other]
        self.members[node_id] = entry
        self._log(now, "member", f"{node_id} at raft {raft}, api {url}", node=node_id)
        return True

    def apply_member_removed(self, raft: str, now: float) -> bool:
        """Forget the lead at ``raft`` after it left the group."""
        gone = [k for k, v in self.members.items() if v["raft"] == raft]
        for key in gone:
            del self.members[key]
        self._log(now, "member-removed", f"raft {raft} left the group", raft=raft)
        return bool(gone)

    # ------------------------------------------------------------------ reads

    def cluster_generation(self, cluster: str) -> int:
        """The plan generation at which this cluster's desired state last changed."""
        return self.cluster_generations.get(cluster, 0)

    def _epoch(self) -> float | None:
        """Since when the group could have heard agents: the current leader's start."""
        return float(self.leader["since"]) if self.leader else None

    def _heard_since(self, cluster: str) -> float | None:
        """Since when the group could have heard ``cluster``: the latest of its last report,
        the current leader's start and the moment it was declared. While the leads
        themselves were down or electing nobody could hear agents, and an agent of a cluster
        the goals did not declare yet has its reports refused; failing clusters for either
        silence would be wrong. None: it has not reported and the group has no start yet."""
        epoch = self._epoch()
        entry = self.reports.get(cluster)
        heard = entry.received_at if entry else None
        declared = self.declared_since.get(cluster)
        return max((t for t in (heard, epoch, declared) if t is not None), default=None)

    def heartbeat_age(self, cluster: str, now: float) -> float | None:
        """Seconds of silence from ``cluster`` as the group can judge them (``_heard_since``)."""
        since = self._heard_since(cluster)
        return None if since is None else max(0.0, now - since)

    def judge(self, now: float, observer_impaired: bool = False,
              ) -> tuple[dict[str, ClusterJudgement], tuple[Storm, ...]]:
        """Every cluster (declared, or a pool cluster whose agent reported) judged at ``now``
        by the one health model (``kb.health``), storm guard included; and the storms.
        ``observer_impaired``: the judging lead could not take reports lately (no silent
        cluster is failed over; ``kb.health.judge_fleet``)."""
        heard = {name: self._heard_since(name) for name in sorted(set(self.inventory) | set(self.dynamic))
                 if name in self.inventory or name in self.reports}
        groups = {name: (str(c["tier"]), str(c["region"])) for name, c in self.inventory.items()}
        return judge_fleet(self.cluster_tracks, heard, groups, now, self.health_settings, observer_impaired)

    def cluster_health(self, cluster: str, now: float) -> bool:
        """Whether the cluster counts as alive (not failed over) at ``now``. Judges the whole
        fleet (the storm guard looks at all of it): callers asking about many clusters use
        ``judge`` once."""
        judged = self.judge(now)[0].get(cluster)
        return judged is not None and not judged.gone

    def next_health_change(self, now: float) -> float | None:
        """The earliest moment after ``now`` at which a judgement changes by time alone: a
        cluster falls silent, a degradation lasts long enough to fail over, a recovery ends,
        the storm guard releases an eviction, a placed component reaches its progress
        deadline. None when nothing would change without a report."""
        judged, _ = self.judge(now)
        times: list[float | None] = [j.next_change for j in judged.values()]
        workloads = self.workloads
        for cluster, since in self.unready_since.items():
            j = judged.get(cluster)
            if j is None or j.gone or j.state == ClusterState.STALLED:
                continue
            for comp, (at, _) in since.items():
                workload = workloads.get(comp)
                due = at + (workload.deadline if workload is not None else DEFAULT_PROGRESS_DEADLINE)
                if due >= now:
                    times.append(due)
        return earliest_change(t for t in times if t is not None and t >= now)

    def capture(self) -> KnowledgeBase:
        """The whole state as it is now, in containers of its own: what a full dump stores
        (``to_dict`` of the copy) and what the planner's ``snapshot`` is built from, cheap
        enough to take on the Raft thread or under the replica's lock (the snapshot of
        10,000 clusters, built under the lock, held it for 1.9 s).

        Only the top-level containers are copied: their values are immutable records or
        plain values that transitions replace, never edit (module docstring), so the
        copy shares them safely. At 10,000 clusters it is well under a millisecond of
        CPU where ``to_dict`` took the Raft thread about a second; ``to_dict`` of the
        copy then runs on the dump's own thread, and entries applied meanwhile do not
        reach it."""
        view = KnowledgeBase(self.decision_log_limit)
        view.inventory = dict(self.inventory)
        view.declared_since = dict(self.declared_since)
        view.heartbeat = dict(self.heartbeat)
        view.workloads = dict(self.workloads)
        # Containers of its own throughout, even the small ones replaced whole: the dump's
        # thread may empty them to free the dump gradually.
        view.last_good = None if self.last_good is None else dict(self.last_good)
        view.last_failed = None if self.last_failed is None else dict(self.last_failed)
        view.reports = dict(self.reports)
        view.stale_reports = self.stale_reports
        view.ignored_claims = dict(self.ignored_claims)
        view.completed_jobs = dict(self.completed_jobs)
        view.latency_history = dict(self.latency_history)
        view.cluster_tracks = dict(self.cluster_tracks)
        view.unready_since = dict(self.unready_since)
        view.generation = self.generation
        view.placements = dict(self.placements)
        view._placed_on = self._placed_on  # rebuilt, never changed, by apply_plan
        view.last_moved = dict(self.last_moved)
        view.cluster_generations = dict(self.cluster_generations)
        view.goals_commit_of_plan = self.goals_commit_of_plan
        view.unmet = list(self.unmet)
        view.leader = None if self.leader is None else dict(self.leader)
        view.members = dict(self.members)
        view.rejected_proposals = dict(self.rejected_proposals)
        view.decisions = list(self.decisions)
        view.decision_seq = self.decision_seq
        view.dynamic = dict(self.dynamic)
        view.pool_tokens = dict(self.pool_tokens)
        view.branch_heads = dict(self.branch_heads)
        view.branch_heads_term = self.branch_heads_term
        return view

    def snapshot(self, now: datetime, observer_impaired: bool = False) -> Observed:
        """The planner's frozen view of the fleet at ``now`` (an aware datetime);
        ``observer_impaired``: see ``judge``."""
        ts = now.timestamp()
        clusters: dict[str, ObservedCluster] = {}
        latencies: dict[tuple[str, str], float] = {}
        traffic: dict[tuple[str, str], float] = {}
        cluster_api: dict[str, tuple[ClusterApiStatus, ...]] = {}
        window = self.latency_window
        judged, _ = self.judge(ts, observer_impaired)
        for name, judgement in judged.items():
            entry = self.reports.get(name)
            condition = _observed_condition(judgement)
            if entry is None:
                # Never reported: declared nodes apply; after the grace it counts as failed.
                clusters[name] = ObservedCluster(heartbeat_age_seconds=judgement.age, **condition)
                continue
            record = entry.record
            nodes = tuple(_observed_node(node) for node in record.nodes)
            free = None
            if nodes:
                ready = [n for n in record.nodes if n.ready]
                # Bounded per node (model.report), the sums stay far inside 64 bits.
                free = _capacity(sum(n.free_cpu for n in ready), sum(n.free_memory for n in ready))
            clusters[name] = ObservedCluster(
                heartbeat_age_seconds=judgement.age,
                free=free,
                nodes=nodes or None,
                **condition,
            )
            for lat in record.latencies:
                if lat.to != name:
                    sustained = self.sustained_latency(name, lat.to, ts, window)
                    if sustained is not None:
                        latencies[(name, lat.to)] = sustained
            for item in record.traffic:
                key = (item.component, item.region)
                traffic[key] = saturating_add(traffic.get(key, 0.0), item.rps)
            if record.cluster_api:
                cluster_api[name] = record.cluster_api
        completed = sorted(
            key for key, done in self.completed_jobs.items()
            if key in self.workloads and self.workloads[key].digest == done.digest
        )
        return Observed(
            now=now,
            clusters=clusters,
            latencies=tuple(_observed_latency(src, dst, ms) for (src, dst), ms in sorted(latencies.items())),
            traffic=tuple(
                ObservedTraffic(component=comp, region=region, rps=rps)
                for (comp, region), rps in sorted(traffic.items())
            ),
            completed_jobs=tuple(completed),
            cluster_api=cluster_api,
            workloads=self.workload_states(ts, judged),
        )

    def workload_states(self, now: float, judged: Mapping[str, ClusterJudgement]) -> tuple[ObservedWorkload, ...]:
        """The placed components that do not run (yet) where they are placed, judged at
        ``now``: Progressing within their deadline, NotRunning past it or on a Stalled
        cluster. Pairs left out run. Sorted by component, then cluster."""
        out: list[ObservedWorkload] = []
        workloads = self.workloads
        for cluster, since in self.unready_since.items():
            j = judged.get(cluster)
            if j is None or j.gone:
                continue  # failed over as a whole
            entry = self.reports.get(cluster)
            reported = {c.component: c for c in entry.record.components} if entry else {}
            for comp, (at, _) in since.items():
                if cluster not in self.placements.get(comp, {}):
                    continue
                workload = workloads.get(comp)
                deadline = workload.deadline if workload is not None else DEFAULT_PROGRESS_DEADLINE
                line = reported.get(comp)
                state, reason, _ = judge_workload(at, now, deadline, j, line)
                out.append(_observed_workload(comp, cluster, state, line.ready_replicas if line else 0, reason))
        out.sort(key=lambda w: (w.component, w.cluster))
        return tuple(out)

    def current_placement(self) -> CurrentPlacement:
        """The placement in force as the planner's ``current`` input."""
        return CurrentPlacement.model_validate({
            "placements": copy.deepcopy(self.placements),
            "lastMoved": {
                comp: datetime.fromtimestamp(moved["at"], tz=UTC)
                for comp, moved in sorted(self.last_moved.items())
            },
        })

    def cluster_rows(self, now: float) -> list[dict[str, Any]]:
        """Per-cluster status for the API: inventory, the health model's judgement, and what
        the last report said."""
        rows = []
        judged, _ = self.judge(now)
        for name in sorted(set(self.inventory) | set(self.reports) | set(self.dynamic)):
            declared = self.inventory.get(name) or self.dynamic.get(name)
            entry = self.reports.get(name)
            record = entry.record if entry else None
            nodes = record.nodes if record else ()
            age = self.heartbeat_age(name, now)
            j = judged.get(name)
            rows.append(
                {
                    "name": name,
                    "declared": declared is not None,
                    "tier": declared["tier"] if declared else None,
                    "region": declared["region"] if declared else None,
                    "healthy": bool(declared) and j is not None and not j.gone,
                    # The health model (kb.health): state and reason, and what the planner does.
                    "state": str(j.state) if j else None,
                    "reason": j.reason if j else None,
                    "scheduling": _scheduling(j),
                    "silenceThresholdSeconds": round(j.threshold, 3) if j else None,
                    "reported": entry is not None,
                    "heartbeatAgeSeconds": None if age is None else round(age, 3),
                    "lastReportAt": iso(entry.received_at) if entry else None,
                    "reports": entry.count if entry else 0,
                    "clockSkewSeconds": round(entry.skew_seconds, 3) if entry else None,
                    "ignoredClaims": self.ignored_claims.get(name, 0),
                    "sync": record.sync_json() if record else None,
                    "applied": record.applied_json() if record else None,
                    "attempted": record.attempted if record else None,
                    "refusals": record.refusals_json() if record else [],
                    "nodesReady": sum(1 for n in nodes if n.ready),
                    # Components not healthy on this cluster, with the agent's machine reason.
                    "unhealthy": [{"component": c.component, "reason": c.reason, "ready": c.ready_replicas,
                                   "desired": c.desired_replicas, "message": c.message}
                                  for c in (record.components if record else ()) if not c.healthy],
                    "nodes": len(nodes) if nodes else (declared["nodes"] if declared else 0),
                    "generation": self.cluster_generation(name),
                    "dynamic": dict(self.dynamic[name]) if name in self.dynamic else None,
                }
            )
        return rows

    # ---------------------------------------------------------- persistence

    def to_dict(self) -> dict[str, Any]:
        """The whole state as plain values (what the Raft full dump stores)."""
        return {
            "version": STATE_VERSION,
            "decisionLogLimit": self.decision_log_limit,
            "inventory": self.inventory,
            "declaredSince": self.declared_since,
            "heartbeat": self.heartbeat,
            "workloads": {key: {"kind": w.kind, "digest": w.digest, "deadline": w.deadline}
                          for key, w in self.workloads.items()},
            "lastGood": self.last_good,
            "lastFailed": self.last_failed,
            "reports": {
                name: {"report": stored.record.to_json(), "receivedAt": stored.received_at,
                       "count": stored.count, "skewSeconds": stored.skew_seconds}
                for name, stored in self.reports.items()
            },
            "staleReports": self.stale_reports,
            "ignoredClaims": self.ignored_claims,
            "completedJobs": {key: {"cluster": c.cluster, "at": c.at, "digest": c.digest}
                              for key, c in self.completed_jobs.items()},
            # Lists of [receivedAt, ms], as dumps have always held them.
            "latencyHistory": {cluster: {target: [list(sample) for sample in samples]
                                         for target, samples in targets.items()}
                               for cluster, targets in self.latency_history.items()},
            "clusterTracks": {name: track.to_json() for name, track in self.cluster_tracks.items()},
            "unreadySince": {cluster: {comp: list(entry) for comp, entry in since.items()}
                             for cluster, since in self.unready_since.items()},
            "generation": self.generation,
            "placements": self.placements,
            "lastMoved": self.last_moved,
            "clusterGenerations": self.cluster_generations,
            "goalsCommitOfPlan": self.goals_commit_of_plan,
            "unmet": self.unmet,
            "leader": self.leader,
            "members": self.members,
            "decisions": self.decisions,
            "decisionSeq": self.decision_seq,
            "rejectedProposals": self.rejected_proposals,
            "dynamic": self.dynamic,
            "poolTokens": self.pool_tokens,
            "branchHeads": self.branch_heads,
            "branchHeadsTerm": self.branch_heads_term,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> KnowledgeBase:
        """Rebuild a KB from ``to_dict()`` output (deep-copied: no aliasing)."""
        if data.get("version") not in READABLE_VERSIONS:
            raise ValueError(f"unsupported knowledge base version {data.get('version')!r}")
        d = copy.deepcopy(dict(data))
        kb = cls(decision_log_limit=int(d["decisionLogLimit"]))
        kb.inventory = d["inventory"]
        kb.declared_since = {name: float(at) for name, at in d.get("declaredSince", {}).items()}  # absent before
        kb.heartbeat = d["heartbeat"]
        kb.last_good = d["lastGood"]
        kb.last_failed = d["lastFailed"]
        kb.workloads = {key: WorkloadRecord(w["kind"], w["digest"],  # absent in version 1
                                            float(w.get("deadline", DEFAULT_PROGRESS_DEADLINE)))
                        for key, w in d.get("workloads", {}).items()}
        kb.reports = {
            name: StoredReport(ReportRecord.from_json(stored["report"]), float(stored["receivedAt"]),
                               int(stored["count"]), float(stored.get("skewSeconds", 0.0)))
            for name, stored in d["reports"].items()
        }
        kb.stale_reports = d["staleReports"]
        kb.ignored_claims = d.get("ignoredClaims", {})
        kb.completed_jobs = {key: CompletedJob(c["cluster"], float(c["at"]), c["digest"])
                             for key, c in d.get("completedJobs", {}).items()}
        kb.latency_history = {  # absent in dumps before the window
            cluster: {target: tuple((float(at), float(ms)) for at, ms in samples)
                      for target, samples in targets.items()}
            for cluster, targets in d.get("latencyHistory", {}).items()
        }
        # Absent before version 3: tracks start again from the next report of each cluster.
        kb.cluster_tracks = {name: ClusterTrack.from_json(t) for name, t in d.get("clusterTracks", {}).items()}
        kb.unready_since = {cluster: {comp: _unready(entry) for comp, entry in since.items()}
                            for cluster, since in d.get("unreadySince", {}).items()}
        kb.generation = d["generation"]
        kb.placements = d["placements"]
        kb._placed_on = _placed_on(kb.placements)
        kb.last_moved = d["lastMoved"]
        kb.cluster_generations = d["clusterGenerations"]
        kb.goals_commit_of_plan = d["goalsCommitOfPlan"]
        kb.unmet = d.get("unmet", [])  # absent in dumps made before it was recorded
        kb.leader = d["leader"]
        kb.members = d["members"]
        kb.decisions = d["decisions"]
        kb.decision_seq = d["decisionSeq"]
        kb.rejected_proposals = d.get("rejectedProposals", {})  # absent in dumps before review
        kb.dynamic = d.get("dynamic", {})  # absent in dumps before cloud bursting
        kb.pool_tokens = d.get("poolTokens", {})
        kb.branch_heads = d.get("branchHeads", {})  # absent in dumps before the heads were recorded
        kb.branch_heads_term = int(d.get("branchHeadsTerm", 0))
        return kb


def _by_cluster(placements: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, int]]:
    """``{component: {cluster: n}}`` turned into ``{cluster: {component: n}}``."""
    result: dict[str, dict[str, int]] = {}
    for comp, clusters in placements.items():
        for cluster, n in clusters.items():
            if n > 0:
                result.setdefault(cluster, {})[comp] = n
    return result


def _placed_on(placements: Mapping[str, Mapping[str, int]]) -> dict[str, frozenset[str]]:
    """Cluster -> the components placed there with at least one replica."""
    return {cluster: frozenset(comps) for cluster, comps in _by_cluster(placements).items()}


def saturating_add(a: float, b: float, limit: float = MAX_RPS) -> float:
    """``a + b`` capped at ``limit``: sums of bounded observations never overflow."""
    total = a + b
    return min(limit, total)


# Every cycle takes a snapshot of the whole fleet, and between two reports of a cluster
# its nodes are the same records: their validated models are kept (by value: records are
# frozen) instead of being validated again, seconds per snapshot at 10,000 clusters.
_SNAPSHOT_CACHE = 1 << 16


@functools.lru_cache(maxsize=_SNAPSHOT_CACHE)
def _observed_node(node: NodeRecord) -> ObservedNode:
    return ObservedNode(
        name=node.name,
        arch=node.arch,  # type: ignore[arg-type]
        ready=node.ready,
        allocatable=_capacity(node.allocatable_cpu, node.allocatable_memory),
        free=_capacity(node.free_cpu, node.free_memory),
    )


def _unready(entry: Any) -> Unready:
    """A dumped ``unready_since`` entry: ``[since, generation]``."""
    since, awaiting = entry
    return float(since), int(awaiting)


def _scheduling(j: ClusterJudgement | None) -> str | None:
    """What the planner does with a cluster, in one word for tables: ``schedulable``,
    ``cordoned`` (keeps what runs, no new replicas), ``recovering`` (cordoned until Ready
    long enough), ``failed-over``."""
    if j is None:
        return None
    if j.gone:
        return "failed-over"
    if j.recovering:
        return "recovering"
    return "cordoned" if j.cordoned else "schedulable"


def _observed_condition(j: ClusterJudgement) -> dict[str, Any]:
    """The health model's judgement as ``ObservedCluster`` fields."""
    return {"healthy": not j.gone, "state": j.state, "reason": j.reason, "recovering": j.recovering}


def _observed_workload(component: str, cluster: str, state: str, ready: int, reason: str | None) -> ObservedWorkload:
    return ObservedWorkload.model_validate({"component": component, "cluster": cluster, "state": state,
                                            "readyReplicas": ready, "reason": reason})


@functools.lru_cache(maxsize=_SNAPSHOT_CACHE)
def _observed_latency(source: str, target: str, ms: float) -> ObservedLatency:
    return ObservedLatency.model_validate({"from": source, "to": target, "ms": ms})


@functools.lru_cache(maxsize=_SNAPSHOT_CACHE)
def _capacity(millicores: int, memory_bytes: int) -> Capacity:
    # Capacity takes quantities: millicores go in as "<n>m", bytes as plain numbers.
    return Capacity.model_validate({"cpu": f"{millicores}m", "memory": str(memory_bytes)})
