"""Typed, consistent reads of a lead's replica of the Knowledge Base.

The Raft thread applies entries to the ``KnowledgeBase`` under a lock; every read
here takes the same lock, so a caller never sees half an entry applied. The
reconcile loop and the HTTP API read only through this class: they never hold the
live object, and what they get back is a copy or an immutable value.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from qonnect_gitops.kb.state import KnowledgeBase
from qonnect_gitops.model.observed import Observed
from qonnect_gitops.model.plan import CurrentPlacement

T = TypeVar("T")


@dataclass(frozen=True)
class ClusterAdmission:
    """What the report endpoint checks about a cluster before queueing its report."""

    declared: bool | None  # None: no goals loaded yet, any cluster may report
    grace_seconds: float
    interval_seconds: float | None


class KBReader:
    """Reads of one replica; ``lock`` is the state machine's, ``current`` returns the KB
    in force (it is replaced wholesale when a full dump is loaded)."""

    def __init__(self, lock: AbstractContextManager[Any], current: Callable[[], KnowledgeBase]) -> None:
        self._lock = lock
        self._current = current

    def read(self, fn: Callable[[KnowledgeBase], T]) -> T:
        """Run ``fn(kb)`` under the lock; ``fn`` must copy what it returns."""
        with self._lock:
            return fn(self._current())

    # ------------------------------------------------------------ the planner's inputs

    def snapshot(self, now: datetime, observer_impaired: bool = False) -> Observed:
        """The planner's frozen view of the fleet at ``now``: the inputs are copied under
        the lock, the view is built outside it (the Raft thread waits for the lock).
        ``observer_impaired``: this lead could not take reports lately (``KnowledgeBase.judge``)."""
        return self.read(lambda kb: kb.capture()).snapshot(now, observer_impaired)

    def current_placement(self) -> CurrentPlacement:
        """The placement in force as the planner's ``current`` input."""
        return self.read(lambda kb: kb.current_placement())

    def placements(self) -> dict[str, dict[str, int]]:
        """A copy of the placement in force."""
        return self.read(lambda kb: copy.deepcopy(kb.placements))

    def unmet(self) -> list[dict[str, str]]:
        """The goals the plan in force cannot meet, as recorded with it (a copy)."""
        return self.read(lambda kb: [dict(u) for u in kb.unmet])

    def is_empty(self) -> bool:
        """No placement was ever recorded (a group rebuilt from scratch)."""
        return self.read(lambda kb: kb.generation == 0 and not kb.placements)

    # ------------------------------------------------------------------ goals records

    def dynamic_clusters(self) -> dict[str, dict[str, Any]]:
        """The clusters cloud bursting created, as recorded (``KnowledgeBase.dynamic``)."""
        return self.read(lambda kb: {k: dict(v) for k, v in kb.dynamic.items()})

    def pool_token_owner(self, digest: str) -> str | None:
        """The pool cluster whose agent token hashes to ``digest`` (issued by the leader)."""
        return self.read(lambda kb: kb.pool_token_owner(digest))

    def last_good_commit(self) -> str | None:
        return self.read(lambda kb: str(kb.last_good["commit"]) if kb.last_good else None)

    def last_failed_commit(self) -> str | None:
        return self.read(lambda kb: str(kb.last_failed["commit"]) if kb.last_failed else None)

    def leader_term(self) -> int:
        return self.read(lambda kb: kb.leader_term)

    # ---------------------------------------------------------------------- timing

    def latency_window(self) -> float:
        """Seconds a latency breach must hold before the planner sees it."""
        return self.read(lambda kb: kb.latency_window)

    def next_health_change(self, now: float) -> float | None:
        """When a cluster's or a placed component's judgement next changes by time alone
        (``KnowledgeBase.next_health_change``); None when nothing would without a report."""
        return self.read(lambda kb: kb.capture()).next_health_change(now)

    # -------------------------------------------------------------------- reports

    def admission(self, cluster: str) -> ClusterAdmission:
        """Whether ``cluster`` may report now, and the heartbeat settings to answer with."""
        return self.read(lambda kb: ClusterAdmission(
            None if kb.last_good is None else cluster in kb.inventory or cluster in kb.dynamic,
            kb.grace_seconds, kb.interval_seconds))

    def cluster_generation(self, cluster: str) -> tuple[int, int, str | None]:
        """``(generation at which the cluster's desired state last changed, plan generation,
        the commit its branch holds on the Git server as recorded)``: what a report answer
        names, in one read (dict lookups under the lock)."""
        return self.read(lambda kb: (kb.cluster_generation(cluster), kb.generation,
                                     kb.branch_heads.get(cluster)))

    def branch_heads(self) -> dict[str, str]:
        """Every recorded branch head (a copy): what the leader compares its mirror with."""
        return self.read(lambda kb: dict(kb.branch_heads))
