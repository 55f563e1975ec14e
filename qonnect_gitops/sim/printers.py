"""Table responses: the columns ``kubectl get`` shows, computed by the server as the real one does.

The API server answers ``Accept: ...;as=Table`` with rows of cells; kubectl shows
them as they come. Columns and wording follow the API's printers for built-in
kinds (priority 1 columns appear with ``-o wide``), a CRD version's
``additionalPrinterColumns`` (JSONPath cells; ``date`` columns as ages) for custom
resources, and NAME and AGE for everything else. A table of a list carries the
list's ``continue`` and ``remainingItemCount``, so ``kubectl get`` pages through it.
"""

from __future__ import annotations

import calendar
import json
import re
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from qonnect_gitops.sim.resources import ResourceType

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


def _data_count(o: dict[str, Any], age: str) -> Cells:
    return [len(o.get("data") or {}) + len(o.get("binaryData") or {}), age]


def _secret(o: dict[str, Any], age: str) -> Cells:
    return [o.get("type", "Opaque"), len(o.get("data") or {}), age]


def _namespace(o: dict[str, Any], age: str) -> Cells:
    return [_status(o).get("phase", "Active"), age]


def _service(o: dict[str, Any], age: str) -> Cells:
    spec = _spec(o)
    ingress = ((_status(o).get("loadBalancer") or {}).get("ingress") or [])
    external = ",".join(str(i.get("ip") or i.get("hostname")) for i in ingress) or (
        "<pending>" if spec.get("type") == "LoadBalancer" else spec.get("externalName") or "<none>")
    ports = ",".join(f"{p.get('port')}{':' + str(p['nodePort']) if p.get('nodePort') else ''}/"
                     f"{p.get('protocol', 'TCP')}" for p in spec.get("ports") or []) or "<none>"
    selector = ",".join(f"{k}={v}" for k, v in sorted((spec.get("selector") or {}).items())) or "<none>"
    return [spec.get("type", "ClusterIP"), spec.get("clusterIP") or "<none>", external, ports, age, selector]


def _event_object(o: dict[str, Any]) -> str:
    ref = o.get("involvedObject") or o.get("regarding") or {}
    return f"{str(ref.get('kind', '')).lower()}/{ref.get('name', '')}"


def _event(o: dict[str, Any], age: str) -> Cells:
    last = human_age(o.get("lastTimestamp") or o.get("deprecatedLastTimestamp") or o.get("eventTime")
                     or (o.get("metadata") or {}).get("creationTimestamp"))
    source = o.get("source") or o.get("deprecatedSource") or {}
    first = human_age(o.get("firstTimestamp") or o.get("deprecatedFirstTimestamp") or o.get("eventTime"))
    ref = o.get("involvedObject") or o.get("regarding") or {}
    return [last, o.get("type", ""), o.get("reason", ""), _event_object(o), ref.get("fieldPath", ""),
            ", ".join(x for x in (o.get("reportingComponent") or o.get("reportingController")
                                  or source.get("component", ""), source.get("host", "")) if x),
            o.get("message") or o.get("note") or "", first, o.get("count") or o.get("deprecatedCount") or 1,
            (o.get("metadata") or {}).get("name", "")]


def _rc(o: dict[str, Any], age: str) -> Cells:
    s = _status(o)
    names, images = _containers(o)
    selector = ",".join(f"{k}={v}" for k, v in sorted((_spec(o).get("selector") or {}).items())) or "<none>"
    return [_spec(o).get("replicas", 1), s.get("replicas", 0), s.get("readyReplicas", 0), age, names, images,
            selector]


def _access_modes(modes: list[str]) -> str:
    short = {"ReadWriteOnce": "RWO", "ReadOnlyMany": "ROX", "ReadWriteMany": "RWX", "ReadWriteOncePod": "RWOP"}
    return ",".join(short.get(m, m) for m in modes)


def _pvc(o: dict[str, Any], age: str) -> Cells:
    s, spec = _status(o), _spec(o)
    return [s.get("phase", "Pending"), spec.get("volumeName", ""), (s.get("capacity") or {}).get("storage", ""),
            _access_modes(s.get("accessModes") or []), spec.get("storageClassName") or "<unset>",
            spec.get("volumeAttributesClassName") or "<unset>", age, spec.get("volumeMode", "Filesystem")]


