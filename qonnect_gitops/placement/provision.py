"""Cloud bursting: when to create a cluster from a ``ClusterPool``, how big, and when to
remove it (pure, deterministic; ``observed.now`` is the clock).

``plan_with_pools`` wraps the planner: it adds the pool clusters that joined the fleet to
the goals, plans, then ``decide`` moves every dynamic cluster through its phases:

* replicas unplaced for at least the pool's ``scaleUp.unplacedSeconds`` and a pool whose
  node shape holds them (CPU, memory, architecture), with a free slot and not backing off:
  a cluster is requested, sized to the demand (first fit decreasing on the pool's node
  shape, plus headroom, within the limits). Replicas a cluster already being provisioned
  will hold never request a second one. Among fitting pools the one in the region the
  replicas are wanted in comes first, then the cheapest per CPU-hour, then by name.
* ``provisioning`` -> ``joined`` once Cluster API reports the cluster ready (the
  management cluster's agent sees phase Provisioned, the control plane ready and the
  ``<name>-kubeconfig`` Secret) and the new cluster's own agent reports, fresh.
  Phase ``Failed`` or the provisioning timeout: the cluster is dropped (its objects leave
  the management branch) and the pool backs off, doubling the wait each failure.
* ``joined``: nodes grow with the replicas placed there plus those still waiting. When
  the fleet without the pool clusters would place everything, the cluster is idle; idle
  for ``lingerSeconds`` it starts ``draining``: it gets a taint no component tolerates,
  so repair moves its replicas off (make before break). Empty, it is removed.

Replicas unplaced for a reason a new cluster cannot fix (a latency envelope, a cost cap)
wait as before: a pool is only used for replicas whose shape it holds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta

from qonnect_gitops.model.base import Metadata
from qonnect_gitops.model.cluster import Cluster, ClusterSpec, NodeShape, Taint
from qonnect_gitops.model.goals import Goals
from qonnect_gitops.model.labels import DRAINING_TAINT, POOL_LABEL
from qonnect_gitops.model.observed import Observed
from qonnect_gitops.model.plan import (
    CurrentPlacement,
    DynamicCluster,
    Plan,
    PoolBackoff,
    ProvisionEvent,
    Provisioning,
    Unplaced,
)
from qonnect_gitops.model.pool import ClusterApiStatus, ClusterPool
from qonnect_gitops.model.quantity import to_bytes, to_millicores
from qonnect_gitops.placement.planner import plan as make_plan

DRAIN_TAINT = Taint(key=DRAINING_TAINT, value="pool", effect="NoSchedule")
MAX_BACKOFF_DOUBLINGS = 10


@dataclasses.dataclass(frozen=True)
class Replica:
    """One unplaced replica's shape (what a new node must hold)."""

    component: str
    cpu: int  # millicores
    memory: int  # bytes
    architectures: tuple[str, ...]
    near: str | None


def unplaced_replicas(unplaced: Iterable[Unplaced]) -> list[Replica]:
    """Every unplaced replica, one entry each, in plan order."""
    out: list[Replica] = []
    for u in unplaced:
        shape = Replica(u.component, to_millicores(u.cpu), to_bytes(u.memory), u.architectures, u.near)
        out.extend([shape] * u.replicas)
    return out


def holds(pool: ClusterPool, replica: Replica) -> bool:
    """Whether one node of the pool holds the replica."""
    node = pool.spec.node
    return replica.cpu <= node.cpu and replica.memory <= node.memory and (
        not replica.architectures or node.arch in replica.architectures)


def nodes_for(pool: ClusterPool, replicas: Iterable[Replica]) -> int:
    """Nodes of the pool's shape the replicas need: first fit decreasing (deterministic)."""
    node = pool.spec.node
    free: list[list[int]] = []  # per node: cpu, memory, pods left
    for r in sorted(replicas, key=lambda r: (-r.cpu, -r.memory, r.component)):
        for slot in free:
            if slot[0] >= r.cpu and slot[1] >= r.memory and slot[2] >= 1:
                slot[0] -= r.cpu
                slot[1] -= r.memory
                slot[2] -= 1
                break
        else:
            free.append([node.cpu - r.cpu, node.memory - r.memory, node.pods - 1])
    return len(free)


