"""``qonnect.yaml``: fleet-wide settings (kind ``Fleet``)."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from qonnect_gitops.model.base import Header, Metadata, Name, UserModel
from qonnect_gitops.model.limits import MAX_DISRUPTION_BUDGET, MAX_SECONDS

# Characters git forbids in ref names, plus what would make a prefix ambiguous.
_BAD_REF = re.compile(r"(\.\.|[\x00-\x20~^:?*\[\\]|@\{|//|^/|\.lock(/|$)|^\.|/\.)")


def _ref_fragment(value: str) -> str:
    if not value or _BAD_REF.search(value) or value.endswith((".", ".lock")):
        raise ValueError(f"'{value}' cannot be used in a git branch name")
    return value


RefFragment = Annotated[str, AfterValidator(_ref_fragment)]


_REPOSITORY = r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)+$|^[0-9]+$"
_HTTP_URL = r"^https?://[^\s/?#@]+(/[^\s?#]*)?$"


class ReviewForge(UserModel):
    """The forge that shows proposals as pull requests, previews goals changes and carries
    commit statuses. The API token comes from ``tokenFile`` on the lead's disk, or from the
    ``QONNECT_FORGE_TOKEN`` environment variable; it never appears in goals."""

    type: Literal["github", "gitlab", "gitea"] = Field(
        description="`github` (github.com or GitHub Enterprise Server), `gitlab`, or `gitea` "
        "(Gitea and Forgejo)."
    )
    url: str | None = Field(
        None,
        max_length=512,
        pattern=_HTTP_URL,
        description="Base URL of the forge (`https://github.com`, `https://ghe.example.com`, "
        "`https://gitlab.example.com`, `https://gitea.example.com`); the API path is added. "
        "Default: github.com or gitlab.com; required for gitea.",
    )
    repository: str = Field(
        max_length=256,
        pattern=_REPOSITORY,
        description="`owner/name` (GitLab: `group/subgroup/project` or the numeric project id).",
    )
    token_file: str | None = Field(
        None, max_length=4096, description="File on each lead holding the API token."
    )
    status_url: str | None = Field(
        None,
        max_length=512,
        pattern=_HTTP_URL,
        description="Public URL of the lead group's HTTP API; commit statuses link to "
        "`<statusUrl>/v1/status`. Default: the leader's advertised HTTP address.",
    )

    @model_validator(mode="after")
    def _gitea_needs_url(self) -> ReviewForge:
        if self.type == "gitea" and self.url is None:
            raise ValueError("a gitea forge needs its url (there is no public default)")
        return self


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

    plan: RefFragment = Field("qonnect/plan", description="The branch holding every decision.")
    cluster_prefix: RefFragment = Field(
        "cluster/", description="Each cluster's agent follows `<clusterPrefix><cluster>`."
    )
    proposal_prefix: RefFragment = Field(
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
        """Why ``cluster``'s branch would collide with the goals or plan branch, or None."""
        branch = self.cluster_branch(cluster)
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


class FleetSpec(UserModel):
    """Settings that apply to the whole fleet."""

    review: Review = Field(default_factory=Review)
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
