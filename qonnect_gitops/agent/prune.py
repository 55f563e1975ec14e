"""Prune guards, and deleting what left the branch.

An object is deleted only when all of these hold: it is in the inventory, it is
no longer on the branch, the live object still carries our ownership label, it is
not annotated ``qonnect.io/prune: disabled``, and it is not a protected kind
(Namespace, PersistentVolumeClaim, CustomResourceDefinition) unless annotated
``qonnect.io/prune: enabled``. Pruning happens only after a fully successful apply.

Guards that refuse a whole commit (nothing is applied, nothing deleted):
``EmptyDesiredSet`` (an empty branch without ``Qonnect-Allow-Empty: true``) and
``PruneLimitExceeded`` (removing more than a fraction of the inventory without a
``Qonnect-Prune-Limit`` trailer covering the count).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from qonnect_gitops.agent.config import PRUNE_ANNOTATION
from qonnect_gitops.agent.inventory import Inventory, ObjKey, describe, identity, owned
from qonnect_gitops.agent.kube import Kube, KubeError, Resource
from qonnect_gitops.logs import get_logger

log = get_logger(__name__)

PROTECTED_KINDS = frozenset({("", "Namespace"), ("", "PersistentVolumeClaim"),
                             ("apiextensions.k8s.io", "CustomResourceDefinition")})


@dataclass(frozen=True)
class GuardRefusal:
    reason: str
    message: str


def check_guards(desired: set[ObjKey], inventory: Inventory, *, allow_empty: bool,
                 prune_limit: int | None, fraction: float) -> GuardRefusal | None:
    """The whole-commit guards; None when the commit may proceed."""
    if not desired and not allow_empty:
        return GuardRefusal("EmptyDesiredSet",
                            f"the branch holds no objects and its commit lacks 'Qonnect-Allow-Empty: true'; "
                            f"refusing to prune the {len(inventory.objects)} objects applied")
    removed = removal_candidates(desired, inventory)
    total = len(inventory.objects)
    if total and len(removed) > fraction * total and not allow_empty \
            and (prune_limit is None or prune_limit < len(removed)):
        covered = "no Qonnect-Prune-Limit trailer" if prune_limit is None else \
            f"Qonnect-Prune-Limit: {prune_limit} does not cover it"
        return GuardRefusal("PruneLimitExceeded",
                            f"this commit removes {len(removed)} of {total} objects (more than "
                            f"{fraction:.0%}) and has {covered}")
    return None


def removal_candidates(desired: set[ObjKey], inventory: Inventory) -> list[ObjKey]:
    """Inventory entries no longer on the branch (compared without API version)."""
    want = {identity(k) for k in desired}
    return sorted(k for k in inventory.objects if identity(k) not in want)


@dataclass
class PruneResult:
    deleted: list[ObjKey] = field(default_factory=list)
    kept: list[tuple[ObjKey, str]] = field(default_factory=list)  # left alone, with why
    protected: list[ObjKey] = field(default_factory=list)  # refused: ProtectedKind
    errors: list[tuple[ObjKey, str]] = field(default_factory=list)

    def remaining(self) -> set[ObjKey]:
        """What stays in the inventory: refused and failed ones (to retry and keep reporting)."""
        return set(self.protected) | {k for k, _ in self.errors}


def prune(kube: Kube, candidates: list[ObjKey], *, dry_run: bool = False) -> PruneResult:
    out = PruneResult()
    # Delete namespaced objects before cluster-scoped ones (Namespaces, CRDs last).
    for key in sorted(candidates, key=lambda k: (k[3] == "", k)):
        group, version, kind, ns, name = key
        try:
            res = kube.resource(f"{group}/{version}" if group else version, kind)
        except KubeError as exc:
            if exc.not_found:
                out.kept.append((key, "kind no longer served"))
                continue
            out.errors.append((key, str(exc)))
            continue
        try:
            live = kube.get(res, ns or None, name)
            if live is None:
                out.kept.append((key, "already gone"))
                continue
            decision = _decide(key, live)
            if decision == "protected":
                out.protected.append(key)
                log.warning("prune_refused", object=describe(key), reason="ProtectedKind")
                continue
            if decision:
                out.kept.append((key, decision))
                log.info("prune_skipped", object=describe(key), why=decision)
                continue
            if not dry_run:
                _delete(kube, res, live)
            out.deleted.append(key)
            log.info("pruned", object=describe(key), dry_run=dry_run)
        except KubeError as exc:
            out.errors.append((key, str(exc)))
            log.warning("prune_failed", object=describe(key), error=str(exc))
    return out


def _decide(key: ObjKey, live: dict[str, Any]) -> str:
    """'' to delete; otherwise why not ('protected' for a refused protected kind)."""
    if not owned(live):
        return "no longer carries the ownership label"
    annotation = ((live.get("metadata") or {}).get("annotations") or {}).get(PRUNE_ANNOTATION, "")
    if annotation == "disabled":
        return "annotated qonnect.io/prune: disabled"
    if (key[0], key[2]) in PROTECTED_KINDS and annotation != "enabled":
        return "protected"
    return ""


def _delete(kube: Kube, res: Resource, live: dict[str, Any]) -> None:
    meta = live["metadata"]
    kube.delete(res, meta.get("namespace"), meta["name"], uid=meta.get("uid"))
