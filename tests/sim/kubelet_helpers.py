"""Helpers for the part 2 tests: clusters with nodes, workloads, waiting."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from kubernetes import client, config

from qonnect_gitops.model.cluster import NodeShape, Taint
from qonnect_gitops.sim import SimCluster

T = TypeVar("T")


def shape(count: int, cpu: str, memory: str = "8Gi", arch: str = "amd64", pods: int = 110) -> NodeShape:
    """A node shape as a Cluster file writes it."""
    return NodeShape.model_validate({"count": count, "cpu": cpu, "memory": memory, "arch": arch, "pods": pods})


def taint(key: str, value: str = "", effect: str = "NoSchedule") -> Taint:
    """A cluster taint as a Cluster file writes it."""
    return Taint.model_validate({"key": key, "value": value, "effect": effect})


def make_sim(*shapes: NodeShape, name: str = "t", delay: float = 0.05, **kwargs: Any) -> SimCluster:
    """A cluster with these node shapes and a short start-up delay (not started)."""
    return SimCluster(name=name, nodes=shapes, region="eu-central", startup_delay=delay, bookmark_interval=0.3,
                      **kwargs)


def clients(sim: SimCluster, retries: bool = True) -> tuple[client.CoreV1Api, client.AppsV1Api, client.BatchV1Api,
                                                            client.ApiClient]:
    """Official typed clients configured from the sim's kubeconfig (``retries=False``: no urllib3 retries)."""
    conf = client.Configuration()
    config.load_kube_config_from_dict(sim.kubeconfig(), client_configuration=conf)
    if not retries:
        # urllib3 otherwise retries refused connections and honours Retry-After by sleeping.
        conf.retries = False
    api = client.ApiClient(conf)
    return client.CoreV1Api(api), client.AppsV1Api(api), client.BatchV1Api(api), api


def wait_for(fn: Callable[[], T], timeout: float = 10.0, what: str = "condition") -> T:
    """Poll ``fn`` until it returns something truthy; fail with ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}; last value: {last!r}")


def deployment(name: str, replicas: int, cpu: str = "100m", memory: str = "64Mi",
               pod_spec: dict[str, Any] | None = None) -> dict[str, Any]:
    """A Deployment whose one container requests ``cpu`` and ``memory``."""
    spec: dict[str, Any] = {"containers": [{"name": "app", "image": "nginx:1.27", "ports": [{"containerPort": 80}],
                                            "resources": {"requests": {"cpu": cpu, "memory": memory}}}]}
    spec.update(pod_spec or {})
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": {"app": name}},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}}


def pods_of(core: client.CoreV1Api, app: str, ns: str = "default") -> list[client.V1Pod]:
    """Pods labelled ``app=<app>``."""
    return list(core.list_namespaced_pod(ns, label_selector=f"app={app}").items)


def ready(pod: client.V1Pod) -> bool:
    """Running with Ready=True."""
    return pod.status.phase == "Running" and any(c.type == "Ready" and c.status == "True"
                                                 for c in pod.status.conditions or [])
