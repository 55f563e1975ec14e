"""The observer (``qonnect observer``): reports a cluster that Flux or Argo CD syncs.

It never writes to the cluster. A pass reads, in order:

1. **fetch** the cluster branch into the local cache, as the agent does (read access to
   the branch only);
2. **syncer**: the Flux ``Kustomization`` or the Argo CD ``Application`` that applies the
   branch, and from its status the commit it applied last and where it stands
   (``flux_status``, ``argocd_status``);
3. **applied**: that commit, read from the cache: it must be the branch head or one of its
   ancestors (a syncer following another branch is refused as ``BranchUnreadable``); its
   ``Qonnect-Generation`` trailer is the generation reported as applied; then the health
   of its objects, read live as the agent reads them (kinds with a health check; other
   kinds are taken as present once the syncer applied the commit, so the observer needs no
   right to read them, Secrets included), rolled up per component.

The report is the agent's (``Agent.build_report``): applied commit and generation, sync
state, component health, nodes, latency and traffic. The sync state is the syncer's where
it failed or is still working, the health roll-up's otherwise (``_settle``), so the leads
judge a Flux or Argo CD cluster by the same rules as an agent's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import pygit2

from qonnect_gitops.agent.agent import Agent, SyncResult, _Pass, refusal
from qonnect_gitops.agent.config import AgentConfig
from qonnect_gitops.agent.health import CHECKS, HEALTHY, Health, health_of
from qonnect_gitops.agent.inventory import Inventory, ObjKey, key_of
from qonnect_gitops.agent.kube import Kube, KubeError, api_client_from
from qonnect_gitops.agent.source import Revision, SourceError, read_revision
from qonnect_gitops.agent.sync import normalise_namespaces
from qonnect_gitops.logs import get_logger
from qonnect_gitops.model.report import AppliedCommit
from qonnect_gitops.model.status import MAX_MESSAGE, RefusalReason, SyncReason, SyncState

log = get_logger(__name__)

_COMMIT_AT_END = re.compile(r"(?:^|[@:/])([0-9a-f]{40}|[0-9a-f]{64})$")


class SyncerKind(StrEnum):
    """What applies the branch in this cluster."""

    FLUX = "flux"
    ARGOCD = "argocd"


# (apiVersion, kind) of the object each syncer records its work in.
SYNCER_OBJECT = {
    SyncerKind.FLUX: ("kustomize.toolkit.fluxcd.io/v1", "Kustomization"),
    SyncerKind.ARGOCD: ("argoproj.io/v1alpha1", "Application"),
}


@dataclass(frozen=True)
class SyncerRef:
    """Which object to read: ``namespace/name`` of the syncer's kind, through ``kubeconfig``
    (None: the cluster's own; a central Argo CD keeps Applications in its own cluster)."""

    kind: SyncerKind
    namespace: str
    name: str
    kubeconfig: dict[str, Any] | str | None = None

    @classmethod
    def default(cls, kind: SyncerKind, cluster: str) -> SyncerRef:
        """What deploy/flux and deploy/argocd create: ``flux-system/qonnect``, ``argocd/qonnect-<cluster>``."""
        if kind is SyncerKind.FLUX:
            return cls(kind, "flux-system", "qonnect")
        return cls(kind, "argocd", f"qonnect-{cluster}")

    def describe(self) -> str:
        return f"{'Flux Kustomization' if self.kind is SyncerKind.FLUX else 'Argo CD Application'} " \
               f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class SyncerStatus:
    """What the syncer's object says: the commit applied last and the one tried now (either
    may be unknown), and the sync state in qonnect's vocabulary."""

    applied: str | None
    attempted: str | None
    state: SyncState
    reason: SyncReason
    message: str


def commit_of(revision: Any) -> str | None:
    """The commit id at the end of a syncer's revision: Flux writes ``<branch>@sha1:<id>``
    (``<branch>/<id>`` before Flux 2.0), Argo CD the bare id."""
    if not isinstance(revision, str):
        return None
    found = _COMMIT_AT_END.search(revision.strip())
    return found.group(1) if found else None


def _condition(obj: dict[str, Any], ctype: str) -> dict[str, Any]:
    for cond in (obj.get("status") or {}).get("conditions") or ():
        if isinstance(cond, dict) and cond.get("type") == ctype:
            return cond
    return {}


# Flux's failure reasons (Ready=False), as qonnect's sync reasons.
_FLUX_FAILURES = {
    "ArtifactFailed": SyncReason.SOURCE_UNAVAILABLE,
    "BuildFailed": SyncReason.BRANCH_UNREADABLE,
    "HealthCheckFailed": SyncReason.HEALTH_CHECK_FAILED,
    "PruneFailed": SyncReason.PRUNE_FAILED,
    "ReconciliationFailed": SyncReason.APPLY_FAILED,
}


def flux_status(obj: dict[str, Any]) -> SyncerStatus:
    """A Flux ``Kustomization``'s status (kustomize-controller's conditions ``Ready``,
    ``Reconciling``, ``Stalled``; ``lastAppliedRevision``, ``lastAttemptedRevision``)."""
    status = obj.get("status") or {}
    applied, attempted = commit_of(status.get("lastAppliedRevision")), commit_of(status.get("lastAttemptedRevision"))
    ready, stalled, reconciling = _condition(obj, "Ready"), _condition(obj, "Stalled"), _condition(obj, "Reconciling")
    said = f"Flux: {ready.get('reason', '')}: {ready.get('message', '')}".strip(": ")
    generation = (obj.get("metadata") or {}).get("generation")
    if (obj.get("spec") or {}).get("suspend"):
        said += " (suspended)"
    if stalled.get("status") == "True":
        reason = _FLUX_FAILURES.get(str(stalled.get("reason")), SyncReason.APPLY_FAILED)
        return SyncerStatus(applied, attempted, SyncState.STALLED, reason,
                            f"Flux: stalled: {stalled.get('reason', '')}: {stalled.get('message', '')}")
    if ready.get("status") == "False" and ready.get("reason") in _FLUX_FAILURES:
        return SyncerStatus(applied, attempted, SyncState.STALLED, _FLUX_FAILURES[ready["reason"]], said)
    if ready.get("status") == "True" and reconciling.get("status") != "True" \
            and (generation is None or status.get("observedGeneration") == generation):
        return SyncerStatus(applied, attempted, SyncState.READY, SyncReason.RECONCILIATION_SUCCEEDED, said)
    if ready.get("status") == "False" and reconciling.get("status") != "True":
        return SyncerStatus(applied, attempted, SyncState.STALLED, SyncReason.APPLY_FAILED, said)
    return SyncerStatus(applied, attempted, SyncState.RECONCILING, SyncReason.PROGRESSING,
                        said or "Flux has not reconciled it yet")


def argocd_status(obj: dict[str, Any]) -> SyncerStatus:
    """An Argo CD ``Application``'s status: ``sync`` (status, revision), ``operationState``
    (phase, message, syncResult.revision), ``history`` (what was deployed), ``conditions``.

    Applied: ``sync.revision`` while the app is ``Synced`` (live equals that commit), else
    the newest ``history`` entry, else a succeeded operation's revision."""
    status = obj.get("status") or {}
    sync = status.get("sync") or {}
    operation = status.get("operationState") or {}
    history = [h for h in status.get("history") or () if isinstance(h, dict)]
    attempted = commit_of((operation.get("syncResult") or {}).get("revision")) or commit_of(sync.get("revision"))
    if sync.get("status") == "Synced" and commit_of(sync.get("revision")):
        applied = commit_of(sync.get("revision"))
    elif history:
        applied = commit_of(history[-1].get("revision"))
    elif operation.get("phase") == "Succeeded":
        applied = commit_of((operation.get("syncResult") or {}).get("revision"))
    else:
        applied = None
    errors = [c for c in status.get("conditions") or ()
              if isinstance(c, dict) and str(c.get("type", "")).endswith("Error")]
    if operation.get("phase") in ("Failed", "Error"):
        return SyncerStatus(applied, attempted, SyncState.STALLED, SyncReason.APPLY_FAILED,
                            f"Argo CD: sync {operation['phase'].lower()}: {operation.get('message', '')}")
    if errors:
        first = errors[0]
        reason = SyncReason.SOURCE_UNAVAILABLE if first.get("type") == "ComparisonError" else SyncReason.APPLY_FAILED
        return SyncerStatus(applied, attempted, SyncState.STALLED, reason,
                            f"Argo CD: {first.get('type')}: {first.get('message', '')}")
    said = f"Argo CD: {sync.get('status', 'Unknown')}, health {(status.get('health') or {}).get('status', 'Unknown')}"
    if sync.get("status") == "Synced" and operation.get("phase") != "Running":
        return SyncerStatus(applied, attempted, SyncState.READY, SyncReason.RECONCILIATION_SUCCEEDED, said)
    return SyncerStatus(applied, attempted, SyncState.RECONCILING, SyncReason.PROGRESSING, said)


STATUS_OF = {SyncerKind.FLUX: flux_status, SyncerKind.ARGOCD: argocd_status}


class Observer(Agent):
    """An agent that only observes: the same report, the same loop (heartbeats, lead
    answers), other phases (the module docstring)."""

    def __init__(self, cfg: AgentConfig, syncer: SyncerRef, kube: Kube | None = None,
                 syncer_kube: Kube | None = None) -> None:
        super().__init__(cfg, kube)
        self.watched = syncer
        self.syncer_kube = syncer_kube or (Kube(api_client_from(syncer.kubeconfig), retries=cfg.api_retries,
                                                backoff=cfg.api_backoff, backoff_max=cfg.api_backoff_max)
                                           if syncer.kubeconfig is not None else self.kube)
        self.found: SyncerStatus | None = None  # what the last pass read from the syncer
        self._forbidden: set[tuple[str, str]] = set()  # kinds the observer may not read (logged once)
        self.phases = (self._fetch, self._read_syncer, self._read_applied)

    def _read_syncer(self, p: _Pass) -> SyncResult | None:
        """The syncer's object and what its status says."""
        what = self.watched.describe()
        api_version, kind = SYNCER_OBJECT[self.watched.kind]
        try:
            res = self.syncer_kube.resource(api_version, kind)
            obj = self.syncer_kube.get(res, self.watched.namespace, self.watched.name)
        except KubeError as exc:
            if exc.not_found:  # the kind is not served: the syncer is not installed
                return self._stall(p, SyncReason.APPLY_FAILED, f"{what}: {kind} ({api_version}) is not served "
                                   f"here; is {self.watched.kind.value} installed?", kind="apply")
            return self._stall(p, SyncReason.API_UNAVAILABLE, f"cannot read {what}: {exc}", kind="apply")
        if obj is None:
            return self._stall(p, SyncReason.APPLY_FAILED, f"{what} does not exist: nothing applies "
                               f"{self.cfg.branch} here (deploy/{self.watched.kind.value}/)", kind="apply")
        self.found = found = STATUS_OF[self.watched.kind](obj)
        p.result.commit = found.attempted or p.head
        return None

    def _read_applied(self, p: _Pass) -> SyncResult | None:
        """The applied commit from the cache, its generation, and the health of its objects."""
        found, result = self.found, p.result
        assert found is not None
        if found.applied is None:
            result.state, result.reason = found.state, found.reason
            result.message = f"{self.watched.describe()} has applied nothing yet; {found.message}"[:MAX_MESSAGE]
            return result
        try:
            rev = self._applied_revision(found.applied, p.head)
        except SourceError as exc:
            message = f"{self.watched.describe()} applied {found.applied[:12]}: {exc}"
            return self._stall(p, SyncReason.BRANCH_UNREADABLE, message,
                               [refusal(RefusalReason.BRANCH_UNREADABLE, message, found.applied)])
        p.rev = self.revision = rev
        result.applied = AppliedCommit(commit=rev.commit, generation=rev.generation or 0)
        result.generation, result.term = rev.generation, rev.term
        self._observe(result, Inventory(), rev)
        self._settle(result)
        # The syncer's failure or unfinished work wins over what the objects look like.
        if found.state is SyncState.STALLED or (found.state is SyncState.RECONCILING
                                                and result.state is SyncState.READY):
            result.state, result.reason, result.message = found.state, found.reason, found.message[:MAX_MESSAGE]
        return result

    def _applied_revision(self, commit: str, head: str | None) -> Revision:
        """The applied commit, which must be on our branch (the head or an ancestor)."""
        try:
            repo = pygit2.Repository(str(self.cache))
            on_branch = commit == head or (head is not None and commit in repo
                                           and repo.descendant_of(head, commit))
        except (pygit2.GitError, KeyError, ValueError) as exc:
            raise SourceError(f"the cache cannot be read: {exc}") from exc
        if not on_branch:
            why = ("the branch could not be fetched" if head is None else
                   f"it is not on {self.cfg.branch} (head {head[:12]}): the syncer follows another branch?")
            raise SourceError(f"cannot read it: {why}")
        if self.revision is not None and self.revision.commit == commit:
            return self.revision
        return read_revision(self.cache, commit)

    def _observe(self, result: SyncResult, inv: Inventory, rev: Revision | None) -> None:
        """Health of the applied commit's objects: kinds with a health check read live
        (listed per kind and namespace), the others taken as applied."""
        result.health, result.health_reasons = [], {}
        if rev is None:
            return
        try:
            objects = normalise_namespaces(self.kube, list(rev.objects))
        except KubeError as exc:
            log.warning("health_failed", error=str(exc))
            return
        applied = f"applied by {self.watched.kind.value}"
        out: list[tuple[dict[str, Any], Health]] = []
        checked: dict[tuple[str, str, str, str], list[tuple[ObjKey, dict[str, Any]]]] = {}
        for obj in objects:
            key = key_of(obj)
            if (key[0], key[2]) in CHECKS:
                checked.setdefault(key[:4], []).append((key, obj))
            else:
                out.append((obj, (HEALTHY, applied)))
        try:
            for (group, version, kind, ns), members in sorted(checked.items()):
                live = self._live(group, version, kind, ns)
                if live is None:  # not readable: not judged (what the syncer applied stands)
                    out += [(obj, (HEALTHY, applied)) for _, obj in members]
                    continue
                for key, obj in members:
                    found = live.get(key[4])
                    out.append((found, health_of(found)) if found is not None else (obj, health_of(None)))
            result.health, result.health_reasons = self._pod_verdicts(out)
        except KubeError as exc:  # as the agent: no health rather than a guess
            log.warning("health_failed", error=str(exc))
            result.health, result.health_reasons = [], {}

    def _live(self, group: str, version: str, kind: str, ns: str) -> dict[str, dict[str, Any]] | None:
        """The live objects of one kind in one namespace by name; None when the observer's
        RBAC does not allow reading them (logged once per kind)."""
        api_version = f"{group}/{version}" if group else version
        try:
            res = self.kube.resource(api_version, kind)
            items = self.kube.list(res, ns or None)
        except KubeError as exc:
            if exc.not_found:
                return {}
            if exc.status == 403:
                if (group, kind) not in self._forbidden:
                    self._forbidden.add((group, kind))
                    log.warning("observer_cannot_read", kind=f"{group}/{kind}".lstrip("/"), error=str(exc))
                return None
            raise
        return {i["metadata"]["name"]: {**i, "apiVersion": api_version, "kind": kind} for i in items}


__all__ = ["Observer", "SyncerKind", "SyncerRef", "SyncerStatus", "argocd_status", "commit_of",
           "flux_status"]