def sized(pool: ClusterPool, demand: int) -> int:
    """Nodes a cluster gets for ``demand`` nodes of replicas: plus headroom, within limits."""
    limits = pool.spec.limits
    return max(limits.min_nodes_per_cluster,
               min(limits.max_nodes_per_cluster, demand + pool.spec.scale_up.headroom_nodes))


def member(pool: ClusterPool, cluster: DynamicCluster) -> Cluster:
    """The fleet member a dynamic cluster is: tier, region, nodes, cost and energy from its
    pool; a draining cluster carries a taint no component tolerates."""
    spec = pool.spec
    return Cluster.model_validate({
        "apiVersion": "qonnect.io/v1alpha1",
        "kind": "Cluster",
        "metadata": Metadata(name=cluster.name, labels={POOL_LABEL: pool.name}),
        "spec": ClusterSpec(
            tier=spec.tier,
            distribution="k3s" if spec.control_plane == "k3s" else "k8s",
            region=spec.region,
            taints=(DRAIN_TAINT,) if cluster.phase == "draining" else (),
            # Quantities as text: a bare number would read as whole cores and bytes.
            nodes=(NodeShape.model_validate({"count": cluster.nodes, "cpu": f"{spec.node.cpu}m",
                                             "memory": str(spec.node.memory), "pods": spec.node.pods,
                                             "arch": spec.node.arch}),),
            cost=spec.cost,
            energy=spec.energy,
        ),
    })


def with_members(goals: Goals, state: Provisioning | None) -> Goals:
    """The goals plus the dynamic clusters that are fleet members (joined or draining),
    with the latencies their pools declare."""
    if state is None:
        return goals
    clusters = dict(goals.clusters)
    latencies = dict(goals.latencies)
    for dyn in state.clusters:
        pool = goals.pools.get(dyn.pool)
        if pool is None or dyn.phase not in ("joined", "draining"):
            continue
        clusters[dyn.name] = member(pool, dyn)
        for link in pool.spec.latencies:
            latencies.setdefault((link.to, dyn.name), link.ms)
            latencies[(dyn.name, link.to)] = link.ms
    if len(clusters) == len(goals.clusters):
        return goals
    return dataclasses.replace(goals, clusters=dict(sorted(clusters.items())), latencies=latencies)


def _without(current: CurrentPlacement, names: set[str]) -> CurrentPlacement:
    """The placement in force minus what runs on ``names`` (for a what-if plan)."""
    if not names:
        return current
    def drop(table: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, int]]:
        return {k: {c: n for c, n in v.items() if c not in names} for k, v in table.items()}
    return current.model_copy(update={"placements": drop(current.placements),
                                      "draining": drop(current.draining)})


def plan_with_pools(goals: Goals, observed: Observed, current: CurrentPlacement,
                    previous: Provisioning | None) -> Plan:
    """The cycle's plan with cloud bursting: plan on the fleet plus the joined pool
    clusters, then decide provisioning (``decide``). Without pools and without dynamic
    clusters it is exactly ``placement.plan``."""
    if not goals.pools and (previous is None or not previous.clusters):
        return make_plan(goals, observed, current)
    state = previous
    decision = make_plan(with_members(goals, state), observed, _known(current, goals, state))
    without: Plan | None = None
    members = {d.name for d in (state.clusters if state else ()) if d.phase in ("joined", "draining")}
    if members:
        without = make_plan(goals, observed, _without(current, members))
    new_state = decide(goals, decision, without, state, observed)
    if _membership(new_state) != _membership(state):
        # A cluster joined or started draining: plan again so its replicas move this cycle.
        decision = make_plan(with_members(goals, new_state), observed, _known(current, goals, new_state))
        new_state = new_state.model_copy(update={"clusters": tuple(
            c.model_copy(update={"nodes": max(c.nodes, _grown(goals, c, decision))})
            if c.phase == "joined" else c for c in new_state.clusters)})
    unplaced = tuple(_explain_unplaced(u, goals, new_state) for u in decision.unplaced)
    return decision.model_copy(update={"provisioning": new_state, "unplaced": unplaced})


