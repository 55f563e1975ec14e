"""The Raft state machine: ``ReplicatedKB`` holds the Knowledge Base.

Each ``@command`` method is one log entry type and only forwards to a
``KnowledgeBase.apply_*`` transition, under a lock so HTTP threads read a consistent
state while the Raft thread applies. The methods keep their types for mypy
(``command``), so ``Commands`` and ``RaftNode.propose`` check each command's arguments
and result.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from pysyncobj import SyncObjConsumer, replicated

from qonnect_gitops.kb import (
    KBReader,
    KnowledgeBase,
    ReportEntry,
    ReportVerdict,
    WorkloadRecord,
)
from qonnect_gitops.kb.records import unpack_entries
from qonnect_gitops.lead.raft.collector import freeze_long_lived
from qonnect_gitops.lead.raft.dump import StateCapture
from qonnect_gitops.logs import get_logger

log = get_logger(__name__)

# The pysyncobj code versions that brought ``ReplicatedKB.plan_changes`` and
# ``ReplicatedKB.branch_heads``; ``CODE_VERSION``: the newest this code has.
PLAN_CHANGES_VERSION = 1
BRANCH_HEADS_VERSION = 2
CODE_VERSION = BRANCH_HEADS_VERSION

# Report batches a lead remembers having proposed until they are applied (a batch commits
# within a few hundred milliseconds; the batcher keeps one or two in flight).
MAX_PROPOSED_BATCHES = 64



_Method = TypeVar("_Method", bound=Callable[..., Any])

# pysyncobj's ``@replicated`` under names that keep each method's own signature for mypy
# (pysyncobj has no types). At run time a command also takes pysyncobj's ``callback=``
# and then returns nothing: only ``RaftNode.propose`` and ``Commands`` call one. They are
# pysyncobj's own decorator, not wrappers of it: it adds ``<name>_v<version>`` to the
# class body it is called from, found by its frame.
if TYPE_CHECKING:
    def command(method: _Method) -> _Method:
        """One log entry type (pysyncobj code version 0)."""

    def command_since(version: int) -> Callable[[_Method], _Method]:
        """A log entry type added at pysyncobj code ``version`` (see below)."""
else:
    command = replicated

    def command_since(version):
        return replicated(ver=version)


class ReplicatedKB(SyncObjConsumer):  # type: ignore[misc]
    """The Raft state machine holding a ``KnowledgeBase``. Its commands are proposed
    through ``Commands`` (lead/raft/commands.py), never called directly."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.RLock()
        self.kb = KnowledgeBase()
        # Called after each applied batch of reports with the verdict of each (on the
        # Raft thread: must be cheap); the leader's loop notices reports that change the
        # picture.
        self.report_listener: Callable[[list[ReportEntry], list[ReportVerdict]], None] | None = None
        # Batches this lead proposed and has not applied yet: their bytes -> the entries they
        # were encoded from (``ReportBatcher``), so this lead applies them without decoding
        # its own bytes again. Bounded: a batch whose callback never came is dropped.
        self._proposed: dict[bytes, list[ReportEntry]] = {}
        self._proposed_lock = threading.Lock()

    def reader(self) -> KBReader:
        """Typed, locked reads of this replica."""
        return KBReader(self.lock, lambda: self.kb)

    # The full dump stores plain dicts, not pickled objects of our classes, so a
    # dump stays loadable across code changes that keep the state format.
    def _serialize(self) -> StateCapture:
        # On the Raft thread, at every compaction: only a copy of the state's containers
        # (``KnowledgeBase.capture``, milliseconds at 10,000 clusters); the plain dict is
        # built and pickled from it on the dump's thread (``_BackgroundDump``). Built here
        # it held the Raft thread about a second at 10,000 clusters.
        with self.lock:
            return StateCapture(self.kb.capture())

    def _deserialize(self, data: dict[str, Any]) -> None:
        with self.lock:
            self.kb = KnowledgeBase.from_dict(data)
        freeze_long_lived()

    def proposing(self, packed: bytes, entries: list[ReportEntry]) -> None:
        """``packed`` (``pack_entries`` of ``entries``) is about to be proposed by this lead:
        when it is applied here, ``entries`` stand for it. Exact, because every entry's
        decoding is the entry itself (``encode_entry``; tests/lead/test_report_fast.py)."""
        with self._proposed_lock:
            while len(self._proposed) >= MAX_PROPOSED_BATCHES:
                del self._proposed[next(iter(self._proposed))]  # the oldest: its answer never came
            self._proposed[packed] = entries

    def settled(self, packed: bytes) -> None:
        """The proposal of ``packed`` was answered (applied or failed): forget it."""
        with self._proposed_lock:
            self._proposed.pop(packed, None)

    @command
    def reports(self, batch: bytes | list[ReportEntry]) -> list[ReportVerdict]:
        # ``batch``: the entries packed by ``ReportBatcher`` (MessagePack, decoded here in
        # C on every lead), or a list pickled by a lead from before that encoding. A batch
        # this lead proposed is applied from the entries it encoded (``proposing``).
        if isinstance(batch, bytes):
            with self._proposed_lock:
                entries = self._proposed.pop(batch, None)
            if entries is None:
                entries = unpack_entries(batch)
        else:
            entries = batch
        with self.lock:
            result = self.kb.apply_reports(entries)
        listener = self.report_listener
        if listener is not None:
            try:
                listener(entries, result)
            except Exception as exc:  # a listener bug must never stall the log
                log.error("report_listener_failed", error=exc)
        return result

    @command
    def goals(self, commit: str, inventory: dict[str, Any], heartbeat: dict[str, float],
              workloads: dict[str, WorkloadRecord], now: float) -> bool:
        with self.lock:
            changed = self.kb.apply_goals(commit, inventory, heartbeat, workloads, now)
        freeze_long_lived()
        return changed

    @command
    def dynamic(self, clusters: dict[str, dict[str, Any]], now: float) -> bool:
        with self.lock:
            return self.kb.apply_dynamic(clusters, now)

    @command
    def pool_token(self, cluster: str, digest: str, now: float) -> bool:
        with self.lock:
            return self.kb.apply_pool_token(cluster, digest, now)

    @command
    def goals_failure(self, commit: str, errors: list[str], now: float) -> bool:
        with self.lock:
            return self.kb.apply_goals_failure(commit, errors, now)

    @command
    def plan(self, placements: dict[str, dict[str, int]], reasons: dict[str, str], reason: str,
             goals_commit: str | None, term: int, now: float,
             unmet: list[dict[str, str]] | None = None, generation: int = 0) -> int:
        with self.lock:
            return self.kb.apply_plan(placements, reasons, reason, goals_commit, term, now, unmet or (),
                                      generation)

    @command
    def proposal_rejected(self, key: str, proposal_id: str, goals_commit: str, url: str,
                          now: float) -> bool:
        with self.lock:
            return self.kb.apply_proposal_rejected(key, proposal_id, goals_commit, url, now)

    @command
    def leader(self, node_id: str, term: int, now: float) -> bool:
        with self.lock:
            return self.kb.apply_leader(node_id, term, now)

    @command
    def member(self, node_id: str, raft: str, http: str, url: str, now: float) -> bool:
        with self.lock:
            return self.kb.apply_member(node_id, raft, http, url, now)

    @command
    def member_removed(self, raft: str, now: float) -> bool:
        with self.lock:
            return self.kb.apply_member_removed(raft, now)

    # A method added after the first release takes a new pysyncobj code version: the log
    # stores a method's number, numbered in the order of (version, name), so a new method
    # of version 0 would renumber the others and old journals would replay the wrong one.
    # A lead proposes it only once the group runs that version (``RaftNode.code_version``;
    # the leader raises it with ``RaftNode.enable_code_version``). The numbers are pinned
    # by tests/lead/test_raft_versions.py.
    @command_since(PLAN_CHANGES_VERSION)
    def plan_changes(self, base: int, changed: dict[str, dict[str, int]], removed: list[str],
                     reasons: dict[str, str], reason: str, goals_commit: str | None, term: int,
                     now: float, unmet: list[dict[str, str]] | None = None, generation: int = 0) -> int:
        with self.lock:
            return self.kb.apply_plan_changes(base, changed, removed, reasons, reason, goals_commit,
                                              term, now, unmet or (), generation)

    @command_since(BRANCH_HEADS_VERSION)
    def branch_heads(self, changes: dict[str, str | None], term: int) -> bool:
        with self.lock:
            return self.kb.apply_branch_heads(changes, term)
