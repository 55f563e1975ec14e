"""The small records one planning cycle passes between its stages.

Every decision is carried by structured fields (enums, cluster indices, numbers); the
text a person reads is written from them at the very end (``explain.py``), so rewording
a message can never change a placement.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from qonnect_gitops.model.goals import Component
from qonnect_gitops.model.plan import GoalKind, MoveReason
from qonnect_gitops.placement.capacity import Take


class Rule(Enum):
    """Why a cluster took replicas of a component."""

    KEPT = "kept"  # they already ran there
    BEST = "best"  # the best-scoring cluster with room
    OFFLOADED = "offloaded"  # the preferred cluster was full: nearest with room
    AVAILABILITY = "availability"  # an extra cluster for minClusters
    SPREAD = "spread"  # one of the clusters of an even spread
    BURST = "burst"  # overflow of the primary cluster, nearest first
    SEARCH = "search"  # the local search found it better than the greedy choice
    MADE_ROOM = "made-room"  # placed after moving other fresh components away
    COLOCATED = "colocated"  # beside the components it is colocated with
    NEAREST = "nearest"  # serves a region from nearby (``serve: nearest``)


# Replicas the offloading and bursting rules placed: the local search only moves them
# back to their preferred cluster.
RULE_PLACED = frozenset({Rule.OFFLOADED, Rule.BURST})


@dataclass(frozen=True, slots=True)
class Why:
    rule: Rule
    origin: int | None = None  # OFFLOADED: the preferred cluster; BURST: the primary one
    ordinal: int = 0  # AVAILABILITY / SPREAD: the how-manieth cluster
    of: int = 0  # AVAILABILITY / SPREAD: out of how many
    too_small: bool = False  # OFFLOADED: the preferred cluster's nodes cannot hold a replica
    region: int = 0  # NEAREST: the region served (index into the fleet's regions)


class Run(Enum):
    """Whether replicas placed on a live cluster run there (issue 31: what runs is the truth)."""

    RUNNING = "running"  # observed Running with as many ready, or not observed
    PENDING = "pending"  # placed, not running yet (Progressing, or sent to a cordoned cluster)
    NOT_RUNNING = "not-running"  # observed NotRunning: replaced where room exists


class Blocked(Enum):
    """Why a distribution left replicas unplaced."""

    NO_CLUSTER = "no-cluster"  # no cluster passes the filters
    NO_ROOM = "no-room"  # clusters pass, none has room left
    OFFLOADING_OFF = "offloading-off"  # the preferred cluster is full and offloading is off
    BURSTING_OFF = "bursting-off"  # overflow, and bursting is off


class CauseKind(Enum):
    """Why replicas leave a cluster, or are added."""

    NEW = "new"
    AGAIN = "again"  # placed from scratch again: none of its replicas ran (unplaced, lost)
    SCALE_UP = "scale-up"
    SCALE_DOWN = "scale-down"
    FAILOVER = "failover"  # the cluster failed
    UNDECLARED = "undeclared"  # the cluster left the goals
    GOALS = "goals"  # a goal filter no longer allows the cluster
    DECLARED_LATENCY = "declared-latency"  # the declared latency breaks the envelope
    MEASURED_LATENCY = "measured-latency"  # a sustained measured breach, past the cooldown
    CAPACITY = "capacity"  # no longer fits on the cluster's nodes at today's size
    AVAILABILITY = "availability"  # moved to use minClusters clusters
    SPREAD = "spread"  # moved to even the spread
    NEAREST = "nearest"  # moved so a region is served from nearby
    COLOCATION = "colocation"  # follows the components it is colocated with
    DAEMONSET = "daemonset"  # a DaemonSet runs one per cluster
    NOT_RUNNING = "not-running"  # placed there, observed not running (reason: the workload's)
    CORDONED = "cordoned"  # the cluster is cordoned: drains there go on, nothing new goes there
    AWAITING = "awaiting"  # replaced already: drains until the replacement runs
    IMPROVES = "improves"  # rescheduling: the objective improves past the threshold
    GONE = "gone"  # the component left the goals
    COMPLETED = "completed"  # a Job that completed


@dataclass(frozen=True, slots=True)
class Cause:
    kind: CauseKind
    cluster: int | None = None  # the cluster concerned
    filter: str | None = None  # GOALS / CAPACITY: the filter (plugin name) that failed
    gain: float = 0.0  # IMPROVES: relative gain
    threshold: float = 0.0  # IMPROVES: minImprovement
    count: int = 0  # SCALE_UP / SCALE_DOWN: the new replica count
    region: int = 0  # NEAREST: the region served (index into the fleet's regions)
    note: str | None = None  # NOT_RUNNING: the workload's reason (CamelCase), if it gave one
    budget: int = 0  # IMPROVES: replicas of the move left for later cycles (disruption budget)


@dataclass(slots=True)
class PendingMove:
    """Replicas moving from a cluster (None: new) to a cluster (None: removed or unplaced)."""

    source: int | None
    target: int | None
    replicas: int
    reason: MoveReason
    cause: Cause
    source_name: str | None = None  # a source cluster no longer declared


@dataclass(slots=True)
class Drain:
    """Make before break: replicas that keep running where they were until a later plan."""

    replicas: int
    cause: Cause
    unreplaced: bool = False  # no replacement could be placed: they keep the service up


class KeepKind(Enum):
    COOLDOWN = "cooldown"
    NOT_MOVABLE = "not-movable"  # StatefulSet (without allowStateful) or Job
    NO_GAIN = "no-gain"  # the best alternative does not clear minImprovement
    NO_GAIN_BOUND = "no-gain-bound"  # no alternative could, even at its best
    NO_BETTER = "no-better"  # no alternative places every replica
    BUDGET_SPREAD = "budget-spread"  # a move within the budget would break the spread
    BUDGET_STALL = "budget-stall"  # the budget would leave the move half done, gaining too little to finish


@dataclass(frozen=True, slots=True)
class Keep:
    """Why a running component stays as it is."""

    kind: KeepKind
    until: float | None = None  # COOLDOWN: when it ends (Unix time)
    gain: float = 0.0  # NO_GAIN: the best alternative's gain
    threshold: float = 0.0
    budget: int = 0  # BUDGET_STALL: the disruption budget (replicas per cycle)


class ShortfallKind(Enum):
    UNPLACED = "unplaced"  # replicas fit nowhere
    WAITING = "waiting"  # a StatefulSet waits on its failed cluster
    MEASURED_BREACH = "measured-breach"  # kept on a breaching cluster within the cooldown
    NOT_MOVABLE = "not-movable"  # a breach rescheduling may not repair (StatefulSet, Job)
    NOT_RUNNING = "not-running"  # a StatefulSet placed where it does not run: it waits there
    KEPT = "kept"  # kept (waiting, cordoned) on a cluster another of its filters rules out
    NEAREST_KEPT = "nearest-kept"  # one replica kept nearest a region no allowed cluster serves
    UNREPLACED = "unreplaced"  # kept running where goals exclude it: no replacement fits
    TOO_FEW_REPLICAS = "too-few-replicas"  # fewer replicas than minClusters
    TOO_FEW_CLUSTERS = "too-few-clusters"  # not enough allowed clusters with room
    UNEVEN = "uneven"  # spread: capacity does not allow an even spread
    MAX_REPLICAS = "max-replicas"  # traffic needs more replicas than maxReplicas
    UNSERVED = "unserved"  # serve: nearest: no replica within the envelope of a region
    NOT_COLOCATED = "not-colocated"  # colocateWith: replicas on clusters without the anchors


@dataclass(frozen=True, slots=True)
class Census:
    """Why no more clusters take a component: per filter (in order) how many clusters it
    ruled out, then how many passed every filter but had no room."""

    excluded: tuple[tuple[str, int], ...]
    full: int
    unused: int  # passed every filter and had room, but a rule kept them out
    goal: GoalKind  # the goal that ruled out the last candidates


@dataclass(frozen=True, slots=True)
class Shortfall:
    """A hard goal this cycle's placement of a component does not meet, and why."""

    goal: GoalKind
    kind: ShortfallKind
    replicas: int = 0
    cluster: int | None = None
    census: Census | None = None
    blocked: Blocked | None = None
    preferred: int | None = None
    until: float | None = None
    wanted: int = 0  # clusters / replicas asked for
    have: int = 0  # clusters / replicas achieved
    rps: float = 0.0
    filter: str | None = None
    region: int = 0  # UNSERVED: the region (index into the fleet's regions)
    max_ms: float = 0.0  # UNSERVED: its envelope
    cause: Cause | None = None  # UNREPLACED: why the replicas leave their cluster


