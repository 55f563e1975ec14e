"""Table columns for ``kubectl get`` of the kinds the fake kubelet brings to life.

The API server prints tables for ``Accept: ...;as=Table``; kubectl shows them
as they come. Without these, ``kubectl get pods`` would show only NAME and AGE.
Columns and wording follow the API's printers; priority 1 columns appear with
``-o wide``. Kinds not listed here keep NAME and AGE.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Column = tuple[str, str, int]  # name, type, priority
Cells = list[Any]


def _status(o: dict[str, Any]) -> dict[str, Any]:
    return o.get("status") or {}


def _spec(o: dict[str, Any]) -> dict[str, Any]:
    return o.get("spec") or {}


def _pod(o: dict[str, Any], age: str) -> Cells:
    status = _status(o)
    containers = _spec(o).get("containers") or []
    statuses = status.get("containerStatuses") or []
    ready = sum(1 for c in statuses if c.get("ready"))
    restarts = sum(int(c.get("restartCount", 0)) for c in statuses)
    reason = status.get("reason") or status.get("phase") or "Pending"
    for c in statuses:
        state = c.get("state") or {}
        if (state.get("waiting") or {}).get("reason"):
            reason = state["waiting"]["reason"]
        elif (state.get("terminated") or {}).get("reason"):
            reason = state["terminated"]["reason"]
    if (o.get("metadata") or {}).get("deletionTimestamp"):
        reason = "Terminating"
    return [f"{ready}/{len(containers)}", reason, restarts, age, status.get("podIP") or "<none>",
            _spec(o).get("nodeName") or "<none>", status.get("nominatedNodeName") or "<none>", "<none>"]


def _node(o: dict[str, Any], age: str) -> Cells:
    status = _status(o)
    ready = next((c.get("status") for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    text = "Ready" if ready == "True" else "NotReady" if ready in ("False", "Unknown") else "Unknown"
    if _spec(o).get("unschedulable"):
        text += ",SchedulingDisabled"
    info = status.get("nodeInfo") or {}
    internal = next((a.get("address") for a in status.get("addresses") or [] if a.get("type") == "InternalIP"),
                    "<none>")
    return [text, "<none>", age, info.get("kubeletVersion", ""), internal, "<none>", info.get("osImage", ""),
            info.get("kernelVersion", ""), info.get("containerRuntimeVersion", "")]


def _containers(o: dict[str, Any]) -> tuple[str, str]:
    cs = ((_spec(o).get("template") or {}).get("spec") or {}).get("containers") or []
    return ",".join(str(c.get("name")) for c in cs), ",".join(str(c.get("image")) for c in cs)


def _selector(o: dict[str, Any]) -> str:
    labels = (_spec(o).get("selector") or {}).get("matchLabels") or {}
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items())) or "<none>"


def _deployment(o: dict[str, Any], age: str) -> Cells:
    s = _status(o)
    names, images = _containers(o)
    return [f"{s.get('readyReplicas', 0)}/{_spec(o).get('replicas', 1)}", s.get("updatedReplicas", 0),
            s.get("availableReplicas", 0), age, names, images, _selector(o)]


def _replicaset(o: dict[str, Any], age: str) -> Cells:
    s = _status(o)
    names, images = _containers(o)
    return [_spec(o).get("replicas", 1), s.get("replicas", 0), s.get("readyReplicas", 0), age, names, images,
            _selector(o)]


def _statefulset(o: dict[str, Any], age: str) -> Cells:
    names, images = _containers(o)
    return [f"{_status(o).get('readyReplicas', 0)}/{_spec(o).get('replicas', 1)}", age, names, images]


def _daemonset(o: dict[str, Any], age: str) -> Cells:
    s = _status(o)
    node_selector = ((_spec(o).get("template") or {}).get("spec") or {}).get("nodeSelector") or {}
    names, images = _containers(o)
    return [s.get("desiredNumberScheduled", 0), s.get("currentNumberScheduled", 0), s.get("numberReady", 0),
            s.get("updatedNumberScheduled", 0), s.get("numberAvailable", 0),
            ",".join(f"{k}={v}" for k, v in sorted(node_selector.items())) or "<none>", age, names, images,
            _selector(o)]


def _job(o: dict[str, Any], age: str) -> Cells:
    s = _status(o)
    conds = {c.get("type"): c.get("status") for c in s.get("conditions") or []}
    state = "Complete" if conds.get("Complete") == "True" else "Failed" if conds.get("Failed") == "True" \
        else "Suspended" if _spec(o).get("suspend") else "Running"
    completions = _spec(o).get("completions")
    names, images = _containers(o)
    return [state, f"{s.get('succeeded', 0)}/{completions if completions is not None else 1}", age, names, images]


_WIDE_WORKLOAD: list[Column] = [("Containers", "string", 1), ("Images", "string", 1), ("Selector", "string", 1)]

PRINTERS: dict[tuple[str, str], tuple[list[Column], Callable[[dict[str, Any], str], Cells]]] = {
    ("", "Pod"): ([("Ready", "string", 0), ("Status", "string", 0), ("Restarts", "string", 0), ("Age", "string", 0),
                   ("IP", "string", 1), ("Node", "string", 1), ("Nominated Node", "string", 1),
                   ("Readiness Gates", "string", 1)], _pod),
    ("", "Node"): ([("Status", "string", 0), ("Roles", "string", 0), ("Age", "string", 0), ("Version", "string", 0),
                    ("Internal-IP", "string", 1), ("External-IP", "string", 1), ("OS-Image", "string", 1),
                    ("Kernel-Version", "string", 1), ("Container-Runtime", "string", 1)], _node),
    ("apps", "Deployment"): ([("Ready", "string", 0), ("Up-to-date", "integer", 0), ("Available", "integer", 0),
                              ("Age", "string", 0), *_WIDE_WORKLOAD], _deployment),
    ("apps", "ReplicaSet"): ([("Desired", "integer", 0), ("Current", "integer", 0), ("Ready", "integer", 0),
                              ("Age", "string", 0), *_WIDE_WORKLOAD], _replicaset),
    ("apps", "StatefulSet"): ([("Ready", "string", 0), ("Age", "string", 0), ("Containers", "string", 1),
                               ("Images", "string", 1)], _statefulset),
    ("apps", "DaemonSet"): ([("Desired", "integer", 0), ("Current", "integer", 0), ("Ready", "integer", 0),
                             ("Up-to-date", "integer", 0), ("Available", "integer", 0),
                             ("Node Selector", "string", 0), ("Age", "string", 0), *_WIDE_WORKLOAD], _daemonset),
    ("batch", "Job"): ([("Status", "string", 0), ("Completions", "string", 0), ("Age", "string", 0),
                        ("Containers", "string", 1), ("Images", "string", 1)], _job),
}


def columns(group: str, kind: str) -> list[dict[str, Any]] | None:
    """Column definitions after NAME for ``kind``, or None for the default NAME/AGE table."""
    hit = PRINTERS.get((group, kind))
    if hit is None:
        return None
    return [{"name": name, "type": typ, "format": "", "description": name, "priority": prio}
            for name, typ, prio in hit[0]]


def cells(group: str, kind: str, obj: dict[str, Any], age: str) -> Cells:
    """The row after NAME for ``obj`` (``columns`` must have returned definitions)."""
    return PRINTERS[(group, kind)][1](obj, age)
