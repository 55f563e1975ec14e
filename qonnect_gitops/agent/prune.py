"""Prune guards, and deleting what left the branch.

An object is deleted only when all of these hold: it is in the inventory, it is no
longer on the branch, the live object still carries our ownership label and was
applied by the agent (its field manager ``qonnect-agent`` is among the object's
managers), it is not annotated ``qonnect.io/prune: disabled``, it is not in (or one of)
the protected namespaces, it is not a system object (``system:`` RBAC, ``cluster-admin``,
the API server's bootstrap RBAC) the agent's configuration does not list, and it is not
a protected kind (Namespace, PersistentVolumeClaim, PersistentVolume,
CustomResourceDefinition by default: agent configuration) unless a person annotated the
live object ``qonnect.io/prune: enabled`` (the agent never takes that annotation from a
branch, and does not count it when its own field manager set it). Pruning happens only
after a fully successful apply.

Deletes run in parallel (``workers`` at a time), namespaced objects first, then
cluster-scoped ones, Namespaces and CRDs last; every object retries on its own with
exponential backoff, so one slow or failing object does not hold the others up.

Guards that refuse a whole commit (nothing is applied, nothing deleted):
``EmptyDesiredSet`` (an empty branch without ``Qonnect-Allow-Empty: true``) and
``PruneLimitExceeded`` (removing more than a fraction of the applied commit's objects
without ``Qonnect-Prune-Limit`` trailers covering the count; ``Qonnect-Allow-Empty`` does
not lift it: it only says that an empty tree is intended). Only the applied commit's
objects count (``Inventory.settled``): removals an earlier commit ordered and an
unfinished pass's objects were decided already. And only what the agent would really
delete counts: the guard asks ``assess`` about the objects it would count, and leaves
out those the agent will not delete (protected kinds, ``prune: disabled``, no longer
ours, already gone) and those a person let go (``qonnect.io/prune: enabled`` set by
someone other than the agent): see "Clearing a stalled prune guard" in docs/agent.md.
"""

from __future__ import annotations

import functools
import random
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from qonnect_gitops.agent.config import DEFAULT_PROTECTED_KINDS, FIELD_MANAGER
from qonnect_gitops.agent.inventory import (
    Inventory,
    ObjKey,
    SystemName,
    describe,
    field_managers,
    identity,
    in_namespaces,
    owned,
    system_object,
)
from qonnect_gitops.agent.kube import Kube, KubeError, Resource
from qonnect_gitops.logs import get_logger
from qonnect_gitops.model.labels import DISABLED, ENABLED, PRUNE_ANNOTATION
from qonnect_gitops.model.status import RefusalReason

log = get_logger(__name__)

_LAST_KINDS = frozenset({("", "Namespace"), ("apiextensions.k8s.io", "CustomResourceDefinition")})
_NAMED = 3  # objects a PruneLimitExceeded message names


@dataclass(frozen=True)
class Allowance:
    """How many removals the leader's trailers order: the head's ``Qonnect-Prune-Limit``
    plus, when the agent missed commits, those of the commits since the applied one
    (the trailers of ``commits`` commits add up to ``limit``; None: no trailer at all)."""

    limit: int | None = None
    commits: int = 1

    def covers(self, removals: int) -> bool:
        return self.limit is not None and self.limit >= removals

    def describe(self) -> str:
        if self.limit is None:
            return "no Qonnect-Prune-Limit trailer"
        if self.commits == 1:
            return f"Qonnect-Prune-Limit: {self.limit} does not cover it"
        return (f"the Qonnect-Prune-Limit trailers of the {self.commits} commits since the applied one "
                f"add up to {self.limit}, which does not cover it")


@dataclass(frozen=True)
class GuardRefusal:
    reason: RefusalReason
    message: str
    removals: tuple[ObjKey, ...] = ()  # PruneLimitExceeded: the objects it counted


def check_guards(desired: set[ObjKey], inventory: Inventory, *, allow_empty: bool, allowance: Allowance,
                 fraction: float, spared: frozenset[ObjKey] = frozenset()) -> GuardRefusal | None:
    """The whole-commit guards; None when the commit may proceed.

    ``allow_empty`` (the ``Qonnect-Allow-Empty`` trailer) only lets an empty tree through;
    every tree, empty or not, is held to the prune fraction. Removals are counted among the
    applied commit's objects (``inventory.settled``), leaving out ``spared`` (what
    ``assess`` found the agent would not delete, or a person let go): they count neither
    as removals nor in the total."""
    if not desired and not allow_empty:
        return GuardRefusal(RefusalReason.EMPTY_DESIRED_SET,
                            f"the branch holds no objects and its commit lacks 'Qonnect-Allow-Empty: true'; "
                            f"refusing to prune the {len(inventory.objects)} objects applied")
    settled = inventory.settled
    leaving = removal_candidates(desired, settled)
    removed = [k for k in leaving if k not in spared]
    total = len(settled) - (len(leaving) - len(removed))
    if total and len(removed) > fraction * total and not allowance.covers(len(removed)):
        named = ", ".join(describe(k) for k in removed[:_NAMED]) + (", ..." if len(removed) > _NAMED else "")
        return GuardRefusal(RefusalReason.PRUNE_LIMIT_EXCEEDED,
                            f"this commit removes {len(removed)} of {total} objects (more than {fraction:.0%}) "
                            f"and has {allowance.describe()}: {named}; to let them go, annotate them "
                            f"{PRUNE_ANNOTATION}=enabled (or =disabled to keep them) or delete them "
                            "(docs/agent.md, 'Clearing a stalled prune guard')", tuple(removed))
    return None


