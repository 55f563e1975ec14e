"""The leader's side of forge review (``spec.review.forge``), behind a few calls from the loop.

* **Proposals as pull requests** (``after_cycle``): every open proposal branch gets a pull
  request into the plan branch, titled with the decision summary, described with its
  markdown table, labelled ``qonnect``. A pull request whose proposal left the branch list
  (superseded, approved with ``qonnect approve``, stale) is closed with a comment linking
  its successor. A merged pull request moved the plan branch, which the cycle already
  follows; its proposal is closed in Git as merged. A pull request closed without merging
  rejects the proposal: recorded in the Knowledge Base (``may_propose`` then withholds
  the same decision for the same goals commit and plan in force) and closed in Git.
* **Previews** (``on_webhook`` + a worker thread): a pull request against the goals
  branch gets one comment with ``qonnect preview``'s markdown, updated in place on every
  push, and the commit status ``qonnect/validate`` on its head. Each preview runs in a
  child process with CPU, memory and time limits (``forge.sandbox``): a hostile head fails
  its own preview and nothing else, and the worker outlives any error.
* **What runs** (``tick``): the newest planned goals commit on main carries
  ``qonnect/placed``: pending while clusters apply their generation, success when every
  cluster reports it applied and healthy, failure with refusals and unmet goals.

Only the leader talks to the forge; every call is best effort (a forge outage never stops
a cycle) and rate limits are honoured by waiting until the forge's reset time. Which forges
exist, where they are and their tokens is the lead's own configuration (``ReviewConfig``:
``qonnect lead --forges FILE``); goals only select one by name.
"""

from __future__ import annotations

import hashlib
import json
import queue
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from qonnect_gitops.forge import (
    CommitState,
    CommitStatus,
    Forge,
    ForgeError,
    ForgeRateLimited,
    ForgeSettings,
    PullRequest,
    PullRequestDraft,
    PullState,
    connect,
    find_forge,
    read_token,
    unknown_forge,
)
from qonnect_gitops.forge.base import STATUS_DESCRIPTION_MAX, clip
from qonnect_gitops.forge.events import (
    PullAction,
    PullRequestEvent,
    parse_pull_request_event,
)
from qonnect_gitops.forge.preview import MARKER, Preview, preview_markdown, unmet_items, unmet_line
from qonnect_gitops.forge.sandbox import SandboxLimits, preview_sandboxed
from qonnect_gitops.gitstore import (
    DecisionMeta,
    GitStoreError,
    resolve_commit,
)
from qonnect_gitops.gitstore.proposals import pull_request_for
from qonnect_gitops.gitstore.remote import (
    Mirror,
    credentials_from_env,
    fetch_for_review,
)
from qonnect_gitops.lead.reconcile import placement_document
from qonnect_gitops.logs import get_logger
from qonnect_gitops.model import Goals, Plan
from qonnect_gitops.model.limits import TreeLimits
from qonnect_gitops.model.status import HealthReason
from qonnect_gitops.render.placement_file import placement_files

if TYPE_CHECKING:
    from qonnect_gitops.kb import KBReader
    from qonnect_gitops.lead.raft.node import RaftNode
    from qonnect_gitops.lead.reconcile import CycleResult

log = get_logger(__name__)


class ReviewSettings(Protocol):
    """The loop's settings the bridge reads (``lead.loop.LoopConfig`` has them)."""

    @property
    def repo(self) -> str: ...
    @property
    def mirror_dir(self) -> Path: ...
    @property
    def api_url(self) -> str | None: ...
    @property
    def goals_limits(self) -> TreeLimits: ...
    @property
    def review(self) -> ReviewConfig: ...


class LeaderLoop(Protocol):
    """What the bridge needs of the leader's reconcile loop (``lead.loop.ReconcileLoop``),
    so this module does not import it."""

    @property
    def config(self) -> ReviewSettings: ...

    def may_write(self, term: int) -> bool:
        """Whether this lead still leads in ``term`` with a quorum (its fence)."""
        ...

    def trigger(self, why: str) -> None:
        """Run a cycle soon."""
        ...

