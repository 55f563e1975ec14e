"""The Knowledge Base: the lead group's replicated state (pure, deterministic).

Every ``apply_*`` method is a state transition the Raft log replays on every
replica, in the same order, so they obey three rules:

* time comes in as an argument (``now``, Unix seconds from the proposing lead's
  clock); nothing here reads a clock, a file or a random source;
* the inputs are plain JSON-like values (what went through the Raft log), and
  the state holds nothing else, so a full dump is a plain dict;
* they are small: the Raft tick thread runs them, and a slow one stalls
  heartbeats for the whole group.

Reads (``snapshot``, ``current_placement``, ``status``) never change state.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from qonnect_gitops.model.goals import Goals
from qonnect_gitops.model.observed import (
    Capacity,
    Observed,
    ObservedCluster,
    ObservedLatency,
    ObservedNode,
    ObservedTraffic,
)
from qonnect_gitops.model.plan import CurrentPlacement

STATE_VERSION = 1
MAX_UNMET = 1000  # unmet goals kept with the plan in force (one per component and goal)
DECISION_LOG_LIMIT = 256
DEFAULT_GRACE_SECONDS = 20.0
DEFAULT_INTERVAL_SECONDS = 5.0
MAX_GOALS_ERRORS = 100
LATENCY_WINDOW_REPORTS = 3

ReportEntry = tuple[str, float, dict[str, Any]]
"""``(cluster, agent_time_unix, report_json)``: one report as it travels through the log."""


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


def heartbeat_from_goals(goals: Goals) -> dict[str, float]:
    """The heartbeat settings the KB needs to judge freshness."""
    hb = goals.fleet.spec.heartbeat
    return {
        "intervalSeconds": float(hb.interval_seconds),
        "graceSeconds": float(hb.grace_seconds),
        # A latency breach counts once it held through three reports in a row.
        "latencyWindowSeconds": LATENCY_WINDOW_REPORTS * float(hb.interval_seconds),
    }


class KnowledgeBase:
    """Replicated state of the lead group. See the module docstring for the rules."""

    def __init__(self, decision_log_limit: int = DECISION_LOG_LIMIT) -> None:
        self.decision_log_limit = decision_log_limit
        # Inventory and heartbeat settings from the last good goals commit.
        self.inventory: dict[str, dict[str, Any]] = {}
        self.heartbeat: dict[str, float] = {
            "intervalSeconds": DEFAULT_INTERVAL_SECONDS,
            "graceSeconds": DEFAULT_GRACE_SECONDS,
        }
        self.last_good: dict[str, Any] | None = None  # {commit, at}
        self.last_failed: dict[str, Any] | None = None  # {commit, at, errors}
        # Latest report per cluster: {report, agentTime, receivedAt, count}.
        self.reports: dict[str, dict[str, Any]] = {}
        self.stale_reports = 0
        # Measured latencies per cluster and target, [[receivedAt, ms], ...] oldest first,
        # trimmed to the latency window: the planner sees the lowest value of the window,
        # so only a sustained breach moves anything (one slow sample does not).
        self.latency_history: dict[str, dict[str, list[list[float]]]] = {}
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
        # Bounded decision log, oldest first; seq numbers survive trimming.
        self.decisions: list[dict[str, Any]] = []
        self.decision_seq = 0

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

    # -------------------------------------------------------- state changes

    def apply_reports(self, entries: Sequence[ReportEntry], now: float) -> dict[str, int]:
        """Store a batch of reports received at ``now``; returns each cluster's generation.

        A report older (by agent time) than the one stored is dropped: batches from
        different leads may commit out of the order the agent sent them.
        """
        result: dict[str, int] = {}
        for cluster, agent_time, report in entries:
            current = self.reports.get(cluster)
            if current is not None and agent_time < current["agentTime"]:
                self.stale_reports += 1
            else:
                count = current["count"] + 1 if current else 1
                self.reports[cluster] = {
                    "report": report,
                    "agentTime": agent_time,
                    "receivedAt": now,
                    "count": count,
                }
                self._record_latencies(cluster, report, now)
            result[cluster] = self.cluster_generations.get(cluster, 0)
        return result

    @property
    def latency_window(self) -> float:
        default = LATENCY_WINDOW_REPORTS * float(self.heartbeat["intervalSeconds"])
        return float(self.heartbeat.get("latencyWindowSeconds", default))

    def _record_latencies(self, cluster: str, report: Mapping[str, Any], now: float) -> None:
        history = self.latency_history.setdefault(cluster, {})
        seen = set()
        for lat in report.get("latencies") or ():
            target = str(lat["to"])
            seen.add(target)
            samples = history.setdefault(target, [])
            samples.append([now, float(lat["ms"])])
            # Keep the samples inside the window plus the one in force at its start.
            start = now - self.latency_window
            while len(samples) > 1 and samples[1][0] <= start:
                del samples[0]
        for target in [t for t in history if t not in seen]:
            del history[target]  # no longer measured: the declared value applies again

    def sustained_latency(self, cluster: str, target: str, now: float) -> float | None:
        """The lowest latency ``cluster`` measured to ``target`` over the window before
        ``now`` (the value in force at the window's start included). None while the
        measurement is younger than the window: until then the declared latency holds,
        so a first slow sample after silence is no more a breach than any other."""
        samples = self.latency_history.get(cluster, {}).get(target)
        start = now - self.latency_window
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
        now: float,
    ) -> bool:
        """Make ``commit`` the last good goals commit; False if it already was."""
        if self.last_good is not None and self.last_good["commit"] == commit:
            return False
        added = sorted(set(inventory) - set(self.inventory))
        removed = sorted(set(self.inventory) - set(inventory))
        self.inventory = {name: dict(value) for name, value in sorted(inventory.items())}
        self.heartbeat = {k: float(v) for k, v in heartbeat.items()}
        self.last_good = {"commit": commit, "at": now}
        # Reports of clusters no longer declared are forgotten: nothing may be planned there.
        for name in removed:
            self.reports.pop(name, None)
            self.latency_history.pop(name, None)
        summary = f"goals {commit[:12]} accepted: {len(inventory)} clusters"
        if added:
            summary += f", added {', '.join(added)}"
        if removed:
            summary += f", removed {', '.join(removed)}"
        self._log(now, "goals", summary, commit=commit)
        return True

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
    ) -> int:
        """Put a placement in force; returns the new generation.

        Returns the current generation unchanged when nothing differs (no decision is
        logged), and -1 when ``term`` is older than the newest leader's: a deposed
        leader's decision is refused by the log itself. ``unmet``: the goals the
        decision cannot meet (kept even when the placement did not change).
        """
        if term < self.leader_term:
            self._log(now, "plan-refused", f"plan from stale term {term} refused", term=term)
            return -1
        self.unmet = [
            {"component": str(u["component"]), "goal": str(u["goal"]), "message": str(u["message"])}
            for u in unmet[:MAX_UNMET]
        ]
        new = {
            comp: {cl: int(n) for cl, n in sorted(clusters.items()) if int(n) > 0}
            for comp, clusters in sorted(placements.items())
        }
        if new == self.placements:
            return self.generation
        generation = self.generation + 1
        moves: list[dict[str, Any]] = []
        for comp in sorted(set(new) | set(self.placements)):
            old_map = self.placements.get(comp, {})
            new_map = new.get(comp, {})
            if old_map == new_map:
                continue
            why = reasons.get(comp, reason)
            moves.append({"component": comp, "from": old_map, "to": new_map, "reason": why})
            if new_map:
                self.last_moved[comp] = {"at": now, "reason": why, "generation": generation}
            else:
                self.last_moved.pop(comp, None)
        old_by_cluster = _by_cluster(self.placements)
        new_by_cluster = _by_cluster(new)
        for cluster in sorted(set(old_by_cluster) | set(new_by_cluster)):
            if old_by_cluster.get(cluster) != new_by_cluster.get(cluster):
                self.cluster_generations[cluster] = generation
        self.placements = new
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
            moves=moves,
        )
        return generation

    def apply_leader(self, node_id: str, term: int, now: float) -> bool:
        """Record that ``node_id`` became leader in ``term``; older terms are ignored."""
        if term <= self.leader_term:
            return False
        self.leader = {"id": node_id, "term": term, "since": now}
        self._log(now, "leader", f"{node_id} leads in term {term}", term=term, node=node_id)
        return True

    def apply_member(self, node_id: str, raft: str, http: str, now: float) -> bool:
        """Record a lead's addresses (so any lead can name the leader and its URL)."""
        entry = {"raft": raft, "http": http}
        if self.members.get(node_id) == entry:
            return False
        # An address belongs to one lead: a renamed lead replaces the old entry.
        for other in [k for k, v in self.members.items() if v["raft"] == raft and k != node_id]:
            del self.members[other]
        self.members[node_id] = entry
        self._log(now, "member", f"{node_id} at raft {raft}, http {http}", node=node_id)
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

    def heartbeat_age(self, cluster: str, now: float) -> float | None:
        """Seconds of silence from ``cluster`` as the group can judge them.

        Counted from the later of the last report and the current leader's start:
        while the leads themselves were down or electing, nobody could hear agents,
        and failing every cluster after a group restart would be wrong. None means
        the cluster has not reported and the group has no start time yet.
        """
        epoch = self._epoch()
        entry = self.reports.get(cluster)
        heard = entry["receivedAt"] if entry else None
        since = max((t for t in (heard, epoch) if t is not None), default=None)
        if since is None:
            return None
        return max(0.0, now - since)

    def cluster_health(self, cluster: str, now: float) -> bool:
        """Healthy = heard within the grace period and (if nodes reported) a node is ready.

        A cluster that never reported is healthy on its declared nodes for one grace
        period after the group (its current leader) started, then failed.
        """
        age = self.heartbeat_age(cluster, now)
        if age is not None and age > self.grace_seconds:
            return False
        entry = self.reports.get(cluster)
        if entry is None:
            return True
        nodes = entry["report"].get("nodes") or []
        return not nodes or any(node.get("ready", True) for node in nodes)

    def snapshot(self, now: datetime) -> Observed:
        """The planner's frozen view of the fleet at ``now`` (an aware datetime)."""
        ts = now.timestamp()
        clusters: dict[str, ObservedCluster] = {}
        latencies: dict[tuple[str, str], float] = {}
        traffic: dict[tuple[str, str], float] = {}
        completed: set[str] = set()
        for name in sorted(self.inventory):
            entry = self.reports.get(name)
            healthy = self.cluster_health(name, ts)
            age = self.heartbeat_age(name, ts)
            if entry is None:
                # Never reported: declared nodes apply; after the grace it counts as failed.
                clusters[name] = ObservedCluster(healthy=healthy, heartbeat_age_seconds=age)
                continue
            report = entry["report"]
            nodes = tuple(_observed_node(node) for node in report.get("nodes") or ())
            free = None
            if nodes:
                ready = [n for n in nodes if n.ready]
                # Capacity takes quantities, so sums go back in as "<n>m" and bytes.
                free = Capacity.model_validate({
                    "cpu": f"{sum(n.free.cpu for n in ready)}m",
                    "memory": str(sum(n.free.memory for n in ready)),
                })
            clusters[name] = ObservedCluster(
                healthy=healthy,
                heartbeat_age_seconds=age,
                free=free,
                nodes=nodes or None,
            )
            for lat in report.get("latencies") or ():
                if lat["to"] != name:
                    sustained = self.sustained_latency(name, lat["to"], ts)
                    if sustained is not None:
                        latencies[(name, lat["to"])] = sustained
            for item in report.get("traffic") or ():
                key = (item["component"], item["region"])
                traffic[key] = traffic.get(key, 0.0) + float(item["rps"])
            for comp in report.get("components") or ():
                if comp.get("completed"):
                    completed.add(comp["component"])
        return Observed(
            now=now,
            clusters=clusters,
            latencies=tuple(
                ObservedLatency.model_validate({"from": src, "to": dst, "ms": ms})
                for (src, dst), ms in sorted(latencies.items())
            ),
            traffic=tuple(
                ObservedTraffic(component=comp, region=region, rps=rps)
                for (comp, region), rps in sorted(traffic.items())
            ),
            completed_jobs=tuple(sorted(completed)),
        )

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
        """Per-cluster status for the API: inventory plus what the last report said."""
        rows = []
        for name in sorted(set(self.inventory) | set(self.reports)):
            declared = self.inventory.get(name)
            entry = self.reports.get(name)
            report = entry["report"] if entry else {}
            nodes = report.get("nodes") or []
            age = self.heartbeat_age(name, now)
            rows.append(
                {
                    "name": name,
                    "declared": declared is not None,
                    "tier": declared["tier"] if declared else None,
                    "region": declared["region"] if declared else None,
                    "healthy": self.cluster_health(name, now) if declared else False,
                    "reported": entry is not None,
                    "heartbeatAgeSeconds": None if age is None else round(age, 3),
                    "lastReportAt": iso(entry["receivedAt"]) if entry else None,
                    "reports": entry["count"] if entry else 0,
                    "sync": report.get("sync"),
                    "applied": report.get("applied"),
                    "attempted": report.get("attempted"),
                    "refusals": report.get("refusals") or [],
                    "nodesReady": sum(1 for n in nodes if n.get("ready", True)),
                    "nodes": len(nodes) if nodes else (declared["nodes"] if declared else 0),
                    "generation": self.cluster_generation(name),
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
            "heartbeat": self.heartbeat,
            "lastGood": self.last_good,
            "lastFailed": self.last_failed,
            "reports": self.reports,
            "staleReports": self.stale_reports,
            "latencyHistory": self.latency_history,
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
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> KnowledgeBase:
        """Rebuild a KB from ``to_dict()`` output (deep-copied: no aliasing)."""
        if data.get("version") != STATE_VERSION:
            raise ValueError(f"unsupported knowledge base version {data.get('version')!r}")
        d = copy.deepcopy(dict(data))
        kb = cls(decision_log_limit=int(d["decisionLogLimit"]))
        kb.inventory = d["inventory"]
        kb.heartbeat = d["heartbeat"]
        kb.last_good = d["lastGood"]
        kb.last_failed = d["lastFailed"]
        kb.reports = d["reports"]
        kb.stale_reports = d["staleReports"]
        kb.latency_history = d.get("latencyHistory", {})  # absent in dumps before the window
        kb.generation = d["generation"]
        kb.placements = d["placements"]
        kb.last_moved = d["lastMoved"]
        kb.cluster_generations = d["clusterGenerations"]
        kb.goals_commit_of_plan = d["goalsCommitOfPlan"]
        kb.unmet = d.get("unmet", [])  # absent in dumps made before it was recorded
        kb.leader = d["leader"]
        kb.members = d["members"]
        kb.decisions = d["decisions"]
        kb.decision_seq = d["decisionSeq"]
        return kb


def _by_cluster(placements: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, int]]:
    """``{component: {cluster: n}}`` turned into ``{cluster: {component: n}}``."""
    result: dict[str, dict[str, int]] = {}
    for comp, clusters in placements.items():
        for cluster, n in clusters.items():
            if n > 0:
                result.setdefault(cluster, {})[comp] = n
    return result


def _observed_node(node: Mapping[str, Any]) -> ObservedNode:
    return ObservedNode(
        name=node["name"],
        arch=node.get("arch", "amd64"),
        ready=bool(node.get("ready", True)),
        # Quantities stay strings here: the model's validators convert them exactly once.
        allocatable=Capacity.model_validate(
            {"cpu": node["allocatableCpu"], "memory": node["allocatableMemory"]}
        ),
        free=Capacity.model_validate({"cpu": node["freeCpu"], "memory": node["freeMemory"]}),
    )