def removal_candidates(desired: Iterable[ObjKey], objects: Iterable[ObjKey]) -> list[ObjKey]:
    """Entries of ``objects`` no longer on the branch (compared without API version)."""
    want = {identity(k) for k in desired}
    return sorted(k for k in objects if identity(k) not in want)


@dataclass
class PruneResult:
    deleted: list[ObjKey] = field(default_factory=list)
    kept: list[tuple[ObjKey, str]] = field(default_factory=list)  # left alone, with why
    refused: list[tuple[ObjKey, RefusalReason]] = field(default_factory=list)  # ProtectedKind/Namespace, SystemObject
    errors: list[tuple[ObjKey, str]] = field(default_factory=list)
    consented: list[ObjKey] = field(default_factory=list)  # of ``deleted``: a person annotated prune: enabled

    @property
    def protected(self) -> list[ObjKey]:
        """Objects refused as a protected kind."""
        return [k for k, why in self.refused if why == RefusalReason.PROTECTED_KIND]

    def remaining(self) -> set[ObjKey]:
        """What stays in the inventory: protected kinds (a person may allow them later) and
        failed ones, to retry and keep reporting. Objects in reserved namespaces leave it:
        nothing can ever make the agent delete them, nor system objects its configuration
        does not list."""
        return {k for k, why in self.refused if why == RefusalReason.PROTECTED_KIND} | {k for k, _ in self.errors}


@dataclass(frozen=True)
class PruneRules:
    """What the agent's configuration protects; nothing on a branch changes these."""

    protected_kinds: frozenset[tuple[str, str]] = DEFAULT_PROTECTED_KINDS
    protected_namespaces: frozenset[str] = frozenset()
    system_objects: frozenset[SystemName] = frozenset()  # system RBAC objects the agent may manage
    workers: int = 16
    attempts: int = 4  # per object, on top of the client's own retries
    backoff: float = 0.2


def prune(kube: Kube, candidates: Iterable[ObjKey], rules: PruneRules = PruneRules(), *,
          dry_run: bool = False) -> PruneResult:
    """Delete the candidates the rules allow; namespaced first, then cluster-scoped, Namespaces
    and CRDs last, each wave in parallel."""
    out = PruneResult()
    waves: dict[int, list[ObjKey]] = {}
    for key in sorted(set(candidates)):
        wave = 2 if (key[0], key[2]) in _LAST_KINDS else 1 if key[3] == "" else 0
        waves.setdefault(wave, []).append(key)
    with ThreadPoolExecutor(max(1, rules.workers), thread_name_prefix="prune") as pool:
        for wave in sorted(waves):
            listed = _list_live(kube, waves[wave])
            one = functools.partial(_prune_one, kube, rules=rules, dry_run=dry_run, listed=listed)
            for key, (verdict, detail) in zip(waves[wave], pool.map(one, waves[wave]), strict=True):
                if verdict == "deleted":
                    out.deleted.append(key)
                    if detail == _CONSENTED:
                        out.consented.append(key)
                elif verdict == "kept":
                    out.kept.append((key, detail))
                elif verdict == "error":
                    out.errors.append((key, detail))
                else:
                    out.refused.append((key, RefusalReason(verdict)))
    return out


def assess(kube: Kube, candidates: Iterable[ObjKey], rules: PruneRules) -> frozenset[ObjKey]:
    """The candidates a prune guard leaves out: those the agent would not delete (read live,
    decided exactly as ``prune`` decides) and those a person let go. One that could not be
    read counts (it may be deleted)."""
    keys = sorted(set(candidates))
    dry = prune(kube, keys, rules, dry_run=True)
    counted = (set(dry.deleted) - set(dry.consented)) | {k for k, _ in dry.errors}
    return frozenset(k for k in keys if k not in counted)


_LIST_ABOVE = 3  # more candidates than this of one kind in one namespace: one LIST instead of GETs


