"""What every controller of a simulated cluster shares: writes, lookups, events and timers.

A controller is one small class (see ``Controller``): which keys a store event
concerns (its "informer handlers"), every key for a full resync, and how to bring
one key to its desired state. ``Context`` gives it the writes a real controller
makes through the API (create, replace, status, delete, all refused writes logged,
never raised), the event recorder and timers.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from qonnect_gitops.logs import get_logger
from qonnect_gitops.sim.api import ApiCore, WriteOptions
from qonnect_gitops.sim.control.events import Recorder
from qonnect_gitops.sim.errors import ApiError
from qonnect_gitops.sim.resources import ResourceType
from qonnect_gitops.sim.selectors import match_label_selector_object
from qonnect_gitops.sim.ssa import now_rfc3339
from qonnect_gitops.sim.store import Event, ObjKey

log = get_logger(__name__)

_HASH_CHARS = "bcdfghjklmnpqrstvwxz2456789"
PODS = ("", "pods")
RETRY_FIRST, RETRY_MAX = 0.5, 30.0  # seconds: the back-off of a key whose write was refused


class Controller(Protocol):
    """One control loop: keys from store events, a full list of keys, and a sync of one key."""

    name: str

    def keys(self, ev: Event) -> Iterable[ObjKey]:
        """Keys to sync because of ``ev`` (called under the store lock, in event order; must be cheap)."""

    def all_keys(self) -> Iterable[ObjKey]:
        """Every key (a full resync: at start, and when the event log moved past us)."""

    def sync(self, key: ObjKey) -> None:
        """Bring ``key`` to its desired state (called under the store lock)."""


def template_hash(template: Any) -> str:
    """A stable 10-character hash of a pod template (the ``pod-template-hash`` label's value)."""
    digest = hashlib.sha256(json.dumps(template, sort_keys=True, separators=(",", ":")).encode()).digest()
    return "".join(_HASH_CHARS[b % len(_HASH_CHARS)] for b in digest[:10])


def meta(obj: dict[str, Any]) -> dict[str, Any]:
    """``metadata`` or an empty dict."""
    return obj.get("metadata") or {}


def key_of(obj: dict[str, Any]) -> ObjKey:
    """``(namespace, name)`` of an object."""
    m = meta(obj)
    return (m.get("namespace", ""), m.get("name", ""))


def owner_ref(obj: dict[str, Any]) -> dict[str, Any]:
    """A controller ownerReference to ``obj``."""
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": meta(obj)["name"],
            "uid": meta(obj)["uid"], "controller": True, "blockOwnerDeletion": True}


