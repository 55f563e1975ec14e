"""What the leader's ``Qonnect-Prune-Limit`` trailers order when the agent missed commits.

Each cluster commit's trailer counts what that commit removes from its parent. An agent
that was away (stalled, its API server down, restarted late) and comes back to a head
several commits past the one it applied sees the removals of all of them at once, while
the head's own trailer covers only its last step: a decision that emptied the cluster,
followed by one that filled it again, left the agent refusing the head for good
(issue 31: "whoever writes a decision that empties a cluster also writes what the next
one needs"). So the trailers of every commit on the branch between the applied commit
and the head add up, each step counting at most the files it really removed from its
parent (a trailer on a commit that removes nothing lends nothing).

The walk follows first parents from the head, at most ``MAX_WALK`` commits; when the
applied commit is not found (a rewritten branch, a cache without it) only the head's own
trailer counts, as before. The head's signature, where agents verify one, covers this
history: each commit names its parent.
"""

from __future__ import annotations

from pathlib import Path

import pygit2

from qonnect_gitops.agent.prune import Allowance
from qonnect_gitops.agent.source import SourceError, trailer_number
from qonnect_gitops.gitstore import trailers as tr
from qonnect_gitops.logs import get_logger

log = get_logger(__name__)

MAX_WALK = 1000


def allowance(cache: Path, head: str, head_limit: int | None, applied: str | None) -> Allowance:
    """The removals the trailers order from ``applied`` to ``head`` (see the module docstring)."""
    alone = Allowance(head_limit)
    if applied is None or applied == head:
        return alone
    try:
        repo = pygit2.Repository(str(cache))
        commit = repo[head].peel(pygit2.Commit)
        total, commits = head_limit or 0, 1
        for _ in range(MAX_WALK):
            if not commit.parents:
                break
            parent = commit.parents[0]
            if str(parent.id) == applied:
                return Allowance(total if total or head_limit is not None else None, commits)
            step = _step(parent)
            total, commits = total + step, commits + (step > 0)
            commit = parent
    except (KeyError, ValueError, pygit2.GitError) as exc:
        log.warning("prune_allowance_unreadable", head=head[:12], applied=applied[:12], error=str(exc))
        return alone
    log.info("prune_allowance_head_only", head=head[:12], applied=applied[:12],
             why=f"the applied commit is not among the head's last {MAX_WALK} first parents")
    return alone


def _step(commit: pygit2.Commit) -> int:
    """What one skipped commit's trailer orders: its limit, at most the files it removed."""
    found = dict(tr.parse_trailers(commit.message))
    try:
        limit = trailer_number(found, tr.PRUNE_LIMIT, str(commit.id))
    except SourceError:
        return 0
    if not limit or not commit.parents:
        return 0
    diff = commit.parents[0].tree.diff_to_tree(commit.tree)
    removed = sum(1 for delta in diff.deltas if delta.status == pygit2.enums.DeltaStatus.DELETED)
    return min(limit, removed)
