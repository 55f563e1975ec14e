"""What runs, read from each simulated cluster through its Kubernetes API with the official
client (the same way ``kubectl get deployments`` would), never from the leads' state."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kubernetes import client, config

from qonnect_gitops.model.labels import APP_LABEL, COMPONENT_LABEL

Observed = dict[str, dict[str, int] | None]  # cluster -> {app/component: ready replicas}, None: unreachable


class ClusterReader:
    def __init__(self, name: str, kubeconfig: Path) -> None:
        self.name = name
        cfg = client.Configuration()
        config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
        cfg.retries = False
        self.api = client.ApiClient(cfg)
        self.apps = client.AppsV1Api(self.api)
        self.last_error = ""

    def ready(self) -> dict[str, int] | None:
        """Ready replicas per component of our workloads; None when the API does not answer."""
        out: dict[str, int] = {}
        try:
            for lister in (self.apps.list_deployment_for_all_namespaces,
                           self.apps.list_stateful_set_for_all_namespaces):
                items = lister(label_selector=COMPONENT_LABEL, _request_timeout=2).items
                for obj in items:
                    labels = (obj.metadata.labels if obj.metadata else None) or {}
                    key = f"{labels.get(APP_LABEL)}/{labels.get(COMPONENT_LABEL)}"
                    out[key] = out.get(key, 0) + int((obj.status.ready_replicas if obj.status else None) or 0)
        except Exception as exc:  # noqa: BLE001 - any failure means "cannot see it now"
            self.last_error = f"{type(exc).__name__}: {exc}"[:300]
            return None
        return out

    def close(self) -> None:
        self.api.close()


class FleetObserver:
    def __init__(self, kubeconfigs: dict[str, Path]) -> None:
        self.readers = {name: ClusterReader(name, path) for name, path in kubeconfigs.items()}
        self.pool = ThreadPoolExecutor(max_workers=len(self.readers) or 1)

    def snapshot(self) -> Observed:
        futures = {name: self.pool.submit(r.ready) for name, r in self.readers.items()}
        return {name: f.result() for name, f in futures.items()}

    def close(self) -> None:
        self.pool.shutdown(wait=False)
        for reader in self.readers.values():
            reader.close()


def by_component(observed: Observed) -> dict[str, dict[str, int]]:
    """``{component: {cluster: ready}}`` with zero counts left out."""
    out: dict[str, dict[str, int]] = {}
    for cluster, comps in observed.items():
        for comp, ready in (comps or {}).items():
            if ready:
                out.setdefault(comp, {})[cluster] = ready
    return {k: dict(sorted(v.items())) for k, v in sorted(out.items())}


def matches(expected: dict[str, dict[str, int]], observed: Observed, skip: set[str] = frozenset()) -> bool:  # type: ignore[assignment]
    """Whether every reachable cluster (not in ``skip``) runs exactly the expected ready replicas."""
    obs = by_component(observed)
    for comp in set(expected) | set(obs):
        want = {c: n for c, n in expected.get(comp, {}).items() if c not in skip and n}
        have = {c: n for c, n in obs.get(comp, {}).items() if c not in skip}
        if want != have:
            return False
    return all(observed.get(c) is not None for c in observed if c not in skip)


def summary(placement: dict[str, Any]) -> str:
    return ", ".join(f"{c}={n}" for c, n in sorted(placement.items()))
