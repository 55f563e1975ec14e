"""Typed errors of the Git store, so callers can tell "re-read and re-plan" from bugs."""

from __future__ import annotations

from collections.abc import Mapping


class GitStoreError(Exception):
    """Base class of every error the Git store raises on purpose."""


class RevisionNotFound(GitStoreError):
    """A revision (branch, ref, commit id) does not resolve to a commit in the repository."""


class InvalidPath(GitStoreError, ValueError):
    """A file path handed to the tree builder is not a clean relative POSIX path."""


class StaleRef(GitStoreError):
    """A compare-and-swap ref update lost: the ref is not at the commit we last saw.

    Raised for local updates (another writer moved the ref or holds its lock) and for
    pushes the remote rejected. The caller re-reads (``Mirror.fetch``), re-plans and
    writes again; nothing was overwritten.

    ``refs`` maps each losing ref name to a human-readable reason.
    """

    def __init__(self, refs: Mapping[str, str], hint: str = "re-read the repository and re-plan") -> None:
        self.refs: dict[str, str] = dict(refs)
        detail = "; ".join(f"{name}: {why}" for name, why in sorted(self.refs.items()))
        super().__init__(f"stale ref update ({hint}): {detail}")


class FanOutStale(StaleRef):
    """The decision was published, but some cluster branches (or proposal records) lost a race.

    Usually a newer leader pushed its own fan-out in between. The decision stands
    (``plan_commit`` is on the remote); fetch and call ``GitStore.fan_out(plan_head)``
    to bring the cluster branches up to date.
    """

    def __init__(self, refs: Mapping[str, str], plan_commit: str | None) -> None:
        self.plan_commit = plan_commit
        super().__init__(refs, hint="decision published; fetch and fan out the current plan head")


class GenerationConflict(GitStoreError):
    """A decision's generation does not increase over its parent plan commit's generation."""


class RemoteError(GitStoreError):
    """A fetch or push failed for a reason other than a lost compare-and-swap (network, auth...)."""


class ProposalError(GitStoreError):
    """Base class of review-mode errors."""


class ProposalNotFound(ProposalError):
    """No open proposal has this id."""


class StaleProposal(ProposalError):
    """The plan branch moved since the proposal was based, so approving it would drop a decision."""


class PackedRefsCorrupt(GitStoreError):
    """A ``packed-refs`` file that git itself refuses to read (a record that is no
    ``<id> <name>`` line, a peeled line before any record, an unterminated last line).
    Nothing is written over it: a rewrite from a partial reading would lose refs."""
