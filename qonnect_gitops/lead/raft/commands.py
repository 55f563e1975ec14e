"""Every write to the replicated Knowledge Base, with its arguments and result typed.

A lead writes to the KB only through ``Commands`` (``RaftNode.commands``): each method
proposes one ``ReplicatedKB`` command and returns once this lead applied it, with the
command's result, or raises ``ProposalError`` when it was not committed within its
timeout (it may still commit later: every command is idempotent, and callers treat a
timeout as "not known to be done"). ``submit_reports`` is the one command that does not
wait: the report batcher hands it a batch and a callback.

mypy checks each method's arguments and result against the command it proposes
(``RaftNode.propose`` is typed by the command's own signature: ``state.command``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from qonnect_gitops.kb import ReportVerdict, WorkloadRecord
from qonnect_gitops.lead.raft.errors import fail_name, succeeded

if TYPE_CHECKING:
    from qonnect_gitops.lead.raft.node import RaftNode

DEFAULT_TIMEOUT = 5.0


class Commands:
    """The KB's replicated writes through ``node`` (see the module docstring). Each takes
    ``timeout`` (seconds to wait for this lead to apply it; ``DEFAULT_TIMEOUT``)."""

    def __init__(self, node: RaftNode) -> None:
        self._node = node
        self._state = node.state

    # ------------------------------------------------------------------ the group

    def record_leader(self, node_id: str, term: int, now: float, *, timeout: float = DEFAULT_TIMEOUT) -> bool:
        """This lead leads in ``term`` since ``now`` (heartbeat ages count from it); False
        when the KB already holds that record or a newer term."""
        return self._node.propose(timeout, self._state.leader, node_id, term, now)

    def register_member(self, node_id: str, raft: str, http: str, url: str, now: float, *,
                        timeout: float = DEFAULT_TIMEOUT) -> bool:
        """A lead's id and addresses (its Raft address, its API's ``host:port`` and URL)."""
        return self._node.propose(timeout, self._state.member, node_id, raft, http, url, now)

    def forget_member(self, raft: str, now: float, *, timeout: float = DEFAULT_TIMEOUT) -> bool:
        """Drop the record of the lead at ``raft`` (it left the group)."""
        return self._node.propose(timeout, self._state.member_removed, raft, now)

    # ------------------------------------------------------------------ goals

    def record_goals(self, commit: str, inventory: dict[str, Any], heartbeat: dict[str, float],
                     workloads: dict[str, WorkloadRecord], now: float, *,
                     timeout: float = DEFAULT_TIMEOUT) -> bool:
        """Valid goals at ``commit``: the cluster inventory, the heartbeat settings and the
        declared workloads; True when anything changed."""
        return self._node.propose(timeout, self._state.goals, commit, inventory, heartbeat, workloads, now)

    def record_goals_failure(self, commit: str, errors: list[str], now: float, *,
                             timeout: float = DEFAULT_TIMEOUT) -> bool:
        """The goals at ``commit`` are invalid (``errors``: ``file:line:column`` texts)."""
        return self._node.propose(timeout, self._state.goals_failure, commit, errors, now)

    # ------------------------------------------------------------------ decisions

    def record_plan(self, placements: dict[str, dict[str, int]], reasons: dict[str, str], reason: str,
                    goals_commit: str | None, term: int, now: float,
                    unmet: list[dict[str, str]] | None = None, generation: int = 0, *,
                    timeout: float = DEFAULT_TIMEOUT) -> int:
        """A whole placement put in force by the leader of ``term`` (or an operator); the new
        generation, or -1 when a newer term's decision is in force. ``generation``: the plan
        commit's that carries it, where one does (0: none; an operator's plan)."""
        return self._node.propose(timeout, self._state.plan, placements, reasons, reason, goals_commit,
                                  term, now, unmet, generation)

    def record_plan_changes(self, base: int, changed: dict[str, dict[str, int]], removed: list[str],
                            reasons: dict[str, str], reason: str, goals_commit: str | None, term: int,
                            now: float, unmet: list[dict[str, str]] | None = None, generation: int = 0, *,
                            timeout: float = DEFAULT_TIMEOUT) -> int:
        """A decision as what it changed against generation ``base`` (code version 1 and
        later); the new generation, -1 for a stale term, ``PLAN_BASE_MOVED`` when ``base``
        is not the generation in force (then record it whole). ``generation``: as
        ``record_plan``'s."""
        return self._node.propose(timeout, self._state.plan_changes, base, changed, removed, reasons,
                                  reason, goals_commit, term, now, unmet, generation)

    def record_pool_clusters(self, clusters: dict[str, dict[str, Any]], now: float, *,
                             timeout: float = DEFAULT_TIMEOUT) -> bool:
        """The clusters the pools of the decision create (cloud bursting): their agents may
        report from then on."""
        return self._node.propose(timeout, self._state.dynamic, clusters, now)

    def issue_pool_token(self, cluster: str, digest: str, now: float, *,
                         timeout: float = DEFAULT_TIMEOUT) -> bool:
        """The hash of a pool cluster's agent token; False when ``cluster`` is no pool's."""
        return self._node.propose(timeout, self._state.pool_token, cluster, digest, now)

    def reject_proposal(self, key: str, proposal_id: str, goals_commit: str, url: str, now: float, *,
                        timeout: float = DEFAULT_TIMEOUT) -> bool:
        """A proposal closed without merging (``key``: what it decided on which goals), so
        the same decision is not proposed again."""
        return self._node.propose(timeout, self._state.proposal_rejected, key, proposal_id, goals_commit,
                                  url, now)

    def record_branch_heads(self, changes: dict[str, str | None], term: int, *,
                            timeout: float = DEFAULT_TIMEOUT) -> bool:
        """Cluster branch heads as the leader of ``term`` pushed or fetched them (None:
        withdrawn); code version 2 and later."""
        return self._node.propose(timeout, self._state.branch_heads, changes, term)

    # ------------------------------------------------------------------ reports

    def store_reports(self, batch: bytes, *, timeout: float = DEFAULT_TIMEOUT) -> list[ReportVerdict]:
        """A batch of reports (``kb.records.pack_entries``), waited for; the verdict of each."""
        return self._node.propose(timeout, self._state.reports, batch)

    def submit_reports(self, batch: bytes,
                       on_done: Callable[[list[ReportVerdict] | None, str | None], None]) -> None:
        """Propose a batch of reports without waiting: ``on_done(verdicts, None)`` once this
        lead applied it, ``on_done(None, reason)`` when it failed (on the Raft thread)."""

        def answered(result: Any, err: int) -> None:
            if succeeded(err):
                on_done(cast(list[ReportVerdict], result), None)
            else:
                on_done(None, fail_name(err))

        cast(Any, self._state.reports)(batch, callback=answered)