@dataclass(slots=True)
class Work:
    """One component's decision in progress."""

    component: Component
    key: str
    replicas: int  # desired this cycle
    scaled: bool  # replicas decided by qos.scaling
    current: dict[int, int]  # replicas running now, per declared cluster
    undeclared: dict[str, int] = field(default_factory=dict)  # on clusters no longer declared
    # The previous plan's draining replicas that still run on while the replicas running
    # elsewhere are fewer than wanted (their replacement does not run yet), per cluster.
    drained: dict[int, int] = field(default_factory=dict)
    # Of those, the ones on clusters that failed or left the goals (by name): gone.
    lost: dict[str, int] = field(default_factory=dict)
    # Clusters of the placement in force where its replicas do not run (observed
    # NotRunning), with the workload's or the cluster's reason.
    stalled: dict[int, str | None] = field(default_factory=dict)
    target: dict[int, int] = field(default_factory=dict)
    why: dict[int, Why] = field(default_factory=dict)
    drains: dict[int, Drain] = field(default_factory=dict)
    moves: list[PendingMove] = field(default_factory=list)
    takes: list[Take] = field(default_factory=list)  # capacity consumed by new replicas
    unplaced: int = 0
    blocked: Blocked | None = None
    census: Census | None = None
    preferred: int | None = None  # the best cluster ignoring room, when last placed
    keep: Keep | None = None  # kept as it was, and why
    shortfalls: list[Shortfall] = field(default_factory=list)
    touched: bool = False  # decided this cycle (not kept on the short path)
    seen: bool = False  # placed by an earlier plan (it has a request or a last move there)
    budget_limited: bool = False  # rescheduling moved less than it wanted (disruption budget)

    @property
    def fresh(self) -> bool:
        """Nothing of it runs or drains: placed from scratch."""
        return not self.current and not self.undeclared and not self.drained and not self.lost
