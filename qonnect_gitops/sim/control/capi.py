"""Cluster API on a simulated management cluster: the core controllers and one
infrastructure provider, emulated (``qonnect sim --capi``).

``install_crds`` serves the Cluster API CRDs (``qonnect_gitops/data/cluster-api``), so
objects are validated against the real schemas. ``ClusterApi`` acts on them the way the
Cluster API controllers do, as far as a fleet can see:

* a new ``Cluster`` goes to phase ``Provisioning`` (InfrastructureReady and
  ControlPlaneInitialized False); ``delay`` seconds later a simulated cluster starts
  with the ``MachineDeployment``'s replicas as nodes (shape from the machine template's
  ``qonnect.io/node-shape`` annotation), the ``<name>-kubeconfig`` Secret is written
  (``data.value``, as Cluster API does), and the Cluster becomes ``Provisioned`` with
  its conditions True. ``on_ready`` is told (the demo starts the cluster's agent then,
  as a bootstrap would).
* the first ``fail`` clusters created fail instead: phase ``Failed``, conditions False
  with reason ``ProvisioningFailed``; nothing starts.
* a ``MachineDeployment`` whose replicas grow adds nodes; its status follows.
* a deleted ``Cluster`` stops its simulated cluster and deletes the kubeconfig Secret;
  ``on_deleted`` is told.
"""

from __future__ import annotations

import base64
import calendar
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

import qonnect_gitops
from qonnect_gitops.logs import get_logger
from qonnect_gitops.model.cluster import NodeShape
from qonnect_gitops.model.labels import CAPI_CLUSTER_NAME_LABEL, NODE_SHAPE_ANNOTATION, REGION_ANNOTATION
from qonnect_gitops.sim.api import ApiCore, WriteOptions
from qonnect_gitops.sim.control.base import (
    Context,
    condition,
    key_of,
    meta,
    terminating,
)
from qonnect_gitops.sim.errors import ApiError
from qonnect_gitops.sim.nodes import build_node
from qonnect_gitops.sim.store import Event, ObjKey

if TYPE_CHECKING:
    from qonnect_gitops.sim.cluster import SimCluster

log = get_logger(__name__)

CRD_DIR = Path(qonnect_gitops.__file__).parent / "data" / "cluster-api"
CLUSTERS = ("cluster.x-k8s.io", "clusters")
MACHINE_DEPLOYMENTS = ("cluster.x-k8s.io", "machinedeployments")
SECRETS = ("", "secrets")
MANAGER = "capi-sim"

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present: 10x faster
ClusterHook = Callable[[str, "SimCluster | None"], None]


def install_crds(core: ApiCore) -> int:
    """Create the Cluster API CRDs in a simulated cluster; returns how many."""
    rt = core.registry.find("apiextensions.k8s.io", "v1", "customresourcedefinitions")
    assert rt is not None
    count = 0
    for path in sorted(CRD_DIR.glob("*.yaml")):
        crd = yaml.load(path.read_text(), Loader=_LOADER)
        try:
            core.create(rt, "", crd, WriteOptions(field_manager=MANAGER))
            count += 1
        except ApiError as exc:
            if exc.code != 409:
                raise
    return count


def parse_shape(text: str) -> NodeShape:
    """``cpu=4000m,memory=...,pods=110,arch=amd64`` (the annotation render/capi writes)."""
    fields = dict(part.split("=", 1) for part in text.split(",") if "=" in part)
    return NodeShape.model_validate({"count": 1, "cpu": fields.get("cpu", "2"),
                                     "memory": fields.get("memory", "4Gi"),
                                     "pods": int(fields.get("pods", "110")),
                                     "arch": fields.get("arch", "amd64")})


