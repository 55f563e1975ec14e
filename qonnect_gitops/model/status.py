"""The status vocabulary agent and lead share (in the spirit of Flux's conditions).

A sync is ``Ready`` (the cluster matches its branch), ``Reconciling`` (work in
progress) or ``Stalled`` (it cannot progress without help), always with a
CamelCase ``reason`` machines switch on and a ``message`` humans read.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from qonnect_gitops.model.base import UserModel

SyncState = Literal["Ready", "Reconciling", "Stalled"]
SYNC_STATES: tuple[SyncState, ...] = ("Ready", "Reconciling", "Stalled")

RefusalReason = Literal[
    "StaleGeneration",  # the branch is older than what was already applied
    "EmptyDesiredSet",  # the branch is empty: applying it would prune everything
    "PruneLimitExceeded",  # too large a share of objects would be removed at once
    "BranchUnreadable",  # the branch could not be fetched or parsed
    "OwnershipConflict",  # an object exists without our ownership label
    "InvalidManifest",  # the API server rejected an object
    "ProtectedKind",  # a Namespace, PVC or CRD left the branch; deleting it needs qonnect.io/prune: enabled
]
"""Why an agent refused to apply what its branch says (invariant: never prune on error)."""

_REASON_PATTERN = r"^[A-Z][A-Za-z0-9]{0,63}$"


class SyncStatus(UserModel):
    """Where a sync stands, with a machine reason and a human message."""

    state: SyncState
    reason: str = Field(pattern=_REASON_PATTERN, description="CamelCase, e.g. `ApplySucceeded`.")
    message: str = Field("", max_length=1024)


class Refusal(UserModel):
    """One thing the agent declined to do, and why."""

    reason: RefusalReason
    message: str = Field("", max_length=1024)
    commit: str | None = Field(None, pattern=r"^[0-9a-f]{7,64}$")