def _pv(o: dict[str, Any], age: str) -> Cells:
    s, spec = _status(o), _spec(o)
    ref = spec.get("claimRef") or {}
    claim = f"{ref.get('namespace')}/{ref.get('name')}" if ref.get("name") else ""
    return [(spec.get("capacity") or {}).get("storage", ""), _access_modes(spec.get("accessModes") or []),
            spec.get("persistentVolumeReclaimPolicy", "Retain"), s.get("phase", "Pending"), claim,
            spec.get("storageClassName", ""), spec.get("volumeAttributesClassName") or "<unset>",
            s.get("reason", ""), age, spec.get("volumeMode", "Filesystem")]


def _storage_class(o: dict[str, Any], age: str) -> Cells:
    return [o.get("provisioner", ""), o.get("reclaimPolicy", "Delete"),
            o.get("volumeBindingMode", "Immediate"), bool(o.get("allowVolumeExpansion", False)), age]


_DEFAULT_MARKS = {("storage.k8s.io", "StorageClass"): "storageclass.kubernetes.io/is-default-class",
                  ("networking.k8s.io", "IngressClass"): "ingressclass.kubernetes.io/is-default-class"}


def display_name(group: str, kind: str, obj: dict[str, Any]) -> str:
    """The NAME cell: default storage and ingress classes say so, as kubectl shows them."""
    meta = obj.get("metadata") or {}
    mark = _DEFAULT_MARKS.get((group, kind))
    if mark and (meta.get("annotations") or {}).get(mark) == "true":
        return f"{meta.get('name')} (default)"
    return str(meta.get("name"))


def _lease(o: dict[str, Any], age: str) -> Cells:
    return [_spec(o).get("holderIdentity") or "", age]


def _apiservice(o: dict[str, Any], age: str) -> Cells:
    svc = _spec(o).get("service")
    available = next((c for c in _status(o).get("conditions") or [] if c.get("type") == "Available"), None)
    text = "Unknown"
    if available is not None:
        text = "True" if available.get("status") == "True" else f"False ({available.get('reason', '')})"
    return [f"{svc.get('namespace')}/{svc.get('name')}" if svc else "Local", text, age]


def _ingress(o: dict[str, Any], age: str) -> Cells:
    spec = _spec(o)
    hosts = ",".join(str(r.get("host")) for r in spec.get("rules") or [] if r.get("host")) or "*"
    lb = (_status(o).get("loadBalancer") or {}).get("ingress") or []
    address = ",".join(str(i.get("ip") or i.get("hostname")) for i in lb)
    ports = "80, 443" if spec.get("tls") else "80"
    return [spec.get("ingressClassName") or "<none>", hosts, address, ports, age]


def _ingress_class(o: dict[str, Any], age: str) -> Cells:
    params = _spec(o).get("parameters")
    text = f"{params.get('kind')}/{params.get('name')}" if isinstance(params, dict) else "<none>"
    return [_spec(o).get("controller", ""), text, age]


def _created_at(o: dict[str, Any], age: str) -> Cells:
    return [(o.get("metadata") or {}).get("creationTimestamp", "")]


def _quota(o: dict[str, Any], age: str) -> Cells:
    hard, used = _status(o).get("hard") or {}, _status(o).get("used") or {}
    request = ", ".join(f"{k}: {used.get(k, '0')}/{v}" for k, v in sorted(hard.items()) if not k.startswith("limits."))
    limit = ", ".join(f"{k}: {used.get(k, '0')}/{v}" for k, v in sorted(hard.items()) if k.startswith("limits."))
    return [age, request, limit]


def _priority_class(o: dict[str, Any], age: str) -> Cells:
    return [o.get("value", 0), bool(o.get("globalDefault", False)), age,
            o.get("preemptionPolicy", "PreemptLowerPriority")]


def _cronjob(o: dict[str, Any], age: str) -> Cells:
    spec, s = _spec(o), _status(o)
    last = s.get("lastScheduleTime")
    names, images = _containers({"spec": ((spec.get("jobTemplate") or {}).get("spec") or {})})
    return [spec.get("schedule", ""), spec.get("timeZone") or "<none>", bool(spec.get("suspend", False)),
            len(s.get("active") or []), human_age(last) if last else "<none>", age, names, images, "<none>"]


def _endpoints(o: dict[str, Any], age: str) -> Cells:
    pairs = [f"{a.get('ip')}:{p.get('port')}" for sub in o.get("subsets") or [] for a in sub.get("addresses") or []
             for p in sub.get("ports") or []]
    text = ",".join(pairs[:3]) + (f" + {len(pairs) - 3} more..." if len(pairs) > 3 else "")
    return [text or "<none>", age]


