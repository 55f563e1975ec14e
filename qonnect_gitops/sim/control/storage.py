"""Volumes: PersistentVolumeClaims bind to PersistentVolumes, provisioned on demand for their class.

* A claim of a class with a provisioner gets a new PersistentVolume ``pvc-<uid>`` of
  the requested size: at once for ``Immediate`` classes, once the scheduler has
  chosen a node for a Pod using it (``volume.kubernetes.io/selected-node``) for
  ``WaitForFirstConsumer`` ones, as the local-path provisioners of kind and k3s do.
* A claim with ``storageClassName: ""`` binds to the smallest Available volume
  without a class that is large enough and offers its access modes.
* When a bound claim goes, its volume is deleted (reclaim policy ``Delete``) or
  becomes ``Released`` (``Retain``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from qonnect_gitops.model.quantity import parse_quantity
from qonnect_gitops.sim.control.base import Context, key_of, meta, terminating
from qonnect_gitops.sim.store import Event, ObjKey

PVCS = ("", "persistentvolumeclaims")
PVS = ("", "persistentvolumes")
CLASSES = ("storage.k8s.io", "storageclasses")
SELECTED_NODE = "volume.kubernetes.io/selected-node"


def _size(value: Any) -> int:
    try:
        return int(parse_quantity(value))
    except (ValueError, TypeError):
        return 0


class Volumes:
    """The PersistentVolume binder and a dynamic provisioner."""

    name = "volumes"

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.rt_pvc = ctx.rt("", "v1", "persistentvolumeclaims")
        self.rt_pv = ctx.rt("", "v1", "persistentvolumes")
        self._pending: set[ObjKey] = set()
        self._volume_of: dict[ObjKey, str] = {}  # claim -> the volume bound to it

    def keys(self, ev: Event) -> Iterable[ObjKey]:
        """The claim itself; pending claims when volumes or classes appear; a claim whose volume changed."""
        if ev.gr == PVCS:
            return (key_of(ev.obj),)
        if ev.gr == PVS:
            ref = (ev.obj.get("spec") or {}).get("claimRef") or {}
            if ev.type != "DELETED" and ref.get("name"):
                self._volume_of[(ref.get("namespace", ""), ref["name"])] = meta(ev.obj)["name"]
            # A volume's own key has no namespace (claims always have one).
            return [("", meta(ev.obj)["name"]), *sorted(self._pending)]
        if ev.gr == CLASSES:
            return sorted(self._pending)
        return ()

    def all_keys(self) -> Iterable[ObjKey]:
        """Every claim (and the volume each is bound to)."""
        for pv in self.ctx.store.list(PVS):
            ref = (pv.get("spec") or {}).get("claimRef") or {}
            if ref.get("name"):
                self._volume_of[(ref.get("namespace", ""), ref["name"])] = meta(pv)["name"]
        return [*(key_of(v) for v in self.ctx.store.list(PVS)), *(key_of(c) for c in self.ctx.store.list(PVCS))]

    def sync(self, key: ObjKey) -> None:
        """Bind (or provision for) a pending claim; reclaim the volume of a claim that went; new volumes Available."""
        if not key[0]:
            pv = self.ctx.get(PVS, key)
            if pv is not None and not (pv.get("status") or {}).get("phase"):
                phase = "Bound" if (pv.get("spec") or {}).get("claimRef") else "Available"
                self.ctx.set_status(self.rt_pv, pv, {"phase": phase}, "persistentvolume-controller")
            return
        pvc = self.ctx.get(PVCS, key)
        if pvc is None or terminating(pvc):
            self._pending.discard(key)
            if pvc is None:
                self._reclaim(key)
            return
        if (pvc.get("status") or {}).get("phase") == "Bound":
            self._pending.discard(key)
            return
        self._pending.add(key)
        spec = pvc.get("spec") or {}
        class_name = spec.get("storageClassName")
        if spec.get("volumeName"):
            pv = self.ctx.get(PVS, ("", spec["volumeName"]))
            if pv is not None:
                self._bind(pvc, pv)
            return
        if class_name:
            cls = self.ctx.get(CLASSES, ("", class_name))
            if cls is None:
                self.ctx.event(pvc, "ProvisioningFailed", f'storageclass.storage.k8s.io "{class_name}" not found',
                               "persistentvolume-controller", warning=True)
                return
            node = (meta(pvc).get("annotations") or {}).get(SELECTED_NODE)
            if cls.get("volumeBindingMode") == "WaitForFirstConsumer" and not node:
                self.ctx.event(pvc, "WaitForFirstConsumer", "waiting for first consumer to be created before "
                               "binding", "persistentvolume-controller")
                return
            self._provision(pvc, cls, node)
            return
        pv = self._static_match(pvc)
        if pv is None:
            self.ctx.event(pvc, "FailedBinding", "no persistent volumes available for this claim and no storage "
                           "class is set", "persistentvolume-controller")
            return
        self._bind(pvc, pv)

    def _static_match(self, pvc: dict[str, Any]) -> dict[str, Any] | None:
        spec = pvc.get("spec") or {}
        want = _size(((spec.get("resources") or {}).get("requests") or {}).get("storage", 0))
        modes = set(spec.get("accessModes") or [])
        best: tuple[int, str, dict[str, Any]] | None = None
        for pv in self.ctx.store.list(PVS):
            pspec = pv.get("spec") or {}
            if (pv.get("status") or {}).get("phase") != "Available" or pspec.get("claimRef"):
                continue
            if pspec.get("storageClassName") or not modes <= set(pspec.get("accessModes") or []):
                continue
            size = _size((pspec.get("capacity") or {}).get("storage", 0))
            if size >= want and (best is None or (size, meta(pv)["name"]) < best[:2]):
                best = (size, meta(pv)["name"], pv)
        return best[2] if best else None

    def _provision(self, pvc: dict[str, Any], cls: dict[str, Any], node: str | None) -> None:
        spec = pvc.get("spec") or {}
        uid = meta(pvc)["uid"]
        name = f"pvc-{uid}"
        provisioner = cls.get("provisioner", "")
        pv_spec: dict[str, Any] = {
            "capacity": {"storage": ((spec.get("resources") or {}).get("requests") or {}).get("storage", "1Gi")},
            "accessModes": list(spec.get("accessModes") or ["ReadWriteOnce"]),
            "persistentVolumeReclaimPolicy": cls.get("reclaimPolicy", "Delete"),
            "storageClassName": meta(cls)["name"], "volumeMode": spec.get("volumeMode", "Filesystem"),
            "hostPath": {"path": f"/var/lib/qonnect-sim/{name}", "type": "DirectoryOrCreate"},
        }
        if node:
            pv_spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}
        pv = self.ctx.get(PVS, ("", name))
        if pv is None:
            pv = self.ctx.create(self.rt_pv, "", {
                "apiVersion": "v1", "kind": "PersistentVolume",
                "metadata": {"name": name, "annotations": {"pv.kubernetes.io/provisioned-by": provisioner}},
                "spec": pv_spec}, provisioner or "persistentvolume-controller")
            if pv is None:
                return
            self.ctx.event(pvc, "ProvisioningSucceeded", f"Successfully provisioned volume {name}",
                           provisioner or "persistentvolume-controller")
        self._bind(pvc, pv)

    def _bind(self, pvc: dict[str, Any], pv: dict[str, Any]) -> None:
        """Point the volume at the claim and the claim at the volume; both become Bound."""
        m = meta(pvc)
        ref = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": m["namespace"], "name": m["name"],
               "uid": m["uid"], "resourceVersion": m.get("resourceVersion")}
        pspec = dict(pv.get("spec") or {}, claimRef=ref)
        pv = self.ctx.replace(self.rt_pv, dict(pv, spec=pspec), "persistentvolume-controller") or pv
        pv = self.ctx.set_status(self.rt_pv, pv, {"phase": "Bound"}, "persistentvolume-controller") or pv
        annotations = dict(m.get("annotations") or {}, **{"pv.kubernetes.io/bind-completed": "yes",
                                                         "pv.kubernetes.io/bound-by-controller": "yes"})
        provisioner = (meta(pv).get("annotations") or {}).get("pv.kubernetes.io/provisioned-by")
        if provisioner:
            annotations["volume.beta.kubernetes.io/storage-provisioner"] = provisioner
            annotations["volume.kubernetes.io/storage-provisioner"] = provisioner
        bound = self.ctx.replace(self.rt_pvc, dict(pvc, metadata=dict(m, annotations=annotations),
                                                   spec=dict(pvc.get("spec") or {}, volumeName=meta(pv)["name"])),
                                 "persistentvolume-controller")
        if bound is None:
            return
        self.ctx.set_status(self.rt_pvc, bound, {
            "phase": "Bound", "accessModes": list((pv.get("spec") or {}).get("accessModes") or []),
            "capacity": dict((pv.get("spec") or {}).get("capacity") or {})}, "persistentvolume-controller")
        self._volume_of[key_of(pvc)] = meta(pv)["name"]
        self._pending.discard(key_of(pvc))

    def _reclaim(self, key: ObjKey) -> None:
        name = self._volume_of.pop(key, None)
        pv = self.ctx.get(PVS, ("", name)) if name else None
        if pv is None:
            return
        ref = (pv.get("spec") or {}).get("claimRef") or {}
        if (ref.get("namespace"), ref.get("name")) != key:
            return
        if (pv.get("spec") or {}).get("persistentVolumeReclaimPolicy", "Retain") == "Delete":
            self.ctx.delete(self.rt_pv, pv)
        else:
            self.ctx.set_status(self.rt_pv, pv, {"phase": "Released"}, "persistentvolume-controller")
