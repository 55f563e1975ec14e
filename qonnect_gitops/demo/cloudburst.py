"""Drive and judge one cloud burst on a running stack (the ``cloud-burst`` demo scenario
and tests/provision's end-to-end test).

A component is scaled past what the fixed clusters hold; the fleet must provision a
cluster from its pool (through the simulated Cluster API on the management cluster),
run the overflow there, and once the burst is scaled back and the linger has passed,
remove the cluster, with nothing else moved. Phase times are counted from the push that
starts the burst, except ``removedSeconds``, counted from the push that ends it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client, config

from qonnect_gitops.demo.bootstrap import PoolAgents
from qonnect_gitops.demo.stack import Stack
from qonnect_gitops.gitstore import GitStoreError
from qonnect_gitops.lead.reconcile import placement_document

POLL = 0.2


@dataclass
class Burst:
    """What to push: ``path`` edited from ``small`` to ``large`` and back."""

    path: str
    small: str
    large: str
    component: str  # app/name of the component that bursts
    linger: float
    kill_leader_while_provisioning: bool = False
    failures_expected: int = 0
    timeout: float = 150.0


@dataclass
class Outcome:
    cluster: str | None = None
    phases: dict[str, float | None] = field(default_factory=dict)
    failures: int = 0
    failure_reason: str = ""
    unplaced_reason: str = ""
    killed: str | None = None
    clusters_seen: list[str] = field(default_factory=list)
    most_at_once: int = 0
    status: dict[str, Any] | None = None  # /v1/status while the overflow ran there
    problems: list[str] = field(default_factory=list)


def plan_doc(stack: Stack) -> dict[str, Any]:
    try:
        return placement_document(stack.bare, "qonnect/plan") or {}
    except (GitStoreError, ValueError):  # no plan branch yet, or a decision being written
        return {}


def ready_on(stack: Stack, cluster: str, component: str) -> int:
    """Ready replicas of ``component`` on ``cluster`` (0 when it cannot be read)."""
    app, _, name = component.partition("/")
    try:
        api = config.new_client_from_config(config_file=str(stack.kubeconfig(cluster)))
        with api:
            deployments = client.AppsV1Api(api).list_deployment_for_all_namespaces(
                label_selector=f"qonnect.io/app={app},qonnect.io/component={name}", _request_timeout=2)
            return sum(int(d.status.ready_replicas or 0) if d.status else 0 for d in deployments.items)
    except Exception:  # noqa: BLE001 - a cluster starting or gone reads as nothing ready
        return 0


def run(stack: Stack, burst: Burst, event: Callable[[str], None] = print) -> Outcome:
    """Push the burst, follow it through provisioning, running and removal; see the module
    docstring."""
    out = Outcome()
    agents = PoolAgents(stack).start()
    try:
        _run(stack, burst, event, out)
    finally:
        agents.close()
    return out


def _others(doc: dict[str, Any], component: str) -> dict[str, Any]:
    return {k: v for k, v in (doc.get("placements") or _placements(doc)).items() if k != component}


def _placements(doc: dict[str, Any]) -> dict[str, dict[str, int]]:
    return {key: {a["cluster"]: a["replicas"] for a in comp.get("assignments") or [] if a["replicas"]}
            for key, comp in (doc.get("components") or {}).items()}


def _run(stack: Stack, burst: Burst, event: Callable[[str], None], out: Outcome) -> None:
    before = _others(plan_doc(stack), burst.component)
    t0 = time.monotonic()
    stack.push(burst.path, burst.small, burst.large, f"{burst.component}: burst past the fixed clusters")
    deadline = t0 + burst.timeout
    provisioned = running = None
    seen: list[str] = []
    while time.monotonic() < deadline:
        doc = plan_doc(stack)
        prov = doc.get("provisioning") or {}
        clusters = prov.get("clusters") or []
        out.most_at_once = max(out.most_at_once, len(clusters))
        for c in clusters:
            if c["name"] not in seen:
                seen.append(c["name"])
                event(f"cloud-burst: {c['name']} requested ({c['nodes']} nodes): {c['reason']}")
        for b in prov.get("backoff") or []:
            if b["failures"] > out.failures:
                out.failures, out.failure_reason = b["failures"], b["reason"]
                event(f"cloud-burst: provisioning failed ({b['reason']}); retry at {b['retryAt']}")
                unplaced = [u for u in doc.get("unplaced") or [] if u["component"] == burst.component]
                out.unplaced_reason = unplaced[0]["reason"] if unplaced else ""
        waiting = [c for c in clusters if c["phase"] == "provisioning"]
        if burst.kill_leader_while_provisioning and out.killed is None and waiting \
                and out.failures >= burst.failures_expected:
            leader = stack.leader()
            if leader is not None:
                stack.procs.kill(leader.node_id)
                out.killed = leader.node_id
                event(f"cloud-burst: killed the leader {leader.node_id} while {waiting[0]['name']} provisions")
        joined = [c["name"] for c in clusters if c["phase"] == "joined"]
        if provisioned is None and clusters and stack.kubeconfig(clusters[-1]["name"]).exists():
            provisioned = time.monotonic() - t0
            out.cluster = clusters[-1]["name"]
            event(f"cloud-burst: {out.cluster} provisioned after {provisioned:.1f} s")
        if joined and out.cluster is not None and out.cluster in joined:
            want = _placements(doc).get(burst.component, {}).get(out.cluster, 0)
            if want and ready_on(stack, out.cluster, burst.component) >= want:
                running = time.monotonic() - t0
                event(f"cloud-burst: {want} replicas run on {out.cluster} after {running:.1f} s")
                out.status = stack.any_status()
                break
        time.sleep(POLL)
    out.clusters_seen = seen
    out.phases = {"provisionedSeconds": _round(provisioned), "runningSeconds": _round(running),
                  "removedSeconds": None, "lingerSeconds": burst.linger}
    if running is None or out.cluster is None:
        out.problems.append(f"the overflow did not run on a pool cluster within {burst.timeout:.0f} s "
                            f"(clusters requested: {seen or 'none'})")
        stack.push(burst.path, burst.large, burst.small, f"{burst.component}: burst over")
        return
    t1 = time.monotonic()
    stack.push(burst.path, burst.large, burst.small, f"{burst.component}: burst over")
    removed = None
    deadline = t1 + burst.linger + burst.timeout
    while time.monotonic() < deadline:
        doc = plan_doc(stack)
        names = [c["name"] for c in (doc.get("provisioning") or {}).get("clusters") or []]
        if out.cluster not in names and not stack.kubeconfig(out.cluster).exists():
            removed = time.monotonic() - t1
            event(f"cloud-burst: {out.cluster} removed {removed:.1f} s after the burst ended")
            break
        time.sleep(POLL)
    out.phases["removedSeconds"] = _round(removed)
    if removed is None:
        out.problems.append(f"{out.cluster} was not removed within {burst.linger + burst.timeout:.0f} s")
    after = _others(plan_doc(stack), burst.component)
    if after != before:
        out.problems.append(f"other components moved: {before} -> {after}")


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)
