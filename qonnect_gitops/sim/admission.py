"""Admission: what the API server's admission plugins do to a write before it is stored.

In the order of the real chain:

* ServiceAccount: a Pod gets ``serviceAccountName: default`` when it names none, is
  refused when its service account does not exist, and gets the projected
  ``kube-api-access-*`` volume unless automounting is off;
* LimitRanger: defaults a Pod's container requests and limits from the namespace's
  LimitRanges, then checks their min, max and limit/request ratio (and a claim's size);
* Priority: a Pod's ``priorityClassName`` (or the global default class) sets its
  ``priority`` and ``preemptionPolicy``; an unknown class is refused;
* DefaultStorageClass: a claim without ``storageClassName`` gets the default class;
* ResourceQuota: a write that would take a namespace over a quota is refused, with
  the API's messages; admitted writes add to the quota's ``status.used`` at once, and
  deletions (or Pods that finish) recompute it, as the quota controller does.

Pods also get ``status.phase: Pending`` and their ``qosClass`` on create.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from qonnect_gitops.model.quantity import (
    format_bytes,
    format_millicores,
    parse_quantity,
)
from qonnect_gitops.sim import errors
from qonnect_gitops.sim.resources import ResourceType

if TYPE_CHECKING:
    from qonnect_gitops.sim.api import ApiCore

QUOTAS = ("", "resourcequotas")
LIMIT_RANGES = ("", "limitranges")
SA_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
DEFAULT_CLASS = "storageclass.kubernetes.io/is-default-class"
_CHARS = "bcdfghjklmnpqrstvwxz2456789"
_COMPUTE = ("cpu", "memory", "ephemeral-storage")
# Object counts a quota can name without the count/ prefix.
_COUNTED = {("", "pods"): "pods", ("", "services"): "services", ("", "configmaps"): "configmaps",
            ("", "secrets"): "secrets", ("", "persistentvolumeclaims"): "persistentvolumeclaims",
            ("", "replicationcontrollers"): "replicationcontrollers", ("", "resourcequotas"): "resourcequotas"}


def _meta(obj: dict[str, Any] | None) -> dict[str, Any]:
    return (obj or {}).get("metadata") or {}


def _q(value: Any) -> Decimal:
    try:
        return parse_quantity(value)
    except (ValueError, TypeError):
        return Decimal(0)


def format_quantity(resource: str, value: Decimal) -> str:
    """A quantity the way the API prints one for ``resource`` (``1500m``, ``2``, ``128Mi``)."""
    base = resource.split(".")[-1] if "." in resource and not resource.startswith("count/") else resource
    if base == "cpu":
        return format_millicores(int((value * 1000).to_integral_value()))
    if base in ("memory", "storage", "ephemeral-storage"):
        return format_bytes(int(value.to_integral_value()))
    return str(int(value)) if value == value.to_integral_value() else str(value)


def qos_class(pod: dict[str, Any]) -> str:
    """The Pod's QoS class from its containers' requests and limits."""
    containers = (pod.get("spec") or {}).get("containers") or []
    any_set, guaranteed = False, True
    for c in containers:
        res = c.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        if req or lim:
            any_set = True
        for r in ("cpu", "memory"):
            if r not in lim or (r in req and _q(req[r]) != _q(lim[r])):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def _pod_resources(pod: dict[str, Any], kind: str) -> dict[str, Decimal]:
    """Requests or limits of a Pod: containers summed, the largest init container if that is more."""
    spec = pod.get("spec") or {}
    total: dict[str, Decimal] = {}
    for c in spec.get("containers") or []:
        res = c.get("resources") or {}
        values = {**(res.get("limits") or {}), **(res.get("requests") or {})} if kind == "requests" \
            else dict(res.get("limits") or {})
        for r, v in values.items():
            total[r] = total.get(r, Decimal(0)) + _q(v)
    for c in spec.get("initContainers") or []:
        res = c.get("resources") or {}
        values = {**(res.get("limits") or {}), **(res.get("requests") or {})} if kind == "requests" \
            else dict(res.get("limits") or {})
        for r, v in values.items():
            total[r] = max(total.get(r, Decimal(0)), _q(v))
    return total


def usage(gr: tuple[str, str], obj: dict[str, Any] | None) -> dict[str, Decimal]:
    """What one object counts against quotas (nothing for a finished Pod or an absent object)."""
    if obj is None:
        return {}
    out: dict[str, Decimal] = {}
    plural = gr[1] if not gr[0] else f"{gr[1]}.{gr[0]}"
    if gr == ("", "pods"):
        if (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed") or _meta(obj).get("deletionTimestamp"):
            return {}
        for r, v in _pod_resources(obj, "requests").items():
            out[f"requests.{r}"] = v
            if r in _COMPUTE:
                out[r] = v
        for r, v in _pod_resources(obj, "limits").items():
            out[f"limits.{r}"] = v
    if gr == ("", "services"):
        kind = (obj.get("spec") or {}).get("type", "ClusterIP")
        if kind == "LoadBalancer":
            out["services.loadbalancers"] = Decimal(1)
        if kind in ("LoadBalancer", "NodePort"):
            out["services.nodeports"] = Decimal(len((obj.get("spec") or {}).get("ports") or []))
    if gr == ("", "persistentvolumeclaims"):
        size = _q((((obj.get("spec") or {}).get("resources") or {}).get("requests") or {}).get("storage", 0))
        out["requests.storage"] = size
        cls = (obj.get("spec") or {}).get("storageClassName")
        if cls:
            out[f"{cls}.storageclass.storage.k8s.io/requests.storage"] = size
            out[f"{cls}.storageclass.storage.k8s.io/persistentvolumeclaims"] = Decimal(1)
    if gr in _COUNTED:
        out[_COUNTED[gr]] = Decimal(1)
    out[f"count/{plural}"] = Decimal(1)
    return out


def _ratio(limit: Decimal, request: Decimal) -> str:
    return f"{(limit / request):f}" if request else "inf"


class Admission:
    """The admission chain of one simulated API server (see the module docstring)."""

    def __init__(self, core: ApiCore) -> None:
        self.core = core

    # ------------------------------------------------------------------ mutation

    def mutate(self, rt: ResourceType, obj: dict[str, Any], live: dict[str, Any] | None, ns: str) -> None:
        """Mutating admission of a create (``live`` None) or update, in place."""
        if not rt.builtin or live is not None:
            return
        if (rt.group, rt.kind) == ("", "Pod"):
            self._service_account(obj, ns)
            self._limit_defaults(obj, ns)
            self._priority(obj)
            obj["status"] = {"phase": "Pending", "qosClass": qos_class(obj)}
        elif (rt.group, rt.kind) == ("", "PersistentVolumeClaim"):
            spec = obj.setdefault("spec", {})
            if spec.get("storageClassName") is None:
                default = self.default_storage_class()
                if default:
                    spec["storageClassName"] = default

    def default_storage_class(self) -> str | None:
        """The name of the StorageClass annotated as the default (the newest if several)."""
        found = [(_meta(c).get("creationTimestamp", ""), _meta(c)["name"])
                 for c in self.core.store.list(("storage.k8s.io", "storageclasses"))
                 if (_meta(c).get("annotations") or {}).get(DEFAULT_CLASS) == "true"]
        return max(found)[1] if found else None

    def _forbidden(self, rt: ResourceType, name: str, message: str) -> errors.ApiError:
        details: dict[str, Any] = {"name": name, **({"group": rt.group} if rt.group else {}), "kind": rt.plural}
        return errors.ApiError(403, "Forbidden", f'{rt.plural} "{name}" is forbidden: {message}', details)

    def _service_account(self, pod: dict[str, Any], ns: str) -> None:
        spec = pod.setdefault("spec", {})
        name = spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"
        spec["serviceAccountName"] = name
        spec["serviceAccount"] = name
        sa = self.core.store.get(("", "serviceaccounts"), ns, name)
        rt = self.core.registry.find("", "v1", "pods")
        assert rt is not None
        if sa is None:
            raise self._forbidden(rt, _meta(pod).get("name", ""), f'error looking up service account {ns}/{name}: '
                                  f'serviceaccount "{name}" not found')
        automount = spec.get("automountServiceAccountToken")
        if automount is None:
            automount = sa.get("automountServiceAccountToken")
        if automount is False:
            return
        containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
        if any(m.get("mountPath") == SA_MOUNT for c in containers for m in c.get("volumeMounts") or []):
            return
        volume = "kube-api-access-" + "".join(random.choice(_CHARS) for _ in range(5))
        spec.setdefault("volumes", []).append({"name": volume, "projected": {"defaultMode": 420, "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1",
                                                                          "fieldPath": "metadata.namespace"}}]}}]}})
        for c in containers:
            c.setdefault("volumeMounts", []).append({"name": volume, "readOnly": True, "mountPath": SA_MOUNT})

    def _limit_ranges(self, ns: str) -> list[dict[str, Any]]:
        return self.core.store.list(LIMIT_RANGES, ns)

    def _limit_defaults(self, pod: dict[str, Any], ns: str) -> None:
        set_requests: dict[str, list[str]] = {}
        set_limits: dict[str, list[str]] = {}
        for lr in self._limit_ranges(ns):
            for item in (lr.get("spec") or {}).get("limits") or []:
                if item.get("type") != "Container":
                    continue
                for key in ("initContainers", "containers"):
                    for c in (pod.get("spec") or {}).get(key) or []:
                        res = c.setdefault("resources", {})
                        for r, v in (item.get("default") or {}).items():
                            if r not in (res.get("limits") or {}):
                                res.setdefault("limits", {})[r] = v
                                set_limits.setdefault(c.get("name", ""), []).append(r)
                        for r, v in (item.get("defaultRequest") or {}).items():
                            if r not in (res.get("requests") or {}):
                                res.setdefault("requests", {})[r] = v
                                set_requests.setdefault(c.get("name", ""), []).append(r)
        if set_requests or set_limits:
            parts = [f"{', '.join(rs)} request for container {c}" for c, rs in set_requests.items()]
            parts += [f"{', '.join(rs)} limit for container {c}" for c, rs in set_limits.items()]
            meta = pod.setdefault("metadata", {})
            meta.setdefault("annotations", {})["kubernetes.io/limit-ranger"] = "LimitRanger plugin set: " + \
                "; ".join(parts)

    def _priority(self, pod: dict[str, Any]) -> None:
        spec = pod.setdefault("spec", {})
        name = spec.get("priorityClassName")
        classes = ("scheduling.k8s.io", "priorityclasses")
        cls = None
        if name:
            cls = self.core.store.get(classes, "", name)
            if cls is None:
                rt = self.core.registry.find("", "v1", "pods")
                assert rt is not None
                raise self._forbidden(rt, _meta(pod).get("name", ""), f"no PriorityClass with name {name} was found")
        else:
            defaults = [c for c in self.core.store.list(classes) if c.get("globalDefault")]
            cls = min(defaults, key=lambda c: int(c.get("value", 0))) if defaults else None
            if cls is not None:
                spec["priorityClassName"] = _meta(cls)["name"]
        spec["priority"] = int(cls.get("value", 0)) if cls is not None else 0
        spec["preemptionPolicy"] = (cls or {}).get("preemptionPolicy") or spec.get("preemptionPolicy") or \
            "PreemptLowerPriority"

    # ------------------------------------------------------------------ validation

    def validate(self, rt: ResourceType, obj: dict[str, Any], live: dict[str, Any] | None, ns: str) -> None:
        """Validating admission: LimitRange bounds and quotas."""
        if not rt.builtin:
            return
        name = _meta(obj).get("name", "")
        if live is None and (rt.group, rt.kind) in (("", "Pod"), ("", "PersistentVolumeClaim")):
            problems = self._limit_problems(rt, obj, ns)
            if problems:
                text = problems[0] if len(problems) == 1 else "[" + ", ".join(problems) + "]"
                raise self._forbidden(rt, name, text)
        if ns:
            self._quota(rt, obj, live, ns)

    def _limit_problems(self, rt: ResourceType, obj: dict[str, Any], ns: str) -> list[str]:
        out: list[str] = []
        pod = rt.kind == "Pod"
        for lr in self._limit_ranges(ns):
            for item in (lr.get("spec") or {}).get("limits") or []:
                kind = item.get("type")
                if pod and kind == "Container":
                    for c in [*((obj.get("spec") or {}).get("initContainers") or []),
                              *((obj.get("spec") or {}).get("containers") or [])]:
                        res = c.get("resources") or {}
                        out += self._bounds(item, "Container", res.get("requests") or {}, res.get("limits") or {})
                elif pod and kind == "Pod":
                    out += self._bounds(item, "Pod", _pod_resources(obj, "requests"), _pod_resources(obj, "limits"))
                elif not pod and kind == "PersistentVolumeClaim":
                    requests = ((obj.get("spec") or {}).get("resources") or {}).get("requests") or {}
                    out += self._bounds(item, "PersistentVolumeClaim", requests, {})
        return out

    @staticmethod
    def _bounds(item: dict[str, Any], kind: str, requests: dict[str, Any], limits: dict[str, Any]) -> list[str]:
        out = []
        for r, v in sorted((item.get("min") or {}).items()):
            req = requests.get(r)
            if req is None:
                out.append(f"minimum {r} usage per {kind} is {v}.  No request is specified")
            elif _q(req) < _q(v):
                out.append(f"minimum {r} usage per {kind} is {v}, but request is {req}")
        for r, v in sorted((item.get("max") or {}).items()):
            lim = limits.get(r) if kind != "PersistentVolumeClaim" else requests.get(r)
            if lim is None:
                out.append(f"maximum {r} usage per {kind} is {v}.  No limit is specified")
            elif _q(lim) > _q(v):
                what = "limit" if kind != "PersistentVolumeClaim" else "request"
                out.append(f"maximum {r} usage per {kind} is {v}, but {what} is {lim}")
        for r, v in sorted((item.get("maxLimitRequestRatio") or {}).items()):
            lim, req = limits.get(r), requests.get(r)
            if lim is not None and req is not None and _q(req) > 0 and _q(lim) / _q(req) > _q(v):
                out.append(f"{r} max limit to request ratio per {kind} is {v}, but provided ratio is "
                           f"{_ratio(_q(lim), _q(req))}")
        return out

    def _quota(self, rt: ResourceType, obj: dict[str, Any], live: dict[str, Any] | None, ns: str) -> None:
        quotas = self.core.store.list(QUOTAS, ns)
        if not quotas:
            return
        gr = rt.storage_gr
        new, old = usage(gr, obj), usage(gr, live)
        delta = {r: v - old.get(r, Decimal(0)) for r, v in new.items() if v - old.get(r, Decimal(0)) > 0}
        name = _meta(obj).get("name", "")
        for q in sorted(quotas, key=lambda q: _meta(q)["name"]):
            hard = (q.get("spec") or {}).get("hard") or {}
            used = (q.get("status") or {}).get("used") or {}
            if gr == ("", "pods") and live is None:
                missing = self._unspecified(obj, hard)
                if missing:
                    raise self._forbidden(rt, name, f"failed quota: {_meta(q)['name']}: must specify "
                                          + "; ".join(missing))
            over = sorted(r for r in hard if r in delta and _q(used.get(r, 0)) + delta[r] > _q(hard[r]))
            if over:
                requested = ",".join(f"{r}={format_quantity(r, delta[r])}" for r in over)
                in_use = ",".join(f"{r}={used.get(r, '0')}" for r in over)
                limited = ",".join(f"{r}={hard[r]}" for r in over)
                raise self._forbidden(rt, name, f"exceeded quota: {_meta(q)['name']}, requested: {requested}, "
                                      f"used: {in_use}, limited: {limited}")

    @staticmethod
    def _unspecified(pod: dict[str, Any], hard: dict[str, Any]) -> list[str]:
        out = []
        for resource in sorted(hard):
            kind, _, r = resource.partition(".")
            if resource in _COMPUTE:
                kind, r = "requests", resource
            if kind not in ("requests", "limits") or r not in _COMPUTE:
                continue
            lacking = [str(c.get("name")) for c in (pod.get("spec") or {}).get("containers") or []
                       if r not in ((c.get("resources") or {}).get(kind) or {})]
            if lacking:
                out.append(f"{resource} for: {','.join(lacking)}")
        return out

    # ------------------------------------------------------------------ after the write

    def written(self, rt: ResourceType, stored: dict[str, Any] | None, live: dict[str, Any] | None,
                subresource: str = "") -> None:
        """Keep quota usage current after a write or delete (``stored`` None) in a namespace."""
        if not rt.builtin:
            return
        gr = rt.storage_gr
        ns = _meta(stored or live).get("namespace", "")
        if gr == QUOTAS:
            if stored is not None and subresource != "status":
                self.recompute(ns, [_meta(stored)["name"]])
            return
        if not ns or not self.core.store.list(QUOTAS, ns):
            return
        if usage(gr, stored) != usage(gr, live):
            self.recompute(ns)

    def recompute(self, ns: str, names: Iterable[str] | None = None) -> None:
        """Set ``status.hard`` and ``status.used`` of a namespace's quotas (or the named ones)."""
        quotas = [q for q in self.core.store.list(QUOTAS, ns) if names is None or _meta(q)["name"] in names]
        if not quotas:
            return
        wanted = {r for q in quotas for r in ((q.get("spec") or {}).get("hard") or {})}
        totals: dict[str, Decimal] = {r: Decimal(0) for r in wanted}
        grs = {gr for gr in self.core.store.group_resources()}
        for gr in grs:
            for o in self.core.store.list(gr, ns):
                for r, v in usage(gr, o).items():
                    if r in totals:
                        totals[r] += v
        rt = self.core.registry.find("", "v1", "resourcequotas")
        assert rt is not None
        for q in quotas:
            hard = dict((q.get("spec") or {}).get("hard") or {})
            status = {"hard": hard, "used": {r: format_quantity(r, totals[r]) for r in hard}}
            if (q.get("status") or {}) != status:
                from qonnect_gitops.sim.api import WriteOptions

                self.core.replace(rt, ns, _meta(q)["name"], dict(q, status=status),
                                  WriteOptions(field_manager="resourcequota-controller"), "status")
