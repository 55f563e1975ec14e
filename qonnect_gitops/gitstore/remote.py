"""Remotes: the lead's bare mirror (fetch what it needs, push a cycle with compare-and-swap)
and the agent's narrow fetch of its own branch.

Refs in a mirror:

* ``refs/remotes/origin/<ref without refs/>`` is what we last saw on the remote
  (e.g. ``refs/remotes/origin/heads/qonnect/plan``), written only by fetch and by a
  push the remote accepted;
* ``refs/heads/...`` and ``refs/qonnect/closed/...`` are the local branches the
  ``GitStore`` writes. ``publish()`` pushes every one that differs from what we last
  saw, and the remote takes it only if its ref still holds the commit we last saw.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pygit2

from qonnect_gitops.gitstore import gitcli
from qonnect_gitops.gitstore.errors import FanOutStale, RemoteError, StaleRef
from qonnect_gitops.gitstore.lsrefs import LsRefsError, Unsupported, local_path, ls_ref, remote_refs
from qonnect_gitops.gitstore.signing import CommitSigner
from qonnect_gitops.gitstore.store import (
    CLOSED_NAMESPACE,
    DEFAULT_CLUSTER_PREFIX,
    DEFAULT_PLAN_BRANCH,
    DEFAULT_PROPOSAL_PREFIX,
    GitStore,
    Identity,
    RefChange,
    _ref_target,
    cas_update_refs,
)
from qonnect_gitops.gitstore.tree import read_tree_files
from qonnect_gitops.logs import get_logger, redact, redact_url

log = get_logger(__name__)

#: pygit2 credential objects (``UserPass``, ``Keypair``, ``KeypairFromAgent``...) or a
#: callable ``(url, username_from_url, allowed_types) -> credential``.
Credentials = Any

SEEN_PREFIX = "refs/remotes/origin/"
LOOSE_REFS_LIMIT = 512  # refs written loose before the mirror packs them
_ZERO = pygit2.Oid(hex="0" * 40)
# libgit2 refuses client side when the remote ref is not an ancestor of what we push.
_LOST_RACE = re.compile(r"non-fastforwardable|not present locally|fast-forward", re.IGNORECASE)


def _matches(pattern: str, ref: str) -> bool:
    """Whether ``ref`` is ``pattern``, or under it when it ends in ``*``."""
    return ref.startswith(pattern[:-1]) if pattern.endswith("*") else ref == pattern


def _source(refspec: str) -> str:
    """The remote side of a fetch refspec (``+<source>:<destination>``)."""
    return refspec.lstrip("+").split(":", 1)[0]


def _present(refspecs: Sequence[str], refs: Mapping[str, str]) -> list[str]:
    """The refspecs whose source is a pattern or one of ``refs``."""
    return [spec for spec in refspecs if _source(spec).endswith("*") or _source(spec) in refs]


def _destination(refspec: str) -> str:
    """The local side of a fetch refspec."""
    return refspec.split(":", 1)[1]


def _absolute(url: str) -> str:
    """``url``, or the absolute form of a relative local path: git runs inside the mirror
    (``git -C``), where a relative path would name another directory than libgit2 reads."""
    try:
        path = local_path(url)
    except LsRefsError:
        return url
    if path is None or "://" in url or path.is_absolute():
        return url
    return os.path.abspath(url)


def _seen_name(ref: str) -> str:
    return SEEN_PREFIX + ref[len("refs/"):]


def _local_name(seen: str) -> str:
    return "refs/" + seen[len(SEEN_PREFIX):]


@dataclass(frozen=True)
class FetchResult:
    """What a fetch moved over the wire."""

    commit: str | None
    received_bytes: int | None  # None: not counted (a fetch through the git command line)
    received_objects: int | None
    seconds: float


@dataclass(frozen=True)
class PublishResult:
    """The refs a ``publish()`` pushed, in the order they were pushed, and how many
    pushes it took (a refused atomic push counts)."""

    pushed: tuple[RefChange, ...]
    pushes: int
    seconds: float


class _PushCallbacks(pygit2.RemoteCallbacks):
    """Checks each ref against what we last saw before sending, and records rejections."""

    def __init__(self, credentials: Credentials, expected: dict[str, pygit2.Oid | None]) -> None:
        super().__init__(credentials=credentials)
        self.expected = expected
        self.rejected: dict[str, str] = {}
        self.accepted: set[str] = set()

    def push_negotiation(self, updates: list[Any]) -> None:
        # The remote's advertised value is what receive-pack will compare under its lock,
        # so refusing here when it is not what we last saw makes the push a true CAS,
        # deletions included (a plain push only checks fast-forward).
        moved: dict[str, str] = {}
        for update in updates:
            want = self.expected.get(update.dst_refname)
            have = None if update.src == _ZERO else update.src
            if have != want:
                moved[update.dst_refname] = (
                    f"remote holds {str(have)[:12] if have else 'nothing'}, "
                    f"we last saw {str(want)[:12] if want else 'nothing'}"
                )
        if moved:
            raise StaleRef(moved)

    def push_update_reference(self, refname: str, message: str | None) -> None:
        if message is None:
            self.accepted.add(refname)
        else:
            self.rejected[refname] = f"rejected by remote: {message}"


class Mirror:
    """A lead's local bare mirror of the goals repository at ``url``.

    It fetches only ``main``, the plan branch, the cluster branches, proposals and
    closed-proposal records. ``store`` writes decisions locally; ``publish()`` pushes
    them. A lost race anywhere raises ``StaleRef``: call ``fetch()`` and re-plan.
    """

    def __init__(
        self,
        path: str | Path,
        url: str,
        credentials: Credentials = None,
        *,
        main_branch: str = "main",
        plan_branch: str = DEFAULT_PLAN_BRANCH,
        cluster_prefix: str = DEFAULT_CLUSTER_PREFIX,
        proposal_prefix: str = DEFAULT_PROPOSAL_PREFIX,
        identity: Identity | None = None,
        gc: bool = True,
        signer: CommitSigner | None = None,
    ) -> None:
        self.path = Path(path)
        self.url = _absolute(url)
        self.credentials = credentials
        self.main_ref = f"refs/heads/{main_branch}"
        self.gc = gc
        if (self.path / "HEAD").exists():
            repo = pygit2.Repository(str(self.path))
        else:
            repo = pygit2.init_repository(str(self.path), bare=True)
        self.repo = repo
        self.store = GitStore(
            repo,
            plan_branch=plan_branch,
            cluster_prefix=cluster_prefix,
            proposal_prefix=proposal_prefix,
            identity=identity,
            signer=signer,
        )
        self._cluster_refs = f"refs/heads/{cluster_prefix}"  # every cluster branch starts so
        cluster_glob = f"{self._cluster_refs}*"
        proposal_glob = f"refs/heads/{proposal_prefix}*"
        self._local_patterns = [self.store.plan_ref, cluster_glob, proposal_glob, f"{CLOSED_NAMESPACE}*"]
        self._refspecs = [f"+{r}:{_seen_name(r)}" for r in [self.main_ref, *self._local_patterns]]
        self._configure_origin()
        # Everything but the cluster branches, which only the leader writes: what an idle
        # fetch asks the remote about (protocol v2 ls-refs) before deciding to fetch.
        self._watched = [self.main_ref, self.store.plan_ref, proposal_glob[:-1], CLOSED_NAMESPACE]
        # The watched refs as last seen, while every managed ref is known to equal the
        # remote's or to be in ``store.moved``; None until a full fetch shows it.
        self._watched_seen: dict[str, str] | None = None
        self._loose_refs = LOOSE_REFS_LIMIT  # unknown at start: pack after the first fetch
        self._atomic_pushes = True  # until the remote failed one that two pushes then made
        self._pushed_since_upkeep = False
        # Cluster name -> the commit its branch holds on the remote as last fetched or pushed
        # (``published_head``); rebuilt at each fetch, updated per accepted push.
        self._heads: dict[str, str] = {}

    def _configure_origin(self) -> None:
        # The configured fetch refspecs matter beyond fetch: libgit2 uses them after a
        # push to update what we last saw, and they keep the mirror from tracking refs
        # it has no use for.
        remotes = self.repo.remotes
        if "origin" in remotes.names():
            origin = remotes["origin"]
            if origin.url == self.url and list(origin.fetch_refspecs) == self._refspecs:
                return
            remotes.delete("origin")
        remotes.create("origin", self.url, self._refspecs[0])
        for spec in self._refspecs[1:]:
            remotes.add_fetch("origin", spec)

    @property
    def display_url(self) -> str:
        """The remote's URL as it may be shown (credentials hidden; see ``logs.redact_url``)."""
        return redact_url(self.url)

    # ---------------------------------------------------------------- fetch

    def fetch(self, full: bool = False) -> FetchResult:
        """Fetch what the lead needs and make the local branches equal to the remote's.

        Local writes that were never pushed are dropped: the next cycle recomputes them.

        After the first full fetch, a fetch first asks the remote (protocol v2 ``ls-refs``,
        hundreds of bytes; a local remote's refs are read directly, ``lsrefs.local_refs``)
        where ``main``, the plan branch and the proposals are; when none moved it fetches
        nothing and touches only the refs this mirror wrote, and when some moved it fetches
        those alone. Cluster branches are not asked about: only the leader writes them, a
        push that finds one moved fails its compare-and-swap, and after that (or
        ``distrust()``, or ``full=True``) the next fetch is a full one again.
        """
        start = time.perf_counter()
        quiet = not full and self._watched_seen is not None
        command_line = gitcli.available(self.credentials)
        # One ls-refs: whether the watched refs moved, and which named refs exist (the
        # command line fails on one the remote lacks, e.g. no plan branch yet).
        answer = self._ask_watched() if quiet or command_line else None
        refspecs: list[str] | None = None  # None: every configured refspec
        if quiet and answer is not None:
            if answer[0] == self._watched_seen:
                return self._unchanged(start, answer[1])
            refspecs = self._refspecs_for(answer[0])
        counted: tuple[int | None, int | None] = (None, None)  # bytes, objects: libgit2 counts them
        try:
            if command_line and answer is not None:
                wanted = refspecs or self._refspecs
                present = _present(wanted, answer[0])
                if present:
                    gitcli.fetch(self.path, "origin", present, self.credentials)
                # ``--prune`` covers patterns only: a named ref the remote no longer has is
                # forgotten here, as libgit2's prune does (main or the plan branch deleted).
                self._forget([_destination(spec) for spec in wanted if spec not in present])
            else:
                stats = self.repo.remotes["origin"].fetch(
                    refspecs,
                    callbacks=pygit2.RemoteCallbacks(credentials=self.credentials),
                    prune=pygit2.enums.FetchPrune.PRUNE,
                )
                counted = (stats.received_bytes, stats.received_objects)
        except (pygit2.GitError, gitcli.GitFailed) as exc:
            self._watched_seen = None
            raise RemoteError(f"fetch from {self.display_url} failed: {redact(str(exc))}") from exc
        self._sync_local()
        self._loose_refs += len(self._watched_seen or ()) + len(self.store.moved)
        self._pack_refs_if_many()
        result = FetchResult(
            commit=self.main_commit(),
            received_bytes=counted[0],
            received_objects=counted[1],
            seconds=time.perf_counter() - start,
        )
        log.info("mirror_fetched", url=self.display_url, bytes=result.received_bytes, objects=result.received_objects,
                 refspecs="all" if refspecs is None else len(refspecs), seconds=round(result.seconds, 3))
        return result

    def _forget(self, seen_refs: Sequence[str]) -> None:
        """Delete these refs of what we last saw on the remote (the remote lacks them)."""
        gone = {ref: (target, None) for ref in seen_refs if (target := _ref_target(self.repo, ref)) is not None}
        cas_update_refs(self.repo, gone, "qonnect: gone from remote")

    def _ask_watched(self) -> tuple[dict[str, str], int] | None:
        """Where the watched refs are on the remote (one ``ls-refs``, or a read of a local
        remote's refs) and the bytes it answered with; None: it could not say."""
        try:
            answer = remote_refs(self.url, self._watched, self.credentials)
        except LsRefsError as exc:
            log.debug("mirror_ls_refs_failed", url=self.display_url, error=str(exc))
            return None
        return {r: c for r, c in answer.refs.items() if self._is_watched(r)}, answer.received_bytes

    def _refspecs_for(self, watched: dict[str, str]) -> list[str] | None:
        """The configured refspecs covering the watched refs that moved (created, deleted or
        updated); None (all of them) when the plan branch moved (another leader decided: its
        cluster branches moved too) or main went away."""
        seen = self._watched_seen or {}
        moved = {ref for ref in set(watched) | set(seen) if watched.get(ref) != seen.get(ref)}
        if self.store.plan_ref in moved or self.main_ref not in watched:
            return None
        return [spec for spec in self._refspecs if any(_matches(_source(spec), ref) for ref in moved)]

    def _unchanged(self, start: float, received_bytes: int) -> FetchResult:
        """The result of a fetch when the watched refs did not move: drop what this mirror
        wrote and never published."""
        dropped = {ref: (_ref_target(self.repo, ref), _ref_target(self.repo, _seen_name(ref)))
                   for ref in sorted(self.store.moved)}
        dropped = {ref: pair for ref, pair in dropped.items() if pair[0] != pair[1]}
        cas_update_refs(self.repo, dropped, "qonnect: sync with remote")
        if dropped:
            self.store.fanned_out = None
        self.store.moved.clear()
        log.debug("mirror_unchanged", url=self.display_url, dropped=len(dropped))
        return FetchResult(self.main_commit(), received_bytes, 0, time.perf_counter() - start)

    def _is_watched(self, ref: str) -> bool:
        return ref in (self.main_ref, self.store.plan_ref) or any(
            ref.startswith(prefix) for prefix in self._watched[2:])

    def distrust(self) -> None:
        """Fetch fully next time (a new term: another leader may have written)."""
        self._watched_seen = None
        self._heads = {}

    def published_head(self, cluster: str) -> str | None:
        """The commit of ``cluster``'s branch on the remote as this mirror last fetched or
        pushed it; None when unknown. A dict lookup: cheap enough for every report answer."""
        return self._heads.get(cluster)

    def published_heads(self) -> dict[str, str]:
        """Every cluster branch head ``published_head`` knows (a copy)."""
        return dict(self._heads)

    def _managed(self, ref: str) -> bool:
        return any(_matches(pattern, ref) for pattern in self._local_patterns)

    def _refs(self) -> tuple[dict[str, pygit2.Oid], dict[str, pygit2.Oid]]:
        """What we last saw on the remote and the local branches, each managed ref by its
        local name, in one pass over the references."""
        seen: dict[str, pygit2.Oid] = {}
        local: dict[str, pygit2.Oid] = {}
        for ref in self.repo.references.iterator():
            name, target = ref.name, ref.target
            if not isinstance(target, pygit2.Oid):
                continue  # symbolic
            if name.startswith(SEEN_PREFIX):
                name = _local_name(name)
                if self._managed(name):
                    seen[name] = target
            elif self._managed(name):
                local[name] = target
        return seen, local

    def _sync_local(self) -> None:
        seen, local = self._refs()
        updates = {
            ref: (local.get(ref), seen.get(ref))
            for ref in set(seen) | set(local)
            if seen.get(ref) != local.get(ref)
        }
        cas_update_refs(self.repo, updates, "qonnect: sync with remote")
        if updates:
            self.store.fanned_out = None  # cluster branches may be where another writer left them
        self.store.moved.clear()
        prefix = self._cluster_refs
        self._heads = {ref[len(prefix):]: str(oid) for ref, oid in seen.items() if ref.startswith(prefix)}
        seen_main = _ref_target(self.repo, _seen_name(self.main_ref))
        self._watched_seen = {ref: str(oid) for ref, oid in seen.items() if self._is_watched(ref)}
        if seen_main is not None:
            self._watched_seen[self.main_ref] = str(seen_main)

    def main_commit(self) -> str | None:
        """The goals commit on the remote's main branch as of the last fetch."""
        target = _ref_target(self.repo, _seen_name(self.main_ref))
        return None if target is None else str(target)

    def read_goals(self, rev: str | None = None, prefix: str = "") -> dict[str, bytes]:
        """The goals files at ``rev`` (default: the fetched main commit)."""
        commit = rev or self.main_commit()
        if commit is None:
            raise RemoteError(f"{self.display_url} has no {self.main_ref} (fetch first?)")
        return read_tree_files(self.repo, commit, prefix)

    # ---------------------------------------------------------------- push

    def pending(self) -> list[RefChange]:
        """Local refs that differ from what we last saw on the remote (what ``publish`` pushes).

        Since a fetch made them equal, only the refs the store moved can differ: those are
        compared, not every branch of the fleet."""
        seen: Mapping[str, pygit2.Oid | None]
        local: Mapping[str, pygit2.Oid | None]
        if self._watched_seen is not None:
            refs = sorted(self.store.moved)
            seen = {ref: _ref_target(self.repo, _seen_name(ref)) for ref in refs}
            local = {ref: _ref_target(self.repo, ref) for ref in refs}
        else:
            seen, local = self._refs()
            refs = sorted(set(seen) | set(local))
        out = []
        for ref in refs:
            old, new = seen.get(ref), local.get(ref)
            if old != new:
                out.append(RefChange(ref, None if old is None else str(old), None if new is None else str(new)))
        return out

    def publish(self, between: Callable[[], None] | None = None, *, atomic: bool = True) -> PublishResult:
        """Push every pending ref, each only if the remote still holds what we last saw.

        One atomic push where it can (``atomic``, the ``git`` command line and a remote
        that takes ``--atomic``): the decision and its fan-out land together or not at
        all, and the push pays the remote's advertisement of every branch once. At
        10,000 branches that advertisement and the connectivity check are most of a
        push (about 0.3 s), so one changed cluster costs one of them instead of two.

        Otherwise, or when the atomic push was refused (a ref lost its compare-and-swap,
        or the remote does not do atomic pushes), two pushes: the plan branch and new
        proposals first (that is the decision; if it loses, nothing else was pushed),
        then all other refs (cluster branches, closed proposals). If the second push is
        interrupted, the remote plan branch is ahead of its cluster branches and the next
        cycle's ``fan_out`` completes them. ``between`` runs between the two pushes only
        (the lead's fence and fault-injection point).

        Raises ``StaleRef`` naming the refs that lost when the decision itself lost, and
        ``FanOutStale`` (a ``StaleRef``) when the decision was published but later refs
        lost; accepted refs stay accepted either way.
        """
        start = time.perf_counter()
        pending = self.pending()
        pushed: list[RefChange] = []
        pushes = 0
        if pending and atomic and self._atomic_pushes and gitcli.available(self.credentials):
            pushes += 1
            try:
                self.push(pending, atomic=True)
                pushed = pending
            except RemoteError as exc:
                # A remote without atomic pushes fails them whole; a network failure too,
                # which the pushes below then meet again and raise.
                log.info("mirror_atomic_push_failed", refs=len(pending), error=str(exc))
                pushes += self._publish_in_two(pending, between, pushed)
                self._atomic_pushes = False
                log.warning("mirror_atomic_push_unsupported", url=self.display_url)
            except StaleRef as exc:
                # Nothing landed. Two pushes tell a lost decision from a lost branch.
                log.info("mirror_atomic_push_rejected", refs=len(pending), stale=len(exc.refs))
                pushes += self._publish_in_two(pending, between, pushed)
        elif pending:
            pushes += self._publish_in_two(pending, between, pushed)
        self._loose_refs += 2 * len(pushed)  # the branch and what we last saw of it
        self._pushed_since_upkeep |= bool(pushed)
        result = PublishResult(tuple(pushed), pushes, time.perf_counter() - start)
        if pushed:
            log.info("mirror_published", refs=len(pushed), pushes=pushes, seconds=round(result.seconds, 3))
        return result

    def _publish_in_two(self, pending: Sequence[RefChange], between: Callable[[], None] | None,
                        pushed: list[RefChange]) -> int:
        """The decision (plan branch, new proposals), ``between()``, then the rest; appends
        what landed to ``pushed`` and returns the number of pushes (``publish``)."""
        first = [c for c in pending if c.ref == self.store.plan_ref or (
            c.new is not None and c.ref.startswith(f"refs/heads/{self.store.proposal_prefix}"))]
        rest = [c for c in pending if c not in first]
        pushes = 0
        if first:
            self.push(first)
            pushes += 1
            pushed += first
        if between is not None:
            between()
        if rest:
            try:
                self.push(rest)
            except StaleRef as exc:
                accepted = [c for c in rest if c.ref not in exc.refs]
                plan = next((c.new for c in first if c.ref == self.store.plan_ref), None)
                log.warning("fan_out_push_stale", refs=len(exc.refs), accepted=len(accepted), plan=plan)
                raise FanOutStale(exc.refs, plan) from exc
            pushes += 1
            pushed += rest
        return pushes

    def push(self, changes: Sequence[RefChange], *, atomic: bool = False) -> None:
        """One push of ``changes`` with compare-and-swap on each ref (never a forced refspec).

        Through the ``git`` command line (``gitstore.gitcli``: several times faster with
        thousands of branches); through libgit2 when it cannot take the credentials.
        ``atomic`` (command line only): every ref lands or none."""
        if not changes:
            return
        try:
            if gitcli.available(self.credentials):
                accepted_refs, rejected = self._push_with_git(changes, atomic)
            else:
                accepted_refs, rejected = self._push_with_libgit2(changes)
        except (StaleRef, RemoteError):
            self._watched_seen = None  # someone else may have written: look at everything next time
            raise
        self._record_pushed(changes, accepted_refs, rejected)

    def _push_with_git(self, changes: Sequence[RefChange], atomic: bool) -> tuple[set[str], dict[str, str]]:
        """Accepted refs and rejections (ref -> why) of one ``git push``. Refs a branch
        pattern pushed besides ``changes`` count too: a rejected one was moved by someone else."""
        specs = gitcli.refspecs([(c.ref, c.new is None) for c in changes], [self._cluster_refs])
        # Named refs are leased on the values we last saw; a pattern on the tracking refs,
        # or, in one atomic push, checked against the values we last saw by a hook
        # (``push_checked``: no tracking ref written per branch; _record_pushed writes them).
        named = not any("*" in spec for spec in specs)
        leases = {c.ref: c.old for c in changes} if named else None
        try:
            outcome = None
            if atomic and not named:
                try:
                    outcome = gitcli.push_checked(self.path, self.url, specs, {c.ref: c.old for c in changes},
                                                  self.credentials)
                except gitcli.Unavailable as exc:
                    log.info("mirror_checked_push_unavailable", error=str(exc))
            if outcome is None:
                outcome = gitcli.push(self.path, "origin", specs, leases, self.credentials, atomic=atomic)
        except gitcli.GitFailed as exc:
            raise RemoteError(f"push to {self.display_url} failed: {exc}") from exc
        rejected = {ref: f"rejected by remote: {why}" for ref, why in outcome.rejected.items()}
        return set(outcome.accepted), rejected

    def _push_with_libgit2(self, changes: Sequence[RefChange]) -> tuple[set[str], dict[str, str]]:
        """Accepted refs and rejections (ref -> why) of one libgit2 push; the CAS is checked
        against the advertised refs before anything is sent (``_PushCallbacks``)."""
        expected = {c.ref: None if c.old is None else pygit2.Oid(hex=c.old) for c in changes}
        specs = [f"{c.ref}:{c.ref}" if c.new is not None else f":{c.ref}" for c in changes]
        callbacks = _PushCallbacks(self.credentials, expected)
        remote = self.repo.remotes["origin"]
        try:
            remote.push(specs, callbacks=callbacks)
        except pygit2.GitError as exc:
            if _LOST_RACE.search(str(exc)):
                raise StaleRef({c.ref: f"remote moved ({exc})" for c in changes}) from exc
            raise RemoteError(f"push to {self.display_url} failed: {redact(str(exc))}") from exc
        return callbacks.accepted - set(callbacks.rejected), callbacks.rejected

    def _record_pushed(self, changes: Sequence[RefChange], accepted_refs: set[str],
                       rejected: dict[str, str]) -> None:
        """Remember what the remote now holds; raise ``StaleRef`` for what it did not take."""
        accepted = {c.ref: c for c in changes if c.ref in accepted_refs and c.ref not in rejected}
        # Record what the remote now holds, so the next publish compares against it, in one
        # batch (git and libgit2 often did already, through the fetch refspecs; those are skipped).
        seen_moves: dict[str, tuple[pygit2.Oid | None, pygit2.Oid | None]] = {}
        for change in accepted.values():
            seen = _seen_name(change.ref)
            current = _ref_target(self.repo, seen)
            new = None if change.new is None else pygit2.Oid(hex=change.new)
            if current != new:
                seen_moves[seen] = (current, new)
            self._note_head(change.ref, change.new)
        cas_update_refs(self.repo, seen_moves, "qonnect: pushed")
        for change in accepted.values():
            if self._watched_seen is not None and self._is_watched(change.ref):
                if change.new is None:
                    self._watched_seen.pop(change.ref, None)
                else:
                    self._watched_seen[change.ref] = change.new
        missing = {c.ref: "remote did not report the update" for c in changes
                   if c.ref not in accepted_refs and c.ref not in rejected}
        for ref in (*missing, *rejected):
            self._note_head(ref, None)  # someone else moved it: unknown until the next fetch
        if rejected or missing:
            self._watched_seen = None
            raise StaleRef({**missing, **rejected})

    def _note_head(self, ref: str, commit: str | None) -> None:
        prefix = self._cluster_refs
        if ref.startswith(prefix):
            if commit is None:
                self._heads.pop(ref[len(prefix):], None)
            else:
                self._heads[ref[len(prefix):]] = commit

    # ---------------------------------------------------------------- upkeep

    def upkeep(self) -> float | None:
        """After a publish: pack the refs it wrote loose (when many) and ``git gc --auto``
        (when ``gc`` and something was pushed). Kept out of ``publish`` so it never delays
        the branches reaching the remote: after a first decision at 3,000 clusters it takes
        2.3 s (6,000 ref files packed, a commit-graph layer). Seconds spent, None when there
        was nothing to do."""
        start = time.perf_counter()
        packed = self._pack_refs_if_many()
        gc_ran = self.gc and self._pushed_since_upkeep
        if gc_ran:
            self.gc_auto()
        self._pushed_since_upkeep = False
        return time.perf_counter() - start if packed or gc_ran else None

    def _pack_refs_if_many(self) -> bool:
        """``git pack-refs --all`` and a new commit-graph layer once enough refs were written
        loose. Reading refs goes over every loose ref file: 20,000 of them (a fleet of
        10,000 clusters, each seen and local) take half a second to list, packed a fortieth
        of that. A push walks the commit of every advertised branch; the commit-graph
        serves them without parsing (one push at 10,000 branches: 0.25-0.3 s -> 0.17-0.23 s)."""
        if self._loose_refs < LOOSE_REFS_LIMIT:
            return False
        self._upkeep("pack-refs", "--all")
        self._upkeep("commit-graph", "write", "--reachable", "--split")
        self._loose_refs = 0
        return True

    def _upkeep(self, *args: str) -> bool:
        """``git -C <mirror> <args>``; False (logged) when it failed or there is no git:
        upkeep is never fatal to a cycle."""
        try:
            proc = subprocess.run(["git", "-C", str(self.path), *args], capture_output=True, text=True, check=False)
        except OSError as exc:  # no git on this machine: fetches and pushes use libgit2
            log.warning("mirror_upkeep_failed", path=str(self.path), args=" ".join(args), error=str(exc))
            return False
        if proc.returncode != 0:
            log.warning("mirror_upkeep_failed", path=str(self.path), args=" ".join(args), stderr=proc.stderr.strip())
            return False
        return True

    def gc_auto(self) -> float:
        """Run ``git gc --auto`` in the foreground (packs loose objects past gc.auto); returns seconds."""
        start = time.perf_counter()
        done = self._upkeep("-c", "gc.autoDetach=false", "gc", "--auto", "--quiet")
        elapsed = time.perf_counter() - start
        if done:
            log.debug("mirror_gc", path=str(self.path), seconds=round(elapsed, 3))
        return elapsed


