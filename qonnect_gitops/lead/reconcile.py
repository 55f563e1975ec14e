"""One reconcile cycle: goals at ``main`` -> plan -> rendered trees -> plan and cluster branches.

This is the building block of the leader's loop and of ``qonnect reconcile --once``
(CI pipelines, small fleets without a lead group). Every ref update is a
compare-and-swap; an invalid goals commit writes nothing.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from qonnect_gitops.gitstore import (
    DecisionMeta,
    Proposal,
    RefChange,
    WriteResult,
    read_file,
    read_tree_files,
)
from qonnect_gitops.gitstore.errors import GitStoreError
from qonnect_gitops.gitstore.remote import Credentials, Mirror, PublishResult
from qonnect_gitops.gitstore.signing import CommitSigner, check_commit
from qonnect_gitops.gitstore.store import (
    DEFAULT_CLUSTER_PREFIX,
    DEFAULT_PLAN_BRANCH,
    DEFAULT_PROPOSAL_PREFIX,
)
from qonnect_gitops.gitstore.tree import (
    EMPTY_TREE_HEX,
    RepoLike,
    directories_under,
    list_tree_paths,
    resolve_commit,
    subtree_id,
    tree_id_of,
    tree_ids_under,
)
from qonnect_gitops.lead.memo import DecisionMemo, same_outcome
from qonnect_gitops.logs import get_logger
from qonnect_gitops.model import (
    CurrentPlacement,
    Goals,
    GoalsError,
    Observed,
    ParseCache,
    Plan,
    Problem,
    load_goals,
)
from qonnect_gitops.model.fleet import Fleet, GoalsPolicy
from qonnect_gitops.model.limits import DEFAULT_TREE_LIMITS, TreeLimits
from qonnect_gitops.model.loader import FLEET_FILE
from qonnect_gitops.model.parsing import load_documents
from qonnect_gitops.model.plan import DecisionReason
from qonnect_gitops.model.signers import AllowedSigner
from qonnect_gitops.placement.provision import plan_with_pools, with_members
from qonnect_gitops.render import RenderedPlan, render
from qonnect_gitops.render.describe import plan_markdown
from qonnect_gitops.render.placement_file import (
    PLACEMENT_DIR,
    PLACEMENT_FILE,
    PlacementFileError,
    file_of_field,
    load_placement,
)

log = get_logger(__name__)

ObservationSource = Callable[[Goals], Observed]


class Fenced(Exception):
    """The cycle was stopped before publishing: this lead may no longer write."""


@dataclass(frozen=True)
class CycleHooks:
    """Where the lead's loop plugs into one cycle (``qonnect reconcile --once`` uses none).

    * ``on_goals(commit, goals)``: valid goals were read (the loop records the inventory).
    * ``before_publish(result)``: called with the decision committed locally and before
      any push; raise ``Fenced`` to abort (nothing reaches the remote). The loop re-checks
      leadership and records the decision in the KB here.
    * ``between_pushes()``: after the plan branch was pushed and before the fan-out push,
      when a decision goes out in two pushes (``Mirror.publish``).
    * ``two_pushes()``: True publishes the decision before its fan-out even where one
      atomic push could carry both (the crash tests' ``between-pushes`` fault point: the
      fan-out must be finishable by the next leader).
    * ``may_propose(goals_commit, plan_head, plan)``: review mode only; False withholds the
      proposal (a reviewer rejected this decision for these inputs: ``lead.review``).
    """

    on_goals: Callable[[str, Goals], None] | None = None
    before_publish: Callable[[CycleResult], None] | None = None
    between_pushes: Callable[[], None] | None = None
    two_pushes: Callable[[], bool] | None = None
    may_propose: Callable[[str, str | None, Plan], bool] | None = None


@dataclass(frozen=True)
class DecisionWrite:
    """What a cycle writes with its decision, the same whether it goes straight to the
    plan branch or to a proposal for review."""

    summary: str
    meta: DecisionMeta
    clusters: tuple[str, ...]
    timestamp: int
    prune_limits: dict[str, int]
    expected_plan: str | None  # the plan head the cycle planned from (compare-and-swap)


@dataclass(frozen=True)
class CycleResult:
    """What one cycle decided and wrote."""

    goals_commit: str
    plan: Plan
    generation: int  # the generation written, or the one in force when nothing changed
    written: WriteResult | None = None
    proposal: Proposal | None = None
    published: PublishResult | None = None
    degraded: str | None = None  # why planning fell back to liveness only (see reconcile_once)

    @property
    def changed(self) -> bool:
        """Whether any ref moved in this cycle."""
        return bool(self.published and self.published.pushed) or bool(
            self.written and self.written.wrote_anything
        )

    @property
    def refs(self) -> tuple[RefChange, ...]:
        return self.published.pushed if self.published else ()


def open_mirror(path: str | Path, url: str, credentials: Credentials, goals: Goals | None = None,
                signer: CommitSigner | None = None) -> Mirror:
    """A mirror whose branch names follow the fleet settings (defaults before goals are known),
    signing what it writes with ``signer`` (``gitstore.signing``; None: unsigned)."""
    if goals is None:
        return Mirror(path, url, credentials, signer=signer)
    branches = goals.fleet.spec.branches
    return Mirror(path, url, credentials, plan_branch=branches.plan, cluster_prefix=branches.cluster_prefix,
                  proposal_prefix=branches.proposal_prefix, signer=signer)


def open_mirror_for_goals(path: str | Path, url: str, credentials: Credentials,
                          goals_limits: TreeLimits = DEFAULT_TREE_LIMITS,
                          signer: CommitSigner | None = None) -> Mirror:
    """A fetched mirror whose branch names are the ones the goals at main configure.

    The names live in the goals, so the first fetch uses the defaults; when the fleet
    names other branches the mirror is reopened with them.
    """
    mirror = open_mirror(path, url, credentials, signer=signer)
    mirror.fetch()
    commit = mirror.main_commit()
    if commit is None:
        return mirror
    try:
        goals = _goals_at(mirror, commit, goals_limits)
    except GoalsError:
        return mirror  # reconcile_once reports the problems
    branches = goals.fleet.spec.branches
    if (branches.plan, branches.cluster_prefix, branches.proposal_prefix) == (
        DEFAULT_PLAN_BRANCH, DEFAULT_CLUSTER_PREFIX, DEFAULT_PROPOSAL_PREFIX
    ):
        return mirror
    return open_mirror(path, url, credentials, goals, signer=signer)


_PLANS: dict[str, Plan] = {}  # decisions of the last plan commits read (immutable)
_PLANS_KEEP = 4


def placement_document(repo: RepoLike, rev: str) -> dict[str, Any] | None:
    """The decision document of a plan commit (what ``Plan.model_validate`` takes), from
    ``placement.yaml`` and its ``placement/`` shards, or from a ``placement.yaml`` written
    before the shards; None when the commit has no ``placement.yaml``. Raises
    ``PlacementFileError`` (file and field) for files that cannot be read."""
    header = read_file(repo, rev, PLACEMENT_FILE)
    if header is None:
        return None

    def shards() -> dict[str, bytes]:
        odd: list[str] = []
        files = read_tree_files(repo, rev, PLACEMENT_DIR, skipped=odd)
        if odd:  # a symlink or submodule would be a shard silently left out
            raise PlacementFileError(f"{odd[0]}: not a regular file")
        return files

    return load_placement(header, shards)


def plan_in_force(mirror: Mirror, head: str) -> Plan:
    """The decision of a plan commit (its ``placement.yaml`` and shards), parsed once per commit."""
    cached = _PLANS.get(head)
    if cached is not None:
        return cached
    try:
        doc = placement_document(mirror.repo, head)
        if doc is None:
            raise RuntimeError(f"the plan commit {head[:12]} has no {PLACEMENT_FILE}; refusing to "
                               "plan as if nothing ran")
        plan = Plan.model_validate(doc)
    except PlacementFileError as exc:
        # A plan we cannot read must not be mistaken for "nothing runs": refuse to plan.
        raise RuntimeError(f"the decision at {head[:12]} is unreadable: {exc}") from exc
    except ValidationError as exc:
        sharded = PLACEMENT_DIR in resolve_commit(mirror.repo, head).tree
        files = sorted({file_of_field(tuple(error["loc"]), sharded) for error in exc.errors()})
        raise RuntimeError(f"the decision at {head[:12]} is unreadable ({', '.join(files)}): {exc}") from exc
    if len(head) == 40:  # a commit id, never a branch name: what it names never changes
        _remember_plan(head, plan)
    return plan


def _remember_plan(commit: str, plan: Plan) -> None:
    while len(_PLANS) >= _PLANS_KEEP:
        del _PLANS[next(iter(_PLANS))]
    _PLANS[commit] = plan


def current_placement(mirror: Mirror) -> tuple[str | None, int, CurrentPlacement]:
    """The plan commit in force, its generation and its placement (empty before the first):
    what runs, when each component last moved, the size it was placed at, and the replicas
    still draining."""
    head, generation, plan = _in_force(mirror)
    return head, generation, plan.current() if plan else CurrentPlacement()


def _in_force(mirror: Mirror) -> tuple[str | None, int, Plan | None]:
    """The plan commit in force, its generation and its decision (None before the first)."""
    head = mirror.store.plan_head()
    if head is None:
        return None, 0, None
    meta = mirror.store.decision_of(head)
    return head, meta.generation, plan_in_force(mirror, head)


def unmet_of(plan: Plan) -> list[dict[str, str]]:
    """The goals a decision cannot meet, as the KB records them."""
    return [u.model_dump(mode="json") for u in plan.unmet]


def prune_limits(mirror: Mirror, head: str | None, rendered: RenderedPlan) -> dict[str, int]:
    """Per cluster, how many objects the new tree knowingly removes from the one in force."""
    if head is None:
        return {}
    # Only a cluster whose tree changed can lose objects: compare tree ids first (one read
    # of the old clusters tree, the new ids hashed in memory), then list just those.
    old_trees = directories_under(mirror.repo, resolve_commit(mirror.repo, head).tree, "clusters")
    new_trees = tree_ids_under(rendered.files, "clusters")
    fleet = set(rendered.clusters)
    changed = {c for c, tree in old_trees.items() if c in fleet and new_trees.get(c) != tree}
    if not changed:
        return {}
    limits: dict[str, int] = {}
    for cluster in sorted(changed):
        new = {f"clusters/{cluster}/{path}" for path in rendered.cluster_files(cluster)}
        removed = list_tree_paths(mirror.repo, head, f"clusters/{cluster}") - new  # names only
        if removed:
            limits[cluster] = len(removed)
    return limits


def same_decision(mirror: Mirror, commit: str | None, plan: Plan, rendered: RenderedPlan) -> bool:
    """Whether ``commit`` already holds this decision: the same cluster trees, the same
    placement and the same unplaced replicas. Reasons and timestamps may differ: a
    cycle that changes nothing but wording must write nothing.

    The cluster trees are compared by id: the new one is hashed in memory (as the
    decision writer would build it) and the old one is one tree lookup, so an idle cycle
    reads no blobs but the decision's (parsed once per commit)."""
    if commit is None:
        return False
    old_tree = subtree_id(mirror.repo, resolve_commit(mirror.repo, commit).tree, "clusters")
    if str(old_tree or EMPTY_TREE_HEX) != str(tree_id_of(rendered.files, "clusters") or EMPTY_TREE_HEX):
        return False
    try:
        previous = plan_in_force(mirror, commit)
    except RuntimeError:
        return False
    return same_outcome(previous, plan)


