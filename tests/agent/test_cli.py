"""``qonnect agent --once``: the table, exit codes, environment variables; a real lead group."""

from __future__ import annotations

import hashlib
import hmac
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from qonnect_gitops.cli import main
from qonnect_gitops.gitstore.daemon import free_port
from tests.agent.conftest import (
    Branch,
    configmap,
    configmap_names,
    deployment,
    namespace,
    wait_for,
)


@pytest.fixture(autouse=True)
def _no_log_handler(monkeypatch) -> None:
    """The CLI installs a log handler on stderr; under capsys that stream closes after the test."""
    monkeypatch.setattr("qonnect_gitops.cli.agent.configure", lambda *a, **k: None)


@pytest.fixture
def kubeconfig(sim, tmp_path: Path) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(sim.kubeconfig_yaml())
    return path


def _once(branch: Branch, kubeconfig: Path, tmp_path: Path, *extra: str) -> int:
    return main(["agent", "--once", "--cluster", "edge-1", "--repo", branch.url, "--kubeconfig", str(kubeconfig),
                 "--cache-dir", str(tmp_path / "cli-cache"), "--wait-timeout", "0", *extra])


def test_once_exit_codes_and_table(branch: Branch, kubeconfig: Path, tmp_path: Path, capsys) -> None:
    branch.publish([namespace("shop"), configmap("a")])
    assert _once(branch, kubeconfig, tmp_path) == 0
    out = capsys.readouterr().out
    assert "ConfigMap/shop/a" in out and "created" in out and "Ready ReconciliationSucceeded" in out

    branch.publish([namespace("shop"), configmap("a"), deployment("web")])
    assert _once(branch, kubeconfig, tmp_path) == 2  # applied, but nothing makes the Deployment ready
    out = capsys.readouterr().out
    assert "Deployment.apps/shop/web" in out and "Progressing" in out

    branch.raw_commit([namespace("shop")], generation=1)
    assert _once(branch, kubeconfig, tmp_path) == 1
    out = capsys.readouterr().out
    assert "REFUSED StaleGeneration" in out


def test_options_from_environment(branch: Branch, kubeconfig: Path, tmp_path: Path, monkeypatch, capsys, core) -> None:
    branch.publish([namespace("shop"), configmap("a")])
    monkeypatch.setenv("QONNECT_CLUSTER", "edge-1")
    monkeypatch.setenv("QONNECT_REPO", branch.url)
    monkeypatch.setenv("QONNECT_KUBECONFIG", str(kubeconfig))
    monkeypatch.setenv("QONNECT_CACHE_DIR", str(tmp_path / "env-cache"))
    monkeypatch.setenv("QONNECT_NAMESPACE", "agent-ns")
    monkeypatch.setenv("QONNECT_ONCE", "true")
    assert main(["agent"]) == 0
    assert core.read_namespaced_config_map("qonnect-inventory", "agent-ns").data["inventory"]


def test_reports_to_a_real_lead_group_via_another_lead(branch: Branch, kubeconfig: Path, tmp_path: Path, capsys) -> None:
    from tests.lead.harness import LeadGroup

    group = LeadGroup(tmp_path / "leads", size=1, clusters=["edge-1"])
    group.start_all()
    try:
        leader = group.wait_leader()
        group.wait_until(lambda: (group.status(leader) or {}).get("goals", {}).get("lastGood"), what="goals")
        token = tmp_path / "token"
        token.write_text(group.tokens["edge-1"] + "\n")
        branch.publish([namespace("shop"), configmap("a")])
        dead = f"http://127.0.0.1:{free_port()}"
        code = _once(branch, kubeconfig, tmp_path, "--lead", f"{dead},{leader.url}", "--token-file", str(token))
        captured = capsys.readouterr()
        assert code == 0, captured.out
        assert "report not delivered" not in captured.err
        status = group.status(leader, timeout=5) or {}
        seen = next(c for c in status["clusters"] if c["name"] == "edge-1")
        assert seen["reported"] and seen["applied"]["commit"] == branch.store.cluster_head("edge-1")
        assert seen["sync"]["state"] == "Ready" and seen["applied"]["generation"] == 1
    finally:
        group.stop()


