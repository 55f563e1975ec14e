"""The one health model: how the leads judge a cluster, and what runs on it (pure).

Every reader of cluster health (the planner's snapshot, ``/v1/status``, metrics, the
failover deadline, the review bridge) asks this module; nothing else decides whether a
cluster is gone. It works from what the Knowledge Base replicates, so every lead judges
alike, and takes time as an argument.

A cluster is in one of four states (``model.status.ClusterState``):

* ``Ready``: its agent reports, applies its branch, and a node is ready;
* ``Degraded``: its agent reports, but the cluster's API server is unreachable or no node
  is ready (the agent is the observer, the cluster is the trouble);
* ``Stalled``: its agent reports and refuses, or fails to apply, the commit it was sent;
* ``Silent``: no report within the cluster's own silence threshold.

What the planner does with each is a *judgement* with hysteresis:

* **gone** (its replicas fail over): ``Silent``, or ``Degraded`` for ``degradedSeconds``
  in a row. A refusal never evicts: a ``Stalled`` cluster keeps what runs there.
* **cordoned** (keeps what runs, gets no new replicas): ``Degraded`` before it is
  sustained, ``Stalled``, ``Silent`` while the storm guard holds evictions back, and a
  cluster back from being gone until it has been ``Ready`` for ``recoverySeconds``.

Silence is measured against each cluster's own report rhythm: the threshold is the
configured grace, or more for a cluster whose reports come irregularly (an accrual
detector in the spirit of Cassandra's and Akka's phi detectors: the mean gap between its
recent reports plus ``PHI_SIGMAS`` standard deviations, capped at ``MAX_GRACES`` graces).

Storm guard: when at least ``unhealthyShare`` of a tier or region (of three or more
clusters) is silent, one of its silent clusters is failed over per
``stormEvictionSeconds``, longest silent first; when that share of the whole fleet is
silent, none is: the likelier fault is the leads' own view (a saturated lead, a network
partition), as Kubernetes' node lifecycle controller slows and stops evictions for a zone.

What runs: a component placed on a cluster is *ready* there when the cluster's latest
report shows it healthy with at least the placed replicas ready (a Job that completed
counts). From the moment it is placed or seen not ready it has its progress deadline; past
it, it is ``NotRunning``; on a ``Stalled`` cluster it is ``NotRunning`` at once (the
cluster refuses what would make it run).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from qonnect_gitops.kb.records import ComponentRecord, ReportRecord
from qonnect_gitops.model.status import ClusterState, SyncReason, SyncState, WorkloadState

GAPS_KEPT = 16  # report gaps per cluster the silence detector learns from
PHI_SIGMAS = 5.6  # a phi of 8: the chance of a gap this long from a live agent is 1e-8
MIN_SIGMA_SHARE = 0.1  # the detector's standard deviation is at least a tenth of the mean gap
MAX_GRACES = 10.0  # no rhythm stretches the threshold past this many graces
MIN_STORM_GROUP = 3  # tiers and regions smaller than this never count as a storm

# Reasons of the judgements (CamelCase, as every machine reason).
NODES_NOT_READY = "NodesNotReady"
HEARTBEAT_MISSED = "HeartbeatMissed"
EVICTIONS_PAUSED = "EvictionsPaused"
EVICTIONS_SLOWED = "EvictionsSlowed"
PROGRESS_DEADLINE_EXCEEDED = "ProgressDeadlineExceeded"
SYNC_FAILED = "SyncFailed"
RECOVERING = "Recovering"  # Ready again after a failover, not for recoverySeconds yet


@dataclass(frozen=True, slots=True)
class HealthSettings:
    """The fleet's heartbeat settings as the health model uses them (seconds, share)."""

    interval: float
    grace: float
    degraded: float
    recovery: float
    unhealthy_share: float = 0.55
    storm_eviction: float = 60.0

    @classmethod
    def from_heartbeat(cls, heartbeat: Mapping[str, float]) -> HealthSettings:
        """From ``kb.state.heartbeat_from_goals``'s dict (older dumps lack the newer keys)."""
        grace = float(heartbeat["graceSeconds"])
        return cls(
            interval=float(heartbeat.get("intervalSeconds", grace / 4)),
            grace=grace,
            degraded=float(heartbeat.get("degradedSeconds", 3 * grace)),
            recovery=float(heartbeat.get("recoverySeconds", grace)),
            unhealthy_share=float(heartbeat.get("unhealthyShare", 0.55)),
            storm_eviction=float(heartbeat.get("stormEvictionSeconds", 60.0)),
        )