def _same_decision(mirror: Mirror, commit: str | None, plan: Plan, rendered: RenderedPlan,
                   memo: DecisionMemo | None) -> bool:
    """``same_decision``, answered from the memo when it knows ``commit`` holds ``rendered``."""
    if memo is not None and memo.held_by(commit, rendered):
        return True
    same = same_decision(mirror, commit, plan, rendered)
    if same and memo is not None and commit is not None:
        memo.holds(commit, rendered)
    return same


def finishes(mirror: Mirror, head: str | None, plan: Plan) -> bool:
    """Whether a decision only finishes the plan in force (the same target placement:
    draining replicas dropped, reasons or unmet goals reworded). In review mode such a
    decision needs no new review: the reviewer approved that target already."""
    if head is None:
        return False
    return plan_in_force(mirror, head).placements() == plan.placements()


def needs_review(goals: Goals, reason: DecisionReason) -> bool:
    """Review mode sends decisions to proposals, except failover when the fleet allows it."""
    review = goals.fleet.spec.review
    if review.mode != "pull-request":
        return False
    return not (reason == "failover" and review.failover == "auto")


def decision_summary(plan: Plan) -> str:
    """The one-line subject of a decision commit."""
    replicas = sum(sum(c.values()) for c in plan.placements().values())
    clusters = {c for placed in plan.placements().values() for c in placed}
    text = (f"{plan.reason}: {len(plan.components)} components, {replicas} replicas "
            f"on {len(clusters)} clusters")
    if plan.moves:
        text += f", {len(plan.moves)} moves"
    if plan.unplaced:
        text += f", {sum(u.replicas for u in plan.unplaced)} replicas unplaced"
    acted = [e for e in (plan.provisioning.events if plan.provisioning else ())
             if e.action in ("provision", "joined", "drain", "remove", "failed")]
    if acted:
        text += "; " + ", ".join(f"{e.action} {e.cluster}" for e in acted)
    return text