def _slice(o: dict[str, Any], age: str) -> Cells:
    ports = ",".join(str(p.get("port")) for p in o.get("ports") or []) or "<unset>"
    addrs = [a for e in o.get("endpoints") or [] for a in e.get("addresses") or []]
    text = ",".join(addrs[:3]) + (f" + {len(addrs) - 3} more..." if len(addrs) > 3 else "")
    return [o.get("addressType", ""), ports, text or "<unset>", age]


def _service_account(o: dict[str, Any], age: str) -> Cells:
    return [len(o.get("secrets") or []), age]


def _hpa(o: dict[str, Any], age: str) -> Cells:
    spec, s = _spec(o), _status(o)
    ref = spec.get("scaleTargetRef") or {}
    targets = []
    for m in spec.get("metrics") or []:
        res = m.get("resource") or {}
        target = res.get("target") or {}
        if target.get("averageUtilization") is not None:
            targets.append(f"{res.get('name')}: <unknown>/{target['averageUtilization']}%")
    return [f"{ref.get('kind')}/{ref.get('name')}", ", ".join(targets) or "<none>", spec.get("minReplicas", 1),
            spec.get("maxReplicas", 0), s.get("currentReplicas", 0), age]


def _pdb(o: dict[str, Any], age: str) -> Cells:
    spec = _spec(o)
    return [spec.get("minAvailable", "N/A"), spec.get("maxUnavailable", "N/A"),
            _status(o).get("disruptionsAllowed", 0), age]


def _netpol(o: dict[str, Any], age: str) -> Cells:
    labels = (_spec(o).get("podSelector") or {}).get("matchLabels") or {}
    return [",".join(f"{k}={v}" for k, v in sorted(labels.items())) or "<none>", age]


def _binding(o: dict[str, Any], age: str) -> Cells:
    ref = o.get("roleRef") or {}
    subjects = o.get("subjects") or []

    def names(kind: str) -> str:
        return ", ".join(str(s.get("name")) if kind != "ServiceAccount" else f"{s.get('namespace')}/{s.get('name')}"
                         for s in subjects if s.get("kind") == kind)

    return [f"{ref.get('kind')}/{ref.get('name')}", age, names("User"), names("Group"), names("ServiceAccount")]


def _revision(o: dict[str, Any], age: str) -> Cells:
    owner = next((r for r in (o.get("metadata") or {}).get("ownerReferences") or [] if r.get("controller")), None)
    text = f"{str(owner.get('apiVersion', '')).split('/')[0]}/{owner.get('kind', '').lower()}/{owner.get('name')}" \
        if owner else "<none>"
    return [text, o.get("revision", 0), age]


# Events have no leading NAME column: the name is the last, wide one.
_EVENT_COLUMNS: list[Column] = [("Last Seen", "string", 0), ("Type", "string", 0), ("Reason", "string", 0),
                                ("Object", "string", 0), ("Subobject", "string", 1), ("Source", "string", 1),
                                ("Message", "string", 0), ("First Seen", "string", 1), ("Count", "string", 1),
                                ("Name", "string", 1)]