def _known(current: CurrentPlacement, goals: Goals, state: Provisioning | None) -> CurrentPlacement:
    """The placement in force without clusters that are no longer fleet members (a removed
    dynamic cluster: its replicas are gone with it)."""
    members = set(with_members(goals, state).clusters)
    gone = {c for table in (current.placements, current.draining) for v in table.values()
            for c in v if c not in members}
    return _without(current, gone)


def _membership(state: Provisioning | None) -> tuple[tuple[str, str], ...]:
    return tuple((c.name, c.phase) for c in (state.clusters if state else ())
                 if c.phase in ("joined", "draining"))


def _placed_on(decision: Plan, name: str) -> list[Replica]:
    """The replicas a plan runs on cluster ``name`` (draining ones included)."""
    placed: list[Replica] = []
    for key, cp in decision.components.items():
        n = cp.replicas_by_cluster().get(name, 0)
        if n and cp.request is not None:
            placed += [Replica(key, cp.request.cpu, cp.request.memory, (), None)] * n
    return placed


def _grown(goals: Goals, dyn: DynamicCluster, decision: Plan) -> int:
    """Nodes a joined cluster needs: what the plan places there, plus the replicas still
    waiting that its pool holds."""
    pool = goals.pools.get(dyn.pool)
    if pool is None:
        return dyn.nodes
    waiting = [r for r in unplaced_replicas(decision.unplaced) if holds(pool, r)]
    return sized(pool, nodes_for(pool, _placed_on(decision, dyn.name) + waiting))


def _explain_unplaced(u: Unplaced, goals: Goals, state: Provisioning) -> Unplaced:
    """Say on an unplaced replica what the provisioner is doing about it."""
    shape = unplaced_replicas([u.model_copy(update={"replicas": 1})])[0]
    notes = []
    for dyn in state.clusters:
        pool = goals.pools.get(dyn.pool)
        if dyn.phase == "provisioning" and pool is not None and holds(pool, shape):
            notes.append(f"cluster {dyn.name} of pool {dyn.pool} is being provisioned")
    for back in state.backoff:
        pool = goals.pools.get(back.pool)
        if pool is not None and holds(pool, shape) and not any(
                c.pool == back.pool and c.phase == "provisioning" for c in state.clusters):
            notes.append(f"pool {back.pool} failed ({back.reason}); retry at "
                         f"{back.retry_at.isoformat()}")
    if not notes:
        return u
    return u.model_copy(update={"reason": f"{u.reason}; {'; '.join(notes)}"})