_GOALS: dict[tuple[str, TreeLimits], Goals] = {}  # the goals of the last commits read (a commit never changes)
_GOALS_KEEP = 2
# Files parsed for earlier commits, by blob id: a goals push re-parses only what it changed.
_PARSED = ParseCache()


def _goals_at(mirror: Mirror, commit: str, limits: TreeLimits) -> Goals:
    """The goals at a commit, loaded once: reusing the same (immutable) ``Goals`` object
    lets the planner keep what it derived from it between cycles."""
    goals = _GOALS.get((commit, limits))
    if goals is None:
        goals = load_goals(mirror.read_goals(commit), _PARSED, limits)  # raises GoalsError: not in _GOALS
        while len(_GOALS) >= _GOALS_KEEP:
            del _GOALS[next(iter(_GOALS))]
        _GOALS[(commit, limits)] = goals
    return goals


def check_goals_signed(mirror: Mirror, commit: str, trusted_goals: str | None) -> None:
    """Refuse (``GoalsError``, nothing planned) a goals commit that ``spec.goals.requireSignedCommits``
    says must be signed and that is not signed by one of the ``allowedSigners``.

    A commit is judged by the policy in force, never by its own. The policy in force starts
    as that of ``trusted_goals`` (the last good goals commit the lead group recorded) or,
    without one, of the goals commit the plan in force was computed from, when that plan
    commit carries this writer's own signature (anyone with push access could write an
    unsigned one naming any source). The commits on ``main`` between it and ``commit``
    (first parents, at most ``MAX_GOALS_WALK``) are replayed in order: one that passes the
    policy in force puts its own in force, one that does not changes nothing. So an unsigned
    commit can neither switch the requirement off nor add its author's key: those changes,
    like any other, need a signature by a key already allowed, and a key added by one
    signed commit may sign the next even when both arrive in one push. Where no policy is
    known (a new fleet), a commit is judged by its own ``qonnect.yaml``: a commit that turns
    the requirement on must be signed by one of the keys it lists. The commit in force is not
    judged again. Only ``qonnect.yaml`` is read for a policy (one small file per commit
    replayed); the goals of ``commit`` are validated whole afterwards, as without the check."""
    anchor = trusted_goals or _trusted_plan_source(mirror)
    if commit == anchor:
        return
    policy = _signing_policy(mirror, anchor) if anchor is not None else None
    for earlier in _goals_commits_between(mirror, anchor, commit)[:-1]:
        if _signature_refusal(mirror, earlier, policy) is None:
            policy = _signing_policy(mirror, earlier) or policy
    refusal = _signature_refusal(mirror, commit, policy)
    if refusal is not None:
        raise refusal