LABEL = "qonnect"
VALIDATE_CONTEXT = "qonnect/validate"
PLACED_CONTEXT = "qonnect/placed"
TICK_SECONDS = 2.0
PLACED_TIMEOUT = 600.0  # a generation not applied everywhere within this long fails its status
REVIEW_CACHE = "review-cache.git"
MAX_QUEUED_PREVIEWS = 64


@dataclass(frozen=True)
class ReviewConfig:
    """The lead's own side of forge review: the forges goals may select by name (``qonnect
    lead --forges FILE``), and what one preview may take (``--preview-cpu-seconds``...)."""

    forges: tuple[ForgeSettings, ...] = ()
    previews: SandboxLimits = field(default_factory=SandboxLimits)


def rejection_key(goals_commit: str, base: str | None, plan: Plan) -> str:
    """Identifies "the same decision from the same inputs": goals commit, plan in force, and
    the placement and unplaced replicas decided (reasons and timestamps left out)."""
    data = {"goals": goals_commit, "base": base, "placements": plan.placements(),
            "unplaced": sorted((u.component, u.replicas) for u in plan.unplaced)}
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:32]


@dataclass
class _Placed:
    """The ``qonnect/placed`` status of one goals commit while it settles."""

    goals_commit: str
    generation: int
    required: dict[str, int]  # cluster -> generation its branch head carries
    unmet: list[str]
    waiting_for: str | None = None  # a proposal under review, when there is one
    rejected: str | None = None  # the pull request a reviewer closed without merging
    since: float = field(default_factory=time.time)
    sent: tuple[str, str] | None = None  # (state, description) last set on the forge
    final: bool = False


def unmet_section(mirror: Mirror, commit: str, description: str) -> str:
    """The goals a proposed plan cannot meet (``Plan.unmet``, where the model has it), for
    a pull request body whose table does not list them yet; "" when there are none."""
    if "Unmet" in description:
        return ""
    try:
        document = placement_document(mirror.repo, commit)
        if document is None:
            return ""
        proposed = Plan.model_validate(document)
    except ValueError:  # PlacementFileError, ValidationError
        return ""
    unplaced = len(proposed.unplaced)
    items = unmet_items(proposed)[: len(unmet_items(proposed)) - unplaced]  # unplaced: already in the table
    if not items:
        return ""
    return "\n".join(["", "", "#### Unmet goals", "", *(unmet_line(item) for item in items)])


def validate_status(result: Preview) -> tuple[CommitState, str]:
    """The ``qonnect/validate`` status of a previewed head: success with what moves, or
    failure with the first problem (or why the preview was stopped)."""
    if result.stopped is not None:
        return CommitState.FAILURE, clip(result.stopped, STATUS_DESCRIPTION_MAX)
    if result.valid:
        text = f"valid: {len(result.changes)} component(s) change placement"
        if result.unmet:
            text += f", {len(result.unmet)} unmet goal(s)"
        return CommitState.SUCCESS, text
    more = f" (+{len(result.errors) - 1} more)" if len(result.errors) > 1 else ""
    return CommitState.FAILURE, clip(result.errors[0], STATUS_DESCRIPTION_MAX - len(more)) + more


def cluster_progress(entry: Any) -> tuple[int, bool, list[str]]:
    """From a cluster's latest report in the KB: the generation it applied, whether all its
    components are healthy, and the reasons of the refusals that stopped a commit.

    Left out: ``StaleGeneration`` (an old branch, not a failure of this one) and refusals of
    the very commit the agent applied. Those are prunes it declined (a protected kind such
    as a Namespace stays when its last component moves away): the commit runs, and the
    agent repeats them on every later pass, so counting them would fail every next
    generation before the agent even fetched it. The one place that reads reports here:
    it takes the KB's plain-dict entries and its typed ``StoredReport`` records."""
    if entry is None:
        return 0, False, []
    record = getattr(entry, "record", None)
    if record is not None:  # kb.records.StoredReport
        applied = record.applied
        generation = applied.generation if applied is not None else 0
        healthy = all(c.healthy for c in record.components)
        applied_commit = applied.commit if applied is not None else None
        refusals = [(str(r.reason), r.commit) for r in record.refusals]
    else:
        report = entry.get("report") or {}
        applied_json = report.get("applied") or {}
        generation = int(applied_json.get("generation") or 0)
        healthy = all(c.get("healthy", True) for c in report.get("components") or ())
        applied_commit = applied_json.get("commit")
        refusals = [(str(r.get("reason")), r.get("commit")) for r in report.get("refusals") or ()]
    return generation, healthy, [reason for reason, commit in refusals
                                 if reason != "StaleGeneration" and (commit is None or commit != applied_commit)]


