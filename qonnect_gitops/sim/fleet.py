"""``SimFleet``: one simulated cluster per Cluster file, started and stopped together."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import yaml

from qonnect_gitops.logs import get_logger
from qonnect_gitops.model import Cluster, Goals, load_goals, read_directory
from qonnect_gitops.sim.cluster import SimCluster

log = get_logger(__name__)


def load_clusters(path: str | os.PathLike[str]) -> tuple[dict[str, Cluster], Goals | None]:
    """Cluster models from a goals repository or from its ``clusters/`` folder.

    A repository (it has ``qonnect.yaml``) is loaded and validated whole, which also
    gives the declared latencies; a bare folder of Cluster files is read file by file
    (validated as Cluster documents, without the repository's cross-checks).
    """
    root = Path(path)
    if (root / "qonnect.yaml").is_file():
        goals = load_goals(read_directory(root))
        return dict(goals.clusters), goals
    if (root.parent / "qonnect.yaml").is_file() and root.name == "clusters":
        goals = load_goals(read_directory(root.parent))
        return dict(goals.clusters), goals
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: not a directory")
    clusters: dict[str, Cluster] = {}
    for file in sorted(root.glob("*.y*ml")):
        doc = yaml.safe_load(file.read_text())
        if isinstance(doc, dict) and doc.get("kind") == "Cluster":
            try:
                cluster = Cluster.model_validate(doc)
            except ValueError as exc:
                raise ValueError(f"{file}: {exc}") from None
            clusters[cluster.name] = cluster
    if not clusters:
        raise FileNotFoundError(f"{root}: no Cluster files (and no qonnect.yaml)")
    return dict(sorted(clusters.items())), None


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path`` and rename it over: readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


class SimFleet:
    """Simulated clusters by name; a context manager that starts and stops them all."""

    def __init__(self, clusters: Mapping[str, SimCluster]) -> None:
        self.clusters = dict(clusters)

    @classmethod
    def from_clusters(cls, clusters: Mapping[str, Cluster], goals: Goals | None = None,
                      startup_delay: float = 1.0, **kwargs: Any) -> SimFleet:
        """One sim per Cluster model; latencies from ``goals`` (network.yaml) when given."""
        sims = {}
        for name, cluster in clusters.items():
            latencies = {t: ms for (s, t), ms in (goals.latencies.items() if goals else ()) if s == name}
            sims[name] = SimCluster.from_cluster(cluster, startup_delay=startup_delay, latencies=latencies,
                                                 peers=sorted(set(clusters) - {name}), **kwargs)
        return cls(sims)

    @classmethod
    def from_goals(cls, goals: Goals, startup_delay: float = 1.0, **kwargs: Any) -> SimFleet:
        """One sim per cluster of a goals repository, with its declared latencies as signals."""
        return cls.from_clusters(goals.clusters, goals, startup_delay, **kwargs)

    @classmethod
    def from_directory(cls, path: str | os.PathLike[str], startup_delay: float = 1.0, **kwargs: Any) -> SimFleet:
        """From a goals repository or its ``clusters/`` folder (see ``load_clusters``)."""
        clusters, goals = load_clusters(path)
        return cls.from_clusters(clusters, goals, startup_delay, **kwargs)

    def __getitem__(self, name: str) -> SimCluster:
        return self.clusters[name]

    def __iter__(self) -> Iterator[SimCluster]:
        return iter(self.clusters.values())

    def __len__(self) -> int:
        return len(self.clusters)

    def start(self, kubeconfig_dir: str | os.PathLike[str] | None = None, users: Sequence[str] = ()) -> None:
        """Start every cluster; with ``kubeconfig_dir``, write files as soon as each one listens.

        ``<name>.yaml`` is the admin kubeconfig, ``<name>.<user>.yaml`` one per restricted
        user in ``users`` (RBAC in the cluster decides what it may do);
        ``<name>.endpoints.json`` says where the cluster's API, Prometheus and admin
        endpoint listen (for demos and scripts that configure an agent's Prometheus URL or
        drive faults).
        """
        for name, sim in self.clusters.items():
            sim.start()
            if kubeconfig_dir is not None:
                out = Path(kubeconfig_dir)
                for user in users:
                    write_atomic(out / f"{name}.{user}.yaml", sim.kubeconfig_yaml(user=user))
                write_atomic(out / f"{name}.yaml", sim.kubeconfig_yaml())
                write_atomic(out / f"{name}.endpoints.json", json.dumps(self.endpoints(name), indent=2) + "\n")
        log.info("sim_fleet_started", clusters=len(self.clusters))

    def stop(self) -> None:
        """Stop every cluster."""
        for sim in self.clusters.values():
            sim.stop()
        log.info("sim_fleet_stopped", clusters=len(self.clusters))

    def endpoints(self, name: str) -> dict[str, str]:
        """Where cluster ``name`` listens: ``api``, ``prometheus`` and ``admin`` base URLs."""
        sim = self.clusters[name]
        return {"name": name, "api": sim.url, "prometheus": sim.prometheus_url, "admin": sim.admin_url}

    def rows(self) -> list[tuple[str, str, str, str, int]]:
        """``(name, API URL, Prometheus URL, admin URL, nodes)`` per cluster, for tables."""
        return [(name, sim.url, sim.prometheus_url, sim.admin_url + "/_sim/", sim.node_count())
                for name, sim in self.clusters.items()]

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
