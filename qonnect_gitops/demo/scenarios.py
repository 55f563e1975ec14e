"""The demo's scenarios (QONNECT and mck8s demos), each measured and judged on what the
simulated clusters really run (``observe``), with the leader's Git output as the expectation.

Every scenario returns a ``Result``: ``expected`` says what had to hold, ``observed`` is read
from the clusters' Kubernetes APIs, ``seconds`` is measured with a monotonic clock from the
triggering action (a push, a cluster going down, a SIGKILL, an approval).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from qonnect_gitops.demo import cloudburst
from qonnect_gitops.demo.observe import FleetObserver, Observed, by_component, matches
from qonnect_gitops.demo.stack import FORGE_NAME, Stack, git
from qonnect_gitops.forge import (
    CommitState,
    CommitStatus,
    Forge,
    PullRequest,
    PullRequestDraft,
    connect,
)
from qonnect_gitops.forge.preview import MARKER
from qonnect_gitops.gitstore import GitStore, GitStoreError
from qonnect_gitops.lead.reconcile import placement_document
from qonnect_gitops.model import load_goals, read_directory
from qonnect_gitops.render.placement_file import PlacementFileError
from qonnect_gitops.render.render import _autoscaler_of

WORKLOADS = ("Deployment", "StatefulSet")


@dataclass
class Result:
    name: str
    passed: bool = False
    expected: dict[str, Any] = field(default_factory=dict)
    observed: dict[str, Any] = field(default_factory=dict)
    seconds: float | None = None
    notes: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)  # scenario-specific entries (cloud-burst's phases)

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "passed": self.passed, "expected": self.expected,
                "observed": self.observed, "seconds": None if self.seconds is None else round(self.seconds, 3),
                "notes": self.notes, **self.extra}


class Timeout(Exception):
    pass


class Demo:
    """The running stack plus what the scenarios need to drive and judge it."""

    def __init__(self, stack: Stack, event: Callable[[str], None]) -> None:
        self.stack = stack
        self.event = event
        self.observer = FleetObserver({c: stack.kubeconfig(c) for c in stack.clusters})
        self.down: set[str] = set()
        self.autoscaled_cache: set[str] = self.autoscaled()

    # ------------------------------------------------------------------ reading
    def goals(self) -> Any:
        return load_goals(read_directory(self.stack.work))

    def plan_doc(self, ref: str = "qonnect/plan") -> dict[str, Any]:
        return placement_document(self.stack.bare, ref) or {}

    def expected(self, ref: str = "qonnect/plan") -> dict[str, dict[str, int]]:
        """What the decision at ``ref`` says should run, per workload component and cluster
        (target replicas plus those still draining, make before break). Autoscaled components
        are left out of exact counts: their replicas belong to the HorizontalPodAutoscaler."""
        doc = self.plan_doc(ref)
        out: dict[str, dict[str, int]] = {}
        for key, comp in doc["components"].items():
            if comp.get("kind") not in WORKLOADS:
                continue
            counts: dict[str, int] = {}
            for part in (comp.get("assignments") or []) + (comp.get("draining") or []):
                if part["replicas"]:
                    counts[part["cluster"]] = counts.get(part["cluster"], 0) + part["replicas"]
            out[key] = counts
        return out

    def autoscaled(self) -> set[str]:
        return {c.key for c in self.goals().components() if _autoscaler_of(c) is not None}

    def snapshot(self) -> Observed:
        return self.observer.snapshot()

    def converged(self, expected: dict[str, dict[str, int]], observed: Observed) -> bool:
        """The clusters run what is expected (autoscaled components: at least one replica on
        exactly the expected clusters), clusters known to be down left out."""
        auto = self.autoscaled_cache
        exact = {k: v for k, v in expected.items() if k not in auto}
        stripped = {c: ({k: n for k, n in comps.items() if k not in auto} if comps is not None else None)
                    for c, comps in observed.items()}
        if not matches(exact, stripped, self.down):
            return False
        obs = by_component(observed)
        for key in auto & set(expected):
            want = {c for c, n in expected[key].items() if n and c not in self.down}
            have = {c for c in obs.get(key, {}) if c not in self.down}
            if want != have:
                return False
        return True

    def plan_source(self) -> str | None:
        """The goals commit of the plan in force (a forge's merge commit: of the merged side)."""
        if self.stack.rev("qonnect/plan") is None:
            return None
        return GitStore(self.stack.bare).decision_of("qonnect/plan").source

    def wait(self, pred: Callable[[], Any], timeout: float, what: str, interval: float = 0.1) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                value = pred()
            except (RuntimeError, KeyError, TypeError, yaml.YAMLError, GitStoreError, PlacementFileError):
                value = None
            if value:
                return value
            time.sleep(interval)
        raise Timeout(f"timed out after {timeout:.0f}s waiting for {what}")

    def wait_landed(self, source: str, t0: float, timeout: float = 60.0) -> tuple[float, Observed, dict[str, dict[str, int]]]:
        """Until the plan is computed from goals commit ``source`` and the clusters run it."""
        self.wait(lambda: self.plan_source() == source, timeout, f"a decision for goals {source[:12]}")
        self.event(f"decision for {source[:12]} written after {time.monotonic() - t0:.2f}s "
                   f"({self.stack.trailers('qonnect/plan').get('Qonnect-Reason', ['?'])[0]})")
        return self.wait_running(t0, timeout)

    def wait_running(self, t0: float, timeout: float = 60.0) -> tuple[float, Observed, dict[str, dict[str, int]]]:
        """Until the clusters run the plan in force (re-read each time: it may move on)."""
        self.autoscaled_cache = self.autoscaled()
        state: dict[str, Any] = {}

        def ok() -> bool:
            expected = self.expected()
            observed = self.snapshot()
            state.update(expected=expected, observed=observed)
            return self.converged(expected, observed)

        try:
            self.wait(ok, timeout, "the clusters to run the plan", interval=0.2)
        except Timeout:
            raise Timeout(f"clusters did not converge within {timeout:.0f}s; expected "
                          f"{state.get('expected')}, observed {by_component(state.get('observed') or {})}") from None
        return time.monotonic() - t0, state["observed"], state["expected"]

    def wait_drained(self, component: str, timeout: float = 60.0) -> dict[str, int]:
        """Until the plan in force keeps no draining replica of ``component`` and the
        clusters run it exactly where the plan's target says (make-before-break over);
        returns where it runs."""
        state: dict[str, dict[str, int]] = {}

        def drained() -> bool:
            doc = self.plan_doc()["components"][component]
            target = {a["cluster"] for a in doc.get("assignments") or [] if a["replicas"]}
            state["running"] = by_component(self.snapshot()).get(component, {})
            return not doc.get("draining") and set(state["running"]) == target

        self.wait(drained, timeout, f"the draining replicas of {component} removed", interval=0.3)
        return state["running"]

    def push_edits(self, edits: list[tuple[str, str, str]], message: str) -> str:
        for path, old, new in edits:
            target = self.stack.work / path
            text = target.read_text()
            if text.count(old) != 1:
                raise ValueError(f"{path}: {old!r} occurs {text.count(old)} times")
            target.write_text(text.replace(old, new))
        commit = self.stack.commit_push(message)
        self.event(f"git push {commit[:12]}: {message}")
        return commit


def envelope_violations(goals: Any, placement: dict[str, dict[str, int]]) -> list[str]:
    """Placements breaking a latency envelope, by the declared latencies (the sims serve these)."""
    out = []
    for comp in goals.components():
        for goal in comp.qos.latency:
            if goal.serve == "nearest":
                continue  # a coverage goal: judged over all the component's clusters, not each
            for cluster in placement.get(comp.key, {}):
                ms = goals.latencies.get((cluster, goal.region))
                if ms is None or ms > goal.max_ms:
                    out.append(f"{comp.key} on {cluster}: {ms} ms to {goal.region} > {goal.max_ms}")
    return out


# ---------------------------------------------------------------------- scenarios
def initial(d: Demo) -> Result:
    r = Result("initial")
    t0 = time.monotonic()
    commit = d.stack.commit_push("goals from repo-template")
    d.event(f"git push {commit[:12]}: goals from repo-template")
    bookinfo_at: list[float] = []

    def bookinfo_running() -> bool:
        exp = {k: v for k, v in d.expected().items() if k.startswith("bookinfo/")}
        obs = d.snapshot()
        return bool(exp) and matches(exp, {c: {k: n for k, n in (v or {}).items() if k.startswith("bookinfo/")}
                                         for c, v in obs.items()})

    d.wait(lambda: d.plan_source() == commit, 60, "the first decision")
    d.wait(bookinfo_running, 60, "Bookinfo running", interval=0.1)
    bookinfo_at.append(time.monotonic() - t0)
    d.event(f"Bookinfo running in the sims {bookinfo_at[0]:.2f}s after the push")
    seconds, observed, expected = d.wait_running(t0)
    goals = d.goals()
    obs = by_component(observed)
    problems = envelope_violations(goals, obs)
    for comp in goals.components():
        if comp.kind not in WORKLOADS:
            continue
        have = obs.get(comp.key, {})
        if comp.key not in d.autoscaled_cache and sum(have.values()) != comp.replicas:
            problems.append(f"{comp.key}: {sum(have.values())} ready, goals ask {comp.replicas}")
        if len(have) < comp.qos.availability.min_clusters:
            problems.append(f"{comp.key}: on {len(have)} clusters, goals ask at least "
                            f"{comp.qos.availability.min_clusters}")
    r.expected = {"goalsCommit": commit, "placement": expected,
                  "rules": "every workload component ready with its replicas, on at least minClusters clusters, "
                           "inside its latency envelopes"}
    r.observed = {"ready": obs, "bookinfoRunningSeconds": round(bookinfo_at[0], 3), "problems": problems}
    r.seconds = bookinfo_at[0]
    r.notes.append(f"whole fleet converged after {seconds:.2f}s; goal: Bookinfo running <= 5 s after the push")
    r.passed = not problems
    return r


def goals_change(d: Demo) -> Result:
    r = Result("goals-change")
    before = by_component(d.snapshot()).get("bookinfo/reviews-v1", {})
    t0 = time.monotonic()
    commit = d.push_edits([("apps/bookinfo/app.yaml",
                            "tiers: [fog, cloud]               # the JVM is too heavy for the shop boards\n",
                            "tiers: [fog, cloud]               # the JVM is too heavy for the shop boards\n"
                            "        latency:\n          - {region: eu-central, maxMs: 11}\n")],
                          "reviews-v1: tighter latency envelope, eu-central within 11 ms")
    seconds, observed, expected = d.wait_landed(commit, t0)
    goals = d.goals()
    obs = by_component(observed)
    # Make-before-break: the old replica may still run (draining) when the new one is ready.
    after = d.wait_drained("bookinfo/reviews-v1")
    problems = envelope_violations(goals, {"bookinfo/reviews-v1": after})
    if not after:
        problems.append("reviews-v1 runs nowhere")
    r.expected = {"goalsCommit": commit, "reviews-v1": "only on clusters within 11 ms of eu-central "
                  f"({sorted(c for c in goals.clusters if (goals.latencies.get((c, 'eu-central')) or 1e9) <= 11)})",
                  "placement": expected}
    r.observed = {"reviews-v1 before": before, "reviews-v1 after": after, "ready": obs, "problems": problems}
    r.seconds = seconds
    r.notes.append("a declared goal the placement breaks is repaired in the same cycle, whatever the template's "
                   "120 s cooldown says (docs/placement.md, Repair)")
    r.passed = not problems and before != after
    if before == after:
        r.notes.append("reviews-v1 did not move")
    return r


def failover(d: Demo, cluster: str = "edge-1", window: float = 20.0) -> Result:
    """A whole cluster lost (its site's power or uplink): API server, Prometheus and agent
    gone, so its agent falls silent; its workloads run elsewhere, and nothing moves back
    when it returns."""
    r = Result("failover")
    grace = d.goals().fleet.spec.heartbeat.grace_seconds
    before_obs = by_component(d.snapshot())
    hosted = {k: v[cluster] for k, v in before_obs.items() if cluster in v}
    t0 = time.monotonic()
    d.stack.admin(cluster, "down")
    d.stack.procs.kill(f"agent-{cluster}")
    d.down.add(cluster)
    d.event(f"{cluster} is down (its API server, Prometheus and agent stop)")

    def moved_elsewhere() -> bool:
        exp = d.expected()
        if any(exp.get(k, {}).get(cluster) for k in hosted):
            return False
        return d.converged(exp, d.snapshot())

    d.autoscaled_cache = d.autoscaled()
    d.wait(moved_elsewhere, grace + 60, f"{cluster}'s workloads ready elsewhere", interval=0.2)
    seconds = time.monotonic() - t0
    observed = d.snapshot()
    obs = by_component(observed)
    d.event(f"{cluster}'s workloads ready elsewhere {seconds:.2f}s after it failed (grace {grace:.0f}s)")
    moved = {k: {c: n for c, n in obs.get(k, {}).items() if c != cluster} for k in hosted}
    problems = [f"{k}: not running elsewhere" for k, v in moved.items() if not v]
    # it returns: nothing may move back within the cooldown
    plan_before = d.stack.rev("qonnect/plan")
    placement_before = d.expected()
    d.stack.admin(cluster, "up")
    d.stack.procs.restart(f"agent-{cluster}")
    d.down.discard(cluster)
    t_up = time.monotonic()
    d.event(f"{cluster} is back; watching {window:.0f}s for moves back")
    d.wait(lambda: any(row["name"] == cluster and row["healthy"]
                       for row in (d.stack.any_status() or {}).get("clusters", [])), grace + 30,
           f"{cluster} healthy again at the leads")
    healthy_after = time.monotonic() - t_up
    end = time.monotonic() + window
    moves_back: list[str] = []
    while time.monotonic() < end:
        exp = d.expected()
        for k in hosted:
            if exp.get(k, {}).get(cluster):
                moves_back.append(f"{k} planned on {cluster} again")
        if exp != placement_before:
            moves_back.append(f"placement changed: {exp}")
        if moves_back:
            break
        time.sleep(0.5)
    returned = d.snapshot()
    others_now = {k: {c: n for c, n in v.items() if c != cluster} for k, v in by_component(returned).items()}
    others_before = {k: {c: n for c, n in v.items() if c != cluster} for k, v in obs.items()}
    if others_now != others_before:
        problems.append(f"workloads elsewhere changed after {cluster} returned: {others_now}")
    problems += moves_back
    r.expected = {"cluster": cluster, "hosted before": hosted,
                  "rules": f"after {cluster} fails its workloads run elsewhere (goal: <= grace {grace:.0f}s + 5s); "
                           f"after it returns nothing moves back for {window:.0f}s (cooldown)"}
    r.observed = {"ready after failover": obs, "moved": moved,
                  "plan commit unchanged after return": d.stack.rev("qonnect/plan") == plan_before,
                  f"{cluster} after return": returned.get(cluster),
                  "healthy at leads after return s": round(healthy_after, 3), "problems": problems}
    r.seconds = seconds
    r.passed = not problems
    return r


def cluster_row(d: Demo, cluster: str) -> dict[str, Any] | None:
    """The cluster's row of ``/v1/status`` as some lead answers it."""
    return next((row for row in (d.stack.any_status() or {}).get("clusters", []) if row["name"] == cluster), None)


def plan_decisions(d: Demo, since: str | None) -> list[dict[str, Any]]:
    """The decisions written to the plan branch after commit ``since``, oldest first: each
    with its reason and the placement it put in force."""
    head = d.stack.rev("qonnect/plan")
    if head is None or head == since:
        return []
    span = f"{since}..{head}" if since else head
    out = []
    for commit in reversed(git("-C", d.stack.bare, "rev-list", "--first-parent", span).split()):
        reason = (d.stack.trailers(commit).get("Qonnect-Reason") or ["?"])[0]
        out.append({"commit": commit, "reason": reason, "placement": d.expected(commit)})
    return out


def api_down(d: Demo, cluster: str = "edge-2", window: float = 12.0) -> Result:
    """A cluster's API server down while its agent keeps reporting (``Degraded``): what runs
    there keeps running, nothing new goes there, one failover once the degradation has
    lasted ``degradedSeconds`` (never on one report), and no flapping; when the API server
    is back the cluster recovers once (schedulable after ``recoverySeconds`` Ready) and
    nothing moves back within the cooldown."""
    r = Result("api-down")
    heartbeat = d.goals().fleet.spec.heartbeat
    degraded, recovery = heartbeat.effective_degraded_seconds, heartbeat.effective_recovery_seconds
    hosted = {k: v[cluster] for k, v in by_component(d.snapshot()).items() if cluster in v}
    plan_before = d.stack.rev("qonnect/plan")
    states: list[tuple[float, str | None, str | None]] = []  # (t, state, scheduling) as it changed

    def watch() -> dict[str, Any] | None:
        row = cluster_row(d, cluster)
        if row is not None:
            seen = (row.get("state"), row.get("scheduling"))
            if not states or states[-1][1:] != seen:
                states.append((round(time.monotonic() - t0, 2), *seen))
        return row

    t0 = time.monotonic()
    d.stack.admin(cluster, "down")
    d.down.add(cluster)
    d.event(f"{cluster}'s API server is down; its agent keeps reporting")

    def moved_elsewhere() -> bool:
        watch()
        exp = d.expected()
        return not any(exp.get(k, {}).get(cluster) for k in hosted) and d.converged(exp, d.snapshot())

    d.autoscaled_cache = d.autoscaled()
    d.wait(moved_elsewhere, degraded + heartbeat.grace_seconds + 60, f"{cluster}'s workloads ready elsewhere",
           interval=0.25)
    failed_over = time.monotonic() - t0
    d.event(f"{cluster}'s workloads ready elsewhere {failed_over:.2f}s after its API server stopped "
            f"(degradedSeconds {degraded:.0f})")
    during = plan_decisions(d, plan_before)
    plan_mid = d.stack.rev("qonnect/plan")
    d.stack.admin(cluster, "up")
    d.down.discard(cluster)
    t_up = time.monotonic()
    d.wait(lambda: (watch() or {}).get("scheduling") == "schedulable", recovery + heartbeat.grace_seconds + 60,
           f"{cluster} schedulable again")
    recovered = time.monotonic() - t_up
    end = time.monotonic() + window
    while time.monotonic() < end:
        watch()
        time.sleep(0.25)
    after = plan_decisions(d, plan_mid)
    problems = []
    touching = [x for x in during if any(x["placement"].get(k, {}).get(cluster, 0) != n for k, n in hosted.items())]
    if len(touching) != 1 or touching[0]["reason"] != "failover":
        problems.append(f"expected one failover decision moving {cluster}'s workloads, got "
                        f"{[(x['commit'][:12], x['reason']) for x in touching]}")
    first = min((t for t, state, sched in states if sched == "failed-over"), default=None)
    if first is not None and first < degraded - 1.0:
        problems.append(f"failed over {first:.1f}s after the API server stopped, before degradedSeconds {degraded:.0f}")
    if not _in_order([sched for _, _, sched in states], API_DOWN_PATH):
        problems.append(f"{cluster}'s scheduling flapped: {states}")
    if any(k in x["placement"] and cluster in x["placement"][k] for x in after for k in hosted):
        problems.append(f"moved back to {cluster} within the cooldown: {[x['reason'] for x in after]}")
    r.expected = {"cluster": cluster, "hosted before": hosted,
                  "rules": f"Degraded while its agent reports; one failover after degradedSeconds ({degraded:.0f}s), "
                           f"no flapping; schedulable again after recoverySeconds ({recovery:.0f}s) Ready; "
                           f"nothing moves back within {window:.0f}s"}
    r.observed = {"states": states, "decisions during the outage": [(x["commit"][:12], x["reason"]) for x in during],
                  "decisions after": [(x["commit"][:12], x["reason"]) for x in after],
                  "failed over after s": round(failed_over, 3), "schedulable after return s": round(recovered, 3),
                  "problems": problems}
    r.seconds = failed_over
    r.passed = not problems
    return r


# What the leads do with a cluster whose API server goes down and comes back, in order; a
# run may skip steps (a short outage never fails over) but never goes back.
API_DOWN_PATH = ("schedulable", "cordoned", "failed-over", "recovering", "schedulable")


def _in_order(seen: list[str | None], path: tuple[str, ...]) -> bool:
    """Whether ``seen`` walks ``path`` forward only (each step at or after the previous)."""
    at = 0
    for step in seen:
        nxt = next((i for i in range(at, len(path)) if path[i] == step), None)
        if nxt is None:
            return False
        at = nxt
    return True


def stalled(d: Demo, component: str = "bookinfo/reviews-v3") -> Result:
    """A cluster whose agent refuses its branch: someone created by hand, on the cluster a
    goals change sends ``component`` to, an object the agent would create (its Deployment,
    or its app's namespace) (``OwnershipConflict``). The agent refuses the commit
    (``Stalled``); the component keeps running where it ran (make before break) and the
    leads list it unmet (``health``) within one progress deadline; once the operator deletes
    the hand-made object it runs on the new cluster."""
    r = Result("stalled")
    comp = next(c for c in d.goals().components() if c.key == component)
    hand_made = _stalled_target(d, comp)
    if hand_made is None:
        r.notes.append(f"no other cluster of {component}'s tiers and architectures")
        return r
    target = hand_made.cluster
    hand_made.create()
    d.event(f"{hand_made} created by hand on {target} (not the agent's)")
    t0 = time.monotonic()
    pin = _Pin(d, comp, target)
    pinned = pin.push()
    seen = _StalledRun()
    try:
        _stalled_then_fixed(d, comp, hand_made, t0, seen)
    except Timeout as exc:
        seen.problems.append(str(exc))
    finally:
        # Whatever happened, the later scenarios get the fleet back: no hand-made object,
        # the component placed freely again.
        if not seen.deleted:
            hand_made.delete()
        pin.revert()
    r.expected = {"component": component, "pinned to": target, "goals commit": pinned,
                  "rules": f"{target} Stalled (refusal), {component} keeps running where it ran and is listed unmet "
                           f"(health) within its progress deadline ({comp.stability.progress_deadline_seconds:.0f}s) "
                           f"+ a cycle; once {hand_made} is deleted it runs on {target}"}
    r.observed = seen.as_json()
    r.seconds = seen.seconds
    r.passed = not seen.problems
    return r


@dataclass
class _StalledRun:
    """What the stalled scenario saw."""

    problems: list[str] = field(default_factory=list)
    running: dict[str, int] = field(default_factory=dict)
    unmet: list[dict[str, Any]] = field(default_factory=list)
    cluster: dict[str, Any] = field(default_factory=dict)
    seconds: float | None = None
    fixed_after: float | None = None
    deleted: bool = False

    def as_json(self) -> dict[str, Any]:
        return {"running while stalled": self.running, "unmet": self.unmet, "cluster": self.cluster,
                "unmet after s": None if self.seconds is None else round(self.seconds, 3),
                "running on target after fix s": None if self.fixed_after is None else round(self.fixed_after, 3),
                "problems": self.problems}


def _stalled_target(d: Demo, comp: Any) -> _HandMade | None:
    """Where the stalled scenario sends ``comp``, and the hand-made object that makes that
    cluster's agent refuse it. A cluster that runs other parts of its app is preferred: there
    the app's namespace is the agent's, and the object is a Deployment of the component's
    name; elsewhere it is the namespace itself (created by hand before the app came, as
    often happens)."""
    observed = d.snapshot()
    before = by_component(observed).get(comp.key, {})
    allowed = [c for c in _clusters_for(d.goals(), comp) if c not in before]
    if not allowed:
        return None
    app_there = _running_app(observed, comp.app)
    target = next((c for c in allowed if c in app_there), allowed[0])
    return _HandMade(d, target, comp.namespace, str(comp.workload["metadata"]["name"]) if target in app_there else None)


def _running_app(observed: Observed, app: str) -> set[str]:
    """The clusters that run some component of ``app``."""
    return {c for c, comps in observed.items() if any(k.startswith(app + "/") for k in comps or {})}


def _clusters_for(goals: Any, comp: Any) -> list[str]:
    """The clusters of ``comp``'s tiers with a node of one of its architectures, by name."""
    def fits(spec: Any) -> bool:
        return spec.tier in comp.qos.tiers and any(n.arch in comp.architectures for n in spec.nodes)
    return sorted(name for name, cluster in goals.clusters.items() if fits(cluster.spec))


def _stalled_then_fixed(d: Demo, comp: Any, hand_made: _HandMade, t0: float, seen: _StalledRun) -> None:
    """Wait for the leads to list ``comp`` unmet while its cluster refuses it, then delete the
    hand-made object and wait for ``comp`` to run there alone."""
    target = hand_made.cluster

    def listed_unmet() -> bool:
        unmet = (d.stack.any_status() or {}).get("unmet") or []
        return any(u["component"] == comp.key and u["goal"] == "health" for u in unmet)

    d.wait(listed_unmet, comp.stability.progress_deadline_seconds + 60, f"{comp.key} listed unmet (health)",
           interval=0.3)
    seen.seconds = time.monotonic() - t0
    row = cluster_row(d, target) or {}
    seen.cluster = {k: row.get(k) for k in ("state", "reason")}
    seen.running = by_component(d.snapshot()).get(comp.key, {})
    seen.unmet = [u for u in (d.stack.any_status() or {}).get("unmet") or [] if u["component"] == comp.key]
    d.event(f"{target} is {row.get('state')} ({row.get('reason')}); {comp.key} listed unmet after "
            f"{seen.seconds:.2f}s, still running on {seen.running}")
    if row.get("state") != "Stalled":
        seen.problems.append(f"{target} is {row.get('state')}, not Stalled")
    if not seen.running:
        seen.problems.append(f"{comp.key} runs nowhere while {target} refuses it")
    # The operator's fix: the hand-made object goes, the agent applies, it runs there.
    hand_made.delete()
    seen.deleted = True
    t1 = time.monotonic()
    d.event(f"{hand_made} deleted on {target}")
    fixed = d.wait_drained(comp.key, timeout=90)
    seen.fixed_after = time.monotonic() - t1
    if set(fixed) != {target}:
        seen.problems.append(f"after the fix {comp.key} runs on {fixed}, not only on {target}")


@dataclass
class _Pin:
    """A goals edit that sends ``comp`` to ``cluster`` alone (a selector: a hard goal,
    repaired at once whatever the cooldown says), and its revert."""

    d: Demo
    comp: Any
    cluster: str

    def __post_init__(self) -> None:
        self.path = f"apps/{self.comp.app}/app.yaml"
        self.anchor = _qos_line(self.d.stack.work / self.path, self.comp.name)
        qos = self.anchor.splitlines(keepends=True)[-1]
        self.line = qos.replace("qos:", f"  clusterSelector: {{matchLabels: {{qonnect.io/cluster: {self.cluster}}}}}")

    def push(self) -> str:
        return self.d.push_edits([(self.path, self.anchor, self.anchor + self.line)],
                                 f"{self.comp.key}: only on {self.cluster}")

    def revert(self) -> None:
        commit = self.d.push_edits([(self.path, self.anchor + self.line, self.anchor)],
                                   f"{self.comp.key}: placed freely again")
        # The leads took the goals (a decision is written only where the plan changes).
        self.d.wait(lambda: ((self.d.stack.any_status() or {}).get("goals", {}).get("lastGood") or {})
                    .get("commit") == commit, 60, "the leads to take the revert")


@dataclass
class _HandMade:
    """An object created by hand on a simulated cluster, as an operator's kubectl would: a
    Deployment named ``deployment`` in ``namespace``, or (None) the namespace itself."""

    d: Demo
    cluster: str
    namespace: str
    deployment: str | None

    def __str__(self) -> str:
        return (f"a Deployment {self.namespace}/{self.deployment}" if self.deployment
                else f"a Namespace {self.namespace}")

    def create(self) -> None:
        api = self.d.observer.readers[self.cluster].api
        body: Any  # the client takes a plain dict as body
        if self.deployment is None:
            body = {"apiVersion": "v1", "kind": "Namespace",
                    "metadata": {"name": self.namespace, "labels": {"created-by": "hand"}}}
            client.CoreV1Api(api).create_namespace(body)
            return
        body = {"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": self.deployment, "namespace": self.namespace, "labels": {"created-by": "hand"}},
                "spec": {"replicas": 1, "selector": {"matchLabels": {"hand": self.deployment}},
                         "template": {"metadata": {"labels": {"hand": self.deployment}},
                                      "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}}}}
        client.AppsV1Api(api).create_namespaced_deployment(self.namespace, body)

    def delete(self) -> None:
        api = self.d.observer.readers[self.cluster].api
        if self.deployment is None:
            client.CoreV1Api(api).delete_namespace(self.namespace)
        else:
            client.AppsV1Api(api).delete_namespaced_deployment(self.deployment, self.namespace)


def _qos_line(app_file: Path, component: str) -> str:
    """The lines of ``component`` in an app file from its ``- name:`` line to its ``qos:`` line
    (newlines kept): a unique anchor after which a scenario adds a QoS field."""
    lines = app_file.read_text().splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.strip() == f"- name: {component}")
    for end in range(start + 1, len(lines)):
        if lines[end].strip().startswith("- name:"):
            break
        if lines[end].strip() == "qos:":
            return "".join(lines[start:end + 1])
    raise ValueError(f"{app_file}: component {component} has no qos: block")


def burst(d: Demo) -> Result:
    r = Result("burst")
    path = "apps/sensor-pipeline/manifests/ingest.yaml"
    t0 = time.monotonic()
    commit = d.push_edits([(path, "replicas: 6", "replicas: 40")],
                          "ingest: 40 brokers, more than edge-1 and edge-2 hold")
    seconds, observed, expected = d.wait_landed(commit, t0, timeout=90)
    obs = by_component(observed)
    ingest = obs.get("sensor-pipeline/ingest", {})
    problems = []
    if sum(ingest.values()) != 40:
        problems.append(f"ingest: {sum(ingest.values())} ready, 40 asked")
    beyond = sorted(set(ingest) - {"edge-1", "edge-2"})
    if not beyond:
        problems.append("nothing burst beyond edge-1/edge-2")
    unplaced_a = d.plan_doc().get("unplaced") or []
    if unplaced_a:
        problems.append(f"unplaced although the fleet holds 40: {unplaced_a}")
    # more than the whole fleet holds
    t1 = time.monotonic()
    commit2 = d.push_edits([(path, "replicas: 40", "replicas: 200")], "ingest: 200 brokers, more than the fleet holds")
    seconds2, observed2, expected2 = d.wait_landed(commit2, t1, timeout=90)
    ingest2 = by_component(observed2).get("sensor-pipeline/ingest", {})
    unplaced = [u for u in d.plan_doc().get("unplaced") or [] if u["component"] == "sensor-pipeline/ingest"]
    missing = sum(u["replicas"] for u in unplaced)
    if not unplaced:
        problems.append("200 replicas: no unplaced report")
    elif sum(ingest2.values()) + missing != 200:
        problems.append(f"200 asked: {sum(ingest2.values())} ready + {missing} unplaced")
    for u in unplaced:
        d.event(f"unplaced: {u['component']} {u['replicas']} x ({u['cpu']} CPU): {u['reason']}")
    # back to the template's six brokers, so later scenarios find room on the fog
    commit3 = d.push_edits([(path, "replicas: 200", "replicas: 6")], "ingest: back to 6 brokers")
    d.wait_landed(commit3, time.monotonic(), timeout=90)
    r.expected = {"40 replicas": "all ready, beyond edge-1/edge-2 (offload and burst)",
                  "200 replicas": "what fits is ready, the rest reported unplaced with a reason",
                  "placement 40": expected.get("sensor-pipeline/ingest"),
                  "placement 200": expected2.get("sensor-pipeline/ingest")}
    r.observed = {"ingest ready (40)": ingest, "burst to": beyond, "seconds (40)": round(seconds, 3),
                  "ingest ready (200)": ingest2, "seconds (200)": round(seconds2, 3),
                  "unplaced (200)": unplaced, "problems": problems}
    r.seconds = seconds + seconds2
    r.passed = not problems
    return r


def leader_kill(d: Demo) -> Result:
    r = Result("leader-kill")
    leader = d.wait(d.stack.leader, 30, "an agreed leader")
    term = int((d.stack.trailers("qonnect/plan").get("Qonnect-Term") or ["0"])[0])
    t0 = time.monotonic()
    d.stack.procs.kill(leader.node_id, signal.SIGKILL)
    d.event(f"SIGKILL {leader.node_id} (the leader, term {term})")
    commit = d.push_edits([("apps/bookinfo/manifests/details.yaml", "replicas: 1", "replicas: 2")],
                          "details: two replicas")
    d.wait(lambda: d.plan_source() == commit, 60, "a decision after the kill")
    decided = time.monotonic() - t0
    new_term = int((d.stack.trailers("qonnect/plan").get("Qonnect-Term") or ["0"])[0])
    d.event(f"decision written by the new leader {decided:.2f}s after the kill (term {new_term})")
    seconds, observed, _expected = d.wait_running(t0)
    new_leader = d.stack.leader()
    details = by_component(observed).get("bookinfo/details", {})
    problems = []
    if sum(details.values()) != 2:
        problems.append(f"details: {sum(details.values())} ready, 2 asked")
    if new_leader is None or new_leader.node_id == leader.node_id:
        problems.append(f"no new leader: {new_leader}")
    if new_term <= term:
        problems.append(f"decision term {new_term} not above {term}")
    d.stack.start_lead(leader)
    d.event(f"{leader.node_id} restarted (rejoins as follower)")
    r.expected = {"killed": leader.node_id, "rules": "a new leader (higher term) writes the decision for a push "
                  "made after the kill (goal <= 5 s) and the clusters run it"}
    r.observed = {"new leader": new_leader.node_id if new_leader else None, "term": new_term,
                  "decision seconds": round(decided, 3), "details ready": details,
                  "landed seconds": round(seconds, 3), "problems": problems}
    r.seconds = decided
    r.passed = not problems
    return r


def review(d: Demo) -> Result:
    """Review mode through a forge: the proposal is a pull request on the demo's forge, a
    reviewer merges it through the forge's API, and the clusters run it; a goals pull request
    gets its preview comment (updated in place on a push) and ``qonnect/validate``."""
    r = Result("review")
    stack = d.stack
    forge = connect(stack.forge_settings(), stack.forge_token_file.read_text().strip())
    plan_before = stack.rev("qonnect/plan")
    before = by_component(d.snapshot()).get("bookinfo/reviews-v2", {})
    # An envelope the cluster it runs on now breaks (where it landed depends on which
    # agents had reported when the template was pushed): eu-central within 11 ms leaves
    # only fog-1, eu-west within 11 ms only fog-3.
    planned = set(d.expected().get("bookinfo/reviews-v2", {}))
    region = "eu-west" if planned & {"fog-1"} else "eu-central"
    t0 = time.monotonic()
    # The goals select the forge by name; where it is and its token are the leads' own
    # configuration (--forges), never the goals'.
    forge_line = f"    forge: {{name: {FORGE_NAME}}}\n"
    commit = d.push_edits([
        ("qonnect.yaml", "mode: auto            # auto | pull-request", "mode: pull-request    # auto | pull-request"),
        ("qonnect.yaml", "    failover: auto        # failover may bypass review\n",
         "    failover: auto        # failover may bypass review\n" + forge_line),
        ("apps/bookinfo/app.yaml", "      calls: [ratings]\n      qos:\n        tiers: [fog, cloud]\n        maxCostPerHour: 0.05\n",
         ("      calls: [ratings]\n      qos:\n        tiers: [fog, cloud]\n        maxCostPerHour: 0.05\n"
          f"        latency:\n          - {{region: {region}, maxMs: 11}}\n"))],
        f"review mode through the forge; reviews-v2: {region} within 11 ms")

    def proposal_pull() -> PullRequest | None:
        for pull in forge.find_pull_requests():
            if pull.head_branch.startswith("qonnect/proposals/") and "qonnect" in pull.labels \
                    and stack.trailers(pull.head_sha).get("Qonnect-Source") == [commit]:
                return pull
        return None

    pull = d.wait(proposal_pull, 60, "a pull request of the proposal", interval=0.3)
    proposed_after = time.monotonic() - t0
    table = [line for line in pull.body.splitlines() if line.startswith("|")]
    d.event(f"pull request #{pull.number} ({pull.url}) after {proposed_after:.2f}s: {pull.title}")
    problems = []
    time.sleep(1.0)
    held = by_component(d.snapshot()).get("bookinfo/reviews-v2", {})
    if stack.rev("qonnect/plan") != plan_before:
        problems.append("the plan moved before the pull request was merged")
    if held != before:
        problems.append(f"reviews-v2 moved before the merge: {held}")
    if not table:
        problems.append("no markdown table in the pull request")
    t1 = time.monotonic()
    merged = forge.merge_pull_request(pull.number)  # what the reviewer's "Merge" button does
    d.event(f"pull request #{pull.number} merged through the forge's API ({merged.state.value})")
    d.wait(lambda: d.plan_source() == commit, 30, "the merged plan")
    approved = stack.rev("qonnect/plan")
    seconds, observed, expected = d.wait_running(t1)
    after = by_component(observed).get("bookinfo/reviews-v2", {})
    comp = d.plan_doc()["components"]["bookinfo/reviews-v2"]
    target = {a["cluster"]: a["replicas"] for a in comp["assignments"] if a["replicas"]}
    draining = {x["cluster"] for x in comp.get("draining") or []}
    # make before break: the old cluster keeps its replica, listed as draining, until the
    # approved target runs; then the leader drops it on its own (no second review)
    problems += envelope_violations(d.goals(), {"bookinfo/reviews-v2": target})
    if any(after.get(c, 0) < n for c, n in target.items()):
        problems.append(f"reviews-v2 target {target} not ready: {after}")
    if set(after) - set(target) - draining:
        problems.append(f"reviews-v2 runs outside its target and draining: {after}")
    if after == before:
        problems.append("reviews-v2 did not move after the merge")

    t2 = time.monotonic()
    try:
        d.wait_drained("bookinfo/reviews-v2")
    except Timeout as exc:
        problems.append(str(exc))
    drained_after = time.monotonic() - t2
    finished = stack.rev("qonnect/plan")
    open_proposals = git("-C", stack.bare, "for-each-ref", "--format=%(refname)",
                         "refs/heads/qonnect/proposals/").split()
    if open_proposals:
        problems.append(f"a new proposal waits for review: {open_proposals}")
    d.event(f"draining replica of reviews-v2 gone {drained_after:.2f}s after the merged target ran "
            f"(plan {(approved or 'none')[:12]} -> {(finished or 'none')[:12]}, no new proposal)")
    placed = _status(d, forge, commit, "qonnect/placed", {CommitState.SUCCESS, CommitState.FAILURE}, 90)
    d.event(f"qonnect/placed on {commit[:12]}: {placed.state.value if placed else None} "
            f"({placed.description if placed else 'not set'})")
    if placed is None or placed.state is not CommitState.SUCCESS:
        problems.append(f"qonnect/placed on the goals commit: {placed}")
    preview_seen, preview_problems = _goals_pull_request(d, forge)
    problems += preview_problems
    r.expected = {"pull request": "the proposal opened as a labelled pull request with a markdown table; nothing "
                  "runs differently until it is merged on the forge, then the clusters run it, the leader drops "
                  "the draining replica without another review, and the goals commit gets qonnect/placed success",
                  "envelope": f"{region} within 11 ms", "placement": expected,
                  "goals pull request": "one preview comment, updated in place on a push; qonnect/validate "
                  "success on a valid head, failure on an invalid one"}
    r.observed = {"pull request": pull.url, "proposal seconds": round(proposed_after, 3), "table": table[:20],
                  "reviews-v2 before": before, "reviews-v2 held before merge": held,
                  "reviews-v2 after merge": after, "reviews-v2 target": target,
                  "reviews-v2 draining": sorted(draining),
                  "draining removed seconds": round(drained_after, 3),
                  "reviews-v2 after draining": by_component(d.snapshot()).get("bookinfo/reviews-v2", {}),
                  "qonnect/placed": None if placed is None else [placed.state.value, placed.description],
                  "goals pull request": preview_seen, "problems": problems}
    r.seconds = seconds
    r.passed = not problems
    return r


def _status(d: Demo, forge: Forge, sha: str, context: str, states: set[CommitState],
            timeout: float) -> CommitStatus | None:
    """The newest ``context`` status on ``sha`` once it is in ``states`` (None after the timeout)."""
    def newest() -> CommitStatus | None:
        for status in forge.list_statuses(sha):
            if status.context == context:
                return status if status.state in states else None
        return None

    try:
        return d.wait(newest, timeout, f"{context} on {sha[:12]}", interval=0.3)  # type: ignore[no-any-return]
    except Timeout:
        return None


def _goals_pull_request(d: Demo, forge: Forge) -> tuple[dict[str, Any], list[str]]:
    """A goals change proposed as a pull request: its preview comment and qonnect/validate,
    then a push that breaks the goals: the same comment updated, and a failure status."""
    work, problems = d.stack.work, []
    seen: dict[str, Any] = {}
    git("checkout", "-q", "-b", "preview/ratings", cwd=work)
    try:
        ratings = work / "apps/bookinfo/manifests/ratings.yaml"
        ratings.write_text(ratings.read_text().replace("replicas: 1", "replicas: 2", 1))
        git("commit", "-q", "-am", "ratings: two replicas", cwd=work)
        git("push", "-q", "origin", "preview/ratings", cwd=work)
        pull = forge.open_pull_request(PullRequestDraft("preview/ratings", "main", "ratings: two replicas",
                                                        "More ratings replicas."))
        d.event(f"goals pull request #{pull.number} opened ({pull.url})")
        valid = _status(d, forge, pull.head_sha, "qonnect/validate", {CommitState.SUCCESS, CommitState.FAILURE}, 60)
        comments = [c for c in forge.list_comments(pull.number) if c.body.startswith(MARKER)]
        seen["first"] = {"head": pull.head_sha, "validate": valid.state.value if valid else None,
                         "comments": [c.id for c in comments]}
        if valid is None or valid.state is not CommitState.SUCCESS:
            problems.append(f"qonnect/validate on a valid head: {valid}")
        if len(comments) != 1 or "bookinfo/ratings" not in comments[0].body:
            problems.append(f"expected one preview comment naming bookinfo/ratings: {comments}")
        cluster = work / "clusters/edge-1.yaml"
        cluster.write_text(cluster.read_text().replace("tier: edge", "tier: moon", 1))
        git("commit", "-q", "-am", "edge-1: a tier that does not exist", cwd=work)
        git("push", "-q", "origin", "preview/ratings", cwd=work)
        head = git("rev-parse", "HEAD", cwd=work).strip()
        invalid = _status(d, forge, head, "qonnect/validate", {CommitState.FAILURE, CommitState.SUCCESS}, 60)
        again = [c for c in forge.list_comments(pull.number) if c.body.startswith(MARKER)]
        seen["second"] = {"head": head, "validate": [invalid.state.value, invalid.description] if invalid else None,
                          "comments": [c.id for c in again]}
        d.event(f"goals pull request #{pull.number} after a bad push: qonnect/validate "
                f"{invalid.state.value if invalid else None}")
        if invalid is None or invalid.state is not CommitState.FAILURE:
            problems.append(f"qonnect/validate on an invalid head: {invalid}")
        if [c.id for c in again] != [c.id for c in comments] or not again or "invalid" not in again[0].body:
            problems.append("the preview comment was not updated in place")
        forge.close_pull_request(pull.number)
    finally:
        git("checkout", "-q", "main", cwd=work)
    return seen, problems


def resize(d: Demo, component: str = "bookinfo/details") -> Result:
    r = Result("resize")
    path = "apps/bookinfo/manifests/details.yaml"
    before = by_component(d.snapshot()).get(component, {})
    t0 = time.monotonic()
    commit = d.push_edits([(path, "cpu: 50m", 'cpu: "4"')],
                          "details: 4 CPU per replica, more than any node of the shop boards holds")
    # The first decision for this push must already repair it: no cycle keeps it where it cannot run.
    d.wait(lambda: d.plan_source() == commit, 60, f"a decision for goals {commit[:12]}")
    decision = d.plan_doc()
    first = {a["cluster"]: a["replicas"] for a in decision["components"][component]["assignments"] if a["replicas"]}
    unmet = [u for u in decision.get("unmet") or [] if u["component"] == component]
    seconds, _observed, expected = d.wait_running(t0)
    now = d.wait_drained(component)  # the old replicas run until the new ones are ready
    goals = d.goals()
    small = {name for name, c in goals.clusters.items()
             if not any(n.cpu >= 4000 for n in c.spec.nodes)}  # no node holds a 4-CPU replica
    problems = []
    if set(first) & small and not unmet:
        problems.append(f"the first decision keeps {component} on {sorted(set(first) & small)} and lists nothing unmet")
    if set(now) & small:
        problems.append(f"{component} still runs on {sorted(set(now) & small)}")
    if not now and not unmet:
        problems.append(f"{component} runs nowhere and the plan lists no unmet goal")
    problems += envelope_violations(goals, {component: now})
    d.event(f"{component} at 4 CPU: {before} -> {now} in {seconds:.2f}s"
            + (f"; unmet: {[u['goal'] for u in unmet]}" if unmet else ""))
    # back to the template's 50m, so the later scenarios find the fleet as they expect
    commit2 = d.push_edits([(path, 'cpu: "4"', "cpu: 50m")], "details: back to 50m")
    d.wait_landed(commit2, time.monotonic())
    r.expected = {"goalsCommit": commit, "rules": f"within one cycle {component} runs only on clusters with a node "
                  "holding 4 CPU (inside its latency envelope), or the plan lists the goal as unmet",
                  "clusters too small": sorted(small), "placement": expected}
    r.observed = {f"{component} before": before, "first decision": first, f"{component} after": now,
                  "unmet": unmet, "problems": problems}
    r.seconds = seconds
    r.passed = not problems
    return r


def served_from_nearby(goals: Any, component: str, where: dict[str, int]) -> list[str]:
    """What breaks the component's ``serve: nearest`` goals, by declared latencies: a region
    with no cluster of ``where`` in its envelope, a cluster near none of the regions."""
    comp = goals.component(component)
    nearest = [g for g in comp.qos.latency if g.serve == "nearest"]

    def near(cluster: str, goal: Any) -> bool:
        ms = goals.latencies.get((cluster, goal.region))
        return ms is not None and ms <= goal.max_ms

    problems = [f"{component}: no replica within {g.max_ms:g} ms of {g.region}" for g in nearest
                if not any(near(c, g) for c in where)]
    problems += [f"{component} on {c}: near none of {[g.region for g in nearest]}" for c in where
                 if nearest and not any(near(c, g) for g in nearest)]
    return problems


def regions(d: Demo, component: str = "bookinfo/productpage") -> Result:
    r = Result("regions")
    path = "apps/bookinfo/app.yaml"
    before = by_component(d.snapshot()).get(component, {})
    one = "          - {region: eu-central, maxMs: 15}\n"
    both = ("          - {region: eu-central, maxMs: 15, serve: nearest}\n"
            "          - {region: eu-west, maxMs: 15, serve: nearest}\n")
    t0 = time.monotonic()
    commit = d.push_edits([(path, one, both)], "productpage: serve eu-central and eu-west each from nearby")
    seconds, _, expected = d.wait_landed(commit, t0)
    now = d.wait_drained(component)
    goals = d.goals()
    problems = served_from_nearby(goals, component, now)
    if sum(now.values()) != goals.component(component).replicas:
        problems.append(f"{component}: {sum(now.values())} ready, goals ask {goals.component(component).replicas}")
    d.event(f"{component} serving both regions: {before} -> {now} in {seconds:.2f}s")
    # back to the template's single envelope, so the later scenarios find the fleet as they expect
    commit2 = d.push_edits([(path, both, one)], "productpage: back to eu-central within 15 ms")
    d.wait_landed(commit2, time.monotonic())
    d.wait_drained(component)
    r.expected = {"goalsCommit": commit, "rules": f"{component} has a replica within 15 ms of eu-central and one "
                  "within 15 ms of eu-west (declared latencies, which the sims serve), every replica near one "
                  "of them, all its replicas ready", "placement": expected}
    r.observed = {f"{component} before": before, f"{component} after": now, "problems": problems}
    r.seconds = seconds
    r.passed = not problems
    return r


def cloud_burst(d: Demo) -> Result:
    """A burst the fixed clusters cannot hold: a cloud cluster is provisioned through Cluster
    API, the overflow runs there, and after the burst and the linger it is removed."""
    r = Result("cloud-burst")
    pool = (Path(__file__).parent / "cloud_pool.yaml").read_text()
    target = d.stack.work / "clusterPools" / "burst.yaml"
    target.parent.mkdir(exist_ok=True)
    target.write_text(pool)
    d.stack.commit_push("clusterPools/burst: cloud-1 may provision a burst cluster")
    linger = float(yaml.safe_load(pool)["spec"]["lingerSeconds"])
    out = cloudburst.run(d.stack, cloudburst.Burst(
        path="apps/sensor-pipeline/manifests/ingest.yaml", small="replicas: 6", large="replicas: 200",
        component="sensor-pipeline/ingest", linger=linger, timeout=120.0), d.event)
    phases = out.phases
    problems = list(out.problems)
    running, removed = phases.get("runningSeconds"), phases.get("removedSeconds")
    if running is not None and running > RUNNING_GOAL:
        problems.append(f"running after {running} s (goal: {RUNNING_GOAL} s with a 10 s provisioning delay)")
    if removed is not None and removed > linger + REMOVED_SLACK:
        problems.append(f"removed {removed} s after the burst (goal: linger + {REMOVED_SLACK} s)")
    r.extra = {"cluster": out.cluster, "phases": phases}
    r.expected = {"cluster": "provisioned from pool burst on cloud-1 (Cluster API)",
                  "runningSeconds": f"<= {RUNNING_GOAL}", "removedSeconds": f"<= linger + {REMOVED_SLACK}",
                  "other components": "not moved"}
    r.observed = {"cluster": out.cluster, "clusters requested": out.clusters_seen,
                  "phases": phases, "problems": problems}
    r.seconds = running
    r.passed = not problems
    return r


RUNNING_GOAL = 30.0
REMOVED_SLACK = 20.0

SCENARIOS: dict[str, Callable[[Demo], Result]] = {
    "initial": initial, "goals-change": goals_change, "resize": resize, "regions": regions, "failover": failover,
    "api-down": api_down, "stalled": stalled, "burst": burst, "leader-kill": leader_kill, "review": review,
    "cloud-burst": cloud_burst,
}
