"""Issue 13's examples as a user meets them: ``python -m qonnect_gitops plan DIR
--observed OBS --current CUR`` on a copy of the repo template, in a real subprocess."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TEMPLATE = Path(__file__).resolve().parents[2] / "repo-template"
NOW = "2026-11-29T12:00:00Z"


def _qonnect(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "qonnect_gitops", *args], capture_output=True, text=True,
                          timeout=120, check=False, env={**os.environ, "PYTHONPATH": str(TEMPLATE.parent)})


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    target = tmp_path / "goals"
    shutil.copytree(TEMPLATE, target)
    return target


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, new))


def _plan(repo: Path, tmp: Path, observed: str, current: dict[str, object], fmt: str = "json") -> str:
    (tmp / "observed.yaml").write_text(observed)
    (tmp / "current.json").write_text(json.dumps(current))
    run = _qonnect("plan", str(repo), "--observed", str(tmp / "observed.yaml"), "--current", str(tmp / "current.json"),
                   "--format", fmt)
    assert run.returncode == 0, run.stderr
    return run.stdout


def test_raised_request_no_edge_node_holds_moves_ingest_in_that_cycle(repo: Path, tmp_path: Path) -> None:
    _edit(repo / "apps/sensor-pipeline/app.yaml", "    - name: ingest\n      manifests: [manifests/ingest.yaml]\n",
          "    - name: ingest\n      manifests: [manifests/ingest.yaml]\n      replicas: 3\n"
          "      resources: {cpu: \"4\", memory: 512Mi}\n")
    current = {"placements": {"sensor-pipeline/ingest": {"edge-1": 3}},
               "lastMoved": {"sensor-pipeline/ingest": "2026-11-29T11:59:30Z"}}
    out = json.loads(_plan(repo, tmp_path, f'now: "{NOW}"\n', current))
    ingest = out["placements"]["sensor-pipeline/ingest"]
    assert "edge-1" not in ingest and "edge-2" not in ingest  # 3.5-CPU boards hold no 4-CPU replica
    assert sum(ingest.values()) + sum(u["replicas"] for u in out["unplaced"]) == 3
    moves = [m for m in out["moves"] if m["component"] == "sensor-pipeline/ingest"]
    assert {m["from"] for m in moves} == {"edge-1"} and sum(m["replicas"] for m in moves) == 3
    assert all("no node of edge-1 holds one replica at 4 CPU" in m["detail"] for m in moves)
    table = _plan(repo, tmp_path, f'now: "{NOW}"\n', current, fmt="table")
    assert "kept" not in next(line for line in table.splitlines() if "sensor-pipeline/ingest" in line)


def test_failover_keeps_ratings_on_two_clusters(repo: Path, tmp_path: Path) -> None:
    current = {"placements": {"bookinfo/ratings": {"edge-1": 1, "edge-2": 1}},
               "lastMoved": {"bookinfo/ratings": "2026-11-29T11:59:30Z"}}
    out = json.loads(_plan(repo, tmp_path, f'now: "{NOW}"\nclusters:\n  edge-1: {{healthy: false}}\n', current))
    ratings = out["placements"]["bookinfo/ratings"]
    assert len(ratings) == 2 and "edge-1" not in ratings and out["reason"] == "failover"
    assert not [u for u in out["unmet"] if u["component"] == "bookinfo/ratings"]


def test_tightened_envelope_moves_at_once_and_an_impossible_one_is_unmet(repo: Path, tmp_path: Path) -> None:
    app = repo / "apps/bookinfo/app.yaml"
    _edit(app, "        tiers: [fog, cloud]               # the JVM is too heavy for the shop boards\n",
          "        tiers: [fog, cloud]               # the JVM is too heavy for the shop boards\n"
          "        latency:\n          - {region: eu-central, maxMs: 11}\n")
    current = {"placements": {"bookinfo/reviews-v1": {"fog-2": 1}},
               "lastMoved": {"bookinfo/reviews-v1": "2026-11-29T11:59:30Z"}}  # in the 120 s cooldown
    out = json.loads(_plan(repo, tmp_path, f'now: "{NOW}"\n', current))
    assert out["placements"]["bookinfo/reviews-v1"] == {"fog-1": 1}  # fog-2 is 12 ms away
    assert [m["reason"] for m in out["moves"] if m["component"] == "bookinfo/reviews-v1"] == ["goals-changed"]
    _edit(app, "maxMs: 11}", "maxMs: 2}")
    out = json.loads(_plan(repo, tmp_path, f'now: "{NOW}"\n', current))
    assert [(u["component"], u["goal"]) for u in out["unmet"]] == [("bookinfo/reviews-v1", "latency")]
    markdown = _plan(repo, tmp_path, f'now: "{NOW}"\n', current, fmt="markdown")
    assert "#### Unmet goals" in markdown and "| `bookinfo/reviews-v1` | latency |" in markdown


def test_json_round_trips_requests_and_draining_as_current(repo: Path, tmp_path: Path) -> None:
    _edit(repo / "apps/bookinfo/app.yaml", "        tiers: [fog, cloud]               # the JVM is too heavy for the shop boards\n",
          "        tiers: [fog, cloud]               # the JVM is too heavy for the shop boards\n"
          "        latency:\n          - {region: eu-central, maxMs: 2}\n")
    current = {"placements": {"bookinfo/reviews-v1": {"fog-2": 1}}}
    first = json.loads(_plan(repo, tmp_path, f'now: "{NOW}"\n', current))
    assert first["draining"] == {"bookinfo/reviews-v1": {"fog-2": 1}}  # nothing replaces it: it keeps running
    assert first["requests"]["bookinfo/reviews-v1"] == {"cpu": "250m", "memory": "384Mi", "architectures": ["amd64"]}
    second = json.loads(_plan(repo, tmp_path, f'now: "{NOW}"\n', first))
    assert second["draining"] == first["draining"] and second["moves"] == []


def test_a_drain_with_no_replacement_survives_every_later_cycle(repo: Path, tmp_path: Path) -> None:
    # Issue 32, through `qonnect plan --current PREV` as its review ran it: reviews-v1
    # (on fog-1, amd64 only) becomes arm64-only and no arm64 node of its tier has room
    # (fog-2's are full). Cycle 2 kept its replica draining; cycle 3, nothing changed, had
    # no placement, no drain, no move, and the architecture goal was no longer listed.
    _edit(repo / "apps/bookinfo/app.yaml",
          "    - name: reviews-v1\n      manifests: [manifests/reviews-v1.yaml]\n      qos:\n        tiers: [fog, cloud]",
          "    - name: reviews-v1\n      manifests: [manifests/reviews-v1.yaml]\n      architectures: [arm64]\n"
          "      qos:\n        tiers: [fog]")
    full = "".join(f"      - {{name: {name}, arch: arm64, allocatable: {{cpu: '16', memory: 64Gi}}, "
                   "free: {cpu: '0', memory: '0'}}\n" for name in ("a1", "a2"))
    observed = "clusters:\n  fog-2:\n    nodes:\n" + full
    previous: dict[str, object] = {"placements": {"bookinfo/reviews-v1": {"fog-1": 1}},
                                   "lastMoved": {"bookinfo/reviews-v1": "2026-11-29T11:59:30Z"}}
    for second in range(10, 40, 10):
        out = json.loads(_plan(repo, tmp_path, f'now: "2026-11-29T12:00:{second}Z"\n{observed}', previous))
        assert out["placements"]["bookinfo/reviews-v1"] == {}
        assert out["draining"]["bookinfo/reviews-v1"] == {"fog-1": 1}
        goals = {u["goal"] for u in out["unmet"] if u["component"] == "bookinfo/reviews-v1"}
        assert "architecture" in goals, out["unmet"]
        assert not [m for m in out["moves"] if m["component"] == "bookinfo/reviews-v1"]
        previous = out
