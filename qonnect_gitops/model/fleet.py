"""``qonnect.yaml``: fleet-wide settings (kind ``Fleet``)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, model_validator

from qonnect_gitops.model.base import Header, Metadata, Name, UserModel
from qonnect_gitops.model.limits import MAX_DISRUPTION_BUDGET, MAX_SECONDS
from qonnect_gitops.model.signers import MAX_SIGNERS, AllowedSigner, parse_signer_line

_REF_FORBIDDEN = frozenset(" ~^:?*[\\")


def ref_name_problem(ref: str) -> str | None:
    """Why Git refuses ``ref`` as a reference name, by the rules of ``git check-ref-format``;
    None when it takes it."""
    for char in ref:
        if char < " " or char == "\x7f":
            return f"it holds the control character {char!r}"
        if char in _REF_FORBIDDEN:
            return f"it holds {char!r}"
    for sequence in ("..", "@{", "//"):
        if sequence in ref:
            return f"it holds {sequence!r}"
    if ref.startswith("/") or ref.endswith("/"):
        return "it starts or ends with '/'"
    if ref.endswith("."):
        return "it ends with '.'"
    for part in ref.split("/"):
        if part.startswith("."):
            return f"its part {part!r} starts with '.'"
        if part.endswith(".lock"):
            return f"its part {part!r} ends with '.lock'"
    if ref == "@":
        return "'@' alone is not a reference"
    return None


def branch_name_problem(branch: str) -> str | None:
    """Why Git refuses ``branch`` as a branch name (``git check-ref-format --branch``): the
    rules of ``refs/heads/<branch>``, and no leading '-' nor ``HEAD`` (Git would read either
    as something else); None when it takes it."""
    if branch.startswith("-"):
        return "it starts with '-'"
    if branch == "HEAD":
        return "'HEAD' is Git's own"
    return ref_name_problem(f"refs/heads/{branch}")


_ANY_CLUSTER = "x"
"""Stands for the cluster name after a prefix: names are RFC 1123 labels, which add nothing
Git refuses but a part ending in '.lock' (checked per cluster, ``cluster_branch_conflict``)."""


def _branch(value: str) -> str:
    why = branch_name_problem(value)
    if why:
        raise ValueError(f"{value!r} cannot be a Git branch name: {why}")
    return value


def _branch_prefix(value: str) -> str:
    why = branch_name_problem(f"{value}{_ANY_CLUSTER}")
    if not value or why:
        raise ValueError(f"{value!r} cannot start a Git branch name: {why or 'it is empty'}")
    return value


BranchName = Annotated[str, AfterValidator(_branch)]
BranchPrefix = Annotated[str, AfterValidator(_branch_prefix)]

HTTP_URL = r"^https?://[^\s/?#@]+(/[^\s?#]*)?$"
"""An http(s) URL without credentials, query or fragment."""

_MOVED_TO_THE_LEADS = ("type", "url", "repository", "tokenFile", "token_file")


class ReviewForge(UserModel):
    """Which forge shows proposals as pull requests, previews goals changes and carries commit
    statuses: one of the forges the leads are configured with, by name. Where a forge is,
    which repository and which token are the leads' own configuration (``qonnect lead
    --forges FILE``), never the goals': a goals author could otherwise make the leads read
    any file on their disks and send it, as the token, to any server."""

    name: Name = Field(description="The name of a forge in the leads' forges file (`qonnect lead --forges`).")
    status_url: str | None = Field(
        None,
        max_length=512,
        pattern=HTTP_URL,
        description="Public URL of the lead group's HTTP API; commit statuses link to "
        "`<statusUrl>/v1/status`. Default: the leader's advertised HTTP address.",
    )

    @model_validator(mode="before")
    @classmethod
    def _settings_moved_to_the_leads(cls, data: Any) -> Any:
        moved = [key for key in _MOVED_TO_THE_LEADS if isinstance(data, dict) and key in data]
        if moved:
            raise ValueError(
                f"{', '.join(moved)} no longer belong in goals: a goals author could make the leads "
                "send their forge token to any server, or read any file on their disks. Describe the "
                "forge (type, url, repository, tokenFile) in the leads' forges file (qonnect lead "
                "--forges FILE; see docs/review.md) and select it here by its name: forge: {name: <name>}")
        return data


class Review(UserModel):
    """How decisions reach the plan branch."""

    mode: Literal["auto", "pull-request"] = Field(
        "auto",
        description="`auto` writes each decision to the plan branch; `pull-request` pushes "
        "a proposal branch that a reviewer approves.",
    )
    failover: Literal["auto", "review"] = Field(
        "auto",
        description="`auto` lets failover decisions bypass review: a failed cluster cannot "
        "wait for a human.",
    )
    forge: ReviewForge | None = Field(
        None,
        description="Where pull requests, previews and commit statuses go. Without it, review "
        "works on branches and `qonnect approve`.",
    )


GOALS_BRANCH = "main"
"""The branch users push goals to and the leads read; no branch qonnect writes may touch it."""


def branches_collide(a: str, b: str) -> bool:
    """Whether Git cannot hold both branches, or they are the same: equal, or one is a
    directory of the other (``x`` and ``x/y``)."""
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")


class Branches(UserModel):
    """Names of the branches the leader writes. None may equal or nest with another, nor with
    the goals branch ``main``; a cluster whose branch would is refused in its own file."""

    plan: BranchName = Field("qonnect/plan", description="The branch holding every decision.")
    cluster_prefix: BranchPrefix = Field(
        "cluster/", description="Each cluster's agent follows `<clusterPrefix><cluster>`."
    )
    proposal_prefix: BranchPrefix = Field(
        "qonnect/proposals/", description="Review mode pushes `<proposalPrefix><id>`."
    )

    @model_validator(mode="after")
    def _distinct(self) -> Branches:
        if branches_collide(self.plan, GOALS_BRANCH):
            raise ValueError(f"plan branch '{self.plan}' collides with the goals branch '{GOALS_BRANCH}' "
                             "(the leader would overwrite the goals); expected another name, e.g. qonnect/plan")
        names = {self.plan, self.cluster_prefix, self.proposal_prefix}
        if len(names) != 3:
            raise ValueError("plan, clusterPrefix and proposalPrefix must all differ")
        if self.plan.startswith((self.cluster_prefix, self.proposal_prefix)):
            raise ValueError(
                f"plan branch '{self.plan}' must not start with a cluster or proposal prefix"
            )
        # Git cannot hold both `a` and `a/x` as branches.
        for fixed, what in ((self.plan, "the plan branch"), (GOALS_BRANCH, "the goals branch")):
            for prefix in (self.cluster_prefix, self.proposal_prefix):
                if prefix.startswith(fixed + "/") or prefix.rstrip("/") == fixed:
                    raise ValueError(
                        f"prefix '{prefix}' would nest branches under {what} '{fixed}'"
                    )
        if GOALS_BRANCH.startswith(self.proposal_prefix):
            raise ValueError(f"proposalPrefix '{self.proposal_prefix}' is the start of the goals branch "
                             f"'{GOALS_BRANCH}'; a proposal could overwrite it")
        for a, b in ((self.cluster_prefix, self.proposal_prefix),
                     (self.proposal_prefix, self.cluster_prefix)):
            if a.startswith(b):
                raise ValueError(f"prefix '{a}' lies inside prefix '{b}'; branches would collide")
        return self

    def cluster_branch(self, cluster: str) -> str:
        """The branch the agent of ``cluster`` follows."""
        return f"{self.cluster_prefix}{cluster}"

    def cluster_branch_conflict(self, cluster: str) -> str | None:
        """Why ``cluster``'s branch would collide with the goals or plan branch, or Git would
        refuse its name; None when it may be written."""
        branch = self.cluster_branch(cluster)
        why = branch_name_problem(branch)
        if why:
            return (f"cluster '{cluster}' would follow branch '{branch}' (clusterPrefix '{self.cluster_prefix}' "
                    f"+ name), which Git refuses: {why}; rename the cluster or change "
                    "spec.branches.clusterPrefix in qonnect.yaml")
        for fixed, what in ((GOALS_BRANCH, "the goals branch"), (self.plan, "the plan branch")):
            if branches_collide(branch, fixed):
                return (f"cluster '{cluster}' would follow branch '{branch}' (clusterPrefix "
                        f"'{self.cluster_prefix}' + name), which collides with {what} '{fixed}'; "
                        "rename the cluster or change spec.branches.clusterPrefix in qonnect.yaml")
        return None


class Heartbeat(UserModel):
    """How often agents report, and how long silence is tolerated before failover."""

    interval_seconds: float = Field(5.0, gt=0, le=MAX_SECONDS, description="Agents report this often.")
    grace_seconds: float = Field(
        20.0,
        gt=0,
        le=MAX_SECONDS,
        description="A cluster silent for longer is treated as failed and its replicas move.",
    )

    degraded_seconds: float | None = Field(
        None,
        gt=0,
        le=MAX_SECONDS,
        description="A cluster whose agent reports but whose API server is unreachable (or "
        "whose nodes are all not ready) fails over once this has lasted this long. Default: "
        "three times graceSeconds.",
    )
    recovery_seconds: float | None = Field(
        None,
        ge=0,
        le=MAX_SECONDS,
        description="A cluster back from silence or a sustained degradation takes new "
        "replicas only once it has been Ready this long. Default: graceSeconds.",
    )
    unhealthy_share: float = Field(
        0.55,
        gt=0,
        le=1,
        description="When at least this share of the clusters of a tier, a region (of three "
        "or more clusters) or the whole fleet is silent, the leads slow their evictions "
        "down (one per stormEvictionSeconds in a tier or region, none fleet-wide): the "
        "likelier fault is their own view.",
    )
    storm_eviction_seconds: float = Field(
        60.0,
        gt=0,
        le=MAX_SECONDS,
        description="While a tier or region is mostly silent, one of its silent clusters "
        "fails over per this many seconds, longest silent first.",
    )

    @model_validator(mode="after")
    def _grace_covers_interval(self) -> Heartbeat:
        if self.grace_seconds <= self.interval_seconds:
            raise ValueError(
                f"graceSeconds ({self.grace_seconds:g}) must be longer than intervalSeconds "
                f"({self.interval_seconds:g}), or one late report would trigger failover"
            )
        return self

    @property
    def effective_degraded_seconds(self) -> float:
        """``degradedSeconds``, or its default of three graces."""
        return self.degraded_seconds if self.degraded_seconds is not None else 3 * self.grace_seconds

    @property
    def effective_recovery_seconds(self) -> float:
        """``recoverySeconds``, or its default of one grace."""
        return self.recovery_seconds if self.recovery_seconds is not None else self.grace_seconds


class Stability(UserModel):
    """Guardrails against thrash; components may override them under ``qos.migration``."""

    cooldown_seconds: float = Field(
        300.0, ge=0, le=MAX_SECONDS, description="A component that moved does not move again for this long."
    )
    min_improvement: float = Field(
        0.1,
        ge=0,
        le=1,
        description="A move must improve the component's objective by at least this fraction.",
    )
    disruption_budget: int = Field(
        1,
        ge=1,
        le=MAX_DISRUPTION_BUDGET,
        description="At most this many replicas of one component move in one rescheduling "
        "cycle (failover is exempt).",
    )
    progress_deadline_seconds: float = Field(
        600.0,
        gt=0,
        le=MAX_SECONDS,
        description="Replicas placed on a cluster but not ready there after this long count "
        "as not running: the goal they serve is unmet and they are placed elsewhere where "
        "room exists (as a Deployment's progressDeadlineSeconds).",
    )


def _signer_line(value: str) -> str:
    parse_signer_line(value)  # SignersError is a ValueError: reported at the entry
    return value


SignerLine = Annotated[str, AfterValidator(_signer_line)]


class GoalsPolicy(UserModel):
    """Which goals commits the leader plans. With ``requireSignedCommits`` a commit on
    ``main`` must carry an SSH signature (``git commit -S`` with ``gpg.format=ssh``) by one
    of ``allowedSigners``; the leader judges each commit by these settings as they stand in
    the last good goals, so a commit cannot loosen its own check."""

    require_signed_commits: bool = Field(
        False,
        description="Plan only goals commits signed by one of `allowedSigners`; an unsigned or "
        "otherwise signed commit is refused like invalid goals and the plan in force stays.",
    )
    allowed_signers: tuple[Annotated[SignerLine, Field(max_length=16384)], ...] = Field(
        (),
        max_length=MAX_SIGNERS,
        description="Who may sign goals commits: lines of Git's allowed-signers format "
        "(`alice@example.org ssh-ed25519 AAAA...`, options `namespaces=`, `valid-after=`, "
        "`valid-before=` as in `ssh-keygen`) or plain public keys (`ssh-ed25519 AAAA... alice`). "
        "Key types: ssh-ed25519, ecdsa-sha2-nistp256/384/521, ssh-rsa (2048 bits or more).",
    )

    @model_validator(mode="after")
    def _keys_with_requirement(self) -> GoalsPolicy:
        if self.require_signed_commits and not self.allowed_signers:
            raise ValueError("requireSignedCommits needs at least one key in allowedSigners")
        if self.allowed_signers and not self.require_signed_commits:
            raise ValueError("allowedSigners has no effect without requireSignedCommits: true")
        return self

    def signers(self) -> tuple[AllowedSigner, ...]:
        """The allowed signers, parsed (each entry was checked when the file was read)."""
        return tuple(parse_signer_line(line, f"qonnect.yaml spec.goals.allowedSigners[{i}]")
                     for i, line in enumerate(self.allowed_signers))


class FleetSpec(UserModel):
    """Settings that apply to the whole fleet."""

    review: Review = Field(default_factory=Review)
    goals: GoalsPolicy = Field(default_factory=GoalsPolicy)
    branches: Branches = Field(default_factory=Branches)
    heartbeat: Heartbeat = Field(default_factory=Heartbeat)
    stability: Stability = Field(default_factory=Stability)
    mesh: Literal["cilium", "mcs", "none"] = Field(
        "none",
        description="How components are made reachable across clusters: Cilium ClusterMesh "
        "global services, the Multi-Cluster Services API (`ServiceExport`), or not at all.",
    )
    regions: tuple[Name, ...] = Field(
        (), description="The user regions that latency goals may name."
    )

    @model_validator(mode="after")
    def _unique_regions(self) -> FleetSpec:
        seen: set[str] = set()
        for region in self.regions:
            if region in seen:
                raise ValueError(f"region '{region}' is listed twice")
            seen.add(region)
        return self


class Fleet(Header):
    """The ``qonnect.yaml`` document."""

    kind: Literal["Fleet"]
    metadata: Metadata
    spec: FleetSpec = Field(default_factory=FleetSpec)