def decide(goals: Goals, decision: Plan, without: Plan | None, previous: Provisioning | None,
           observed: Observed) -> Provisioning:
    """The provisioner's next state (see the module docstring).

    ``decision`` is this cycle's plan on the fleet plus the member clusters, ``without``
    the same plan without any pool cluster (None when none is a member), ``observed``
    carries the clock, the agents' freshness and what Cluster API reports."""
    now = observed.now
    prev = previous or Provisioning()
    grace = goals.fleet.spec.heartbeat.grace_seconds
    events: list[ProvisionEvent] = []
    # Failures are remembered (the wait doubles) until a cluster of the pool joins.
    backoff = {b.pool: b for b in prev.backoff if b.pool in goals.pools}
    kept: list[DynamicCluster] = []
    idle = without is not None and not without.unplaced
    for dyn in prev.clusters:
        pool = goals.pools.get(dyn.pool)
        if dyn.phase == "provisioning":
            status = _capi_status(observed, pool, dyn.name)
            failure = _failure(pool, dyn, status, now)
            if failure is not None or pool is None:
                why = failure or "its pool left the goals"
                events.append(ProvisionEvent(action="failed", pool=dyn.pool, cluster=dyn.name,
                                             detail=f"provisioning {dyn.name} failed: {why}; its "
                                             "objects are removed"))
                if pool is not None:
                    backoff[dyn.pool] = _back_off(pool, prev, why, now)
                continue
            if status is not None and status.ready and _reporting(observed, dyn.name, grace):
                events.append(ProvisionEvent(action="joined", pool=dyn.pool, cluster=dyn.name,
                                             nodes=dyn.nodes, detail=f"{dyn.name} is ready and its "
                                             "agent reports: it joins the fleet"))
                kept.append(dyn.model_copy(update={"phase": "joined", "since": now}))
                backoff.pop(dyn.pool, None)
            else:
                kept.append(dyn)
            continue
        placed = _runs_anything(decision, dyn.name)
        if dyn.phase == "draining":
            if pool is not None and not idle:
                events.append(ProvisionEvent(action="scale", pool=dyn.pool, cluster=dyn.name,
                                             detail=f"{dyn.name} is needed again: it stops draining"))
                kept.append(dyn.model_copy(update={"phase": "joined", "since": now, "idle_since": None}))
            elif placed:
                kept.append(dyn)
            else:
                events.append(ProvisionEvent(action="remove", pool=dyn.pool, cluster=dyn.name,
                                             detail=f"{dyn.name} is empty: its Cluster API objects "
                                             "are removed from the management cluster"))
            continue
        # joined
        if pool is None:
            events.append(ProvisionEvent(action="drain", pool=dyn.pool, cluster=dyn.name,
                                         detail=f"pool {dyn.pool} left the goals: {dyn.name} drains"))
            kept.append(dyn.model_copy(update={"phase": "draining", "since": now}))
            continue
        if not idle:
            grown = max(dyn.nodes, _grown(goals, dyn, decision))
            if grown != dyn.nodes:
                events.append(ProvisionEvent(action="scale", pool=dyn.pool, cluster=dyn.name,
                                             nodes=grown, detail=f"{dyn.name} grows to {grown} "
                                             "nodes for the replicas placed and waiting"))
            kept.append(dyn.model_copy(update={"nodes": grown, "idle_since": None}))
            continue
        idle_since = dyn.idle_since or now
        lingered = (now - idle_since).total_seconds()
        if lingered >= pool.spec.linger_seconds:
            events.append(ProvisionEvent(action="drain", pool=dyn.pool, cluster=dyn.name,
                                         detail=f"the fleet holds every replica without {dyn.name} "
                                         f"for {lingered:.0f} s (linger {pool.spec.linger_seconds:g} s): "
                                         "its replicas move off under the stability rules"))
            kept.append(dyn.model_copy(update={"phase": "draining", "since": now,
                                               "idle_since": idle_since}))
        else:
            if dyn.idle_since is None:
                events.append(ProvisionEvent(action="idle", pool=dyn.pool, cluster=dyn.name,
                                             detail=f"the fleet holds every replica without "
                                             f"{dyn.name}; removed after {pool.spec.linger_seconds:g} s"))
            kept.append(dyn.model_copy(update={"idle_since": idle_since}))
    replicas = unplaced_replicas(u for u in decision.unplaced if u.component in _fixable(decision))
    since = (prev.unplaced_since or now) if replicas else None
    requested = prev.requested
    if replicas and since is not None:
        before = len(kept)
        kept, more = _provision(goals, decision, replicas, kept, backoff, since, now, requested)
        requested += len(kept) - before
        events += more
    return Provisioning(
        unplaced_since=since,
        clusters=tuple(sorted(kept, key=lambda c: c.name)),
        backoff=tuple(b for _, b in sorted(backoff.items())),
        requested=requested,
        events=tuple(events),
    )


# Unmet goals a bigger fleet can fix; a replica unplaced for a latency envelope, a tier, a
# selector or a cost cap would not run on a new cluster either.
_FIXABLE = frozenset({"capacity", "availability", "spread", "scaling"})


def _fixable(decision: Plan) -> set[str]:
    """Components whose unplaced replicas a new cluster may hold."""
    blocked = {u.component for u in decision.unmet if u.goal not in _FIXABLE}
    return {u.component for u in decision.unplaced} - blocked


def _capi_status(observed: Observed, pool: ClusterPool | None, name: str) -> ClusterApiStatus | None:
    """What the pool's management cluster reports of the Cluster ``name`` (only it may say)."""
    if pool is None:
        return None
    for status in observed.cluster_api.get(pool.spec.management_cluster, ()):
        if status.name == name and status.namespace == pool.spec.namespace:
            return status
    return None