class ClusterApi:
    """The emulated Cluster API controllers (see the module docstring)."""

    name = "cluster-api"

    def __init__(self, ctx: Context, delay: float = 10.0, fail: int = 0,
                 on_ready: ClusterHook | None = None, on_deleted: ClusterHook | None = None) -> None:
        self.ctx = ctx
        self.delay = delay
        self.fail_left = fail
        self.on_ready = on_ready
        self.on_deleted = on_deleted
        self.sims: dict[ObjKey, SimCluster] = {}
        self.failed: set[str] = set()  # uids of clusters that failed (they stay failed)
        self._first_seen: dict[str, float] = {}  # uid -> when this controller first saw it
        self._lock = threading.Lock()

    # ---------------------------------------------------------------- informers

    def keys(self, ev: Event) -> Iterable[ObjKey]:
        """A Cluster that changed or went; the Cluster of a MachineDeployment that changed."""
        if ev.gr == CLUSTERS:
            return (key_of(ev.obj),)
        if ev.gr == MACHINE_DEPLOYMENTS:
            spec = ev.obj.get("spec") or {}
            return ((meta(ev.obj).get("namespace", ""), spec.get("clusterName", "")),)
        return ()

    def all_keys(self) -> Iterable[ObjKey]:
        """Every Cluster, and every cluster this controller started."""
        listed = [key_of(o) for o in self.ctx.store.list(CLUSTERS)] if self._served() else []
        return sorted(set(listed) | set(self.sims))

    def _served(self) -> bool:
        return self.ctx.core.registry.find("cluster.x-k8s.io", "v1beta2", "clusters") is not None

    # -------------------------------------------------------------------- sync

    def sync(self, key: ObjKey) -> None:
        """Bring one Cluster (and its simulated cluster) to what its objects ask."""
        obj = self.ctx.get(CLUSTERS, key) if self._served() else None
        if obj is None or terminating(obj):
            self._tear_down(key)
            return
        uid = meta(obj).get("uid", "")
        status = obj.get("status") or {}
        if uid in self.failed:
            return
        if not status:
            self._set(obj, "Provisioning", False, "Provisioning", "waiting for the infrastructure")
            self._first_seen[uid] = time.monotonic()
            self.ctx.after(self.delay, self.name, key)
            return
        if key in self.sims:
            self._scale(key, obj)
            return
        seen = self._first_seen.get(uid)
        created = time.monotonic() - seen if seen is not None else self._age(obj)
        if created < self.delay:
            self.ctx.after(self.delay - created, self.name, key)
            return
        if self.fail_left > 0:
            self.fail_left -= 1
            self.failed.add(uid)
            self._set(obj, "Failed", False, "ProvisioningFailed",
                      "the simulated provider failed to create the machines (qonnect sim --capi-fail)")
            log.warning("capi_sim_failed", cluster=key[1])
            return
        self._provision(key, obj)

    def _age(self, obj: dict[str, Any]) -> float:
        """Seconds since the Cluster went Provisioning, from its condition (another
        controller instance set it: the management sim restarted)."""
        for cond in (obj.get("status") or {}).get("conditions") or []:
            if cond.get("type") == "InfrastructureReady":
                try:
                    return time.time() - _epoch(cond.get("lastTransitionTime", ""))
                except ValueError:
                    return self.delay
        return 0.0

    def _machine_deployment(self, key: ObjKey) -> dict[str, Any] | None:
        for md in self.ctx.store.list(MACHINE_DEPLOYMENTS):
            if meta(md).get("namespace") == key[0] and (md.get("spec") or {}).get("clusterName") == key[1]:
                return md
        return None

    def _shape(self, key: ObjKey, md: dict[str, Any] | None) -> NodeShape:
        """The node shape of the MachineDeployment's machine template (its annotation)."""
        ref = ((((md or {}).get("spec") or {}).get("template") or {}).get("spec") or {}).get("infrastructureRef") or {}
        annotation = ""
        for rt in self.ctx.core.registry.all():
            if rt.kind == ref.get("kind") and rt.group == ref.get("apiGroup"):
                found = self.ctx.store.get((rt.group, rt.plural), key[0], ref.get("name", ""))
                if found is not None:
                    annotation = (meta(found).get("annotations") or {}).get(NODE_SHAPE_ANNOTATION, "")
                break
        return parse_shape(annotation)

    def _provision(self, key: ObjKey, obj: dict[str, Any]) -> None:
        from qonnect_gitops.sim.cluster import SimCluster

        md = self._machine_deployment(key)
        replicas = int(((md or {}).get("spec") or {}).get("replicas", 1))
        shape = self._shape(key, md).model_copy(update={"count": max(1, replicas)})
        region = (meta(obj).get("annotations") or {}).get(REGION_ANNOTATION, "local")
        sim = SimCluster(name=key[1], nodes=[shape], region=region,
                         startup_delay=self.ctx.startup_delay)
        sim.start()
        self.sims[key] = sim
        kubeconfig = sim.kubeconfig_yaml()
        secrets = self.ctx.rt("", "v1", "secrets")
        self.ctx.create(secrets, key[0], {
            "apiVersion": "v1", "kind": "Secret", "type": "cluster.x-k8s.io/secret",
            "metadata": {"name": f"{key[1]}-kubeconfig", "namespace": key[0],
                         "labels": {CAPI_CLUSTER_NAME_LABEL: key[1]}},
            "data": {"value": base64.b64encode(kubeconfig.encode()).decode()},
        }, MANAGER)
        self._set(obj, "Provisioned", True, "Provisioned", "")
        self._md_status(md, replicas)
        log.info("capi_sim_provisioned", cluster=key[1], nodes=replicas, api=sim.url)
        if self.on_ready is not None:
            self.on_ready(key[1], sim)

    def _scale(self, key: ObjKey, obj: dict[str, Any]) -> None:
        """Add nodes when the MachineDeployment asks for more (fewer: kept, as a
        scale-down waits for the nodes to drain)."""
        sim = self.sims[key]
        md = self._machine_deployment(key)
        want = int(((md or {}).get("spec") or {}).get("replicas", 1))
        pool = sim.pool
        if pool is None:
            return
        have = pool.total
        if want > have:
            shape = self._shape(key, md).model_copy(update={"count": want - have})
            rt = sim.core.registry.find("", "v1", "nodes")
            assert rt is not None
            with sim.core.store.lock:
                node, status = build_node(sim.name, sim.region, shape, pool.total, pool.taints, pool.distribution)
                pool.add_shape(shape, sim.core.render_stored(rt, node, status, "kubelet"))
                sim.core.store.changed.notify_all()
            log.info("capi_sim_scaled", cluster=key[1], nodes=want)
        self._md_status(md, max(want, have))

    def _md_status(self, md: dict[str, Any] | None, nodes: int) -> None:
        if md is None:
            return
        rt = self.ctx.rt("cluster.x-k8s.io", "v1beta2", "machinedeployments")
        status = dict(md.get("status") or {}, replicas=nodes, readyReplicas=nodes,
                      availableReplicas=nodes, upToDateReplicas=nodes, phase="Running",
                      observedGeneration=meta(md).get("generation", 1))
        self.ctx.set_status(rt, md, status, MANAGER)

    def _set(self, obj: dict[str, Any], phase: str, ok: bool, reason: str, message: str) -> None:
        """The Cluster's phase, initialization and v1beta2 conditions."""
        old = (obj.get("status") or {}).get("conditions") or []
        value = "True" if ok else "False"
        conds = [condition(old, kind, value, reason, message) for kind in
                 ("InfrastructureReady", "ControlPlaneInitialized", "ControlPlaneAvailable",
                  "WorkersAvailable", "Available")]
        for cond in conds:
            cond["observedGeneration"] = meta(obj).get("generation", 1)
            cond.setdefault("reason", reason)
            cond.setdefault("message", message)  # required by metav1.Condition
        status = {"phase": phase, "conditions": conds,
                  "initialization": {"infrastructureProvisioned": ok, "controlPlaneInitialized": ok},
                  "observedGeneration": meta(obj).get("generation", 1)}
        rt = self.ctx.rt("cluster.x-k8s.io", "v1beta2", "clusters")
        self.ctx.set_status(rt, obj, status, MANAGER)

    def _tear_down(self, key: ObjKey) -> None:
        sim = self.sims.pop(key, None)
        if sim is None:
            return
        secret = self.ctx.get(SECRETS, (key[0], f"{key[1]}-kubeconfig"))
        if secret is not None:
            self.ctx.delete(self.ctx.rt("", "v1", "secrets"), secret)
        # Stopping binds nothing and waits on the child's own threads only.
        threading.Thread(target=sim.stop, name=f"capi-stop-{key[1]}", daemon=True).start()
        log.info("capi_sim_deleted", cluster=key[1])
        if self.on_deleted is not None:
            self.on_deleted(key[1], None)

    def stop_all(self) -> None:
        """Stop every cluster this controller started (the management sim stops)."""
        for key in list(self.sims):
            self.sims.pop(key).stop()


def _epoch(stamp: str) -> float:
    """Seconds since the epoch of an RFC 3339 UTC timestamp (``...Z``)."""
    return float(calendar.timegm(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S")))


def enable(sim: SimCluster, delay: float = 10.0, fail: int = 0, on_ready: ClusterHook | None = None,
           on_deleted: ClusterHook | None = None) -> ClusterApi:
    """Make a simulated cluster a Cluster API management cluster: serve the CRDs and run
    the emulated controllers (the cluster must have controllers, i.e. nodes)."""
    if sim.controllers is None:
        raise ValueError(f"sim cluster {sim.name} runs no controllers; a management cluster needs nodes")
    install_crds(sim.core)
    controller = ClusterApi(sim.controllers.ctx, delay, fail, on_ready, on_deleted)
    sim.controllers.add(controller)
    return controller