@dataclass(frozen=True, slots=True)
class ClusterTrack:
    """What the KB remembers of a cluster's reports between them (replicated, immutable).

    ``condition``/``reason``: what the latest report says (Ready, Degraded or Stalled);
    ``since``: receipt of the first report of the current condition; ``gaps``: the latest
    gaps between reports, oldest first (silences left out); ``recovering``: it was gone
    (silent past its threshold, or degraded past ``degradedSeconds``) and has not been
    Ready for ``recoverySeconds`` since."""

    condition: ClusterState
    reason: str | None
    since: float
    gaps: tuple[float, ...] = ()
    recovering: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"condition": str(self.condition), "reason": self.reason, "since": self.since,
                "gaps": list(self.gaps), "recovering": self.recovering}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ClusterTrack:
        reason = data.get("reason")
        return cls(ClusterState(str(data["condition"])), None if reason is None else str(reason),
                   float(data["since"]), tuple(float(g) for g in data.get("gaps") or ()),
                   bool(data.get("recovering", False)))


def report_condition(record: ReportRecord) -> tuple[ClusterState, str | None]:
    """What one report says of its cluster: Degraded (API server unreachable, or nodes
    reported and none ready), Stalled (the agent refuses or fails to apply its commit), or
    Ready. A workload that fails its health check is the workload's trouble, not the
    cluster's: it is judged per component (``judge_workload``)."""
    sync = record.sync
    if sync.reason == SyncReason.API_UNAVAILABLE:
        return ClusterState.DEGRADED, SyncReason.API_UNAVAILABLE.value
    nodes = record.nodes
    if nodes and not any(node.ready for node in nodes):
        return ClusterState.DEGRADED, NODES_NOT_READY
    if sync.state == SyncState.STALLED and sync.reason != SyncReason.HEALTH_CHECK_FAILED \
            and not _awaiting_first_branch(record):
        reason = sync.reason if _is_reason(sync.reason) else SYNC_FAILED
        return ClusterState.STALLED, reason
    return ClusterState.READY, None


def _awaiting_first_branch(record: ReportRecord) -> bool:
    """An agent that never had a commit and finds no branch: nothing was placed on its
    cluster yet, so there is nothing it refuses (a new fleet's first cycle)."""
    return (record.sync.reason == SyncReason.SOURCE_UNAVAILABLE and record.applied is None
            and record.attempted is None)


def _is_reason(text: str) -> bool:
    return 0 < len(text) <= 64 and text[0].isupper() and text.isalnum()


def silence_threshold(gaps: tuple[float, ...], settings: HealthSettings) -> float:
    """Seconds of silence after which the cluster counts as ``Silent``: the grace, or its
    own rhythm's mean gap plus ``PHI_SIGMAS`` deviations where that is longer, at most
    ``MAX_GRACES`` graces."""
    floor = settings.grace
    if len(gaps) < 2:
        return floor
    mean = math.fsum(gaps) / len(gaps)
    var = math.fsum((g - mean) ** 2 for g in gaps) / (len(gaps) - 1)
    sigma = max(math.sqrt(var), MIN_SIGMA_SHARE * mean)
    return min(max(floor, mean + PHI_SIGMAS * sigma), MAX_GRACES * floor)


def track_report(previous: ClusterTrack | None, heard_before: float | None, record: ReportRecord,
                 received_at: float, settings: HealthSettings) -> ClusterTrack:
    """The cluster's track once the report received at ``received_at`` is stored.

    ``heard_before``: when the group last heard the cluster before this report (its previous
    report, or the later of the leader's start and the cluster's declaration). The gap to
    it teaches the detector, unless it was a silence; a silence past the threshold or a
    sustained degradation ends in ``recovering``."""
    condition, reason = report_condition(record)
    if previous is None:
        return ClusterTrack(condition, reason, received_at)
    gaps = previous.gaps
    recovering = previous.recovering
    since = previous.since if condition == previous.condition else received_at
    if heard_before is not None:
        gap = received_at - heard_before
        if gap > silence_threshold(gaps, settings):
            recovering = True  # it was silent long enough to be failed over: a new spell begins
            since = received_at
        elif gap > 0:
            gaps = (*gaps[-(GAPS_KEPT - 1):], gap)
    if previous.condition == ClusterState.DEGRADED and received_at - previous.since > settings.degraded:
        recovering = True
    if recovering and condition == ClusterState.READY and received_at - since >= settings.recovery:
        recovering = False
    if (condition, reason, since, gaps, recovering) == (previous.condition, previous.reason, previous.since,
                                                        previous.gaps, previous.recovering):
        return previous
    return ClusterTrack(condition, reason, since, gaps, recovering)


