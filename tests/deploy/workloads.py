"""Reading rendered workloads: one object by kind and name, a workload's container, its
environment as the kubelet sets it, and the kubelet's $(VAR) expansion of args."""

from __future__ import annotations

import re
from typing import Any

K8S_VERSION = "1.37"  # the Kubernetes release whose schemas every rendered object must pass (strict)


def one(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} objects"
    return found[0]


def container(workload: dict[str, Any]) -> dict[str, Any]:
    (c,) = workload["spec"]["template"]["spec"]["containers"]
    return c


def resolved_env(objects: list[dict[str, Any]], workload: dict[str, Any], pod: str) -> dict[str, str]:
    """The container's environment as the kubelet would set it (Secrets: placeholders)."""
    env: dict[str, str] = {}
    ns = workload["metadata"]["namespace"]
    for e in container(workload).get("env", []):
        if "value" in e:
            env[e["name"]] = e["value"]
            continue
        ref = e["valueFrom"]
        if "fieldRef" in ref:
            env[e["name"]] = {"metadata.name": pod, "metadata.namespace": ns,
                              "status.podIP": "10.42.0.7"}[ref["fieldRef"]["fieldPath"]]
        elif "configMapKeyRef" in ref:
            cm = one(objects, "ConfigMap", ref["configMapKeyRef"]["name"])
            env[e["name"]] = cm["data"][ref["configMapKeyRef"]["key"]]
        elif "secretKeyRef" in ref:
            env[e["name"]] = f"<secret {ref['secretKeyRef']['name']}/{ref['secretKeyRef']['key']}>"
        else:  # pragma: no cover
            raise AssertionError(f"unexpected env source {ref}")
    return env


def expand(arg: str, env: dict[str, str]) -> str:
    """The kubelet's $(VAR) expansion in args."""
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m.group(1), m.group(0)), arg)