MAX_GOALS_WALK = 100
"""Most commits of ``main`` replayed by ``check_goals_signed``; further back, only the newest is judged."""


def _goals_commits_between(mirror: Mirror, anchor: str | None, commit: str) -> list[str]:
    """The first-parent commits after ``anchor`` up to ``commit``, oldest first; just
    ``[commit]`` when ``anchor`` is not among its last ``MAX_GOALS_WALK`` first parents."""
    path = [commit]
    current = resolve_commit(mirror.repo, commit)
    while anchor is not None and len(path) <= MAX_GOALS_WALK and current.parent_ids:
        parent = str(current.parent_ids[0])
        if parent == anchor:
            return path[::-1]
        path.append(parent)
        try:
            current = resolve_commit(mirror.repo, parent)
        except GitStoreError:
            break  # history not in the mirror
    return [commit]


def _signing_policy(mirror: Mirror, commit: str) -> GoalsPolicy | None:
    """``spec.goals`` of ``qonnect.yaml`` at ``commit``; None when it cannot be read (the
    whole goals are validated, and their errors reported, where they are planned)."""
    try:
        raw = read_file(mirror.repo, commit, FLEET_FILE)
        docs = load_documents(FLEET_FILE, raw) if raw is not None else []
        return Fleet.model_validate(docs[0]).spec.goals if len(docs) == 1 else None
    except (GoalsError, GitStoreError, ValidationError, ValueError) as exc:
        log.debug("goals_policy_unreadable", commit=commit[:12], error=str(exc)[:200])
        return None