def controller_ref(obj: dict[str, Any] | None) -> dict[str, Any] | None:
    """The ownerReference marked ``controller``, if any."""
    for ref in meta(obj or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return dict(ref)
    return None


def owner_keys(ev: Event, kind: str) -> list[ObjKey]:
    """Keys of the controlling owners of kind ``kind`` of the object in ``ev`` (before and after)."""
    out = []
    for obj in (ev.obj, ev.prev):
        ref = controller_ref(obj)
        if ref and ref.get("kind") == kind:
            key = (meta(obj or {}).get("namespace", ""), str(ref.get("name")))
            if key not in out:
                out.append(key)
    return out


def terminating(obj: dict[str, Any]) -> bool:
    """Whether the object has a deletionTimestamp."""
    return bool(meta(obj).get("deletionTimestamp"))


def pod_ready(pod: dict[str, Any]) -> bool:
    """Running with a True Ready condition."""
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def pod_active(pod: dict[str, Any]) -> bool:
    """Not terminating and not finished."""
    return not terminating(pod) and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def labels_match(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """A workload's LabelSelector against labels; an empty selector selects nothing here."""
    return bool(selector) and match_label_selector_object(selector, labels)


def scaled(value: Any, total: int, round_up: bool) -> int:
    """An int-or-percent (``25%``) of ``total``, as maxSurge/maxUnavailable are resolved."""
    if isinstance(value, int):
        return value
    text = str(value)
    if text.endswith("%"):
        try:
            fraction = float(text[:-1]) / 100 * total
        except ValueError:
            return 0
        return math.ceil(fraction) if round_up else math.floor(fraction)
    try:
        return int(text)
    except ValueError:
        return 0


def condition(old: list[dict[str, Any]], kind: str, status: str, reason: str, message: str,
              update_time: bool = False, probe: bool = False) -> dict[str, Any]:
    """A condition that keeps its timestamps while its status, reason and message stay the same."""
    prev = next((c for c in old if c.get("type") == kind), None)
    now = now_rfc3339()
    same = prev is not None and (prev.get("status"), prev.get("reason"), prev.get("message")) == (status, reason, message)
    cond: dict[str, Any] = {"type": kind, "status": status}
    if update_time:
        cond["lastUpdateTime"] = prev.get("lastUpdateTime", now) if same and prev else now
    if probe:
        cond["lastProbeTime"] = None
    transitioned = prev is None or prev.get("status") != status
    cond["lastTransitionTime"] = now if transitioned or prev is None else prev.get("lastTransitionTime", now)
    if reason:
        cond["reason"] = reason
    if message:
        cond["message"] = message
    return cond


class Context:
    """The API as controllers use it, plus the event recorder and timers."""

    def __init__(self, core: ApiCore, startup_delay: float,
                 schedule: Callable[[float, str, ObjKey], None]) -> None:
        self.core = core
        self.store = core.store
        self.startup_delay = startup_delay
        self.recorder = Recorder(core)
        self._schedule = schedule
        self._failures: dict[tuple[str, ObjKey], int] = {}
        self.last_refusal = ""  # the API's message for the last create it refused

    def rt(self, group: str, version: str, plural: str) -> ResourceType:
        """A served type (it must exist)."""
        found = self.core.registry.find(group, version, plural)
        assert found is not None, plural
        return found

    def after(self, delay: float, controller: str, key: ObjKey) -> None:
        """Sync ``key`` of ``controller`` again ``delay`` seconds from now."""
        self._schedule(time.monotonic() + max(0.0, delay), controller, key)

    def retry(self, controller: str, key: ObjKey) -> None:
        """A write for ``key`` was refused: sync it again after a back-off that doubles (0.5 s to 30 s), as
        controllers' rate-limited queues do (a Pod refused for a ServiceAccount not created yet is made later)."""
        failures = self._failures.get((controller, key), 0) + 1
        self._failures[(controller, key)] = failures
        self.after(min(RETRY_MAX, RETRY_FIRST * 2 ** (failures - 1)), controller, key)

    def succeeded(self, controller: str, key: ObjKey) -> None:
        """``key`` synced without a refused write: its back-off starts over."""
        self._failures.pop((controller, key), None)

    def get(self, gr: tuple[str, str], key: ObjKey) -> dict[str, Any] | None:
        """The object stored under ``key``."""
        return self.store.get(gr, key[0], key[1])

    def owned(self, owner: dict[str, Any], gr: tuple[str, str]) -> list[dict[str, Any]]:
        """Objects of ``gr`` whose controller is ``owner``."""
        uid = meta(owner).get("uid", "")
        return [o for g, o in self.store.dependents(uid) if g == gr and (controller_ref(o) or {}).get("uid") == uid]

    def event(self, obj: dict[str, Any], reason: str, message: str, component: str, warning: bool = False,
              host: str = "", field_path: str = "") -> None:
        """Record an Event about ``obj`` (best effort)."""
        self.recorder.record(obj, reason, message, component, warning, host, field_path)

    # ------------------------------------------------------------------ writes

    @staticmethod
    def _opts(manager: str) -> WriteOptions:
        return WriteOptions(field_manager=manager)

    def create(self, rt: ResourceType, ns: str, body: dict[str, Any], manager: str) -> dict[str, Any] | None:
        """Create (None when the API refuses, logged)."""
        try:
            return self.core.create(rt, ns, body, self._opts(manager)).body
        except ApiError as exc:
            log.info("sim_controller_write_refused", cluster=self.core.cluster_name, kind=rt.kind,
                     code=exc.code, message=exc.message)
            self.last_refusal = exc.message
            return None

    def replace(self, rt: ResourceType, obj: dict[str, Any], manager: str,
                subresource: str = "") -> dict[str, Any] | None:
        """Replace (None when the API refuses, logged)."""
        m = meta(obj)
        try:
            return self.core.replace(rt, m.get("namespace", ""), m["name"], obj, self._opts(manager),
                                     subresource).body
        except ApiError as exc:
            log.warning("sim_controller_write_refused", cluster=self.core.cluster_name, kind=rt.kind,
                        name=m.get("name"), code=exc.code, message=exc.message)
            return None

    def set_status(self, rt: ResourceType, obj: dict[str, Any], status: dict[str, Any],
                   manager: str) -> dict[str, Any] | None:
        """Write ``status`` when it differs from the object's."""
        if (obj.get("status") or {}) == status:
            return obj
        return self.replace(rt, dict(obj, status=status), manager, "status")

    def set_annotations(self, rt: ResourceType, obj: dict[str, Any], annotations: dict[str, str],
                        manager: str) -> dict[str, Any] | None:
        """Write metadata.annotations when they differ."""
        if (meta(obj).get("annotations") or {}) == annotations:
            return obj
        new = dict(obj, metadata=dict(meta(obj), annotations=annotations))
        return self.replace(rt, new, manager)

    def delete(self, rt: ResourceType, obj: dict[str, Any]) -> bool:
        """Delete in the background (True when it went)."""
        m = meta(obj)
        try:
            self.core.delete(rt, m.get("namespace", ""), m["name"], {"propagationPolicy": "Background"})
            return True
        except ApiError as exc:
            if exc.code != 404:
                log.warning("sim_controller_delete_refused", cluster=self.core.cluster_name, kind=rt.kind,
                            name=m.get("name"), code=exc.code)
            return False

    @staticmethod
    def pod_from_template(owner: dict[str, Any], template: dict[str, Any], extra_labels: dict[str, str],
                          name: str | None = None, node: str | None = None) -> dict[str, Any]:
        """A Pod body for ``owner`` from its pod template."""
        tmeta = template.get("metadata") or {}
        m: dict[str, Any] = {"labels": {**(tmeta.get("labels") or {}), **extra_labels},
                             "ownerReferences": [owner_ref(owner)]}
        if tmeta.get("annotations"):
            m["annotations"] = dict(tmeta["annotations"])
        if name:
            m["name"] = name
        else:
            m["generateName"] = meta(owner)["name"] + "-"
        spec = copy.deepcopy(template.get("spec") or {})
        if node:
            spec["nodeName"] = node
        return {"apiVersion": "v1", "kind": "Pod", "metadata": m, "spec": spec}
