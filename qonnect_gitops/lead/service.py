"""One lead process: the Raft node plus the background work around it.

* a leadership watcher records each new term in the log (who leads since when:
  the KB measures heartbeat ages from it) and registers this lead's addresses;
* the reconcile loop (``lead.loop``), on the leader only, fetches ``main``, records
  the inventory or the errors of an invalid commit, plans and writes Git;
* the report batcher, token store and rate limiter serve the HTTP API.

The service builds the loop and hands it only what it uses (the Raft node, a
``KBReader``, the metrics and the repository); the loop never sees the service.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from qonnect_gitops.kb import KnowledgeBase, iso
from qonnect_gitops.kb.health import EVICTIONS_PAUSED, EVICTIONS_SLOWED
from qonnect_gitops.lead.httpd import HTTPLimits, Intake
from qonnect_gitops.lead.loop import MIRROR_DIR, LoopConfig, ReconcileLoop
from qonnect_gitops.lead.metrics import Metrics
from qonnect_gitops.lead.raft.batcher import ReportBatcher
from qonnect_gitops.lead.raft.errors import ProposalError
from qonnect_gitops.lead.raft.node import RaftNode
from qonnect_gitops.lead.raft.secret import RaftSecret
from qonnect_gitops.lead.raft.timing import RaftTiming
from qonnect_gitops.lead.ratelimit import RateLimiter
from qonnect_gitops.lead.review import ReviewConfig
from qonnect_gitops.lead.tokens import TokenStore
from qonnect_gitops.logs import get_logger, redact_url
from qonnect_gitops.model.limits import DEFAULT_TREE_LIMITS, TreeLimits
from qonnect_gitops.model.status import ClusterState

MAX_NOT_RUNNING_SHOWN = 1000  # /v1/status lists at most this many components not running where placed
log = get_logger(__name__)


@dataclass(frozen=True)
class LeadConfig:
    """Everything ``qonnect lead`` takes on its command line."""

    node_id: str
    raft: str
    peers: tuple[str, ...]
    http: str
    data_dir: Path
    # The group's shared secret: every Raft frame is sealed with it (lead/raft/transport.py).
    raft_secret_file: Path
    # Where the Raft port listens when that is not ``raft``'s host (NAT, containers).
    raft_bind: str | None = None
    repo: str | None = None
    # The address other leads, agents and operators reach this lead's API at (the
    # --http bind address when unset, e.g. 0.0.0.0:8080 behind a Service name).
    advertise_http: str | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    # CA bundle to verify the other leads' certificates when forwarding a webhook
    # (default: the system store and this lead's own certificate).
    tls_ca: Path | None = None
    # How far an agent's clock may be from this lead's before the report is flagged
    # (it is stored with this lead's receipt time either way).
    max_clock_skew: float = 300.0
    tokens_file: Path | None = None
    poll_seconds: float = 10.0
    reschedule_seconds: float = 60.0
    webhook_secret_file: Path | None = None
    report_rate: float = 2.0
    report_burst: float = 10.0
    commit_timeout: float = 5.0
    batch_window: float = 0.005
    # The API server's event loop (``lead.httpd.EVENT_LOOPS``): uvloop where installed.
    event_loop: str = "auto"
    timing: RaftTiming = field(default_factory=RaftTiming)
    http_limits: HTTPLimits = field(default_factory=HTTPLimits)
    goals_limits: TreeLimits = DEFAULT_TREE_LIMITS
    review: ReviewConfig = field(default_factory=ReviewConfig)  # --forges, --preview-*: never from the goals

    @property
    def tls(self) -> bool:
        return self.tls_cert is not None

    @property
    def advertised(self) -> str:
        """``host:port`` recorded in the KB for this lead's API."""
        return self.advertise_http or self.http

    @property
    def url(self) -> str:
        """This lead's API URL as others should use it."""
        return f"{'https' if self.tls else 'http'}://{self.advertised}"