def _signature_refusal(mirror: Mirror, commit: str, policy: GoalsPolicy | None) -> GoalsError | None:
    """Why ``commit`` may not be planned: not signed as ``policy`` requires or, when that
    requires nothing, as the commit's own ``qonnect.yaml`` does; None when it may."""
    if policy is not None and policy.require_signed_commits:
        return _unless_signed(mirror, commit, policy, "the goals in force")
    own = _signing_policy(mirror, commit)
    if own is not None and own.require_signed_commits:
        return _unless_signed(mirror, commit, own, "this commit's own qonnect.yaml (no policy was in force)")
    return None


def _trusted_plan_source(mirror: Mirror) -> str | None:
    """The goals commit the plan in force was computed from, when the plan commit is signed
    by the key this mirror signs with; None otherwise (no plan, no key, another signer)."""
    head, signer = mirror.store.plan_head(), mirror.store.signer
    if head is None or signer is None:
        return None
    if not check_commit(resolve_commit(mirror.repo, head), (AllowedSigner(signer.public),)).trusted:
        return None
    try:
        return mirror.store.decision_of(head).source
    except ValueError:
        return None  # a plan commit without our trailers: no source to name


def _unless_signed(mirror: Mirror, commit: str, policy: GoalsPolicy, whose: str) -> GoalsError | None:
    check = check_commit(resolve_commit(mirror.repo, commit), policy.signers())
    if check.trusted:
        log.debug("goals_signature_trusted", commit=commit[:12], signer=check.signer.name if check.signer else "")
        return None
    names = ", ".join(sorted({s.name for s in policy.signers()}))
    return GoalsError([Problem(
        path=f"commit {commit[:12]}", line=None, column=None, field="spec.goals.requireSignedCommits",
        message=f"{check.message}; {whose} allows only goals commits signed by {names}; "
                "not planned, the plan in force stays")])