def narrow_fetch(
    cache_path: str | Path,
    url: str,
    branch: str,
    credentials: Credentials = None,
    *,
    advertised: str | None = None,
) -> FetchResult:
    """Fetch only ``refs/heads/<branch>`` from ``url`` into a bare cache (created if needed).

    The local branch of the same name follows the remote even if it was rewritten: an
    agent only reads. Returns the commit and, from libgit2, the bytes received.

    A server that speaks protocol v2 (asked with ``ls-refs`` first, which also tells a
    missing branch) is fetched from with ``git fetch``, which names the one ref: libgit2
    speaks v0, in which every fetch first downloads every branch name of the fleet
    (750 KB at 10,000 clusters, for every agent after every change of its branch).
    ``advertised``: the commit an ``ls-refs`` of this branch just answered (the agent's
    poll asked already), so it is not asked again.
    """
    start = time.perf_counter()
    path = Path(cache_path)
    repo = pygit2.Repository(str(path)) if (path / "HEAD").exists() else pygit2.init_repository(str(path), bare=True)
    ref = f"refs/heads/{branch}"
    if not pygit2.reference_is_valid_name(ref):
        raise ValueError(f"invalid branch name {branch!r}")
    counted: tuple[int | None, int | None] = (None, None)
    try:
        if gitcli.available(credentials) and (advertised is not None or _speaks_v2(url, ref, credentials)):
            gitcli.fetch(path, url, [f"+{ref}:{ref}"], credentials)
        else:
            remote = repo.remotes.create_anonymous(url)
            stats = remote.fetch([f"+{ref}:{ref}"], callbacks=pygit2.RemoteCallbacks(credentials=credentials))
            counted = (stats.received_bytes, stats.received_objects)
    except (pygit2.GitError, gitcli.GitFailed, LsRefsError) as exc:
        raise RemoteError(f"fetch of {branch} from {redact_url(url)} failed: {redact(str(exc))}") from exc
    target = _ref_target(repo, ref)
    if target is None:
        raise RemoteError(f"{redact_url(url)} has no branch {branch}")
    return FetchResult(str(target), counted[0], counted[1], time.perf_counter() - start)


