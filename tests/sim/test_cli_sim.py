"""``qonnect sim`` as a process, used through the kubeconfigs it writes; ``SimFleet`` as a library."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import yaml
from kubernetes import client, config

from qonnect_gitops.model import load_goals, read_directory
from qonnect_gitops.sim import SimFleet
from qonnect_gitops.sim.fleet import load_clusters
from tests.sim.conftest import Kubectl
from tests.sim.kubelet_helpers import deployment, wait_for

REPO = Path(__file__).resolve().parents[2]


def test_qonnect_sim_process(tmp_path: Path) -> None:
    out = tmp_path / "kubeconfigs"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-m", "qonnect_gitops", "sim", "--clusters", str(REPO / "repo-template"),
                             "--kubeconfig-dir", str(out), "--startup-delay", "0.05", "--user", "agent"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        names = sorted(p.stem for p in (REPO / "repo-template" / "clusters").glob("*.yaml"))
        wait_for(lambda: sorted(p.stem for p in out.glob("*.yaml") if "." not in p.stem) == names, timeout=30,
                 what="nine kubeconfigs")
        assert sorted(p.name for p in out.glob("*.agent.yaml")) == [f"{n}.agent.yaml" for n in names]
        agent = Kubectl(out / "fog-1.agent.yaml", tmp_path / "agent-cache")
        refused = agent("get", "pods", check=False)
        assert 'User "agent" cannot list resource "pods"' in refused.stderr
        kubectl = Kubectl(out / "fog-1.yaml", tmp_path / "cache")
        nodes = kubectl.json("get", "nodes")["items"]
        assert [n["metadata"]["name"] for n in nodes] == ["fog-1-node-1", "fog-1-node-2", "fog-1-node-3"]
        kubectl("apply", "-f", "-", stdin=yaml.safe_dump(deployment("web", 2)))
        assert "condition met" in kubectl("wait", "--for=condition=Available", "deployment/web",
                                          "--timeout=20s").stdout
        api = config.new_client_from_config(config_file=str(out / "edge-1.yaml"))
        archs = {n.metadata.labels["kubernetes.io/arch"] for n in client.CoreV1Api(api).list_node().items}
        assert archs == {"arm64"}
        server = yaml.safe_load((out / "edge-1.yaml").read_text())["clusters"][0]["cluster"]["server"]
        port = int(server.rsplit(":", 1)[1])
        endpoints = json.loads((out / "edge-1.endpoints.json").read_text())
        assert endpoints["api"] == server
        with urllib.request.urlopen(endpoints["prometheus"] + "/api/v1/query?query=qonnect_network_latency_ms",
                                    timeout=5) as resp:
            targets = {r["metric"]["target"] for r in json.loads(resp.read())["data"]["result"]}
        goals = load_goals(read_directory(REPO / "repo-template"))
        assert targets == {t for (s, t) in goals.latencies if s == "edge-1"}  # as network.yaml declares
        with urllib.request.urlopen(endpoints["admin"] + "/_sim/status", timeout=5) as resp:
            assert json.loads(resp.read())["name"] == "edge-1"
    finally:
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr
    lines = stdout.splitlines()
    assert lines[0].split() == ["CLUSTER", "API", "PROMETHEUS", "ADMIN", "NODES"]
    assert any(line.startswith("edge-1 ") and line.rstrip().endswith(" 2") for line in lines)
    assert lines[-1] == "stopped"
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0


def test_qonnect_sim_rejects_a_bad_user_name(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-m", "qonnect_gitops", "sim", "--clusters", str(REPO / "repo-template"),
                           "--kubeconfig-dir", str(tmp_path), "--user", "system:admin"],
                          check=False, capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 2 and "--user 'system:admin'" in proc.stderr


def test_qonnect_sim_rejects_a_missing_directory(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-m", "qonnect_gitops", "sim", "--clusters", str(tmp_path / "nope"),
                           "--kubeconfig-dir", str(tmp_path / "out")], capture_output=True, text=True, env=env,
                          timeout=60, check=False)
    assert proc.returncode == 1 and "not a directory" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_clusters_folder_and_repository_load_alike(tmp_path: Path) -> None:
    from_repo, goals = load_clusters(REPO / "repo-template")
    from_folder, _ = load_clusters(REPO / "repo-template" / "clusters")
    assert goals is not None and list(from_repo) == list(from_folder)
    # A bare folder of Cluster files, outside any repository.
    (tmp_path / "edge-9.yaml").write_text((REPO / "repo-template" / "clusters" / "edge-1.yaml").read_text()
                                          .replace("name: edge-1", "name: edge-9"))
    bare, none = load_clusters(tmp_path)
    assert none is None and list(bare) == ["edge-9"]


def test_sim_fleet_library() -> None:
    goals = load_goals(read_directory(REPO / "repo-template"))
    with SimFleet.from_goals(goals, startup_delay=0.05) as fleet:
        assert len(fleet) == 9
        edge = fleet["edge-1"]
        assert len(edge.node_names()) == 2
        query = "/api/v1/query?query=qonnect_network_latency_ms%7Btarget%3D%22fog-1%22%7D"
        with urllib.request.urlopen(edge.prometheus_url + query, timeout=5) as resp:
            body = yaml.safe_load(resp.read())
        assert body["data"]["result"][0]["value"][1] == "8"  # network.yaml: edge-1 <-> fog-1 8 ms
        started = time.monotonic()
    assert time.monotonic() - started < 5
