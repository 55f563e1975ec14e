"""The event recorder of the simulated control plane: core/v1 Events, aggregated like client-go's.

Controllers, the scheduler and the kubelet report what they did (``ScalingReplicaSet``,
``SuccessfulCreate``, ``Scheduled``, ``FailedScheduling``, ``Pulled``, ``Started``...).
The same Event is served as ``events.k8s.io/v1`` (one storage, two versions, as on
a real server). A repeat of the same reason and message about the same object bumps
``count`` and ``lastTimestamp`` instead of writing a new Event. Events live one
hour (the API server's default TTL) and at most ``MAX_EVENTS`` are kept, oldest
removed first, so a busy cluster does not fill up with them.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from qonnect_gitops.logs import get_logger
from qonnect_gitops.sim.api import WriteOptions
from qonnect_gitops.sim.errors import ApiError
from qonnect_gitops.sim.ssa import now_rfc3339

if TYPE_CHECKING:
    from qonnect_gitops.sim.api import ApiCore

log = get_logger(__name__)

EVENTS = ("", "events")
EVENT_TTL = 3600.0
MAX_EVENTS = 5000


def micro_now() -> str:
    """The current time as a MicroTime (``2026-01-01T10:00:00.123456Z``)."""
    now = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1_000_000):06d}Z"


class Recorder:
    """Writes Events through the API (best effort: a refused write is logged, never raised)."""

    def __init__(self, core: ApiCore, ttl: float = EVENT_TTL, limit: int = MAX_EVENTS) -> None:
        self.core = core
        self.ttl, self.limit = ttl, limit
        # aggregation key -> (namespace, event name, monotonic time written), oldest first
        self._recent: OrderedDict[tuple[str, ...], tuple[str, str, float]] = OrderedDict()
        self._n = 0

    def record(self, obj: dict[str, Any], reason: str, message: str, component: str, warning: bool = False,
               host: str = "", field_path: str = "") -> None:
        """Record (or count again) an Event about ``obj``."""
        rt = self.core.registry.find("", "v1", "events")
        if rt is None:
            return
        meta = obj.get("metadata") or {}
        ns = meta.get("namespace") or "default"
        kind = obj.get("kind", "")
        key = (meta.get("uid", ""), reason, message, component, field_path, "Warning" if warning else "Normal")
        now = now_rfc3339()
        opts = WriteOptions(field_manager=component or "sim")
        self._expire()
        with self.core.store.lock:
            hit = self._recent.get(key)
            if hit is not None:
                live = self.core.store.get(EVENTS, hit[0], hit[1])
                if live is not None:
                    updated = dict(live, count=int(live.get("count") or 1) + 1, lastTimestamp=now)
                    try:
                        self.core.replace(rt, hit[0], hit[1], updated, opts)
                        self._recent[key] = (hit[0], hit[1], time.monotonic())
                        self._recent.move_to_end(key)
                        return
                    except ApiError:
                        pass
            self._n += 1
            name = f"{meta.get('name', 'object')}.{time.time_ns():x}{self._n % 4096:03x}"[:253]
            involved = {"kind": kind, "namespace": meta.get("namespace") or None, "name": meta.get("name"),
                        "uid": meta.get("uid"), "apiVersion": obj.get("apiVersion"),
                        "resourceVersion": meta.get("resourceVersion")}
            if field_path:
                involved["fieldPath"] = field_path
            body = {
                "apiVersion": "v1", "kind": "Event", "metadata": {"name": name, "namespace": ns},
                "involvedObject": {k: v for k, v in involved.items() if v},
                "reason": reason, "message": message, "type": "Warning" if warning else "Normal",
                "source": {"component": component, **({"host": host} if host else {})},
                "firstTimestamp": now, "lastTimestamp": now, "count": 1, "eventTime": micro_now(),
                "reportingComponent": component, "reportingInstance": host or component,
            }
            try:
                self.core.create(rt, ns, body, opts)
            except ApiError as exc:  # e.g. the namespace is terminating
                log.debug("sim_event_refused", cluster=self.core.cluster_name, reason=reason, code=exc.code)
                return
            self._recent[key] = (ns, name, time.monotonic())
            while len(self._recent) > self.limit:
                self._drop(self._recent.popitem(last=False)[1])

    def _expire(self) -> None:
        cutoff = time.monotonic() - self.ttl
        while self._recent:
            first = next(iter(self._recent.values()))
            if first[2] > cutoff:
                return
            self._drop(self._recent.popitem(last=False)[1])

    def _drop(self, entry: tuple[str, str, float]) -> None:
        rt = self.core.registry.find("", "v1", "events")
        if rt is None:
            return
        try:
            self.core.delete(rt, entry[0], entry[1])
        except ApiError:
            pass
