"""Review mode seams: what a forge (GitHub, GitLab, Gitea) needs to open a pull request.

The Git side of review mode lives in ``GitStore.propose/approve/list_proposals``; a
proposal is a branch, so any forge can show it. This module turns a proposal into a
pull-request request and defines the small ``Forge`` protocol a forge client
implements. Merging such a pull request fast-forwards (or merges into) the plan
branch; the leader then calls ``GitStore.fan_out(plan_head)``, which reads the
decision trailers from the merged proposal commit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from qonnect_gitops.gitstore.store import GitStore, Proposal


@dataclass(frozen=True)
class PullRequestRequest:
    """Everything needed to open a pull request for a proposal."""

    proposal_id: str
    head_branch: str
    base_branch: str
    title: str
    body: str


class Forge(Protocol):
    """A forge API client, e.g. GitHub's REST API. Implementations live outside gitstore."""

    def open_pull_request(self, request: PullRequestRequest) -> str:
        """Open (or update) the pull request for ``request.head_branch``; return its URL."""
        ...

    def close_pull_request(self, proposal_id: str, note: str) -> None:
        """Close the pull request of a superseded proposal, leaving ``note`` as a comment."""
        ...


def pull_request_for(store: GitStore, proposal: Proposal) -> PullRequestRequest:
    """The pull request that shows ``proposal`` against the plan branch."""
    heads = "refs/heads/"
    meta = proposal.meta
    footer = (
        f"\n\n---\nGeneration {meta.generation}, reason `{meta.reason}`, goals commit `{meta.source}`, "
        f"Raft term {meta.term}. Approve with `qonnect approve {proposal.id}` or merge this pull request."
    )
    return PullRequestRequest(
        proposal_id=proposal.id,
        head_branch=proposal.ref[len(heads):],
        base_branch=store.plan_ref[len(heads):],
        title=proposal.summary,
        body=proposal.description + footer,
    )
