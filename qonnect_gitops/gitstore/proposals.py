"""What a forge needs to show a proposal as a pull request.

The Git side of review mode lives in ``GitStore.propose/approve/close_proposal``; a
proposal is a branch, so any forge can show it. This module turns a proposal into the
title and body of its pull request; the forge clients (``qonnect_gitops.forge``) open it
and the leader (``lead.review``) keeps pull requests and proposals in step. Merging such
a pull request merges into the plan branch; the leader's next cycle follows it
(``GitStore.fan_out`` reads the decision trailers from the merged proposal commit).
"""

from __future__ import annotations

from dataclasses import dataclass

from qonnect_gitops.gitstore.store import GitStore, Proposal


@dataclass(frozen=True)
class PullRequestRequest:
    """Everything needed to open a pull request for a proposal."""

    proposal_id: str
    head_branch: str
    base_branch: str
    title: str
    body: str


def pull_request_for(store: GitStore, proposal: Proposal) -> PullRequestRequest:
    """The pull request that shows ``proposal`` against the plan branch: the decision
    summary as title, the proposal's markdown (placement table, moves, unplaced replicas,
    unmet goals) as body, and how to act on it."""
    heads = "refs/heads/"
    meta = proposal.meta
    footer = (
        f"\n\n---\nGeneration {meta.generation}, reason `{meta.reason}`, goals commit `{meta.source}`, "
        f"Raft term {meta.term}.\n\nMerge this pull request to put the placement in force (or run "
        f"`qonnect approve {proposal.id}`); close it without merging to reject it: qonnect then does not "
        f"propose the same placement again for the same goals commit."
    )
    return PullRequestRequest(
        proposal_id=proposal.id,
        head_branch=proposal.ref[len(heads):],
        base_branch=store.plan_ref[len(heads):],
        title=proposal.summary,
        body=proposal.description + footer,
    )
