"""Staged server-side apply, dry-run first, only what differs.

Stages (like Argo CD's sync waves by kind): CRDs, Namespaces and ClusterRoles first,
then we wait until the CRDs are Established and the Namespaces Active; then
everything else; admission webhooks last, so a webhook never gates the objects of
its own commit. Inside a stage objects are applied in parallel.

Per object: ``dryRun=All`` apply; if the result equals the live object (ignoring
write-time metadata) nothing is written; otherwise the object is applied for real
under field manager ``qonnect-agent`` with ``force=true``, and every other manager
whose fields shrank is recorded as a conflict taken over.

No adoption without consent: a live object is applied to only when the agent created
it (its field manager is among the object's managers, or the inventory lists it and it
carries the ownership label) or the branch's manifest opts in with
``qonnect.io/adopt: enabled``; otherwise it fails with ``OwnershipConflict`` and is
left untouched. ``qonnect.io/prune: enabled`` is never taken from a branch. The
cluster's own RBAC (``system:`` names, ``cluster-admin``, what the API server bootstrapped)
is never applied to, adoption or not, unless the agent's configuration lists it.
"""

from __future__ import annotations

import copy
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from qonnect_gitops.agent import diff
from qonnect_gitops.agent.config import FIELD_MANAGER
from qonnect_gitops.agent.health import HEALTHY, health_of
from qonnect_gitops.agent.inventory import (
    ObjKey,
    SystemName,
    describe,
    field_managers,
    identity,
    in_namespaces,
    key_of,
    owned,
    system_object,
)
from qonnect_gitops.agent.kube import Kube, KubeError
from qonnect_gitops.logs import get_logger
from qonnect_gitops.model.labels import (
    ADOPT_ANNOTATION,
    DISABLED,
    ENABLED,
    PRUNE_ANNOTATION,
    RECONCILE_ANNOTATION,
    RECREATE_ANNOTATION,
)
from qonnect_gitops.model.status import CHANGED_ACTIONS, Action, RefusalReason

log = get_logger(__name__)

FIRST = frozenset({("apiextensions.k8s.io", "CustomResourceDefinition"), ("", "Namespace"),
                   ("rbac.authorization.k8s.io", "ClusterRole")})