class LeadService:
    """A running lead (without its HTTP server; see ``lead.http``)."""

    def __init__(self, config: LeadConfig) -> None:
        self.config = config
        self.node = RaftNode(config.raft, list(config.peers), config.data_dir, config.timing,
                             secret=RaftSecret.load(config.raft_secret_file), bind=config.raft_bind)
        self.kb = self.node.state.reader()
        self.tokens = TokenStore(config.tokens_file)
        self.limiter = RateLimiter(config.report_rate, config.report_burst)
        self.batcher = ReportBatcher(self.node, window=config.batch_window)
        self.metrics = Metrics()
        # The API server's connections and refusals (``lead.http.serve`` sets it): the
        # typed signal that this lead cannot take reports (``Intake.saturated_since``).
        self.intake: Callable[[], Intake] | None = None
        self._describe_metrics()
        self._stop = threading.Event()
        self._recorded_term = 0
        # The reconcile loop runs only with a goals repository to read and write.
        self.loop: ReconcileLoop | None = None
        if config.repo:
            self.loop = ReconcileLoop(self.node, self.kb, self.metrics, LoopConfig(
                repo=config.repo, mirror_dir=Path(config.data_dir) / MIRROR_DIR,
                poll_seconds=config.poll_seconds, reschedule_seconds=config.reschedule_seconds,
                api_url=config.url, goals_limits=config.goals_limits, review=config.review))
            self.node.state.report_listener = self.loop.on_reports
        self._threads = [
            threading.Thread(target=self._watch_leadership, name="leadership", daemon=True),
        ]
        for thread in self._threads:
            thread.start()
        log.info("lead_started", id=config.node_id, raft=config.raft, http=config.http,
                 url=config.url, peers=",".join(config.peers), data_dir=config.data_dir)

    # -------------------------------------------------------------- reading

    def leader_info(self) -> dict[str, Any] | None:
        """The leader this lead believes in, with its id and API address when known."""
        addr = self.node.leader_addr()
        if addr is None:
            return None
        members = self.kb.read(lambda kb: dict(kb.members))
        for node_id, entry in members.items():
            if entry["raft"] == addr:
                return {"id": node_id, "raft": addr, "http": entry["http"], "url": _member_url(entry)}
        return {"id": None, "raft": addr, "http": None, "url": None}

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        """``/readyz``: ready when this lead is in a group with a quorum and a leader it
        can reach, has applied the log it knows of, and (on the leader) its reconcile
        loop is healthy. Returns the verdict and the checks behind it."""
        raft = self.node.raft_status()
        leader = self.node.leader_addr()
        checks = {
            "raftThread": bool(self.node.sync.tick_thread_alive()),
            "quorum": raft["hasQuorum"],
            "leader": leader is not None,
            "caughtUp": raft["ready"] and raft["lastApplied"] >= raft["commitIndex"],
        }
        if self.loop is not None and self.node.is_leader():
            checks["loop"] = self.loop.healthy()
        failing = sorted(name for name, ok in checks.items() if not ok)
        return not failing, {"ready": not failing, "failing": failing, "checks": checks,
                             "id": self.config.node_id, "state": raft["state"], "term": raft["term"]}

    def status(self) -> dict[str, Any]:
        """Everything ``GET /v1/status`` returns."""
        now = time.time()
        raft = self.node.raft_status()

        def from_kb(kb: KnowledgeBase) -> dict[str, Any]:
            by_raft = {v["raft"]: (k, v) for k, v in kb.members.items()}
            members = []
            for member in self.node.members():
                node_id, entry = by_raft.get(member["raft"], (None, None))
                members.append({**member, "id": node_id, "http": entry["http"] if entry else None,
                                "url": _member_url(entry) if entry else None})
            judged, storms = kb.judge(now)
            return {
                "members": members,
                "generation": kb.generation,
                "clusters": kb.cluster_rows(now),
                "placements": kb.placements,
                # What does not run where it is placed (placed, not ready; kb.health).
                "notRunning": [
                    {"component": w.component, "cluster": w.cluster, "state": str(w.state),
                     "reason": w.reason, "placed": kb.placements.get(w.component, {}).get(w.cluster, 0),
                     "ready": w.ready_replicas}
                    for w in kb.workload_states(now, judged)[:MAX_NOT_RUNNING_SHOWN]
                ],
                # Tiers, regions or the fleet mostly silent at once: evictions slowed or paused.
                "storms": [{**s.to_json(), "since": iso(s.since)} for s in storms],
                "unmet": kb.unmet,
                "lastMoved": {
                    comp: {**moved, "at": iso(moved["at"])} for comp, moved in kb.last_moved.items()
                },
                "goals": {
                    "lastGood": _with_iso(kb.last_good),
                    "lastFailed": _with_iso(kb.last_failed),
                    "heartbeat": kb.heartbeat,
                },
                "leaderRecord": _with_iso(kb.leader, "since"),
                "decisions": [_with_iso(d) for d in kb.decisions[-20:]],
                "staleReports": kb.stale_reports,
                "ignoredClaims": sum(kb.ignored_claims.values()),
                "completedJobs": {key: {"cluster": done.cluster, "at": iso(done.at)}
                                  for key, done in kb.completed_jobs.items()},
            }

        body = self.kb.read(from_kb)
        fetch = self.loop.fetch if self.loop else None
        return {
            "self": {"id": self.config.node_id, "raft": self.config.raft,
                     "http": self.config.advertised, "url": self.config.url, **raft},
            "leader": self.leader_info(),
            "term": raft["term"],
            **body,
            "pending": {
                "reportsQueued": self.batcher.pending(),
                "reportBatchesInFlight": self.batcher.in_flight_batches,
            },
            "goalsSource": {
                "repo": redact_url(self.config.repo) if self.config.repo else None,
                "lastFetchAt": iso(fetch.last_fetch_at) if fetch else None,
                "lastFetchError": fetch.last_fetch_error if fetch else None,
            },
            "loop": self.loop.status() if self.loop else None,
            "tokens": {"count": len(self.tokens), "fileError": self.tokens.last_error},
            "http": self.intake().to_json() if self.intake is not None else None,
            "time": iso(now),
        }

    def plan_view(self) -> dict[str, Any]:
        """Everything ``GET /v1/plan`` returns."""

        def from_kb(kb: KnowledgeBase) -> dict[str, Any]:
            return {
                "generation": kb.generation,
                "goalsCommit": kb.goals_commit_of_plan,
                "placements": kb.placements,
                "lastMoved": {
                    comp: {**moved, "at": iso(moved["at"])} for comp, moved in kb.last_moved.items()
                },
                "clusterGenerations": kb.cluster_generations,
            }

        return self.kb.read(from_kb)

    def observed(self) -> dict[str, Any]:
        """The planner's inputs as of now: ``Observed`` and ``CurrentPlacement`` as JSON."""
        now = utc_now()
        observed, current = self.kb.read(lambda kb: (kb.snapshot(now), kb.current_placement()))
        return {
            "observed": observed.model_dump(mode="json", by_alias=True, exclude_none=True),
            "current": current.model_dump(mode="json", by_alias=True),
        }

    # ------------------------------------------------------ background work

    def _watch_leadership(self) -> None:
        """Record each term this lead wins, and this lead's addresses, in the log."""
        while not self._stop.wait(0.05):
            try:
                self._leadership_step()
            except ProposalError as exc:
                log.debug("leadership_record_retry", reason=exc.reason)
            except Exception as exc:  # keep watching: a crash here would silence the lead
                log.error("leadership_watch_failed", error=exc, exc_info=True)

    def _leadership_step(self) -> None:
        node = self.node
        term = node.term()
        leading = node.is_leader()
        if not leading and self.loop is not None:
            self.loop.set_leading(False, term)  # at once: a cycle in flight must not publish
        if leading and term > self._recorded_term:
            node.commands.record_leader(self.config.node_id, term, time.time(), timeout=2.0)
            self._recorded_term = term
            log.info("leader_elected", id=self.config.node_id, term=term)
        if leading and term == self._recorded_term and self.loop is not None:
            # Only after the term is in the log: the KB then refuses older terms' plans,
            # and heartbeat ages count from this leader's start.
            self.loop.set_leading(node.is_leader(), term)
        cfg = self.config
        mine = self.kb.read(lambda kb: kb.members.get(cfg.node_id))
        wanted = {"raft": cfg.raft, "http": cfg.advertised, "url": cfg.url}
        if mine != wanted and node.leader_addr() is not None:
            node.commands.register_member(cfg.node_id, cfg.raft, cfg.advertised, cfg.url, time.time(),
                                          timeout=2.0)

    def poll_goals_once(self) -> str | None:
        """One fetch-validate-record round, folded into the loop: a full cycle on the
        leader (goals recorded, errors recorded, decision written). Returns the goals
        commit the cycle read, or None when it did not run or failed."""
        if self.loop is None:
            return None
        result = self.loop.cycle(["poll"])
        return result.goals_commit if result else None

    # --------------------------------------------------------------- metrics

    def _describe_metrics(self) -> None:
        m = self.metrics
        m.describe("qonnect_reports_total", "counter", "Report requests by HTTP status code.")
        m.describe("qonnect_goals_fetches_total", "counter", "Fetches of the goals repository.")
        m.describe("qonnect_goals_fetch_errors_total", "counter", "Failed goals fetches.")
        m.describe("qonnect_decisions_recorded_total", "counter",
                   "Decisions this lead recorded in the KB, by form: changes (what moved) or whole.")
        m.describe("qonnect_raft_is_leader", "gauge", "1 while this lead leads with a quorum.")
        m.describe("qonnect_raft_term", "gauge", "Current Raft term.")
        m.describe("qonnect_raft_commit_index", "gauge", "Raft commit index.")
        m.describe("qonnect_raft_last_applied", "gauge", "Last log index applied to the KB.")
        m.describe("qonnect_raft_log_entries", "gauge", "Entries in the Raft log (journal).")
        m.describe("qonnect_raft_members", "gauge", "Members by connection state.")
        m.describe("qonnect_report_batches_total", "gauge", "Report batches proposed.")
        m.describe("qonnect_reports_committed_total", "gauge", "Reports committed via batches.")
        m.describe("qonnect_reports_queued", "gauge", "Reports waiting to be proposed.")
        m.describe("qonnect_plan_generation", "gauge", "Generation of the placement in force.")
        m.describe("qonnect_clusters", "gauge", "Declared clusters by health.")
        m.describe("qonnect_heartbeat_age_seconds", "gauge", "Seconds since a cluster reported.")
        m.describe("qonnect_report_claims_ignored_total", "counter",
                   "Claims of a report about components not placed on its cluster (or completion "
                   "of a component that is no Job), ignored; by reporting cluster.")
        m.describe("qonnect_reports_superseded_total", "counter",
                   "Reports not stored because one received later was stored first (answered 409).")
        m.describe("qonnect_report_clock_skew_total", "counter",
                   "Reports whose agent clock was further than --max-clock-skew from the lead's.")
        m.describe("qonnect_cycles_degraded_total", "counter",
                   "Cycles that planned from liveness only because planning with measurements failed.")
        m.describe("qonnect_loop_healthy", "gauge", "1 unless the leader's loop keeps failing.")
        m.describe("qonnect_cluster_state", "gauge",
                   "Declared clusters by the health model's state (Ready, Degraded, Stalled, Silent).")
        m.describe("qonnect_evictions_held", "gauge",
                   "Silent clusters not failed over because their tier, region or the fleet is "
                   "mostly silent at once (the storm guard).")

        def gauges() -> list[tuple[str, dict[str, str], float]]:
            raft = self.node.raft_status()
            out: list[tuple[str, dict[str, str], float]] = [
                ("qonnect_raft_is_leader", {}, 1.0 if self.node.is_leader() else 0.0),
                ("qonnect_raft_term", {}, raft["term"]),
                ("qonnect_raft_commit_index", {}, raft["commitIndex"]),
                ("qonnect_raft_last_applied", {}, raft["lastApplied"]),
                ("qonnect_raft_log_entries", {}, raft["logLength"]),
                ("qonnect_report_batches_total", {}, self.batcher.batches_sent),
                ("qonnect_reports_committed_total", {}, self.batcher.reports_committed),
                ("qonnect_reports_queued", {}, self.batcher.pending()),
            ]
            members = self.node.members()
            connected = sum(1 for mb in members if mb["connected"])
            out.append(("qonnect_raft_members", {"state": "connected"}, connected))
            out.append(("qonnect_raft_members", {"state": "disconnected"}, len(members) - connected))
            now = time.time()
            rows, generation, ignored, stale = self.kb.read(
                lambda kb: (kb.cluster_rows(now), kb.generation, dict(kb.ignored_claims),
                            kb.stale_reports))
            for cluster, count in sorted(ignored.items()):
                out.append(("qonnect_report_claims_ignored_total", {"cluster": cluster}, count))
            out.append(("qonnect_reports_superseded_total", {}, stale))
            if self.loop is not None:
                out.append(("qonnect_loop_healthy", {}, 1.0 if self.loop.healthy() else 0.0))
            out.append(("qonnect_plan_generation", {}, generation))
            healthy = sum(1 for r in rows if r["declared"] and r["healthy"])
            declared = sum(1 for r in rows if r["declared"])
            out.append(("qonnect_clusters", {"health": "healthy"}, healthy))
            out.append(("qonnect_clusters", {"health": "failed"}, declared - healthy))
            for state in ClusterState:
                out.append(("qonnect_cluster_state", {"state": str(state)},
                            sum(1 for r in rows if r["declared"] and r["state"] == state)))
            held = sum(1 for r in rows if r["reason"] in (EVICTIONS_PAUSED, EVICTIONS_SLOWED))
            out.append(("qonnect_evictions_held", {}, held))
            for row in rows:
                if row["heartbeatAgeSeconds"] is not None and row["reported"]:
                    out.append(("qonnect_heartbeat_age_seconds", {"cluster": row["name"]},
                                row["heartbeatAgeSeconds"]))
            return out

        m.gauges(gauges)

    # ------------------------------------------------------------- shutdown

    def close(self) -> None:
        """Stop background work and the Raft node."""
        self._stop.set()
        if self.loop is not None:
            self.loop.close()
        self.batcher.stop()
        self.node.destroy()
        log.info("lead_stopped", id=self.config.node_id)


def _member_url(entry: dict[str, str]) -> str:
    """A member's API URL (entries recorded before TLS existed have only host:port)."""
    return entry.get("url") or f"http://{entry['http']}"


def _with_iso(entry: dict[str, Any] | None, key: str = "at") -> dict[str, Any] | None:
    if entry is None:
        return None
    return {**entry, key: iso(entry[key])}


def utc_now() -> datetime:
    """The current time as an aware datetime (what ``KnowledgeBase.snapshot`` takes)."""
    return datetime.now(tz=UTC)
