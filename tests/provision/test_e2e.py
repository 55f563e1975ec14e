"""Cloud bursting end to end: git daemon, three leads, the simulated fleet with its Cluster
API provider, agents as processes. The first provisioning fails (reported with its reason,
retried after the back-off), the leader is killed while the retry provisions (the new
leader neither provisions twice nor loses the cluster), the overflow runs on the new
cluster, and once the burst ends and the linger passes the cluster is removed."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from qonnect_gitops.cli.status import render as render_status
from qonnect_gitops.demo import cloudburst
from qonnect_gitops.demo.stack import Settings, Stack
from tests.conftest import TEMPLATE
from tests.load import scaled
from tests.provision.fleet import APP, CLUSTER, DEPLOYMENT, POOL

LINGER = 5.0


def template(root: Path) -> Path:
    out = root / "template"
    (out / "clusters").mkdir(parents=True)
    (out / "apps" / "shop" / "manifests").mkdir(parents=True)
    (out / "clusterPools").mkdir()
    shutil.copy(TEMPLATE / "qonnect.yaml", out / "qonnect.yaml")
    (out / "clusters" / "cloud-1.yaml").write_bytes(CLUSTER.replace(b"NODES", b"2"))
    (out / "apps" / "shop" / "app.yaml").write_bytes(APP.replace(b"REPLICAS", b"4"))
    (out / "apps" / "shop" / "manifests" / "api.yaml").write_bytes(DEPLOYMENT)
    (out / "clusterPools" / "burst.yaml").write_bytes(
        POOL.replace(b"scaleUp: {unplacedSeconds: 5}", b"scaleUp: {unplacedSeconds: 2}")
        .replace(b"lingerSeconds: 20", f"lingerSeconds: {LINGER:g}\n  retrySeconds: 2".encode()))
    return out


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    root = tmp_path / "run"
    root.mkdir()
    s = Stack(root, Settings(startup_delay=0.5, poll_seconds=5.0, agent_interval=3.0),
              template=template(tmp_path), sim_args=["--capi", "--capi-delay", "4", "--capi-fail", "1"])
    try:
        s.start(on_step=print)
        yield s
    finally:
        s.stop()


def test_cloud_burst_with_a_failure_and_a_leader_killed_mid_provisioning(stack: Stack) -> None:
    burst = cloudburst.Burst(path="apps/shop/app.yaml", small="replicas: 4", large="replicas: 12",
                             component="shop/api", linger=LINGER, kill_leader_while_provisioning=True,
                             failures_expected=1, timeout=scaled(120.0))
    out = cloudburst.run(stack, burst)
    print("figures:", out.phases, "cluster:", out.cluster, "seen:", out.clusters_seen)
    assert out.problems == []
    # The failure was detected from the Cluster's phase and reported with its reason.
    assert out.failures == 1 and "Cluster API reports phase Failed" in out.failure_reason
    assert "pool burst failed" in out.unplaced_reason
    # Retried under a new name, once: the new leader did not provision a second cluster.
    assert out.killed is not None
    assert out.clusters_seen == ["burst-1", "burst-2"] and out.cluster == "burst-2"
    assert out.most_at_once == 1
    # /v1/status, and qonnect status printing it, showed it as a joined pool cluster.
    assert out.status is not None
    row = next(r for r in out.status["clusters"] if r["name"] == "burst-2")
    assert row["dynamic"]["phase"] == "joined" and row["dynamic"]["pool"] == "burst" and row["reported"]
    text = render_status(out.status)
    assert "POOL CLUSTERS" in text and "burst-2" in text
    # Its agent reported with the token the leader issued: the tokens file never had one.
    assert "burst-2" not in stack.tokens_file.read_text()
    removed = out.phases["removedSeconds"]
    assert removed is not None and removed >= LINGER