def _failure(pool: ClusterPool | None, dyn: DynamicCluster, status: ClusterApiStatus | None,
             now: datetime) -> str | None:
    """Why a cluster being provisioned counts as failed, or None."""
    if pool is None:
        return None
    if status is not None and status.phase == "Failed":
        return f"Cluster API reports phase Failed: {status.message or 'no message'}"
    waited = (now - dyn.requested_at).total_seconds()
    if waited > pool.spec.provisioning_timeout_seconds:
        state = f"phase {status.phase}" if status is not None else "no status reported"
        return (f"not ready after {waited:.0f} s (timeout "
                f"{pool.spec.provisioning_timeout_seconds:g} s, {state})")
    return None


def _back_off(pool: ClusterPool, prev: Provisioning, why: str, now: datetime) -> PoolBackoff:
    failures = 1 + next((b.failures for b in prev.backoff if b.pool == pool.name), 0)
    wait = pool.spec.retry_seconds * 2 ** min(failures - 1, MAX_BACKOFF_DOUBLINGS)
    return PoolBackoff(pool=pool.name, failures=failures, retry_at=now + timedelta(seconds=wait),
                       reason=why)


def _reporting(observed: Observed, name: str, grace: float) -> bool:
    """The cluster's own agent reports, fresh and healthy."""
    seen = observed.clusters.get(name)
    return seen is not None and seen.healthy and seen.heartbeat_age_seconds is not None \
        and seen.heartbeat_age_seconds <= grace


def _runs_anything(decision: Plan, name: str) -> bool:
    return any(name in cp.replicas_by_cluster() for cp in decision.components.values())


def _provision(goals: Goals, decision: Plan, replicas: list[Replica], clusters: list[DynamicCluster],
               backoff: Mapping[str, PoolBackoff], since: datetime, now: datetime,
               requested: int) -> tuple[list[DynamicCluster], list[ProvisionEvent]]:
    """Let the pool clusters there are take the waiting replicas first (joined ones grow
    in ``decide``), then request new clusters for what they cannot hold."""
    events: list[ProvisionEvent] = []
    waited = (now - since).total_seconds()
    out = list(clusters)
    remaining = list(replicas)
    # Clusters on their way or in the fleet take the replicas their pool holds first:
    # never two clusters for one burst.
    for i, dyn in enumerate(out):
        pool = goals.pools.get(dyn.pool)
        if dyn.phase == "draining" or pool is None:
            continue
        mine = [r for r in remaining if holds(pool, r)]
        if not mine:
            continue
        room = pool.spec.limits.max_nodes_per_cluster
        if dyn.phase == "joined":
            placed = _placed_on(decision, dyn.name)
            room -= nodes_for(pool, placed) if placed else 0
        taken = _fill(pool, mine, room)
        remaining = _minus(remaining, taken)
        need = sized(pool, nodes_for(pool, taken))
        if dyn.phase == "provisioning" and need > dyn.nodes:
            out[i] = dyn.model_copy(update={"nodes": need})
            events.append(ProvisionEvent(action="scale", pool=dyn.pool, cluster=dyn.name, nodes=need,
                                         detail=f"{dyn.name} (provisioning) grows to {need} nodes"))
    while remaining:
        candidates = [
            pool for pool in goals.pools.values()
            if (pool.name not in backoff or backoff[pool.name].retry_at <= now)
            and any(holds(pool, r) for r in remaining)
            and sum(1 for c in out if c.pool == pool.name) < pool.spec.limits.max_clusters
        ]
        if not candidates:
            break
        pool = min(candidates, key=lambda p: _rank(p, remaining))
        mine = [r for r in remaining if holds(pool, r)]
        if waited < pool.spec.scale_up.unplaced_seconds:
            events.append(ProvisionEvent(action="wait", pool=pool.name, detail=(
                f"{len(mine)} replicas unplaced for {waited:.0f} s; pool {pool.name} is used "
                f"after {pool.spec.scale_up.unplaced_seconds:g} s")))
            break
        taken = _fill(pool, mine, pool.spec.limits.max_nodes_per_cluster)
        remaining = _minus(remaining, taken)
        nodes = sized(pool, nodes_for(pool, taken))
        requested += 1
        name = _free_name(pool.name, goals, out, requested)
        components = sorted({r.component for r in taken})
        reason = (f"{len(taken)} replicas of {', '.join(components)} unplaced for {waited:.0f} s; "
                  f"pool {pool.name} holds them on {nodes} nodes of "
                  f"{pool.spec.node.cpu}m/{pool.spec.node.memory // 2**20}Mi")
        out.append(DynamicCluster(name=name, pool=pool.name, nodes=nodes, phase="provisioning",
                                  requested_at=now, since=now, reason=reason))
        events.append(ProvisionEvent(action="provision", pool=pool.name, cluster=name, nodes=nodes,
                                     detail=reason))
    return out, events


