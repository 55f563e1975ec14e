"""The leader's writes: plan commits, per-cluster fan-out, proposals, all with compare-and-swap.

Everything here works on one local (usually bare) repository and never touches a
remote; ``qonnect_gitops.gitstore.remote.Mirror`` fetches into such a repository and
pushes what changed.

Ordering, so an interrupted cycle is always recoverable:

1. the plan commit is written and the plan branch moved (the commit point);
2. open proposals the decision supersedes are closed;
3. ``fan_out(plan_commit)`` moves the cluster branches.

Step 3 is idempotent and derives everything it needs from the plan commit itself
(its tree and trailers), so calling ``fan_out(store.plan_head())`` after a crash
finishes the job and writes nothing when there is nothing left to do.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pygit2

from qonnect_gitops.gitstore import packedrefs
from qonnect_gitops.gitstore import trailers as tr
from qonnect_gitops.gitstore.errors import (
    GenerationConflict,
    GitStoreError,
    ProposalError,
    ProposalNotFound,
    StaleProposal,
    StaleRef,
)
from qonnect_gitops.gitstore.objects import MODE_TREE, ObjectBatch
from qonnect_gitops.gitstore.packedrefs import short_id
from qonnect_gitops.gitstore.signing import CommitSigner
from qonnect_gitops.gitstore.trailers import DecisionMeta
from qonnect_gitops.gitstore.tree import (
    EMPTY_TREE_HEX,
    GroupedFiles,
    RepoLike,
    build_tree,
    directories_under,
    list_tree_paths,
    open_repo,
    read_tree_files,
    resolve_commit,
    tree_entries,
)
from qonnect_gitops.logs import get_logger

log = get_logger(__name__)

DEFAULT_PLAN_BRANCH = "qonnect/plan"
DEFAULT_CLUSTER_PREFIX = "cluster/"
DEFAULT_PROPOSAL_PREFIX = "qonnect/proposals/"
CLOSED_NAMESPACE = "refs/qonnect/closed/"

_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


@dataclass(frozen=True)
class Identity:
    """The fixed author and committer of every commit the store writes."""

    name: str = "qonnect"
    email: str = "qonnect@localhost"

    def signature(self, timestamp: int) -> pygit2.Signature:
        """A signature at ``timestamp`` (seconds since the epoch, UTC)."""
        return pygit2.Signature(self.name, self.email, int(timestamp), 0)


@dataclass(frozen=True)
class RefChange:
    """One ref moved: ``old`` is None for a created ref, ``new`` None for a deleted one."""

    ref: str
    old: str | None
    new: str | None


@dataclass(frozen=True)
class WriteResult:
    """What one call wrote. Empty lists and ``plan_commit=None`` mean nothing was written."""

    plan_head: str | None
    """The plan commit the cluster branches now follow."""
    plan_commit: str | None = None
    """The plan commit written by this call (None when the plan did not change)."""
    plan_change: RefChange | None = None
    clusters: tuple[RefChange, ...] = ()
    closed_proposals: tuple[str, ...] = ()

    @property
    def wrote_anything(self) -> bool:
        """True when any ref moved."""
        return bool(self.plan_change or self.clusters or self.closed_proposals)


@dataclass(frozen=True)
class Proposal:
    """An open proposal: a plan commit waiting for review on ``qonnect/proposals/<id>``."""

    id: str
    ref: str
    commit: str
    base: str | None
    summary: str
    description: str
    meta: DecisionMeta
    stale: bool
    """True when the plan branch moved since the proposal was based (approval would fail)."""


@dataclass(frozen=True)
class ClosedProposal:
    """A proposal that was approved or superseded, kept as ``refs/qonnect/closed/<id>``."""

    id: str
    commit: str
    note: str


@dataclass
class _FanOutPlan:
    clusters: list[str]
    prune_limits: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class _Written:
    """A plan commit a store wrote, with what a later decision would read back from it."""

    commit: str
    tree: pygit2.Oid
    generation: int
    fan: _FanOutPlan  # as _recorded_fan reads it from the commit's trailers


_CURRENT = object()


def cas_update_refs(
    repo: pygit2.Repository,
    updates: Mapping[str, tuple[pygit2.Oid | None, pygit2.Oid | None]],
    message: str,
) -> None:
    """Move several refs at once, each only if it still points where the caller saw it.

    ``updates`` maps ref name -> (expected old id or None for "must not exist",
    new id or None for "delete"). Every ref is locked first (the same ``.lock`` files
    git itself uses, so concurrent git processes are excluded too), then checked, then
    written; a lost lock or a moved ref raises ``StaleRef`` and changes nothing.

    A large batch (a fan-out) in a repository without reflogs is written as one rewrite
    of ``packed-refs`` instead of a file per ref (``packedrefs.update_packed``, with the
    same checks and errors).
    """
    if not updates:
        return
    if packedrefs.suits(repo, updates):
        packedrefs.update_packed(repo, updates)
        return
    names = sorted(updates)
    with repo.transaction() as txn:
        stale: dict[str, str] = {}
        for name in names:
            try:
                txn.lock_ref(name)
            except pygit2.GitError as exc:
                stale[name] = f"locked by another writer ({exc})"
        if stale:
            raise StaleRef(stale)
        packedrefs.refuse_moved(updates, lambda name: _ref_target(repo, name))
        for name in names:
            new = updates[name][1]
            if new is None:
                txn.remove(name)
            else:
                txn.set_target(name, new, message=message)


def _ref_target(repo: pygit2.Repository, name: str) -> pygit2.Oid | None:
    try:
        ref = repo.references[name]
    except KeyError:
        return None
    target = ref.target
    return target if isinstance(target, pygit2.Oid) else None


def _hex(oid: pygit2.Oid | None) -> str | None:
    return None if oid is None else str(oid)


class GitStore:
    """Reads and writes decisions in one local repository (bare or not; the work tree is ignored).

    ``plan_branch``, ``cluster_prefix`` and ``proposal_prefix`` are branch names without
    ``refs/heads/``. Every commit is authored and committed by ``identity`` at the
    caller's timestamp, so the same inputs give the same commit ids. With ``signer``
    (``gitstore.signing``) every plan, cluster and proposal commit is signed as
    ``git commit -S`` with ``gpg.format=ssh`` signs (Ed25519 and RSA sign
    deterministically: the ids stay reproducible); without one they are unsigned.
    """

    def __init__(
        self,
        repo: RepoLike,
        *,
        plan_branch: str = DEFAULT_PLAN_BRANCH,
        cluster_prefix: str = DEFAULT_CLUSTER_PREFIX,
        proposal_prefix: str = DEFAULT_PROPOSAL_PREFIX,
        identity: Identity | None = None,
        signer: CommitSigner | None = None,
    ) -> None:
        self.repo = open_repo(repo)
        self.signer = signer
        self.plan_ref = f"refs/heads/{plan_branch}"
        self.cluster_prefix = cluster_prefix
        self.proposal_prefix = proposal_prefix
        self.identity = identity or Identity()
        if not pygit2.reference_is_valid_name(self.plan_ref):
            raise ValueError(f"invalid plan branch name {plan_branch!r}")
        # Every ref this store moved since ``moved`` was last cleared: a mirror pushes
        # these instead of comparing every ref of the fleet (``Mirror.pending``).
        self.moved: set[str] = set()
        # The plan commit whose fan-out is known complete: every cluster branch follows
        # it. ``catch_up`` of that commit has nothing to do; whoever moves cluster
        # branches by other means (a fetch) must reset it.
        self.fanned_out: str | None = None
        self._branch_names: set[str] = set()  # cluster names known to make valid branch names
        # The last plan commit this store wrote: the next decision need not read it back.
        self._written: _Written | None = None

    @classmethod
    def init_bare(cls, path: str | Path, **kwargs: object) -> GitStore:
        """Create (or open) a bare repository at ``path`` and return a store on it."""
        repo = pygit2.init_repository(str(path), bare=True)
        return cls(repo, **kwargs)  # type: ignore[arg-type]

    # ---------------------------------------------------------------- reading

    def cluster_ref(self, cluster: str) -> str:
        """The full ref name of a cluster's branch; raises ``ValueError`` for unusable names."""
        ref = f"refs/heads/{self.cluster_prefix}{cluster}"
        if "/" in cluster or not pygit2.reference_is_valid_name(ref):
            raise ValueError(f"cluster name {cluster!r} cannot be a branch name")
        return ref

    def proposal_ref(self, proposal_id: str) -> str:
        """The full ref name of a proposal branch."""
        _check_id(proposal_id)
        return f"refs/heads/{self.proposal_prefix}{proposal_id}"

    def plan_head(self) -> str | None:
        """The commit id the plan branch points at, or None before the first decision."""
        return _hex(_ref_target(self.repo, self.plan_ref))

    def cluster_head(self, cluster: str) -> str | None:
        """The commit id of a cluster branch, or None if it does not exist."""
        return _hex(_ref_target(self.repo, self.cluster_ref(cluster)))

    def read_files(self, rev: str, prefix: str = "") -> dict[str, bytes]:
        """``read_tree_files`` on this store's repository."""
        return read_tree_files(self.repo, rev, prefix)

    def decision_of(self, rev: str) -> DecisionMeta:
        """The decision trailers of a plan commit (or of the merged commit for a forge merge)."""
        return _decision_of(self.repo, resolve_commit(self.repo, rev))

    # ---------------------------------------------------------------- writing

    def write_decision(
        self,
        plan_files: Mapping[str, bytes],
        *,
        summary: str,
        body: str,
        meta: DecisionMeta,
        clusters: Iterable[str],
        timestamp: int,
        prune_limits: Mapping[str, int] | None = None,
        expected_plan: str | object | None = _CURRENT,
    ) -> WriteResult:
        """Commit a decision on the plan branch, close superseded proposals, fan out.

        ``plan_files`` holds the decision (``placement.yaml``, ``placement/``) and ``clusters/<name>/<path>`` files.
        ``clusters`` lists every cluster of the fleet; one without files gets an empty
        tree (and ``Qonnect-Allow-Empty: true``). ``prune_limits`` maps a cluster to the
        number of objects its new commit knowingly removes. ``expected_plan`` is the plan
        commit the decision was computed against (default: whatever the branch holds
        now); if the branch is elsewhere, ``StaleRef`` is raised and nothing is written.

        When the plan tree equals the current plan tree no plan commit is written, but
        the fan-out of the current plan commit is still completed (it is idempotent).
        """
        current = _ref_target(self.repo, self.plan_ref)
        if expected_plan is not _CURRENT:
            expected = None if expected_plan is None else pygit2.Oid(hex=str(expected_plan))
            if expected != current:
                raise StaleRef({self.plan_ref: f"expected {short_id(expected)}, found {short_id(current)}"})
        batch = ObjectBatch(self.repo)
        dirs: dict[str, pygit2.Oid] = {}
        tree_id, fan = self._prepare(plan_files, clusters, prune_limits, current, batch, dirs)
        if current is not None and self._tree_of(current) == tree_id:
            log.debug("plan_unchanged", plan=str(current))
            changes = self.fan_out(str(current))
            return WriteResult(plan_head=str(current), clusters=tuple(changes))

        self._check_generation(current, meta)
        open_ids = [p.id for p in self.list_proposals()]
        trailers = meta.trailers() + _fan_trailers(fan) + [(tr.SUPERSEDES, i) for i in open_ids]
        message = tr.format_message(summary, body, trailers)
        sig = self.identity.signature(timestamp)
        parents = [current] if current is not None else []
        commit = batch.commit(tree_id, parents, sig, sig, message, self._sign)
        # The cluster commits are computed now too, so one pack holds the whole decision.
        # They are exactly what fan_out(commit) would write; the refs move in order below.
        # The new clusters tree holds directories only (_prepare refused anything else).
        new_dirs = _entries(self.repo, dirs.get("clusters"), batch)
        names = set(fan.clusters) | new_dirs.keys()
        moving = names
        if current is not None and self.fanned_out == str(current):
            # Every cluster branch follows the current plan commit: one whose directory
            # is the same in both plans needs no new commit, and no read of its branch.
            # Both plans' clusters trees are compared as two sets of entries, not by path.
            old_clusters = tree_entries(self.repo, self._tree_of(current)).get("clusters")
            old_dirs = _entries(self.repo, pygit2.Oid(raw=old_clusters[1])
                                if old_clusters is not None and old_clusters[0] == MODE_TREE else None)
            differ = {name for name, _ in new_dirs.items() ^ old_dirs.items()}
            unfollowed = names - old_dirs.keys() - set(self._recorded_fan(current).clusters)
            moving = (differ & names) | unfollowed
        subtrees = {name: pygit2.Oid(raw=new_dirs[name][1]) if name in new_dirs else None for name in moving}
        updates = self._cluster_commits(commit, summary.strip(), meta, subtrees, fan.prune_limits, timestamp, batch)
        batch.flush()
        self._update_refs({self.plan_ref: (current, commit)}, f"qonnect: plan {meta.generation}")
        log.info("plan_committed", commit=str(commit), generation=meta.generation, reason=meta.reason,
                 term=meta.term, source=meta.source)
        closed = self._close_all(open_ids, f"superseded by plan commit {commit}", timestamp)
        changes = self._move_clusters(commit, updates, len(names))
        self.fanned_out = str(commit)
        # As _recorded_fan reads it back: a cluster with a prune limit is listed too.
        self._written = _Written(str(commit), tree_id, meta.generation,
                                 _FanOutPlan(sorted(set(fan.clusters) | set(fan.prune_limits)), dict(fan.prune_limits)))
        return WriteResult(
            plan_head=str(commit),
            plan_commit=str(commit),
            plan_change=RefChange(self.plan_ref, _hex(current), str(commit)),
            clusters=tuple(changes),
            closed_proposals=tuple(closed),
        )

    def fan_out(
        self,
        plan_commit: str,
        *,
        clusters: Iterable[str] | None = None,
        prune_limits: Mapping[str, int] | None = None,
        timestamp: int | None = None,
    ) -> list[RefChange]:
        """Point every cluster branch at its subtree of ``plan_commit``, where it changed.

        With no arguments everything comes from the plan commit: the clusters are its
        ``clusters/*`` directories plus those named in its ``Qonnect-Empty-Cluster`` and
        ``Qonnect-Prune-Limit`` trailers, and the commit time is the plan commit's, so a
        repeated or recovering call writes byte-identical commits. Use it to finish an
        interrupted fan-out, after an approval, or after someone else fast-forwarded the
        plan branch. Returns the cluster refs moved (all in one compare-and-swap).
        """
        commit = resolve_commit(self.repo, plan_commit)
        meta = _decision_of(self.repo, commit)
        recorded = _recorded_fan(commit)
        names = set(recorded.clusters) if clusters is None else set(clusters)
        present = _cluster_subtrees(self.repo, commit.tree)
        names.update(present)
        limits = dict(recorded.prune_limits if prune_limits is None else prune_limits)
        when = commit.committer.time if timestamp is None else timestamp
        summary = commit.message.splitlines()[0] if commit.message.strip() else "qonnect plan"
        # One read of the clusters tree: a path lookup per cluster re-reads it every time.
        subtrees = {name: present.get(name) for name in names}
        batch = ObjectBatch(self.repo)
        updates = self._cluster_commits(commit.id, summary, meta, subtrees, limits, when, batch)
        batch.flush()
        changes = self._move_clusters(commit.id, updates, len(names))
        if clusters is None and prune_limits is None and timestamp is None:
            self.fanned_out = str(commit.id)  # exactly what the plan commit records
        return changes

    def catch_up(self) -> list[RefChange]:
        """``fan_out`` of the current plan head: a no-op when every cluster branch follows it.

        ``write_decision`` does this itself; call it in review-mode cycles (where a forge
        merge or ``qonnect approve`` may have moved the plan branch) and after a restart.
        """
        head = self.plan_head()
        if head is None or head == self.fanned_out:
            return []
        return self.fan_out(head)

    def _cluster_commits(
        self,
        plan_id: pygit2.Oid,
        summary: str,
        meta: DecisionMeta,
        subtrees: Mapping[str, pygit2.Oid | None],
        limits: Mapping[str, int],
        when: int,
        batch: ObjectBatch,
    ) -> dict[str, tuple[pygit2.Oid | None, pygit2.Oid | None]]:
        """Queue a commit for every cluster whose tree changed; returns ref -> (old, new)."""
        sig = self.identity.signature(when)
        sign = self._sign  # one key for the whole fan-out, even if its file is replaced meanwhile
        empty = pygit2.Oid(hex=EMPTY_TREE_HEX)
        updates: dict[str, tuple[pygit2.Oid | None, pygit2.Oid | None]] = {}
        for name in sorted(subtrees):
            ref = self.cluster_ref(name)
            sub = subtrees[name]
            tree_id = sub if sub is not None else empty
            old = _ref_target(self.repo, ref)
            if old is not None and self.repo[old].peel(pygit2.Commit).tree_id == tree_id:
                continue
            trailers = meta.trailers() + [(tr.PLAN, str(plan_id))]
            limit = int(limits[name]) if name in limits else None
            if tree_id == empty:
                batch.tree([])  # the empty tree object must exist in this odb; it is not implicit
                trailers.append((tr.ALLOW_EMPTY, "true"))
                if old is not None:
                    # Allow-Empty does not lift an agent's prune guard: the decision that empties
                    # a cluster also says how many files it removes, whoever asked for it.
                    removed = len(list_tree_paths(self.repo, str(old)))
                    limit = max(limit or 0, removed) if removed or limit is not None else None
            if limit is not None:
                trailers.append((tr.PRUNE_LIMIT, str(limit)))
            body = f"Files of clusters/{name} in plan commit {plan_id}."
            message = tr.format_message(f"{summary} [{name}]", body, trailers)
            updates[ref] = (old, batch.commit(tree_id, [old] if old else [], sig, sig, message, sign))
        return updates

    def _move_clusters(
        self,
        plan_id: pygit2.Oid,
        updates: Mapping[str, tuple[pygit2.Oid | None, pygit2.Oid | None]],
        clusters: int,
    ) -> list[RefChange]:
        self._update_refs(updates, f"qonnect: fan-out of {plan_id}")
        changes = [RefChange(ref, _hex(old), _hex(new)) for ref, (old, new) in sorted(updates.items())]
        if changes:
            log.info("fanned_out", plan=str(plan_id), changed=len(changes), clusters=clusters)
        return changes

    # ---------------------------------------------------------------- review mode

    def propose(
        self,
        proposal_id: str,
        plan_files: Mapping[str, bytes],
        *,
        summary: str,
        description: str,
        meta: DecisionMeta,
        clusters: Iterable[str],
        timestamp: int,
        prune_limits: Mapping[str, int] | None = None,
        expected_plan: str | object | None = _CURRENT,
    ) -> Proposal | None:
        """Write a decision to ``<proposal_prefix><id>`` instead of the plan branch.

        The commit has the plan commit it would become (tree, trailers plus
        ``Qonnect-Proposal: <id>``), parented on the current plan head; the markdown
        ``description`` is its message body. Older open proposals are closed as
        superseded and listed in ``Qonnect-Supersedes`` trailers. Proposals are immutable:
        an id already used (open or closed) raises ``ProposalError``. Returns None when the
        plan would not change, and the existing proposal when an open one already
        proposes the same tree on the same base (so an idle cycle writes nothing).
        """
        ref = self.proposal_ref(proposal_id)
        current = _ref_target(self.repo, self.plan_ref)
        batch = ObjectBatch(self.repo)
        tree_id, fan = self._prepare(plan_files, clusters, prune_limits, current, batch)
        if expected_plan is not _CURRENT:
            expected = None if expected_plan is None else pygit2.Oid(hex=str(expected_plan))
            if expected != current:
                raise StaleRef({self.plan_ref: f"expected {short_id(expected)}, found {short_id(current)}"})
        if current is not None and self.repo[current].peel(pygit2.Commit).tree_id == tree_id:
            return None
        open_props = self.list_proposals()
        for prop in open_props:
            if not prop.stale and self.repo[pygit2.Oid(hex=prop.commit)].peel(pygit2.Commit).tree_id == tree_id:
                return prop
        # Proposals are immutable: replacing one would be a non-fast-forward push.
        if _ref_target(self.repo, ref) is not None or f"{CLOSED_NAMESPACE}{proposal_id}" in self.repo.references:
            raise ProposalError(f"proposal id {proposal_id!r} is already used; give the new decision a new id")
        self._check_generation(current, meta)
        older = [p.id for p in open_props]
        trailers = (
            meta.trailers()
            + _fan_trailers(fan)
            + [(tr.PROPOSAL, proposal_id)]
            + [(tr.SUPERSEDES, i) for i in older]
        )
        message = tr.format_message(summary, description, trailers)
        sig = self.identity.signature(timestamp)
        commit = batch.commit(tree_id, [current] if current else [], sig, sig, message, self._sign)
        batch.flush()
        self._update_refs({ref: (None, commit)}, f"qonnect: proposal {proposal_id}")
        log.info("proposal_written", proposal=proposal_id, commit=str(commit), generation=meta.generation)
        self._close_all(older, f"superseded by proposal {proposal_id} ({commit})", timestamp)
        return self._proposal(proposal_id)

    def list_proposals(self) -> list[Proposal]:
        """Open proposals, oldest generation first."""
        prefix = f"refs/heads/{self.proposal_prefix}"
        out = [self._proposal(name[len(prefix):]) for name in self._refs_under(prefix)]
        return sorted(out, key=lambda p: (p.meta.generation, p.id))

    def list_closed(self) -> list[ClosedProposal]:
        """Proposals closed by approval or by a newer decision, with the note saying which."""
        out = []
        for name in self._refs_under(CLOSED_NAMESPACE):
            tag = self.repo[self.repo.references[name].target]
            if isinstance(tag, pygit2.Tag):
                out.append(ClosedProposal(name[len(CLOSED_NAMESPACE):], str(tag.target), tag.message.strip()))
        return sorted(out, key=lambda c: c.id)

    def approve(
        self,
        proposal_id: str,
        *,
        validate: Callable[[dict[str, bytes]], object] | None = None,
        timestamp: int | None = None,
    ) -> WriteResult:
        """Make an open proposal the plan: fast-forward the plan branch to it and fan out.

        ``validate`` receives the goals files at the proposal's ``Qonnect-Source`` commit
        and must raise to refuse (the real system re-validates goals here). Raises
        ``ProposalNotFound``, or ``StaleProposal`` when the plan branch moved since the
        proposal was based. Other open proposals are closed as superseded.
        """
        prop = self._proposal(proposal_id)
        current = _ref_target(self.repo, self.plan_ref)
        if prop.base != _hex(current):
            now = "nothing" if current is None else f"{current} ({_summary(self.repo, current)})"
            raise StaleProposal(
                f"proposal {proposal_id} was based on plan commit {prop.base or 'nothing'}, but the plan "
                f"branch has moved to {now}; approving it would drop that decision. Re-plan to get a "
                f"fresh proposal."
            )
        if validate is not None:
            validate(read_tree_files(self.repo, prop.meta.source))
        when = int(time.time()) if timestamp is None else timestamp
        commit = pygit2.Oid(hex=prop.commit)
        self._update_refs({self.plan_ref: (current, commit)}, f"qonnect: approve {proposal_id}")
        log.info("proposal_approved", proposal=proposal_id, commit=prop.commit)
        closed = self._close(proposal_id, f"approved: plan branch fast-forwarded to {prop.commit}", when)
        others = [p.id for p in self.list_proposals()]
        closed += self._close_all(others, f"superseded by approved proposal {proposal_id} ({prop.commit})", when)
        changes = self.fan_out(prop.commit)
        return WriteResult(
            plan_head=prop.commit,
            plan_commit=prop.commit,
            plan_change=RefChange(self.plan_ref, _hex(current), prop.commit),
            clusters=tuple(changes),
            closed_proposals=tuple(closed),
        )

    def close_proposal(self, proposal_id: str, note: str, timestamp: int | None = None) -> list[str]:
        """Close an open proposal without approving it (merged or rejected on a forge, or
        stale), keeping ``refs/qonnect/closed/<id>`` with ``note``; [] when it was not open."""
        return self._close(proposal_id, note, int(time.time()) if timestamp is None else timestamp)

    # ---------------------------------------------------------------- helpers

    def _prepare(
        self,
        plan_files: Mapping[str, bytes],
        clusters: Iterable[str],
        prune_limits: Mapping[str, int] | None,
        current: pygit2.Oid | None,
        batch: ObjectBatch,
        dirs: dict[str, pygit2.Oid] | None = None,
    ) -> tuple[pygit2.Oid, _FanOutPlan]:
        listed = set(clusters)
        with_files: set[str] = set()
        loose: Mapping[str, bytes] = plan_files
        if isinstance(plan_files, GroupedFiles) and plan_files.grouped_under == "clusters":
            # Grouped by cluster already: which clusters have files, without their paths.
            with_files = {name for name, files in plan_files.directories().items() if files}
            loose = plan_files.loose()
        for path in loose:
            # Every path is checked whole when its tree is built; here only where it goes.
            top, _, rest = path.partition("/")
            if top == "clusters":
                name, _, inside = rest.partition("/")
                if not inside:
                    raise ValueError(f"{path!r}: cluster files live under clusters/<name>/")
                with_files.add(name)
        self._check_cluster_names(listed | with_files)
        limits = dict(prune_limits or {})
        self._check_cluster_names(limits)
        for name, n in limits.items():
            if int(n) < 0:
                raise ValueError(f"prune limit of {name} must be >= 0")
        base = self._tree_of(current) if current is not None else None
        tree_id = build_tree(self.repo, plan_files, base=base, batch=batch, trees=dirs)
        # Clusters without files are recorded so fan_out(plan commit) alone can replay this.
        empty = (listed | set(limits)) - with_files
        return tree_id, _FanOutPlan(sorted(empty), {k: int(v) for k, v in limits.items()})

    def _check_cluster_names(self, names: Iterable[str]) -> None:
        """``cluster_ref`` of each name, once per name for the life of the store: a decision
        lists every cluster of the fleet, and the names barely change between decisions."""
        for name in names:
            if name not in self._branch_names:
                self.cluster_ref(name)
                self._branch_names.add(name)

    def _refs_under(self, prefix: str) -> list[str]:
        """Ref names starting with ``prefix``. One listing in libgit2: iterating the
        references in Python costs a call per ref, and a fleet has one per cluster."""
        wanted = prefix.encode()
        return [name.decode(errors="replace") for name in self.repo.raw_listall_references()
                if name.startswith(wanted)]

    @property
    def _sign(self) -> Callable[[bytes], bytes] | None:
        """How a commit's content is signed (None: unsigned)."""
        return None if self.signer is None else self.signer.sign_commit

    def _update_refs(self, updates: Mapping[str, tuple[pygit2.Oid | None, pygit2.Oid | None]], message: str) -> None:
        """``cas_update_refs`` on this repository, remembering the refs in ``moved``."""
        cas_update_refs(self.repo, updates, message)
        self.moved.update(updates)

    def _check_generation(self, parent: pygit2.Oid | None, meta: DecisionMeta) -> None:
        if parent is None:
            return
        if self._written is not None and self._written.commit == str(parent):
            generation = self._written.generation
        else:
            try:
                generation = _decision_of(self.repo, self.repo[parent].peel(pygit2.Commit)).generation
            except ValueError:
                return  # a plan commit without our trailers (hand-made): nothing to compare
        if meta.generation <= generation:
            raise GenerationConflict(
                f"generation {meta.generation} does not increase over the plan head's "
                f"generation {generation} ({parent})"
            )

    def _recorded_fan(self, commit: pygit2.Oid) -> _FanOutPlan:
        """``_recorded_fan`` of a plan commit, from memory when this store wrote it."""
        if self._written is not None and self._written.commit == str(commit):
            return self._written.fan
        return _recorded_fan(self.repo[commit].peel(pygit2.Commit))

    def _tree_of(self, commit: pygit2.Oid) -> pygit2.Oid:
        """The tree id of a commit, from memory when it is the plan commit this store wrote."""
        if self._written is not None and self._written.commit == str(commit):
            return self._written.tree
        return self.repo[commit].peel(pygit2.Commit).tree_id

    def _proposal(self, proposal_id: str) -> Proposal:
        ref = self.proposal_ref(proposal_id)
        target = _ref_target(self.repo, ref)
        if target is None:
            prefix = f"refs/heads/{self.proposal_prefix}"
            open_ids = [n[len(prefix):] for n in self._refs_under(prefix)]
            raise ProposalNotFound(
                f"no open proposal {proposal_id!r} (open: {', '.join(sorted(open_ids)) or 'none'})"
            )
        commit = self.repo[target].peel(pygit2.Commit)
        base = str(commit.parent_ids[0]) if commit.parent_ids else None
        return Proposal(
            id=proposal_id,
            ref=ref,
            commit=str(commit.id),
            base=base,
            summary=commit.message.splitlines()[0],
            description=tr.message_body(commit.message),
            meta=_decision_of(self.repo, commit),
            stale=base != self.plan_head(),
        )

    def _close_all(self, ids: Sequence[str], note: str, timestamp: int) -> list[str]:
        closed: list[str] = []
        for pid in ids:
            closed += self._close(pid, note, timestamp)
        return closed

    def _close(self, proposal_id: str, note: str, timestamp: int) -> list[str]:
        """Delete the proposal branch and keep ``refs/qonnect/closed/<id>``: a tag saying why."""
        ref = self.proposal_ref(proposal_id)
        target = _ref_target(self.repo, ref)
        if target is None:
            return []
        tagger = self.identity.signature(timestamp)
        raw = (
            f"object {target}\ntype commit\ntag qonnect-closed-{proposal_id}\n"
            f"tagger {tagger.name} <{tagger.email}> {tagger.time} +0000\n\n{note}\n"
        )
        tag = self.repo.odb.write(pygit2.enums.ObjectType.TAG, raw.encode())
        closed_ref = f"{CLOSED_NAMESPACE}{proposal_id}"
        self._update_refs(
            {ref: (target, None), closed_ref: (_ref_target(self.repo, closed_ref), tag)},
            f"qonnect: close proposal {proposal_id}",
        )
        log.info("proposal_closed", proposal=proposal_id, note=note)
        return [proposal_id]