def test_metrics_and_signed_webhook(make_agent, branch: Branch, core) -> None:
    branch.publish([namespace("shop"), configmap("a")])
    port = free_port()
    agent = make_agent(interval=60.0, drift_interval=60.0, metrics_addr=f"127.0.0.1:{port}",
                       webhook_secret=b"s3cret")
    thread = threading.Thread(target=agent.run, daemon=True)
    thread.start()
    wait_for(lambda: agent.last and agent.last.applied, what="first sync")
    base = f"http://127.0.0.1:{port}"
    text = urllib.request.urlopen(base + "/metrics", timeout=5).read().decode()
    assert "qonnect_agent_objects_applied_total 2" in text
    assert f'qonnect_agent_last_applied_info{{commit="{agent.last.commit}",generation="1"}} 1' in text
    assert "qonnect_agent_last_sync_timestamp_seconds" in text

    branch.publish([namespace("shop"), configmap("b")])
    body = b'{"ref":"refs/heads/cluster/edge-1"}'
    bad = urllib.request.Request(base + "/webhook", data=body, method="POST",
                                 headers={"X-Hub-Signature-256": "sha256=" + "0" * 64})
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(bad, timeout=5)
    assert err.value.code == 401
    time.sleep(0.3)
    assert configmap_names(core) == {"a"}
    sig = "sha256=" + hmac.new(b"s3cret", body, hashlib.sha256).hexdigest()
    good = urllib.request.Request(base + "/webhook", data=body, method="POST", headers={"X-Hub-Signature-256": sig})
    assert urllib.request.urlopen(good, timeout=5).status == 202
    wait_for(lambda: configmap_names(core) == {"b"},
             timeout=5, what="sync after push")
    # The object is gone before the pass ends (the final inventory, then the counters): wait for them.
    wait_for(lambda: "qonnect_agent_objects_pruned_total 1"
             in urllib.request.urlopen(base + "/metrics", timeout=5).read().decode(), timeout=5, what="pruned counted")
    agent.stop()
    thread.join(5)


def test_protection_options_add_to_the_defaults(branch: Branch, kubeconfig: Path, tmp_path: Path, capsys) -> None:
    """--protect-namespace is refused like kube-system; the defaults stay protected."""
    branch.publish([namespace("shop"), configmap("a")])
    assert _once(branch, kubeconfig, tmp_path, "--protect-namespace", "shop") == 1
    out = capsys.readouterr().out
    assert "REFUSED ProtectedNamespace" in out and "created" not in out


def test_protection_options_are_parsed_strictly(monkeypatch) -> None:
    import argparse

    from qonnect_gitops.cli.agent import build_config, register

    monkeypatch.setenv("QONNECT_PROTECT_KINDS", "apps/Deployment, ConfigMap")  # read when the parser is built
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["agent", "--cluster", "c", "--repo", "file:///r", "--protect-namespace", "billing"])
    cfg = build_config(args)
    assert {("apps", "Deployment"), ("", "ConfigMap"), ("", "Namespace")} <= cfg.protected_kinds
    assert {"billing", "kube-system", "default", cfg.namespace} <= cfg.reserved_namespaces
    assert cfg.system_objects == frozenset()  # no system object is the agent's by default
    for bad in (["--protect-kind", "apps/"], ["--protect-kind", "deployment"], ["--prune-workers", "0"],
                ["--allow-system-object", "cluster-admin"], ["--allow-system-object", "Role/system:x"],
                ["--allow-system-object", "ClusterRole/ns/x"], ["--allow-system-object", "ConfigMap/kube-system/x"]):
        with pytest.raises(SystemExit):
            build_config(parser.parse_args(["agent", "--cluster", "c", "--repo", "file:///r", *bad]))


def test_system_objects_are_allowed_only_by_the_agents_own_options(monkeypatch) -> None:
    import argparse

    from qonnect_gitops.cli.agent import build_config, register

    monkeypatch.setenv("QONNECT_ALLOW_SYSTEM_OBJECTS", "ClusterRoleBinding/cluster-admin")
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    cfg = build_config(parser.parse_args(["agent", "--cluster", "c", "--repo", "file:///r", "--allow-system-object",
                                          "RoleBinding/kube-public/system:controller:bootstrap-signer"]))
    assert cfg.system_objects == {("ClusterRoleBinding", "", "cluster-admin"),
                                  ("RoleBinding", "kube-public", "system:controller:bootstrap-signer")}


def test_api_timeout_option(monkeypatch) -> None:
    import argparse

    from qonnect_gitops.cli.agent import build_config, register

    monkeypatch.setenv("QONNECT_API_TIMEOUT", "12.5")
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    assert build_config(parser.parse_args(["agent", "--cluster", "c", "--repo", "file:///r"])).api_timeout == 12.5
    for bad in ("0", "-1", "inf", "nan"):
        with pytest.raises(SystemExit, match="--api-timeout"):
            build_config(parser.parse_args(["agent", "--cluster", "c", "--repo", "file:///r", "--api-timeout", bad]))