def _rank(pool: ClusterPool, replicas: list[Replica]) -> tuple[int, float, str]:
    """Pools wanted where the replicas are wanted first, then cheapest per CPU-hour."""
    near = sum(1 for r in replicas if r.near == pool.spec.region and holds(pool, r))
    return (-near, pool.spec.cost.cpu_hour, pool.name)


def _fill(pool: ClusterPool, replicas: list[Replica], max_nodes: int) -> list[Replica]:
    """The largest prefix (biggest first) of ``replicas`` that fits on ``max_nodes`` nodes."""
    ordered = sorted(replicas, key=lambda r: (-r.cpu, -r.memory, r.component))
    if nodes_for(pool, ordered) <= max_nodes:
        return ordered
    lo, hi = 0, len(ordered)
    while lo < hi:  # nodes_for is monotone in the prefix length
        mid = (lo + hi + 1) // 2
        if nodes_for(pool, ordered[:mid]) <= max_nodes:
            lo = mid
        else:
            hi = mid - 1
    return ordered[:lo]


def _minus(replicas: list[Replica], taken: list[Replica]) -> list[Replica]:
    left = list(replicas)
    for r in taken:
        left.remove(r)
    return left


def _free_name(pool: str, goals: Goals, clusters: list[DynamicCluster], n: int) -> str:
    """``<pool>-<n>``, n counting every cluster ever requested (skipping names in use)."""
    used = set(goals.clusters) | {c.name for c in clusters}
    while f"{pool}-{n}" in used:
        n += 1
    return f"{pool}-{n}"


def next_deadline(goals: Goals, state: Provisioning | None, now: datetime) -> datetime | None:
    """The earliest moment after ``now`` a provisioning rule may decide something new
    without any other change (a pool's unplaced delay, a linger, a provisioning timeout, a
    back-off): the leader plans again then. A moment already past was decided at it."""
    if state is None:
        return None
    times: list[datetime] = []
    if state.unplaced_since is not None and goals.pools:
        wait = min(p.spec.scale_up.unplaced_seconds for p in goals.pools.values())
        times.append(state.unplaced_since + timedelta(seconds=wait))
    for dyn in state.clusters:
        pool = goals.pools.get(dyn.pool)
        if pool is None:
            continue
        if dyn.phase == "provisioning":
            times.append(dyn.requested_at + timedelta(seconds=pool.spec.provisioning_timeout_seconds))
        elif dyn.idle_since is not None and dyn.phase == "joined":
            times.append(dyn.idle_since + timedelta(seconds=pool.spec.linger_seconds))
    if state.unplaced_since is not None:
        times += [b.retry_at for b in state.backoff]
    return min((t for t in times if t > now), default=None)


def fleet_record(state: Provisioning | None, goals: Goals) -> dict[str, dict[str, object]]:
    """The dynamic clusters as the Knowledge Base records them (plain values)."""
    out: dict[str, dict[str, object]] = {}
    for dyn in state.clusters if state else ():
        pool = goals.pools.get(dyn.pool)
        out[dyn.name] = {"pool": dyn.pool, "phase": dyn.phase, "nodes": dyn.nodes,
                         "tier": pool.spec.tier if pool else None,
                         "region": pool.spec.region if pool else None}
    return out


def state_key(state: Provisioning | None) -> tuple[object, ...]:
    """What of the provisioning state must reach the plan branch when it changes (wording,
    events and exact times need not: a cycle that changes only them writes nothing)."""
    if state is None:
        return ()
    return (
        state.unplaced_since is not None,
        tuple((c.name, c.phase, c.nodes, c.idle_since is not None) for c in state.clusters),
        tuple((b.pool, b.failures) for b in state.backoff),
    )
