"""Services: Endpoints and EndpointSlices for selector Services, ingress addresses for LoadBalancers.

A Pod event concerns only the Services of its namespace whose selector its labels
(before or after) match; Services are indexed by one pair of their selector, so
finding them does not read every Service, and the Pods of a Service come from the
store's label index.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from typing import Any

from qonnect_gitops.sim.control.base import (
    PODS,
    Context,
    key_of,
    meta,
    owner_ref,
    pod_ready,
    terminating,
)
from qonnect_gitops.sim.store import NODES, Event, ObjKey

SERVICES = ("", "services")
ENDPOINTS = ("", "endpoints")
SLICES = ("discovery.k8s.io", "endpointslices")
MANAGED_BY_SLICE = "endpointslice-controller.k8s.io"
MANAGED_BY_ENDPOINTS = "endpoint-controller"


def _selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


class Services:
    """Endpoints, EndpointSlices and load balancer addresses."""

    name = "endpoints"

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.rt_service = ctx.rt("", "v1", "services")
        self.rt_endpoints = ctx.rt("", "v1", "endpoints")
        self.rt_slice = ctx.rt("discovery.k8s.io", "v1", "endpointslices")
        ctx.store.index_labels(PODS)
        # (namespace, label key, value) -> names of Services whose selector has that pair
        self._index: dict[tuple[str, str, str], set[str]] = {}
        self._selectors: dict[ObjKey, dict[str, str]] = {}
        self._next_lb = 0
        # Each simulated cluster hands out load balancer addresses from its own /24 in
        # 172.16.0.0/12 (from its name), so two clusters' first addresses differ.
        digest = hashlib.sha256(ctx.core.cluster_name.encode()).digest()
        self._lb_block = f"172.{16 + digest[0] % 16}.{digest[1]}"

    def _remember(self, key: ObjKey, svc: dict[str, Any] | None) -> None:
        old = self._selectors.pop(key, None)
        if old:
            k, v = min(old.items())
            names = self._index.get((key[0], k, v))
            if names is not None:
                names.discard(key[1])
                if not names:
                    del self._index[(key[0], k, v)]
        selector = ((svc or {}).get("spec") or {}).get("selector") or {}
        if svc is not None and selector:
            self._selectors[key] = dict(selector)
            k, v = min(selector.items())
            self._index.setdefault((key[0], k, v), set()).add(key[1])

    def keys(self, ev: Event) -> Iterable[ObjKey]:
        """The Service itself; the Services selecting a Pod that changed."""
        if ev.gr == SERVICES:
            key = key_of(ev.obj)
            self._remember(key, None if ev.type == "DELETED" else ev.obj)
            return (key,)
        if ev.gr == PODS:
            ns = meta(ev.obj).get("namespace", "")
            out: set[ObjKey] = set()
            for obj in (ev.obj, ev.prev):
                labels = meta(obj or {}).get("labels") or {}
                for k, v in labels.items():
                    for name in self._index.get((ns, k, v), ()):
                        if _selects(self._selectors.get((ns, name), {}), labels):
                            out.add((ns, name))
            return sorted(out)
        return ()

    def all_keys(self) -> Iterable[ObjKey]:
        """Every Service (and every Endpoints object this controller made, in case its Service is gone)."""
        self._index.clear()
        self._selectors.clear()
        keys = set()
        for svc in self.ctx.store.list(SERVICES):
            self._remember(key_of(svc), svc)
            keys.add(key_of(svc))
        for ep in self.ctx.store.list(ENDPOINTS):
            if (meta(ep).get("labels") or {}).get("endpoints.kubernetes.io/managed-by") == MANAGED_BY_ENDPOINTS:
                keys.add(key_of(ep))
        return sorted(keys)

    def sync(self, key: ObjKey) -> None:
        """Endpoints and EndpointSlice of one Service; its load balancer address."""
        svc = self.ctx.get(SERVICES, key)
        spec = (svc or {}).get("spec") or {}
        if svc is None or not spec.get("selector") or spec.get("type") == "ExternalName" or terminating(svc):
            ep = self.ctx.get(ENDPOINTS, key)
            if ep is not None and (meta(ep).get("labels") or {}).get(
                    "endpoints.kubernetes.io/managed-by") == MANAGED_BY_ENDPOINTS:
                self.ctx.delete(self.rt_endpoints, ep)
            if svc is not None and spec.get("type") == "LoadBalancer" and not terminating(svc):
                self._load_balancer(svc)
            return
        if spec.get("type") == "LoadBalancer":
            svc = self._load_balancer(svc) or svc
        pods = [p for p in self.ctx.store.select(PODS, key[0], spec["selector"])
                if not terminating(p) and (p.get("status") or {}).get("podIP")
                and (p.get("status") or {}).get("phase") == "Running"]
        self._sync_endpoints(svc, pods)

    def _load_balancer(self, svc: dict[str, Any]) -> dict[str, Any] | None:
        """Give a LoadBalancer Service an ingress address, as a cloud controller (or k3s' servicelb) does."""
        status = svc.get("status") or {}
        if (status.get("loadBalancer") or {}).get("ingress"):
            return None
        self._next_lb += 1
        ip = f"{self._lb_block}.{self._next_lb % 250 + 1}"
        ports = [{"port": p.get("port"), "protocol": p.get("protocol", "TCP")}
                 for p in (svc.get("spec") or {}).get("ports") or []]
        self.ctx.event(svc, "EnsuringLoadBalancer", "Ensuring load balancer", "service-controller")
        updated = self.ctx.set_status(self.rt_service, svc, dict(status, loadBalancer={"ingress": [
            {"ip": ip, "ipMode": "VIP", **({"ports": ports} if ports else {})}]}), "service-controller")
        self.ctx.event(svc, "EnsuredLoadBalancer", "Ensured load balancer", "service-controller")
        return updated

    @staticmethod
    def _ports(svc: dict[str, Any], pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for sp in (svc.get("spec") or {}).get("ports") or []:
            target = sp.get("targetPort", sp.get("port"))
            port: int | None = target if isinstance(target, int) else None
            if port is None:
                if str(target).isdigit():
                    port = int(str(target))
                else:
                    for p in pods:
                        for c in (p.get("spec") or {}).get("containers") or []:
                            for cp in c.get("ports") or []:
                                if cp.get("name") == target and port is None:
                                    port = int(cp.get("containerPort"))
            if port is None:
                continue
            entry: dict[str, Any] = {"port": port, "protocol": sp.get("protocol", "TCP")}
            if sp.get("name"):
                entry["name"] = sp["name"]
            if sp.get("appProtocol"):
                entry["appProtocol"] = sp["appProtocol"]
            out.append(entry)
        return out

    def _sync_endpoints(self, svc: dict[str, Any], pods: list[dict[str, Any]]) -> None:
        m = meta(svc)
        ns, name = m["namespace"], m["name"]
        ports = self._ports(svc, pods)

        def ref(p: dict[str, Any]) -> dict[str, Any]:
            return {"kind": "Pod", "namespace": ns, "name": meta(p)["name"], "uid": meta(p)["uid"]}

        pods = sorted(pods, key=lambda p: str((p.get("status") or {}).get("podIP")))
        ready = [{"ip": p["status"]["podIP"], "nodeName": p["spec"]["nodeName"], "targetRef": ref(p)}
                 for p in pods if pod_ready(p)]
        not_ready = [{"ip": p["status"]["podIP"], "nodeName": p["spec"]["nodeName"], "targetRef": ref(p)}
                     for p in pods if not pod_ready(p)]
        subset: dict[str, Any] = {}
        if ready:
            subset["addresses"] = ready
        if not_ready:
            subset["notReadyAddresses"] = not_ready
        if subset and ports:
            subset["ports"] = ports
        labels = {**(m.get("labels") or {}), "endpoints.kubernetes.io/managed-by": MANAGED_BY_ENDPOINTS}
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "Endpoints",
                                "metadata": {"name": name, "namespace": ns, "labels": labels}}
        if subset and ports:
            body["subsets"] = [subset]
        self._upsert(self.rt_endpoints, ns, name, body, lambda live: (
            (meta(live).get("labels") or {}) == labels and live.get("subsets") == body.get("subsets")),
            "endpoint-controller")
        slice_labels = {**(m.get("labels") or {}), "kubernetes.io/service-name": name,
                        "endpointslice.kubernetes.io/managed-by": MANAGED_BY_SLICE}
        endpoints = []
        for p in pods:
            r = pod_ready(p)
            ep: dict[str, Any] = {"addresses": [p["status"]["podIP"]],
                                  "conditions": {"ready": r, "serving": r, "terminating": False},
                                  "nodeName": p["spec"]["nodeName"], "targetRef": ref(p)}
            node = self.ctx.get(NODES, ("", p["spec"]["nodeName"]))
            zone = (meta(node or {}).get("labels") or {}).get("topology.kubernetes.io/zone")
            if zone:
                ep["zone"] = zone
            endpoints.append(ep)
        existing = [o for gr, o in self.ctx.store.dependents(m.get("uid", "")) if gr == SLICES
                    and (meta(o).get("labels") or {}).get("endpointslice.kubernetes.io/managed-by") == MANAGED_BY_SLICE]
        slice_body: dict[str, Any] = {
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
            "metadata": {"labels": slice_labels, "ownerReferences": [owner_ref(dict(svc, apiVersion="v1",
                                                                                    kind="Service"))]},
            "endpoints": endpoints, "ports": ports}
        if not existing:
            slice_body["metadata"]["generateName"] = name + "-"
            self.ctx.create(self.rt_slice, ns, slice_body, "endpointslice-controller")
            return
        for extra in existing[1:]:
            self.ctx.delete(self.rt_slice, extra)
        live = existing[0]
        if (meta(live).get("labels") or {}) == slice_labels and (live.get("endpoints") or []) == endpoints and \
                (live.get("ports") or []) == ports:
            return
        new = dict(live, endpoints=endpoints, ports=ports)
        new["metadata"] = dict(meta(live), labels=slice_labels)
        self.ctx.replace(self.rt_slice, new, "endpointslice-controller")

    def _upsert(self, rt: Any, ns: str, name: str, body: dict[str, Any],
                same: Callable[[dict[str, Any]], bool], manager: str) -> None:
        live = self.ctx.get((rt.group, rt.plural), (ns, name))
        if live is None:
            self.ctx.create(rt, ns, body, manager)
        elif not same(live):
            new = dict(body)
            new["metadata"] = dict(meta(live), labels=body["metadata"]["labels"])
            self.ctx.replace(rt, new, manager)