NO_NAME_COLUMN = frozenset({("", "Event"), ("events.k8s.io", "Event")})
_WIDE_WORKLOAD: list[Column] = [("Containers", "string", 1), ("Images", "string", 1), ("Selector", "string", 1)]
_AGE: Column = ("Age", "string", 0)
_CREATED: list[Column] = [("Created At", "date", 0)]

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
    ("apps", "ControllerRevision"): ([("Controller", "string", 0), ("Revision", "integer", 0), _AGE], _revision),
    ("batch", "Job"): ([("Status", "string", 0), ("Completions", "string", 0), ("Age", "string", 0),
                        ("Containers", "string", 1), ("Images", "string", 1)], _job),
    ("batch", "CronJob"): ([("Schedule", "string", 0), ("Timezone", "string", 0), ("Suspend", "boolean", 0),
                            ("Active", "integer", 0), ("Last Schedule", "string", 0), _AGE, *_WIDE_WORKLOAD],
                           _cronjob),
    ("", "ConfigMap"): ([("Data", "integer", 0), _AGE], _data_count),
    ("", "Secret"): ([("Type", "string", 0), ("Data", "integer", 0), _AGE], _secret),
    ("", "Namespace"): ([("Status", "string", 0), _AGE], _namespace),
    ("", "Service"): ([("Type", "string", 0), ("Cluster-IP", "string", 0), ("External-IP", "string", 0),
                       ("Port(s)", "string", 0), _AGE, ("Selector", "string", 1)], _service),
    ("", "Event"): (_EVENT_COLUMNS, _event),
    ("events.k8s.io", "Event"): (_EVENT_COLUMNS,
                                 _event),
    ("", "ReplicationController"): ([("Desired", "integer", 0), ("Current", "integer", 0), ("Ready", "integer", 0),
                                     _AGE, *_WIDE_WORKLOAD], _rc),
    ("", "PersistentVolumeClaim"): ([("Status", "string", 0), ("Volume", "string", 0), ("Capacity", "string", 0),
                                     ("Access Modes", "string", 0), ("StorageClass", "string", 0),
                                     ("VolumeAttributesClass", "string", 0), _AGE, ("VolumeMode", "string", 1)],
                                    _pvc),
    ("", "PersistentVolume"): ([("Capacity", "string", 0), ("Access Modes", "string", 0),
                                ("Reclaim Policy", "string", 0), ("Status", "string", 0), ("Claim", "string", 0),
                                ("StorageClass", "string", 0), ("VolumeAttributesClass", "string", 0),
                                ("Reason", "string", 0), _AGE, ("VolumeMode", "string", 1)], _pv),
    ("", "ServiceAccount"): ([("Secrets", "string", 0), _AGE], _service_account),
    ("", "Endpoints"): ([("Endpoints", "string", 0), _AGE], _endpoints),
    ("", "LimitRange"): (_CREATED, _created_at),
    ("", "ResourceQuota"): ([_AGE, ("Request", "string", 0), ("Limit", "string", 0)], _quota),
    ("discovery.k8s.io", "EndpointSlice"): ([("AddressType", "string", 0), ("Ports", "string", 0),
                                            ("Endpoints", "string", 0), _AGE], _slice),
    ("storage.k8s.io", "StorageClass"): ([("Provisioner", "string", 0), ("ReclaimPolicy", "string", 0),
                                         ("VolumeBindingMode", "string", 0), ("AllowVolumeExpansion", "string", 0),
                                         _AGE], _storage_class),
    ("coordination.k8s.io", "Lease"): ([("Holder", "string", 0), _AGE], _lease),
    ("apiregistration.k8s.io", "APIService"): ([("Service", "string", 0), ("Available", "string", 0), _AGE],
                                               _apiservice),
    ("networking.k8s.io", "Ingress"): ([("Class", "string", 0), ("Hosts", "string", 0), ("Address", "string", 0),
                                        ("Ports", "string", 0), _AGE], _ingress),
    ("networking.k8s.io", "IngressClass"): ([("Controller", "string", 0), ("Parameters", "string", 0), _AGE],
                                            _ingress_class),
    ("networking.k8s.io", "NetworkPolicy"): ([("Pod-Selector", "string", 0), _AGE], _netpol),
    ("scheduling.k8s.io", "PriorityClass"): ([("Value", "integer", 0), ("Global-Default", "boolean", 0), _AGE,
                                             ("PreemptionPolicy", "string", 0)], _priority_class),
    ("apiextensions.k8s.io", "CustomResourceDefinition"): (_CREATED, _created_at),
    ("rbac.authorization.k8s.io", "Role"): (_CREATED, _created_at),
    ("rbac.authorization.k8s.io", "ClusterRole"): (_CREATED, _created_at),
    ("rbac.authorization.k8s.io", "RoleBinding"): ([("Role", "string", 0), _AGE, ("Users", "string", 1),
                                                   ("Groups", "string", 1), ("ServiceAccounts", "string", 1)],
                                                  _binding),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"): ([("Role", "string", 0), _AGE, ("Users", "string", 1),
                                                          ("Groups", "string", 1), ("ServiceAccounts", "string", 1)],
                                                         _binding),
    ("autoscaling", "HorizontalPodAutoscaler"): ([("Reference", "string", 0), ("Targets", "string", 0),
                                                 ("MinPods", "string", 0), ("MaxPods", "integer", 0),
                                                 ("Replicas", "integer", 0), _AGE], _hpa),
    ("policy", "PodDisruptionBudget"): ([("Min Available", "string", 0), ("Max Unavailable", "string", 0),
                                        ("Allowed Disruptions", "integer", 0), _AGE], _pdb),
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


