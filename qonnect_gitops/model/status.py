"""The status vocabulary agent and lead share (in the spirit of Flux's conditions).

A sync is ``Ready`` (the cluster matches its branch), ``Reconciling`` (work in
progress) or ``Stalled`` (it cannot progress without help), always with a
CamelCase ``reason`` machines switch on and a ``message`` humans read. The enums
below are the only spellings; they are ``str`` enums, so they compare equal to
(and serialise as) their values.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from qonnect_gitops.model.base import UserModel

MAX_MESSAGE = 1024
"""Longest message a status or refusal carries (longer ones are cut)."""


class SyncState(StrEnum):
    READY = "Ready"
    RECONCILING = "Reconciling"
    STALLED = "Stalled"


SYNC_STATES: tuple[SyncState, ...] = tuple(SyncState)


class RefusalReason(StrEnum):
    """Why an agent refused to apply what its branch says (invariant: never prune on error)."""

    STALE_GENERATION = "StaleGeneration"  # the branch is older than what was already applied
    EMPTY_DESIRED_SET = "EmptyDesiredSet"  # the branch is empty: applying it would prune everything
    PRUNE_LIMIT_EXCEEDED = "PruneLimitExceeded"  # too large a share of objects would be removed at once
    BRANCH_UNREADABLE = "BranchUnreadable"  # the branch could not be fetched, parsed, or is over a limit
    OWNERSHIP_CONFLICT = "OwnershipConflict"  # a live object the agent did not create, and no opt-in
    INVALID_MANIFEST = "InvalidManifest"  # the API server rejected an object
    PROTECTED_KIND = "ProtectedKind"  # a protected kind (Namespace, PVC, CRD...) left the branch
    PROTECTED_NAMESPACE = "ProtectedNamespace"  # an object in (or of) a reserved namespace
    DUPLICATE_OBJECT = "DuplicateObject"  # the same object in two files of the branch
    SYSTEM_OBJECT = "SystemObject"  # the cluster's own RBAC (system:*, cluster-admin), not allowed by the agent
    UNSIGNED_COMMIT = "UnsignedCommit"  # the head commit carries no signature (agent.verify)
    UNTRUSTED_SIGNER = "UntrustedSigner"  # signed, but not validly by a key the agent trusts


class SyncReason(StrEnum):
    """The ``reason`` of a sync state. Refusals that stop a whole commit use the refusal's name."""

    RECONCILIATION_SUCCEEDED = "ReconciliationSucceeded"
    PROGRESSING = "Progressing"
    DRIFT_DETECTED = "DriftDetected"
    HEALTH_CHECK_FAILED = "HealthCheckFailed"
    SOURCE_UNAVAILABLE = "SourceUnavailable"
    API_UNAVAILABLE = "ApiUnavailable"
    INVENTORY_UNREADABLE = "InventoryUnreadable"
    APPLY_FAILED = "ApplyFailed"
    PRUNE_FAILED = "PruneFailed"
    STALE_GENERATION = "StaleGeneration"
    EMPTY_DESIRED_SET = "EmptyDesiredSet"
    PRUNE_LIMIT_EXCEEDED = "PruneLimitExceeded"
    BRANCH_UNREADABLE = "BranchUnreadable"
    PROTECTED_NAMESPACE = "ProtectedNamespace"
    DUPLICATE_OBJECT = "DuplicateObject"
    SYSTEM_OBJECT = "SystemObject"
    UNSIGNED_COMMIT = "UnsignedCommit"
    UNTRUSTED_SIGNER = "UntrustedSigner"


class ClusterState(StrEnum):
    """A cluster as the leads judge it from its agent's reports (one health model, ``kb.health``).

    ``Ready``: reporting, applying its branch, a node ready. ``Degraded``: the agent reports
    but its API server is unreachable or no node is ready. ``Stalled``: the agent reports and
    refuses or fails to apply the commit it was sent. ``Silent``: no report within the
    cluster's own grace. Only ``Silent`` and a sustained ``Degraded`` fail a cluster over;
    ``Degraded`` and ``Stalled`` keep what runs there and get no new replicas."""

    READY = "Ready"
    DEGRADED = "Degraded"
    STALLED = "Stalled"
    SILENT = "Silent"


class WorkloadState(StrEnum):
    """One component on one cluster, judged on what its agent reports running.

    ``Running``: the agent applied the generation that placed it and its replicas are ready.
    ``Progressing``: placed, not (yet) applied or ready, within the component's progress
    deadline. ``NotRunning``: past the deadline, or its cluster refused the commit that
    carries it: it counts as not running and is replaced elsewhere where room exists."""

    RUNNING = "Running"
    PROGRESSING = "Progressing"
    NOT_RUNNING = "NotRunning"


class HealthReason(StrEnum):
    """Why an object (and so its component) has the health it has, where a machine must tell.

    Set beside the health status when the status alone does not say what to do about it."""

    UNSCHEDULABLE = "Unschedulable"  # pods stayed unschedulable (PodScheduled=False) past the grace
    NO_READY_ENDPOINTS = "NoReadyEndpoints"  # a Service whose backends run here selects no ready pod
    CALLER_ONLY = "CallerOnly"  # a Service rendered for callers only: its backends run on other clusters


class Action(StrEnum):
    """What the agent did with one object of its branch."""

    CREATED = "created"
    CONFIGURED = "configured"
    RECREATED = "recreated"
    UNCHANGED = "unchanged"
    SKIPPED = "skipped"  # annotated qonnect.io/reconcile: disabled
    DRIFTED = "drifted"  # report-only drift mode: differs, left alone
    MISSING = "missing"  # report-only drift mode: absent, not created
    FAILED = "failed"


CHANGED_ACTIONS = frozenset({Action.CREATED, Action.CONFIGURED, Action.RECREATED})
"""Actions that wrote to the cluster."""

REASON_CHARS = r"[A-Z][A-Za-z0-9]{0,63}"
"""A machine reason: CamelCase, at most 64 characters (anchor it to use it)."""
_REASON_PATTERN = rf"^{REASON_CHARS}$"


class SyncStatus(UserModel):
    """Where a sync stands, with a machine reason and a human message."""

    state: SyncState
    reason: str = Field(pattern=_REASON_PATTERN, description="CamelCase, e.g. `ReconciliationSucceeded`.")
    message: str = Field("", max_length=MAX_MESSAGE)


class Refusal(UserModel):
    """One thing the agent declined to do, and why."""

    reason: RefusalReason
    message: str = Field("", max_length=MAX_MESSAGE)
    commit: str | None = Field(None, pattern=r"^[0-9a-f]{7,64}$")