def _speaks_v2(url: str, ref: str, credentials: Credentials) -> bool:
    """Whether the server answers ``ls-refs`` (v2) for ``ref``, so ``git fetch`` can name
    it alone. Raises ``RemoteError`` when it says the branch is not there, ``LsRefsError``
    when it cannot be reached."""
    try:
        answer = ls_ref(url, ref, credentials)
    except Unsupported:
        return False
    if answer.commit is None:
        raise RemoteError(f"{redact_url(url)} has no branch {ref.removeprefix('refs/heads/')}")
    return True


def fetch_for_review(
    cache_path: str | Path,
    url: str,
    extra_refs: Sequence[str] = (),
    credentials: Credentials = None,
    branches: Sequence[str] | None = None,
) -> pygit2.Repository:
    """Fetch ``branches`` (None: every branch and every tag) as ``refs/remotes/origin/heads/*``,
    and ``extra_refs`` (e.g. a pull request's ``refs/pull/7/head``, kept under
    ``refs/qonnect-review/``) into a bare cache, so ``resolve_commit`` finds a branch, tag,
    commit or pull request head. An extra ref the remote lacks is skipped; the caller's
    resolve then says what is missing.

    The lead names its branches: with one branch per cluster, every branch is the whole
    fleet's rendered manifests, which a goals preview never reads. Branch and ref names
    come from forge events, so each must be a valid ref name (``ValueError``)."""
    for name in [f"refs/heads/{b}" for b in branches or ()] + list(extra_refs):
        if not name.startswith("refs/") or not pygit2.reference_is_valid_name(name):
            raise ValueError(f"invalid ref name {name!r}")
    path = Path(cache_path)
    repo = pygit2.Repository(str(path)) if (path / "HEAD").exists() else pygit2.init_repository(str(path), bare=True)
    specs = ["+refs/heads/*:refs/remotes/origin/heads/*", "+refs/tags/*:refs/tags/*"] if branches is None else [
        f"+refs/heads/{b}:refs/remotes/origin/heads/{b}" for b in branches]
    extra = {ref: f"+{ref}:refs/qonnect-review/{ref[len('refs/'):]}" for ref in extra_refs}
    if branches is not None and gitcli.available(credentials):
        # The command line asks for the named refs alone (protocol v2), where libgit2
        # first downloads the name of every branch of the fleet.
        try:
            gitcli.fetch(path, url, specs, credentials)
        except gitcli.GitFailed as exc:
            raise RemoteError(f"fetch from {redact_url(url)} failed: {exc}") from exc
        for ref, spec in extra.items():
            try:
                gitcli.fetch(path, url, [spec], credentials)
            except gitcli.GitFailed as exc:
                log.info("review_ref_not_fetched", ref=ref, error=str(exc))
        return repo
    remote = repo.remotes.create_anonymous(url)
    callbacks = pygit2.RemoteCallbacks(credentials=credentials)
    try:
        remote.fetch(specs, callbacks=callbacks, prune=pygit2.enums.FetchPrune.PRUNE)
    except pygit2.GitError as exc:
        raise RemoteError(f"fetch from {redact_url(url)} failed: {redact(str(exc))}") from exc
    for ref, spec in extra.items():
        try:
            remote.fetch([spec], callbacks=callbacks)
        except pygit2.GitError as exc:
            log.info("review_ref_not_fetched", ref=ref, error=redact(str(exc)))
    return repo


def fetch_branch(
    cache_path: str | Path,
    url: str,
    branch: str,
    credentials: Credentials = None,
) -> str:
    """``narrow_fetch`` returning just the commit id of the fetched branch."""
    result = narrow_fetch(cache_path, url, branch, credentials)
    assert result.commit is not None
    return result.commit


def credentials_from_env(env: dict[str, str] | None = None) -> Credentials:
    """Credentials from ``QONNECT_GIT_USERNAME``/``QONNECT_GIT_TOKEN`` (smart HTTP) or
    ``QONNECT_GIT_SSH_KEY`` (+ optional ``QONNECT_GIT_SSH_USER``, default ``git``); None if unset."""
    import os

    env = dict(os.environ) if env is None else env
    token = env.get("QONNECT_GIT_TOKEN")
    if token:
        return pygit2.UserPass(env.get("QONNECT_GIT_USERNAME", "qonnect"), token)
    key = env.get("QONNECT_GIT_SSH_KEY")
    if key:
        pub = key + ".pub" if Path(key + ".pub").exists() else None
        return pygit2.Keypair(env.get("QONNECT_GIT_SSH_USER", "git"), pub, key, env.get("QONNECT_GIT_SSH_PASSPHRASE", ""))
    return None