def _check_id(proposal_id: str) -> None:
    if not _ID_RE.match(proposal_id) or ".." in proposal_id or proposal_id.endswith(".lock"):
        raise ValueError(f"proposal id {proposal_id!r}: use letters, digits, '.', '_' and '-'")


def _summary(repo: pygit2.Repository, oid: pygit2.Oid) -> str:
    return repo[oid].peel(pygit2.Commit).message.splitlines()[0]


def _decision_of(repo: pygit2.Repository, commit: pygit2.Commit) -> DecisionMeta:
    """Trailers of a plan commit; for a merge without them (a forge merge), the merged side's."""
    found = tr.parse_trailers(commit.message)
    try:
        return DecisionMeta.from_trailers(found)
    except ValueError:
        if len(commit.parents) < 2:
            raise
    for parent in reversed(commit.parents):
        try:
            return DecisionMeta.from_trailers(tr.parse_trailers(parent.message))
        except ValueError:
            continue
    raise ValueError(f"commit {commit.id} and its merged parents carry no Qonnect trailers")


def _recorded_fan(commit: pygit2.Commit) -> _FanOutPlan:
    """Empty clusters and prune limits recorded in a plan commit (or its merged side)."""
    messages = [commit.message] + [p.message for p in commit.parents[1:]]
    empty: list[str] = []
    limits: dict[str, int] = {}
    for message in messages:
        found = tr.parse_trailers(message)
        empty += tr.trailer_values(found, tr.EMPTY_CLUSTER)
        for value in tr.trailer_values(found, tr.PRUNE_LIMIT):
            name, _, n = value.partition("=")
            if not n.isdigit():
                raise GitStoreError(f"bad {tr.PRUNE_LIMIT} trailer {value!r} in plan commit {commit.id}")
            limits[name] = int(n)
        if found:
            break
    return _FanOutPlan(sorted(set(empty) | set(limits)), limits)


def _fan_trailers(fan: _FanOutPlan) -> list[tuple[str, str]]:
    out = [(tr.EMPTY_CLUSTER, name) for name in fan.clusters]
    out += [(tr.PRUNE_LIMIT, f"{name}={n}") for name, n in sorted(fan.prune_limits.items())]
    return out


def _entries(repo: pygit2.Repository, tree_id: pygit2.Oid | None,
             batch: ObjectBatch | None = None) -> Mapping[str, tuple[int, bytes]]:
    """``tree_entries`` of a tree (written, or queued in ``batch``), none for None (a plan
    without cluster files)."""
    return {} if tree_id is None else tree_entries(repo, tree_id, batch)


def _cluster_subtrees(repo: pygit2.Repository, tree: pygit2.Tree) -> dict[str, pygit2.Oid]:
    """Each ``clusters/<name>`` directory of a plan tree and its tree id, read at once."""
    return directories_under(repo, tree, "clusters")