def reconcile_once(
    mirror: Mirror,
    observe: ObservationSource,
    *,
    now: datetime,
    term: int = 0,
    describe: Callable[[Plan], str] = plan_markdown,
    hooks: CycleHooks = CycleHooks(),
    fallback: ObservationSource | None = None,
    memo: DecisionMemo | None = None,
    goals_limits: TreeLimits = DEFAULT_TREE_LIMITS,
    trusted_goals: str | None = None,
) -> CycleResult:
    """Fetch, validate, plan, render, write and publish once.

    Raises GoalsError (nothing written) when the goals at ``main`` are invalid, and
    StaleRef when another writer won a race: fetch again and call once more. With
    ``hooks.before_publish`` raising ``Fenced``, the local writes are left unpublished
    (the next fetch drops them). With ``fallback``, a failure to observe or plan with
    ``observe`` is retried once with ``fallback`` (the lead passes liveness only) and
    the result says why in ``degraded``: failover must not stop because of one bad
    measurement. With ``memo`` (the leader's), a cycle whose inputs equal the last one's
    reuses that decision and its rendering (``lead.memo``). Goals over ``goals_limits``
    are invalid (GoalsError), as is a commit not signed as ``spec.goals.requireSignedCommits``
    of the goals in force requires (``check_goals_signed``; ``trusted_goals`` is the last good
    goals commit the caller knows).
    """
    mirror.fetch()
    goals_commit = mirror.main_commit()
    if goals_commit is None:
        raise RuntimeError(f"{mirror.display_url} has no main branch")
    check_goals_signed(mirror, goals_commit, trusted_goals)
    goals = _goals_at(mirror, goals_commit, goals_limits)
    if hooks.on_goals is not None:
        hooks.on_goals(goals_commit, goals)
    # The generation and the placement in force come from the plan branch: it is the
    # fenced source of truth, so a new leader (or a rebuilt lead group) resumes from it.
    head, generation, in_force = _in_force(mirror)
    current = in_force.current if in_force else CurrentPlacement
    # Cloud bursting resumes from the plan branch too: a new leader neither provisions
    # twice nor forgets a cluster (placement.provision).
    provisioning = in_force.provisioning if in_force else None
    degraded = None
    recalled: tuple[Plan, RenderedPlan] | None = None
    try:
        observed = observe(goals)
        recalled = memo.recall(goals, head, observed, now) if memo is not None else None
        decision = recalled[0] if recalled else plan_with_pools(goals, observed, current(), provisioning)
    except Exception as exc:  # a planner bug or a value it cannot take: plan on liveness
        if fallback is None:
            raise
        degraded = f"planning with measurements failed ({type(exc).__name__}: {exc}); planned from liveness only"
        log.error("plan_degraded", error=exc)
        decision = plan_with_pools(goals, fallback(goals), current(), provisioning)
    meta = DecisionMeta(source=goals_commit, term=term, generation=generation + 1,
                        reason=decision.reason)
    result = CycleResult(goals_commit, decision, generation, degraded=degraded)
    review = needs_review(goals, decision.reason) and not finishes(mirror, head, decision)
    open_proposals = [p for p in mirror.store.list_proposals() if p.base == head] if review else []
    baseline = open_proposals[-1].commit if open_proposals else head
    if recalled is not None:
        rendered = recalled[1]
        log.debug("decision_recalled", goals=goals_commit[:12], plan=head)
    else:
        # A fresh plan that found the decision the baseline already holds takes that
        # rendering: the whole fleet is neither rendered nor compared again (lead/memo.py).
        known = memo.rendering_for(goals, baseline, decision) if memo is not None and degraded is None else None
        rendered = known if known is not None else render(with_members(goals, decision.provisioning), decision)
        if memo is not None:
            if degraded is None:
                memo.remember(goals, head, observed, now, decision, rendered)
            else:
                memo.forget()  # a degraded plan is redone as soon as measurements allow
    if _same_decision(mirror, baseline, decision, rendered, memo):
        log.info("reconcile_unchanged", goals=goals_commit[:12], generation=generation)
        if head is not None:
            # Finish a fan-out an earlier cycle left, or follow a plan commit someone else
            # fast-forwarded (a merged proposal); current_placement validated it above.
            mirror.store.catch_up()
        result = CycleResult(goals_commit, decision, generation, degraded=degraded)
        published = _publish(mirror, result, hooks) if mirror.pending() else None
        return CycleResult(goals_commit, decision, generation, published=published, degraded=degraded)
    write = DecisionWrite(summary=decision_summary(decision), meta=meta, clusters=rendered.clusters,
                          timestamp=int(now.timestamp()), prune_limits=prune_limits(mirror, head, rendered),
                          expected_plan=head)
    if review and hooks.may_propose is not None and not hooks.may_propose(goals_commit, head, decision):
        log.info("proposal_withheld", goals=goals_commit[:12], reason="rejected-by-reviewer")
        if head is not None:
            mirror.store.catch_up()
        published = _publish(mirror, result, hooks) if mirror.pending() else None
        return CycleResult(goals_commit, decision, generation, published=published, degraded=degraded)
    if review:
        digest = hashlib.sha256(b"".join(p.encode() + b"\0" + b for p, b in rendered.files.items()))
        proposal = mirror.store.propose(f"g{generation + 1}-{digest.hexdigest()[:10]}", rendered.files,
                                        description=describe(decision), summary=write.summary,
                                        meta=write.meta, clusters=write.clusters, timestamp=write.timestamp,
                                        prune_limits=write.prune_limits, expected_plan=write.expected_plan)
        result = CycleResult(goals_commit, decision, generation, proposal=proposal)
    else:
        written = mirror.store.write_decision(rendered.files, body=describe(decision), summary=write.summary,
                                              meta=write.meta, clusters=write.clusters, timestamp=write.timestamp,
                                              prune_limits=write.prune_limits, expected_plan=write.expected_plan)
        if written.plan_commit is not None:
            generation += 1
            # Its decision files are this decision: the next cycle need not parse it back
            # (megabytes of YAML at fleet scale; tests/render/test_placement_file.py).
            _remember_plan(written.plan_commit, decision)
            if memo is not None:
                memo.holds(written.plan_commit, rendered)
        result = CycleResult(goals_commit, decision, generation, written=written)
    published = _publish(mirror, result, hooks) if mirror.pending() else None
    log.info("reconcile_cycle", goals=goals_commit[:12], reason=decision.reason,
             generation=generation, pushed=len(published.pushed) if published else 0)
    return CycleResult(result.goals_commit, decision, generation, result.written,
                       result.proposal, published, degraded)


def _publish(mirror: Mirror, result: CycleResult, hooks: CycleHooks) -> PublishResult:
    """Push the cycle's local writes, after ``before_publish`` allowed it."""
    if hooks.before_publish is not None:
        hooks.before_publish(result)
    two = hooks.two_pushes is not None and hooks.two_pushes()
    published = mirror.publish(between=hooks.between_pushes, atomic=not two)
    upkeep = mirror.upkeep()  # the branches are out: agents need not wait for this
    if upkeep is not None:
        log.debug("mirror_upkeep", seconds=round(upkeep, 3))
    return published