def human_age(timestamp: str | None) -> str:
    """An age the way the API's table printers write it (``45s``, ``3m20s``, ``5h``, ``2d4h``)."""
    if not timestamp:
        return "<unknown>"
    try:
        created = calendar.timegm(time.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ"))
    except ValueError:
        return "<unknown>"
    secs = int(time.time() - created)
    if secs < 0:
        return "0s"
    if secs < 120:
        return f"{secs}s"
    mins = secs // 60
    if mins < 10:
        return f"{mins}m{secs % 60}s" if secs % 60 else f"{mins}m"
    if mins < 180:
        return f"{mins}m"
    hours = mins // 60
    if hours < 8:
        return f"{hours}h{mins % 60}m" if mins % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        return f"{hours // (24 * 365)}y{(hours // 24) % 365}d"
    return f"{hours // (24 * 365)}y"


# --------------------------------------------------------------------------- JSONPath (printer columns)

_SEGMENT = re.compile(r"""\.([A-Za-z0-9_$-]+)|\[(\d+|\*)\]|\[\?\(@\.([A-Za-z0-9_.-]+)\s*==\s*["']([^"']*)["']\)\]|\[['"]([^'"]+)['"]\]""")


def jsonpath(obj: Any, path: str) -> list[Any]:
    """Values of ``obj`` at a printer column's JSONPath (``.status.conditions[?(@.type=="Ready")].status``)."""
    text = path.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1]
    text = text.removeprefix("$")
    current = [obj]
    pos = 0
    while pos < len(text):
        m = _SEGMENT.match(text, pos)
        if m is None:
            return []
        pos = m.end()
        field, index, fkey, fvalue, quoted = m.groups()
        nxt: list[Any] = []
        for value in current:
            if field is not None or quoted is not None:
                key = field if field is not None else quoted
                if isinstance(value, dict) and key in value:
                    nxt.append(value[key])
            elif index is not None:
                if isinstance(value, list):
                    nxt.extend(value if index == "*" else value[int(index):int(index) + 1])
            elif fkey is not None and isinstance(value, list):
                for item in value:
                    got = jsonpath(item, "." + fkey) if isinstance(item, dict) else []
                    if got and str(got[0]) == fvalue:
                        nxt.append(item)
        current = nxt
    return current


def _custom_cell(obj: dict[str, Any], column: dict[str, Any]) -> Any:
    values = jsonpath(obj, str(column.get("jsonPath", "")))
    if not values or values[0] is None:
        return None
    value = values[0]
    kind = column.get("type", "string")
    if kind == "date":
        return human_age(value) if isinstance(value, str) else value
    if kind == "integer" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value)
    if kind in ("number", "boolean") and not isinstance(value, (dict, list)):
        return value
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


# --------------------------------------------------------------------------- tables

_NAME_COLUMN = {"name": "Name", "type": "string", "format": "name", "description": "Name of the object",
                "priority": 0}
_AGE_COLUMN = {"name": "Age", "type": "string", "format": "",
               "description": "Time since the object was created", "priority": 0}


def table(rt: ResourceType, body: dict[str, Any], is_list: bool) -> dict[str, Any]:
    """The ``meta.k8s.io/v1`` Table of an object or a list of objects of ``rt``."""
    items = body.get("items") or [] if is_list else [body]
    builtin = columns(rt.group, rt.kind) if rt.builtin or (rt.group, rt.kind) in PRINTERS else None
    custom = [c for c in rt.printer_columns if c.get("name") and c.get("jsonPath")]
    rows = []
    for o in items:
        meta = o.get("metadata", {})
        partial = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": meta}
        age = human_age(meta.get("creationTimestamp"))
        if builtin and (rt.group, rt.kind) in NO_NAME_COLUMN:
            row = cells(rt.group, rt.kind, o, age)
        elif builtin:
            row = [display_name(rt.group, rt.kind, o), *cells(rt.group, rt.kind, o, age)]
        elif custom:
            row = [meta.get("name"), *(_custom_cell(o, c) for c in custom)]
        else:
            row = [meta.get("name"), age]
        rows.append({"cells": row, "object": partial})
    if builtin and (rt.group, rt.kind) in NO_NAME_COLUMN:
        defs = list(builtin)
    elif builtin:
        defs = [_NAME_COLUMN, *builtin]
    elif custom:
        defs = [_NAME_COLUMN, *({"name": c["name"], "type": c.get("type", "string"), "format": c.get("format", ""),
                                 "description": c.get("description", ""), "priority": int(c.get("priority", 0))}
                                for c in custom)]
    else:
        defs = [_NAME_COLUMN, _AGE_COLUMN]
    list_meta = body.get("metadata", {}) if is_list else {}
    table_meta = {k: list_meta[k] for k in ("continue", "remainingItemCount") if k in list_meta}
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1",
            "metadata": {"resourceVersion": body.get("metadata", {}).get("resourceVersion", ""), **table_meta},
            "columnDefinitions": defs, "rows": rows}
