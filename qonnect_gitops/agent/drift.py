"""Drift: objects in the cluster that no longer match the branch head already applied.

Drift is found by the same dry-run comparison a sync uses (``sync.Syncer`` with
``apply=False`` compares only). In ``heal`` mode a drift check re-applies what differs
(a correction); in ``report`` mode it writes nothing and says what differs and where.
A new head is always applied, in both modes: that is a change, not drift.
"""

from __future__ import annotations

from collections.abc import Sequence

from qonnect_gitops.agent.config import DriftMode
from qonnect_gitops.agent.sync import ObjectResult
from qonnect_gitops.model.status import CHANGED_ACTIONS, Action

DRIFT_ACTIONS = frozenset({Action.DRIFTED, Action.MISSING})


def should_apply(mode: DriftMode, head: str, applied_commit: str | None) -> bool:
    """Whether this pass writes: always for a new head, for the applied head only when healing."""
    return not (mode == "report" and head == applied_commit)


def drifted(results: Sequence[ObjectResult]) -> list[ObjectResult]:
    """Objects a compare-only pass found different from (or missing against) the branch."""
    return [r for r in results if r.action in DRIFT_ACTIONS]


def corrections(results: Sequence[ObjectResult], head: str, applied_commit: str | None,
                last_good: str | None) -> list[ObjectResult]:
    """Objects re-applied on a head that was already fully applied: drift that was healed.
    (Writes on a new head, or retries after a failed pass, are not drift.)"""
    if head != applied_commit or head != last_good:
        return []
    return [r for r in results if r.action in CHANGED_ACTIONS]


def describe(found: Sequence[ObjectResult], limit: int = 5) -> str:
    """``N objects differ from the branch (report-only): Kind/ns/name (fields); ...``"""
    shown = "; ".join(f"{r.name} ({r.message})" for r in found[:limit])
    more = f"; and {len(found) - limit} more" if len(found) > limit else ""
    return f"{len(found)} objects differ from the branch (report-only): {shown}{more}"