@dataclass(frozen=True, slots=True)
class ClusterJudgement:
    """How the leads treat a cluster at one moment (``judge_cluster``, ``storm_guard``)."""

    state: ClusterState
    reason: str | None
    gone: bool  # its replicas fail over
    recovering: bool  # back from being gone, not Ready long enough yet
    age: float | None  # seconds of silence as the group can judge them
    threshold: float  # the silence threshold in force for it
    next_change: float | None = None  # when this judgement changes by time alone

    @property
    def cordoned(self) -> bool:
        """Keeps what runs, gets no new replicas."""
        return not self.gone and (self.recovering or self.state != ClusterState.READY)


def judge_cluster(track: ClusterTrack | None, heard_since: float | None, now: float,
                  settings: HealthSettings) -> ClusterJudgement:
    """The judgement of one cluster at ``now``, before the storm guard.

    ``heard_since``: the latest of its last report, the current leader's start and its
    declaration (None: nothing to count from yet: fresh)."""
    gaps = track.gaps if track else ()
    threshold = silence_threshold(gaps, settings)
    age = None if heard_since is None else max(0.0, now - heard_since)
    if age is not None and age > threshold:
        return ClusterJudgement(ClusterState.SILENT, HEARTBEAT_MISSED, True, False, age, threshold)
    silent_at = None if heard_since is None else heard_since + threshold
    if track is None:
        return ClusterJudgement(ClusterState.READY, None, False, False, age, threshold, silent_at)
    if track.condition == ClusterState.DEGRADED:
        gone_at = track.since + settings.degraded
        if now > gone_at:
            return ClusterJudgement(ClusterState.DEGRADED, track.reason, True, False, age, threshold, silent_at)
        return ClusterJudgement(ClusterState.DEGRADED, track.reason, False, track.recovering, age, threshold,
                                _earliest(silent_at, gone_at))
    recovering = track.recovering
    change = silent_at
    reason = track.reason
    if recovering and track.condition == ClusterState.READY:
        ready_at = track.since + settings.recovery
        if now >= ready_at:
            recovering = False
        else:
            change = _earliest(change, ready_at)
            reason = RECOVERING
    return ClusterJudgement(track.condition, reason, False, recovering, age, threshold, change)


def _earliest(*times: float | None) -> float | None:
    known = [t for t in times if t is not None]
    return min(known) if known else None


@dataclass(frozen=True, slots=True)
class Storm:
    """A group of clusters mostly silent at once: its evictions slow down or stop."""

    group: str  # "fleet", "tier/<tier>" or "region/<region>"
    silent: int
    members: int
    since: float  # when the silent share reached the threshold
    paused: bool  # the whole fleet: no eviction at all

    def to_json(self) -> dict[str, Any]:
        return {"group": self.group, "silent": self.silent, "members": self.members,
                "since": self.since, "paused": self.paused}