def _list_live(kube: Kube, keys: list[ObjKey]) -> dict[ObjKey, dict[str, Any] | None]:
    """The live objects of ``keys`` read with one LIST per kind and namespace where many share
    them (items of a list carry no apiVersion or kind, so both are filled in). Keys whose
    list failed are left out: they are read one by one."""
    groups: dict[tuple[str, str, str, str], list[ObjKey]] = {}
    for key in keys:
        groups.setdefault(key[:4], []).append(key)
    out: dict[ObjKey, dict[str, Any] | None] = {}
    for (group, version, kind, ns), members in groups.items():
        if len(members) <= _LIST_ABOVE:
            continue
        api_version = f"{group}/{version}" if group else version
        try:
            items = kube.list(kube.resource(api_version, kind), ns or None)
        except KubeError as exc:
            log.warning("prune_list_failed", kind=kind, namespace=ns, error=str(exc))
            continue
        by_name = {i["metadata"]["name"]: {**i, "apiVersion": api_version, "kind": kind} for i in items}
        for key in members:
            out[key] = by_name.get(key[4])
    return out


def _prune_one(kube: Kube, key: ObjKey, rules: PruneRules, dry_run: bool,
               listed: dict[ObjKey, dict[str, Any] | None]) -> tuple[str, str]:
    """One candidate: ("deleted" | "kept" | "error" | a RefusalReason value, detail)."""
    for why, holds in ((RefusalReason.PROTECTED_NAMESPACE, in_namespaces(key, rules.protected_namespaces)),
                       (RefusalReason.SYSTEM_OBJECT, system_object(key, None, rules.system_objects))):
        if holds:
            if not dry_run:
                log.warning("prune_refused", object=describe(key), reason=why)
            return why.value, ""
    last = ""
    for attempt in range(max(1, rules.attempts)):
        if attempt:
            time.sleep(rules.backoff * 2 ** (attempt - 1) * random.uniform(0.5, 1.0))
        try:
            # The listed copy serves the first attempt; a retry reads the object afresh.
            return _try_delete(kube, key, rules, dry_run, listed if attempt == 0 else {})
        except KubeError as exc:
            last = str(exc)
            if not exc.transient or exc.unanswered:  # no answer within the client's timeout: retrying cannot help now
                break
    log.warning("prune_failed", object=describe(key), error=last)
    return "error", last


def _try_delete(kube: Kube, key: ObjKey, rules: PruneRules, dry_run: bool,
                listed: dict[ObjKey, dict[str, Any] | None]) -> tuple[str, str]:
    group, version, kind, ns, name = key
    try:
        res = kube.resource(f"{group}/{version}" if group else version, kind)
    except KubeError as exc:
        if exc.not_found:
            return "kept", "kind no longer served"
        raise
    live = listed[key] if key in listed else kube.get(res, ns or None, name)
    if live is None:
        return "kept", "already gone"
    decision = _decide(key, live, rules)
    if decision in (RefusalReason.PROTECTED_KIND, RefusalReason.SYSTEM_OBJECT):
        if not dry_run:
            log.warning("prune_refused", object=describe(key), reason=decision)
        return RefusalReason(decision).value, ""
    if decision:
        if not dry_run:
            log.info("prune_skipped", object=describe(key), why=decision)
        return "kept", decision
    if not dry_run:
        gone = _delete(kube, res, live)
        if gone:
            return "kept", gone
        log.info("pruned", object=describe(key))
    return "deleted", _CONSENTED if let_go(live) else ""


_CONSENTED = "consented"


def let_go(live: dict[str, Any]) -> bool:
    """Whether a person (a field manager other than the agent: ``kubectl annotate``) set
    ``qonnect.io/prune: enabled`` on the live object."""
    annotation = ((live.get("metadata") or {}).get("annotations") or {}).get(PRUNE_ANNOTATION, "")
    return annotation == ENABLED and bool(
        field_managers(live, ("metadata", "annotations", PRUNE_ANNOTATION)) - {FIELD_MANAGER})


def _decide(key: ObjKey, live: dict[str, Any], rules: PruneRules) -> str:
    """'' to delete; otherwise why not (``RefusalReason.PROTECTED_KIND`` for a protected kind,
    ``RefusalReason.SYSTEM_OBJECT`` for the API server's own RBAC)."""
    if system_object(key, live, rules.system_objects):
        return RefusalReason.SYSTEM_OBJECT
    if not owned(live):
        return "no longer carries the ownership label"
    if FIELD_MANAGER not in field_managers(live):
        return f"not applied by the agent (no {FIELD_MANAGER} field manager): someone else owns it"
    annotation = ((live.get("metadata") or {}).get("annotations") or {}).get(PRUNE_ANNOTATION, "")
    if annotation == DISABLED:
        return f"annotated {PRUNE_ANNOTATION}: {DISABLED}"
    if (key[0], key[2]) in rules.protected_kinds and not let_go(live):
        return RefusalReason.PROTECTED_KIND
    return ""


def _delete(kube: Kube, res: Resource, live: dict[str, Any]) -> str:
    """Delete exactly the object that was read (UID precondition); '' when it was deleted,
    otherwise why it was not there to delete."""
    meta = live["metadata"]
    try:
        return "" if kube.delete(res, meta.get("namespace"), meta["name"], uid=meta.get("uid")) else "already gone"
    except KubeError as exc:
        if exc.status == 409:  # a new object took the name since the read: not ours to delete
            return "replaced by another object since it was read"
        raise