def unschedulable_components(entry: Any) -> list[str]:
    """The components a cluster's last report says can never schedule there
    (``HealthReason.UNSCHEDULABLE``): the plan relied on something the cluster lacks."""
    if entry is None:
        return []
    record = getattr(entry, "record", None)
    if record is not None:
        return [c.component for c in record.components if c.reason == HealthReason.UNSCHEDULABLE]
    report = entry.get("report") or {}
    return [str(c.get("component")) for c in report.get("components") or ()
            if c.get("reason") == HealthReason.UNSCHEDULABLE]


class ReviewBridge:
    """See the module docstring. Created by the loop; every public method is safe to call
    whatever the configuration (without a forge they do nothing)."""

    def __init__(self, node: RaftNode, kb: KBReader, loop: LeaderLoop) -> None:
        self.node = node
        self.kb = kb
        self.loop = loop
        self._lock = threading.RLock()
        self._settings: ForgeSettings | None = None  # the configured forge the goals select
        self._selected: str | None = None  # spec.review.forge.name of the last goals
        self._status_base: str | None = None  # spec.review.forge.statusUrl of the last goals
        self._forge: Forge | None = None
        self._branches: tuple[str, str] = ("qonnect/plan", "qonnect/proposals/")
        self.last_error: str | None = None
        self._retry_at = 0.0
        self._pulls: dict[str, dict[str, Any]] = {}  # proposal id -> {number, url, state}
        self._placed: _Placed | None = None
        self._previews: dict[int, dict[str, Any]] = {}  # pull number -> {comment, head, valid}
        self._queue: queue.Queue[PullRequestEvent | None] = queue.Queue(MAX_QUEUED_PREVIEWS)
        self._stop = threading.Event()
        self._worker = threading.Thread(target=self._preview_worker, name="review-previews", daemon=True)
        self._worker.start()

    # ------------------------------------------------------------ configuration

    def on_goals(self, goals: Goals) -> None:
        """Valid goals were read: (re)connect when the forge they select changed."""
        spec = goals.fleet.spec
        with self._lock:
            self._branches = (spec.branches.plan, spec.branches.proposal_prefix)
            selected = spec.review.forge.name if spec.review.forge is not None else None
            self._status_base = spec.review.forge.status_url if spec.review.forge is not None else None
            settings = find_forge(self.loop.config.review.forges, selected) if selected else None
            if (selected, settings) == (self._selected, self._settings) and (
                    self._forge is not None or settings is None):
                return
            self._selected, self._settings, self._forge = selected, settings, None
            if selected is not None and settings is None:
                self._error("forge_unknown", ValueError(unknown_forge(self.loop.config.review.forges, selected)))
                return
            if settings is None:
                return
            try:
                self._forge = connect(settings, read_token(settings))
                self.last_error = None
                log.info("forge_configured", name=settings.name, type=settings.type, repository=settings.repository)
            except (ForgeError, ValueError) as exc:
                self._error("forge_unusable", exc)

    def _client(self) -> Forge | None:
        """The forge, when configured, reachable by this lead and not rate limited."""
        with self._lock:
            if self._forge is None or time.time() < self._retry_at:
                return None
            if not self.loop.may_write(self.node.term()):
                return None
            return self._forge

    def _error(self, event: str, exc: Exception) -> None:
        self.last_error = str(exc)
        if isinstance(exc, ForgeRateLimited):
            self._retry_at = exc.retry_at
        if isinstance(exc, ForgeError) and exc.status == 401:
            with self._lock:
                self._forge = None  # the token was refused: read it again at the next cycle
        log.warning(event, error=str(exc))

    # -------------------------------------------------------------- proposals

    def may_propose(self, goals_commit: str, base: str | None, plan: Plan) -> bool:
        """False when a reviewer rejected this decision for these inputs (KB record)."""
        key = rejection_key(goals_commit, base, plan)
        rejected = self.kb.read(lambda kb: key in getattr(kb, "rejected_proposals", {}))
        return not rejected

    def after_cycle(self, mirror: Mirror, result: CycleResult, term: int) -> None:
        """Bring pull requests and ``qonnect/placed`` in line with what the cycle left in Git.
        Never raises: the cycle is done whatever the forge says."""
        try:
            self._track_placed(mirror, result)
            forge = self._client()
            if forge is not None and not self._ensure_plan_branch(mirror, result, term):
                self._sync_pulls(forge, mirror, term)
        except ForgeError as exc:
            self._error("forge_sync_failed", exc)
        except (GitStoreError, OSError, ValueError) as exc:
            self._error("review_sync_failed", exc)

    def _ensure_plan_branch(self, mirror: Mirror, result: CycleResult, term: int) -> bool:
        """A pull request needs a base branch: before the first decision of a review-mode
        fleet, write a plan commit that places nothing (generation 0) and propose again on it.
        True when it did (the proposal made without a base is superseded by it)."""
        store = mirror.store
        if store.plan_head() is not None or not any(p.base is None for p in store.list_proposals()):
            return False
        if not self.loop.may_write(term):
            return False
        empty = Plan(reason="initial", components={})
        store.write_decision(placement_files(empty), summary="qonnect: plan branch created, nothing placed yet",
                             body="Review mode with a forge: pull requests of proposals need a base branch. "
                                  "This commit places nothing; the first proposal follows as a pull request.",
                             meta=DecisionMeta(result.goals_commit, term, 0, "initial"), clusters=(),
                             timestamp=int(time.time()), expected_plan=None)
        mirror.publish()
        log.info("plan_branch_created_for_review", goals=result.goals_commit[:12])
        self.loop.trigger("review")
        return True

    def _sync_pulls(self, forge: Forge, mirror: Mirror, term: int) -> None:
        store = mirror.store
        plan_branch, prefix = self._branches
        open_pulls = {p.head_branch: p for p in forge.find_pull_requests()
                      if p.head_branch.startswith(prefix) and p.base_branch == plan_branch}
        proposals = store.list_proposals()
        changed_git = False
        newest: PullRequest | None = None
        for proposal in proposals:
            branch = proposal.ref.removeprefix("refs/heads/")
            pull = open_pulls.pop(branch, None)
            if pull is None:
                previous = forge.find_pull_requests(branch, only_open=False)
                pull = previous[0] if previous else None
            if pull is not None and pull.state is PullState.MERGED:
                store.close_proposal(proposal.id, f"merged on the forge: {pull.url}")
                changed_git = True
            elif pull is not None and pull.state is PullState.CLOSED:
                self._reject(proposal, pull, mirror, term)
                changed_git = True
            elif proposal.stale:
                if pull is not None:
                    forge.comment(pull.number, "The plan branch moved since this proposal was made, so merging it "
                                  "would drop a newer decision. qonnect closed it; a fresh proposal follows if "
                                  "the decision still differs.")
                    pull = forge.close_pull_request(pull.number)
                store.close_proposal(proposal.id, "stale: the plan branch moved before it was reviewed")
                changed_git = True
            elif pull is None:
                request = pull_request_for(store, proposal)
                body = request.body + unmet_section(mirror, proposal.commit, request.body)
                pull = forge.open_pull_request(PullRequestDraft(request.head_branch, request.base_branch,
                                                                request.title, body, (LABEL,)))
                log.info("proposal_pull_request_opened", proposal=proposal.id, number=pull.number, url=pull.url)
            if pull is not None:
                self._pulls[proposal.id] = {"number": pull.number, "url": pull.url, "state": pull.state.value}
                if pull.state is PullState.OPEN and not proposal.stale:
                    newest = pull
        # What is left open on the forge has no open proposal any more: superseded or approved.
        closed_notes = {c.id: c.note for c in store.list_closed()}
        for branch, pull in open_pulls.items():
            pid = branch[len(prefix):]
            note = closed_notes.get(pid, "the proposal branch is gone")
            text = (f"Superseded by #{newest.number} ({newest.url})." if newest is not None
                    else f"qonnect closed this proposal: {note}.")
            forge.comment(pull.number, text)
            forge.close_pull_request(pull.number)
            self._pulls[pid] = {"number": pull.number, "url": pull.url, "state": PullState.CLOSED.value}
            log.info("proposal_pull_request_closed", proposal=pid, number=pull.number)
        if changed_git and self.loop.may_write(term):
            mirror.publish()

    def _reject(self, proposal: Any, pull: PullRequest, mirror: Mirror, term: int) -> None:
        """Closed without merging: record it in the KB, then close the proposal in Git."""
        meta = proposal.meta
        document = placement_document(mirror.repo, proposal.commit)
        decided = Plan.model_validate(document) if document else None
        if decided is not None and self.loop.may_write(term):
            key = rejection_key(meta.source, proposal.base, decided)
            self.node.commands.reject_proposal(key, proposal.id, meta.source, pull.url, time.time())
            log.info("proposal_rejected", proposal=proposal.id, number=pull.number, goals=meta.source[:12])
        with self._lock:
            if self._placed is not None and self._placed.goals_commit == meta.source:
                self._placed.rejected, self._placed.final = pull.url, False
        mirror.store.close_proposal(proposal.id, f"rejected: {pull.url} was closed without merging")

    # ----------------------------------------------------------------- placed

    def _track_placed(self, mirror: Mirror, result: CycleResult) -> None:
        """Start or refresh the ``qonnect/placed`` record of the goals commit just planned."""
        with self._lock:
            if self._settings is None:
                return
            store = mirror.store
            required: dict[str, int] = {}
            clusters = self.kb.read(lambda kb: sorted(kb.inventory))
            for cluster in clusters:
                head = store.cluster_head(cluster)
                if head is not None:
                    required[cluster] = store.decision_of(head).generation
            head = store.plan_head()
            meta = store.decision_of(head) if head is not None else None
            in_force = meta.source if meta is not None and meta.generation > 0 else None
            # Under review only while no plan computed from this goals commit is in force (a
            # later rescheduling proposal does not make the running placement pending again).
            waiting = None if in_force == result.goals_commit else next(
                (p.id for p in store.list_proposals() if p.meta.source == result.goals_commit and not p.stale), None)
            unmet = [f"{u.get('component')}: {u.get('reason') or u.get('detail') or u.get('goal')}"
                     for u in unmet_items(result.plan)]
            current = self._placed
            if current is not None and current.goals_commit != result.goals_commit and not current.final:
                self._send_placed(current, CommitState.ERROR,
                                  f"superseded by goals commit {result.goals_commit[:12]} before it was placed")
            if current is None or current.goals_commit != result.goals_commit:
                self._placed = _Placed(result.goals_commit, result.generation, required, unmet, waiting)
            elif (current.required, current.unmet, current.waiting_for) != (required, unmet, waiting):
                current.required, current.unmet, current.waiting_for = required, unmet, waiting
                current.generation, current.final, current.since = result.generation, False, time.time()
        self.tick()

    def tick(self) -> None:
        """Judge the tracked goals commit against the clusters' reports (scheduler job)."""
        with self._lock:
            placed = self._placed
            if placed is None or placed.final:
                return
            state, description = self._judge(placed)
            self._send_placed(placed, state, description)

    def _judge(self, placed: _Placed) -> tuple[CommitState, str]:
        if placed.rejected is not None:
            return CommitState.FAILURE, f"placement rejected in review ({placed.rejected}); the plan in force stays"
        if placed.waiting_for is not None:
            url = (self._pulls.get(placed.waiting_for) or {}).get("url")
            return CommitState.PENDING, f"awaiting review of proposal {placed.waiting_for}" + (f" ({url})" if url else "")
        if not placed.required:
            return CommitState.PENDING, "no plan in force yet"
        now = time.time()

        def read(kb: Any) -> dict[str, Any]:
            judged = kb.judge(now)[0]
            return {c: (kb.reports.get(c), c in judged and not judged[c].gone) for c in placed.required}

        seen = self.kb.read(read)
        applied, refused, waiting, stuck = [], [], [], []
        for cluster, generation in sorted(placed.required.items()):
            entry, healthy = seen[cluster]
            applied_generation, components_ok, refusals = cluster_progress(entry)
            done = applied_generation >= generation
            unschedulable = unschedulable_components(entry) if done else []
            if refusals and not done:
                refused.append(f"{cluster}: {refusals[0]}")
            elif unschedulable:
                # Waiting longer cannot help: the agent's grace for an autoscaler has passed.
                stuck.append(f"{cluster}: {', '.join(unschedulable)}")
            elif done and healthy and components_ok:
                applied.append(cluster)
            else:
                waiting.append(cluster)
        total = len(placed.required)
        if refused or stuck:
            text = "; ".join(([f"refused on {', '.join(refused)}"] if refused else [])
                             + ([f"{HealthReason.UNSCHEDULABLE} on {'; '.join(stuck)}"] if stuck else []))
            if placed.unmet:
                text += "; unmet: " + "; ".join(placed.unmet)
            return CommitState.FAILURE, text
        if waiting:
            if now - placed.since > PLACED_TIMEOUT:
                return CommitState.FAILURE, (f"generation {placed.generation} not applied and healthy within "
                                             f"{PLACED_TIMEOUT:.0f}s on: {', '.join(waiting)}")
            return CommitState.PENDING, (f"generation {placed.generation}: {len(applied)}/{total} clusters "
                                         "applied and healthy")
        if placed.unmet:
            return CommitState.FAILURE, f"applied on {total} clusters; unmet: " + "; ".join(placed.unmet)
        return CommitState.SUCCESS, f"generation {placed.generation} applied and healthy on {total} clusters"

    def _send_placed(self, placed: _Placed, state: CommitState, description: str) -> None:
        description = clip(description, STATUS_DESCRIPTION_MAX)
        if placed.sent == (state.value, description):
            return
        forge = self._client()
        if forge is None:
            return
        try:
            forge.set_status(placed.goals_commit, CommitStatus(PLACED_CONTEXT, state, description, self._status_url()))
        except ForgeError as exc:
            self._error("forge_status_failed", exc)
            return
        placed.sent = (state.value, description)
        placed.final = state is not CommitState.PENDING
        log.info("placed_status", commit=placed.goals_commit[:12], state=state.value, description=description)

    def _status_url(self) -> str | None:
        if self._status_base:
            return self._status_base.rstrip("/") + "/v1/status"
        # Statuses are set by the leader only, so its own advertised address is the leader's.
        api = self.loop.config.api_url
        return api.rstrip("/") + "/v1/status" if api else None

    def after_invalid_goals(self, commit: str, errors: Sequence[str]) -> None:
        """An invalid goals commit on main: ``qonnect/validate`` failure with the first error."""
        forge = self._client()
        if forge is None or not errors:
            return
        more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
        try:
            forge.set_status(commit, CommitStatus(VALIDATE_CONTEXT, CommitState.FAILURE,
                                                  clip(errors[0], STATUS_DESCRIPTION_MAX - len(more)) + more,
                                                  self._status_url()))
        except ForgeError as exc:
            self._error("forge_status_failed", exc)

    # ---------------------------------------------------------------- webhooks

    def on_webhook(self, headers: Mapping[str, str], body: bytes) -> bool:
        """A verified webhook; True when it is worth a reconcile cycle (pushes, proposal pull
        requests). Goals pull requests are queued for a preview."""
        event = parse_pull_request_event(headers, body)
        if event is None:
            return True  # a push (or an event we do not read): the cycle decides
        plan_branch, prefix = self._branches
        if event.head_branch.startswith(prefix) or event.base_branch == plan_branch:
            return True  # a proposal's pull request changed state
        if event.action in (PullAction.OPENED, PullAction.UPDATED) and event.base_branch == "main":
            try:
                self._queue.put_nowait(event)
            except queue.Full:
                log.warning("preview_queue_full", number=event.number)
        return False

    def _preview_worker(self) -> None:
        while not self._stop.is_set():
            try:
                event = self._queue.get(timeout=0.5)
            except queue.Empty:
                continue
            if event is None:
                return
            forge = self._client()
            if forge is None:
                continue
            try:
                self.preview_pull(forge, event.number)
            except (ForgeError, GitStoreError, OSError, ValueError) as exc:
                self._error("preview_failed", exc)
            except Exception as exc:  # noqa: BLE001 - one pull request must not end the previews of all
                log.error("preview_crashed", exc_info=True, number=event.number, error=repr(exc))
                self.last_error = f"preview of pull request {event.number} failed: {exc!r}"

    def preview_pull(self, forge: Forge, number: int) -> None:
        """Comment the preview of goals pull request ``number`` (in place) and set
        ``qonnect/validate`` on its head."""
        pull = forge.get_pull_request(number)
        if pull.state is not PullState.OPEN:
            return
        done = self._previews.get(number)
        url = self.loop.config.repo
        pull_ref = f"refs/merge-requests/{number}/head" if forge.kind == "gitlab" else f"refs/pull/{number}/head"
        cache = self.loop.config.mirror_dir.parent / REVIEW_CACHE
        repo = fetch_for_review(cache, url, [pull_ref], credentials_from_env(), branches=[pull.base_branch])
        base_sha = str(resolve_commit(repo, pull.base_branch).id)
        if done is not None and (done["head"], done["base"]) == (pull.head_sha, base_sha):
            return  # already previewed this head on this base
        try:
            head = resolve_commit(repo, pull.head_sha)
        except GitStoreError:
            head = resolve_commit(repo, f"refs/qonnect-review/{pull_ref[len('refs/'):]}")
        if str(head.id) != pull.head_sha:
            raise ValueError(f"pull request {number}: fetched head {head.id} is not the forge's {pull.head_sha}")
        now = datetime.now(tz=UTC)
        observed, current = self.kb.read(lambda kb: (kb.snapshot(now), kb.current_placement()))
        # The head is anyone's: read, validated and planned in a child under limits.
        result = preview_sandboxed(Path(repo.path), base_sha, pull.head_sha, current, observed,
                                   self.loop.config.goals_limits, self.loop.config.review.previews)
        body = preview_markdown(result, base_sha, pull.head_sha)
        comment_id = (done or {}).get("comment")
        if comment_id is None:
            comment_id = next((c.id for c in forge.list_comments(number) if c.body.startswith(MARKER)), None)
        if comment_id is None:
            comment_id = forge.comment(number, body).id
        else:
            forge.update_comment(number, comment_id, body)
        state, text = validate_status(result)
        forge.set_status(pull.head_sha, CommitStatus(VALIDATE_CONTEXT, state, text, self._status_url()))
        self._previews[number] = {"comment": comment_id, "head": pull.head_sha, "base": base_sha,
                                  "valid": result.valid}
        log.info("preview_commented", number=number, head=pull.head_sha[:12], valid=result.valid,
                 changes=len(result.changes))

    # ------------------------------------------------------------------ status

    def status(self) -> dict[str, Any]:
        """The review part of ``/v1/status`` (never the token)."""
        settings = self._settings
        placed = self._placed
        return {
            "forge": None if settings is None else {"name": settings.name, "type": settings.type,
                                                    "url": settings.url, "repository": settings.repository,
                                                    "connected": self._forge is not None},
            "lastError": self.last_error,
            "pullRequests": dict(self._pulls),
            "placed": None if placed is None else {"goalsCommit": placed.goals_commit,
                                                   "state": placed.sent[0] if placed.sent else None,
                                                   "description": placed.sent[1] if placed.sent else None},
            "previews": {str(k): {"head": v["head"], "valid": v["valid"]} for k, v in self._previews.items()},
        }

    def close(self) -> None:
        self._stop.set()
        try:
            self._queue.put_nowait(None)
        except queue.Full:
            pass