LAST = frozenset({("admissionregistration.k8s.io", "MutatingWebhookConfiguration"),
                  ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration")})

CHANGED = CHANGED_ACTIONS
IMMUTABLE_FIELD, API_ERROR, NOT_READY = "ImmutableField", "ApiError", "NotReady"


@dataclass
class ObjectResult:
    key: ObjKey
    action: Action
    message: str = ""
    reason: str = ""  # for failures: ImmutableField, InvalidManifest, OwnershipConflict, ApiError, NotReady
    took_over: list[str] = field(default_factory=list)
    live: dict[str, Any] | None = None
    wrote: bool = False  # a real (not dry-run) write was attempted: the object may exist now

    @property
    def name(self) -> str:
        return describe(self.key)


def stage_of(obj: dict[str, Any]) -> int:
    api = obj.get("apiVersion", "")
    kind = (api.split("/")[0] if "/" in api else "", obj.get("kind", ""))
    return 0 if kind in FIRST else 2 if kind in LAST else 1


def normalise_namespaces(kube: Kube, objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Copies with the namespace the API will use: ``default`` for a namespaced kind without
    one, none for a cluster-scoped kind (as kubectl does). Keys in the inventory then match
    what exists. Kinds not served yet (a CRD in the same commit) are left as written."""
    out = []
    for obj in objects:
        try:
            res = kube.resource(obj["apiVersion"], obj["kind"])
        except KubeError as exc:
            if not exc.not_found:
                raise
            out.append(obj)
            continue
        meta = obj.get("metadata") or {}
        if res.namespaced and not meta.get("namespace"):
            obj = {**obj, "metadata": {**meta, "namespace": "default"}}
        elif not res.namespaced and "namespace" in meta:
            obj = {**obj, "metadata": {k: v for k, v in meta.items() if k != "namespace"}}
        out.append(obj)
    return out


class Syncer:
    def __init__(self, kube: Kube, *, workers: int = 8, ready_timeout: float = 30.0,
                 reserved: frozenset[ObjKey] = frozenset(), protected_namespaces: frozenset[str] = frozenset(),
                 system_objects: frozenset[SystemName] = frozenset()) -> None:
        self.kube = kube
        self.reserved = reserved  # objects the agent itself owns (its inventory): never applied from Git
        # Checked again per object: a kind served only once its CRD is applied gets its namespace here.
        self.protected_namespaces = protected_namespaces
        self.system_objects = system_objects  # the cluster's own RBAC the configuration lets the agent manage
        self.workers = max(1, workers)
        self.ready_timeout = ready_timeout

    def sync(self, objects: list[dict[str, Any]], *, apply: bool = True,
             known: frozenset[tuple[str, str, str, str]] = frozenset()) -> list[ObjectResult]:
        """Apply (or, with ``apply=False``, only compare) every object, stage by stage.
        ``known``: identities the inventory lists (see the adoption rule above)."""
        results: list[ObjectResult] = []
        stages: dict[int, list[dict[str, Any]]] = {}
        for obj in objects:
            stages.setdefault(stage_of(obj), []).append(obj)
        with ThreadPoolExecutor(self.workers, thread_name_prefix="apply") as pool:
            for stage in sorted(stages):
                batch = list(pool.map(lambda o: self._one(o, apply, known), stages[stage]))
                if stage == 0 and apply:
                    self._wait_ready(batch)
                    if any(r.key[2] == "CustomResourceDefinition" for r in batch):
                        self.kube.forget_discovery()
                results += batch
        return results

    def _one(self, obj: dict[str, Any], apply: bool, known: frozenset[tuple[str, str, str, str]]) -> ObjectResult:
        obj = copy.deepcopy(obj)
        key = key_of(obj)
        try:
            res = self.kube.resource(obj["apiVersion"], obj["kind"])
        except KubeError as exc:
            reason = RefusalReason.INVALID_MANIFEST if exc.not_found else API_ERROR
            return ObjectResult(key, Action.FAILED, exc.message or str(exc), reason)
        meta = obj.setdefault("metadata", {})
        if res.namespaced and not meta.get("namespace"):
            meta["namespace"] = "default"
        elif not res.namespaced:
            meta.pop("namespace", None)
        key = key_of(obj)
        if key in self.reserved:
            return ObjectResult(key, Action.FAILED, "reserved for the agent's own inventory; rename the object",
                                RefusalReason.INVALID_MANIFEST)
        if in_namespaces(key, self.protected_namespaces):
            return ObjectResult(key, Action.FAILED, "in a reserved namespace; the agent never touches it",
                                RefusalReason.PROTECTED_NAMESPACE)
        if _annotation(obj, PRUNE_ANNOTATION) == ENABLED:
            # Protection from pruning is the agent's configuration: a branch cannot lift it.
            del meta["annotations"][PRUNE_ANNOTATION]
            if not meta["annotations"]:
                del meta["annotations"]
            log.warning("prune_annotation_ignored", object=describe(key), annotation=PRUNE_ANNOTATION)
        wrote = False
        try:
            live = self.kube.get(res, meta.get("namespace"), meta["name"])
            if system_object(key, live, self.system_objects):
                return ObjectResult(key, Action.FAILED, "part of the cluster's own RBAC; the agent never adopts, "
                                    "changes or deletes it unless its configuration allows it "
                                    "(--allow-system-object)", RefusalReason.SYSTEM_OBJECT, live=live)
            if live is not None and not _ours(key, live, obj, known):
                return ObjectResult(key, Action.FAILED, (
                    f"exists and was not created by the agent; annotate the manifest "
                    f"{ADOPT_ANNOTATION}: {ENABLED} in the goals to take it over"), RefusalReason.OWNERSHIP_CONFLICT,
                    live=live)
            if _annotation(obj, RECONCILE_ANNOTATION) == DISABLED or \
                    (live is not None and _annotation(live, RECONCILE_ANNOTATION) == DISABLED):
                return ObjectResult(key, Action.SKIPPED, f"annotated {RECONCILE_ANNOTATION}: {DISABLED}", live=live)
            try:
                dry = self.kube.apply(res, obj, dry_run=True)
            except KubeError as exc:
                if exc.immutable and live is not None:
                    wrote = apply
                    return self._immutable(res, obj, key, live, exc, apply)
                raise
            if not diff.differs(dry, live):
                return ObjectResult(key, Action.UNCHANGED, live=live)
            paths = ", ".join(diff.changed_paths(dry, live))
            took = diff.managers_losing_fields(live, dry)
            if not apply:
                return ObjectResult(key, Action.DRIFTED if live is not None else Action.MISSING, paths, took_over=took,
                                    live=live)
            wrote = True
            after = self.kube.apply(res, obj)
            action = Action.CREATED if live is None else Action.CONFIGURED
            if took:
                log.warning("conflict_taken_over", object=describe(key), managers=",".join(took))
            log.info("applied", object=describe(key), action=action, changed=paths)
            return ObjectResult(key, action, paths, took_over=took, live=after)
        except KubeError as exc:
            reason = API_ERROR if exc.transient else RefusalReason.INVALID_MANIFEST
            log.warning("apply_failed", object=describe(key), status=exc.status, error=exc.message)
            return ObjectResult(key, Action.FAILED, f"{exc.status} {exc.reason}: {exc.message}"[:1000], reason,
                                wrote=wrote)

    def _immutable(self, res: Any, obj: dict[str, Any], key: ObjKey, live: dict[str, Any], exc: KubeError,
                   apply: bool) -> ObjectResult:
        if _annotation(obj, RECREATE_ANNOTATION) != ENABLED:
            return ObjectResult(key, Action.FAILED, f"immutable field changed: {exc.message} "
                                f"(annotate {RECREATE_ANNOTATION}: {ENABLED} to allow delete and re-create)"[:1000],
                                IMMUTABLE_FIELD, live=live)
        if not apply:
            return ObjectResult(key, Action.DRIFTED, "immutable field changed; would re-create", live=live)
        meta = live["metadata"]
        self.kube.delete(res, meta.get("namespace"), meta["name"], uid=meta.get("uid"), propagation="Foreground")
        deadline = time.monotonic() + self.ready_timeout
        while self.kube.get(res, meta.get("namespace"), meta["name"]) is not None:
            if time.monotonic() > deadline:
                return ObjectResult(key, Action.FAILED, "deleted for re-create but still present", API_ERROR)
            time.sleep(0.1)
        after = self.kube.apply(res, obj)
        log.info("recreated", object=describe(key))
        return ObjectResult(key, Action.RECREATED, "immutable field changed", live=after)

    def _wait_ready(self, batch: list[ObjectResult]) -> None:
        """CRDs Established and Namespaces Active before the next stage."""
        deadline = time.monotonic() + self.ready_timeout
        for result in batch:
            if result.action == Action.FAILED or result.key[2] not in ("CustomResourceDefinition", "Namespace"):
                continue
            group, version, kind, ns, name = result.key
            res = self.kube.resource(f"{group}/{version}" if group else version, kind)
            while True:
                try:
                    live = self.kube.get(res, ns or None, name)
                except KubeError as exc:
                    if exc.unanswered:  # the API server is not answering: waiting on cannot help
                        result.action, result.reason, result.message = Action.FAILED, API_ERROR, str(exc)
                        break
                    live = None
                    result.message = str(exc)
                if live is not None and health_of(live)[0] == HEALTHY:
                    result.live = live
                    break
                if time.monotonic() > deadline:
                    result.action, result.reason = Action.FAILED, NOT_READY
                    result.message = f"{kind} {name} not ready within {self.ready_timeout:.0f}s"
                    break
                time.sleep(0.1)


def _ours(key: ObjKey, live: dict[str, Any], desired: dict[str, Any],
          known: frozenset[tuple[str, str, str, str]]) -> bool:
    """Whether the agent may apply to an existing object (see the module docstring)."""
    if FIELD_MANAGER in field_managers(live):
        return True
    if identity(key) in known and owned(live):
        return True
    return _annotation(desired, ADOPT_ANNOTATION) == ENABLED


def _annotation(obj: dict[str, Any], name: str) -> str:
    return str(((obj.get("metadata") or {}).get("annotations") or {}).get(name, ""))
