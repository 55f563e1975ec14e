"""Defaulting of built-in kinds: the values the API server fills in on every write.

Only fields left unset are filled, as the API's defaulting functions do, so a
client that sets a field keeps its value. The set covers the workload kinds
the agent applies (pod templates, Deployment, StatefulSet, DaemonSet, Job,
CronJob, Service, Secret, Namespace); admission-time additions (service
account tokens, tolerations, priority) are out of scope.
"""

from __future__ import annotations

from typing import Any

_TEMPLATE_KINDS = ("Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job")


def _container(c: dict[str, Any]) -> None:
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    image = str(c.get("image") or "")
    last = image.rsplit("/", 1)[-1]
    # Images without a tag, or tagged latest, are pulled every time; others only when absent.
    untagged = ":" not in last and "@" not in last
    c.setdefault("imagePullPolicy", "Always" if untagged or last.endswith(":latest") else "IfNotPresent")
    resources = c.setdefault("resources", {})
    # The API stores quantities as strings (`cpu: 2` reads back as "2"); clients
    # deserialise them as strings and fail on a bare number.
    for group in ("requests", "limits"):
        values = resources.get(group) if isinstance(resources, dict) else None
        if isinstance(values, dict):
            for name, value in values.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    values[name] = _quantity(value)


def _quantity(value: float) -> str:
    if float(value).is_integer():
        return str(int(value))
    return f"{round(value * 1000)}m"


def pod_spec(spec: dict[str, Any]) -> None:
    """Defaults of a PodSpec (in a Pod or a pod template)."""
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    for key in ("initContainers", "containers"):
        for c in spec.get(key) or []:
            if isinstance(c, dict):
                _container(c)


def _template_spec(obj: dict[str, Any]) -> None:
    template = (obj.get("spec") or {}).get("template")
    if isinstance(template, dict) and isinstance(template.get("spec"), dict):
        pod_spec(template["spec"])


def apply_defaults(kind: str, obj: dict[str, Any]) -> None:
    """Fill in the defaults of a built-in ``kind`` in place."""
    spec = obj.get("spec")
    if kind in _TEMPLATE_KINDS:
        _template_spec(obj)
    if kind == "CronJob" and isinstance(spec, dict):
        job = (spec.get("jobTemplate") or {}).get("spec")
        if isinstance(job, dict):
            _job(job)
            template = job.get("template")
            if isinstance(template, dict) and isinstance(template.get("spec"), dict):
                pod_spec(template["spec"])
        spec.setdefault("concurrencyPolicy", "Allow")
        spec.setdefault("suspend", False)
        spec.setdefault("successfulJobsHistoryLimit", 3)
        spec.setdefault("failedJobsHistoryLimit", 1)
    if kind == "Pod" and isinstance(spec, dict):
        pod_spec(spec)
        spec.setdefault("enableServiceLinks", True)
        spec.setdefault("priority", 0)
        spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    if not isinstance(spec, dict):
        return
    if kind == "Deployment":
        spec.setdefault("replicas", 1)
        strategy = spec.setdefault("strategy", {})
        strategy.setdefault("type", "RollingUpdate")
        if strategy["type"] == "RollingUpdate":
            rolling = strategy.setdefault("rollingUpdate", {})
            rolling.setdefault("maxUnavailable", "25%")
            rolling.setdefault("maxSurge", "25%")
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault("progressDeadlineSeconds", 600)
    elif kind == "ReplicaSet":
        spec.setdefault("replicas", 1)
    elif kind == "StatefulSet":
        spec.setdefault("replicas", 1)
        spec.setdefault("podManagementPolicy", "OrderedReady")
        strategy = spec.setdefault("updateStrategy", {})
        strategy.setdefault("type", "RollingUpdate")
        if strategy["type"] == "RollingUpdate":
            strategy.setdefault("rollingUpdate", {}).setdefault("partition", 0)
        spec.setdefault("revisionHistoryLimit", 10)
        retention = spec.setdefault("persistentVolumeClaimRetentionPolicy", {})
        retention.setdefault("whenDeleted", "Retain")
        retention.setdefault("whenScaled", "Retain")
    elif kind == "DaemonSet":
        strategy = spec.setdefault("updateStrategy", {})
        strategy.setdefault("type", "RollingUpdate")
        if strategy["type"] == "RollingUpdate":
            rolling = strategy.setdefault("rollingUpdate", {})
            rolling.setdefault("maxUnavailable", 1)
            rolling.setdefault("maxSurge", 0)
        spec.setdefault("revisionHistoryLimit", 10)
    elif kind == "Job":
        _job(spec)


def _job(spec: dict[str, Any]) -> None:
    spec.setdefault("parallelism", 1)
    spec.setdefault("completions", 1)
    spec.setdefault("backoffLimit", 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")


# Status fields without omitempty: the zero status of a new object still carries them.
_INITIAL_STATUS: dict[str, dict[str, Any]] = {
    # A real API server returns every new Service with an empty load balancer status.
    "Service": {"loadBalancer": {}},
    "ReplicaSet": {"replicas": 0},
    "StatefulSet": {"replicas": 0, "availableReplicas": 0},
    "DaemonSet": {"currentNumberScheduled": 0, "numberMisscheduled": 0, "desiredNumberScheduled": 0,
                  "numberReady": 0},
}


def initial_status(kind: str) -> dict[str, Any]:
    """The status a newly created built-in object starts with."""
    return dict(_INITIAL_STATUS.get(kind, {}))


ROOT_CA = "kube-root-ca.crt"
# The cluster CA published in every namespace (a self-signed certificate generated once for the
# simulated clusters; the sim serves plain HTTP, so nothing is ever verified against it).
CA_CERT = """-----BEGIN CERTIFICATE-----
MIIBkjCCATegAwIBAgIUNMK8f97MMWNa/X6TVO8LJbkDGQAwCgYIKoZIzj0EAwIw
FTETMBEGA1UEAwwKa3ViZXJuZXRlczAgFw0yNjEyMDEwMjUyMTVaGA8yMTI2MTEw
NzAyNTIxNVowFTETMBEGA1UEAwwKa3ViZXJuZXRlczBZMBMGByqGSM49AgEGCCqG
SM49AwEHA0IABC3o/yljK+Dn6gSp3AmLQtSFWIkchVsh5EMj/bZPk5vB2ChGgkdK
LFB54cPt1VU9ly1L+E3SW0I4k0M4GFjVXU+jYzBhMB0GA1UdDgQWBBTuqlscwr3G
e0l8Rx7fBgR4fSFJQTAfBgNVHSMEGDAWgBTuqlscwr3Ge0l8Rx7fBgR4fSFJQTAP
BgNVHRMBAf8EBTADAQH/MA4GA1UdDwEB/wQEAwICpDAKBggqhkjOPQQDAgNJADBG
AiEAqQWHNobY9/SQocCYgXPbiWTAk43wo7zxB5iBeKE0zyUCIQDmAX+hZ+uc9X2F
5Td4CfWTTt41Py5D87ZjC60i4w7qUQ==
-----END CERTIFICATE-----
"""