def storm_guard(judged: Mapping[str, ClusterJudgement], groups: Mapping[str, tuple[str, str]],
                now: float, settings: HealthSettings,
                ) -> tuple[dict[str, ClusterJudgement], tuple[Storm, ...]]:
    """The judgements with evictions held back where a tier, a region or the fleet is mostly
    silent, and the storms found. ``groups``: cluster -> (tier, region), for declared clusters.

    In a group whose silent share reached ``unhealthyShare``, the clusters that went silent
    more than a grace before the share was reached stay gone; the others are held (cordoned)
    and released one per ``stormEvictionSeconds``, longest silent first. A fleet-wide storm
    releases none."""
    members: dict[str, list[str]] = {"fleet": sorted(groups)}
    for name, (tier, region) in sorted(groups.items()):
        members.setdefault(f"tier/{tier}", []).append(name)
        members.setdefault(f"region/{region}", []).append(name)
    silent_since = {name: _silent_since(j, now) for name, j in judged.items()
                    if j.state == ClusterState.SILENT and j.age is not None}
    storms: list[Storm] = []
    release: dict[str, float] = {}  # held cluster -> when it may go (inf: not while the storm lasts)
    for group, names in sorted(members.items()):
        if len(names) < MIN_STORM_GROUP:
            continue
        silent = sorted((silent_since[n], n) for n in names if n in silent_since)
        needed = math.ceil(settings.unhealthy_share * len(names))
        if len(silent) < needed:
            continue
        start = silent[needed - 1][0]
        paused = group == "fleet"
        storms.append(Storm(group, len(silent), len(names), start, paused))
        # Silent within one grace before the share was reached: part of the storm. Those
        # silent earlier failed on their own, and stay failed over.
        held = [n for at, n in silent if at >= start - settings.grace]
        for k, name in enumerate(held):
            until = math.inf if paused else start + (k + 1) * settings.storm_eviction
            release[name] = max(release.get(name, until), until)
    if not release:
        return dict(judged), tuple(storms)
    out = dict(judged)
    for name, until in release.items():
        j = judged[name]
        if now >= until:
            continue
        reason = EVICTIONS_PAUSED if math.isinf(until) else EVICTIONS_SLOWED
        change = None if math.isinf(until) else until
        out[name] = ClusterJudgement(j.state, reason, False, False, j.age, j.threshold, change)
    return out, tuple(storms)


def _silent_since(j: ClusterJudgement, now: float) -> float:
    """When a silent cluster crossed its threshold."""
    assert j.age is not None
    return now - j.age + j.threshold


def judge_fleet(tracks: Mapping[str, ClusterTrack], heard: Mapping[str, float | None],
                groups: Mapping[str, tuple[str, str]], now: float, settings: HealthSettings,
                observer_impaired: bool = False,
                ) -> tuple[dict[str, ClusterJudgement], tuple[Storm, ...]]:
    """Every cluster of ``heard`` (name -> since when the group could hear it) judged at
    ``now``, storm guard included. ``observer_impaired``: the judging lead knows it could
    not take reports lately (its API refused connections for want of room): no silence
    is evidence then, and no silent cluster is failed over (``EvictionsPaused``)."""
    judged = {name: judge_cluster(tracks.get(name), since, now, settings) for name, since in heard.items()}
    guarded, storms = storm_guard(judged, {n: g for n, g in groups.items() if n in judged}, now, settings)
    if not observer_impaired:
        return guarded, storms
    held = {name: ClusterJudgement(j.state, EVICTIONS_PAUSED, False, False, j.age, j.threshold, j.next_change)
            if j.state == ClusterState.SILENT and j.gone else j for name, j in guarded.items()}
    return held, storms


def component_ready(component: ComponentRecord | None, placed: int, kind: str) -> bool:
    """Whether a report's line for a component shows what was placed running: healthy, with
    the replicas its cluster wants ready (Deployments and StatefulSets: the placed count, or
    fewer where an autoscaler there wants fewer), or a Job that completed. Whether the agent
    applied the generation that placed them is the caller's to check."""
    if component is None:
        return False
    if component.completed:
        return True
    if not component.healthy:
        return False
    wanted = min(placed, component.desired_replicas)
    return kind not in ("Deployment", "StatefulSet") or component.ready_replicas >= wanted


def judge_workload(unready_since: float, now: float, deadline: float, cluster: ClusterJudgement,
                   component: ComponentRecord | None) -> tuple[WorkloadState, str | None, float | None]:
    """A placed component that is not ready on its cluster: ``Progressing`` within its
    deadline, ``NotRunning`` past it or at once on a Stalled cluster. Returns the state, the
    reason and when the state changes by time alone."""
    if cluster.state == ClusterState.STALLED and not cluster.gone:
        return WorkloadState.NOT_RUNNING, cluster.reason, None
    due = unready_since + deadline
    if now > due:
        reason = component.reason if component is not None and component.reason else PROGRESS_DEADLINE_EXCEEDED
        return WorkloadState.NOT_RUNNING, reason, None
    return WorkloadState.PROGRESSING, None, due


def earliest_change(times: Iterable[float | None]) -> float | None:
    """The earliest of ``times`` that is known."""
    return _earliest(*times)
