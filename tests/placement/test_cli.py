"""``qonnect plan`` end to end on the repo template, and its refusal of bad inputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qonnect_gitops.cli import main

TEMPLATE = str(Path(__file__).resolve().parents[2] / "repo-template")
OBSERVED = """\
clusters:
  edge-1: {healthy: false}
  fog-2: {free: {cpu: "1500m", memory: 2Gi}, heartbeatAgeSeconds: 3}
latencies:
  - {from: edge-2, to: eu-central, ms: 40}
traffic:
  - {component: bookinfo/productpage, region: eu-central, rps: 300}
now: "2026-11-29T12:00:00Z"
"""


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["plan", TEMPLATE, *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_json_is_byte_identical_and_round_trips_as_current(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    obs = tmp_path / "observed.yaml"
    obs.write_text(OBSERVED)
    code, first, _ = _run(capsys, "--observed", str(obs), "--format", "json")
    assert code == 0
    code, second, _ = _run(capsys, "--observed", str(obs), "--format", "json")
    assert first == second
    data = json.loads(first)
    assert set(data) >= {"placements", "unplaced", "moves"}
    assert "edge-1" not in json.dumps(data["placements"])  # unhealthy
    assert all("reason" in m and "from" in m and "to" in m for m in data["moves"])
    cur = tmp_path / "current.json"
    cur.write_text(first)
    code, again, _ = _run(capsys, "--observed", str(obs), "--current", str(cur), "--format", "json")
    assert code == 0
    assert json.loads(again)["placements"] == data["placements"]  # stable: nothing moves
    assert json.loads(again)["moves"] == []


def test_markdown_and_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    obs = tmp_path / "observed.yaml"
    obs.write_text(OBSERVED)
    code, md, _ = _run(capsys, "--observed", str(obs), "--format", "markdown")
    assert code == 0 and "| Component | Cluster | Replicas | Score | Why |" in md and "`bookinfo/productpage`" in md
    code, table, _ = _run(capsys, "--observed", str(obs))
    assert code == 0 and table.startswith("decision: ") and "bookinfo/ratings" in table


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('now: "2026-11-29T12:00:00Z"\nclusters:\n  nope: {healthy: false}\n', "observed.yaml:3:3: clusters.nope: unknown cluster 'nope'"),
        ('now: "2026-11-29T12:00:00Z"\nclusters:\n  edge-1: {healthy: [\n', "observed.yaml:"),
        ('now: "2026-11-29T12:00:00Z"\nclusters:\n  edge-1: {helthy: false}\n', "observed.yaml:3:12: clusters.edge-1.helthy: unknown field 'helthy'"),
        ('now: "2026-11-29T12:00:00Z"\ntraffic:\n  - {component: bookinfo/nope, region: eu-central, rps: 3}\n', "observed.yaml:3:17: traffic[0].component: unknown component 'bookinfo/nope'"),
        ('now: yesterday\n', "observed.yaml:1:6: now:"),
    ],
)
def test_bad_observed_file(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, expected: str) -> None:
    obs = tmp_path / "observed.yaml"
    obs.write_text(text)
    code, out, err = _run(capsys, "--observed", str(obs))
    assert code == 1 and out == ""
    assert expected in err, err


def test_bad_current_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cur = tmp_path / "current.json"
    cur.write_text('{"placements": {"bookinfo/details": {"edge-1": -1}}}')
    code, _, err = _run(capsys, "--current", str(cur))
    assert code == 1 and "current.json:1:" in err and "greater than or equal to 0" in err, err


def test_a_cluster_removed_from_the_goals_fails_over(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Issue 32: a plan in force that names a cluster since removed from the goals was
    # refused ("unknown cluster", exit 1); docs/placement.md says its replicas fail over.
    obs = tmp_path / "observed.yaml"
    obs.write_text('now: "2026-11-29T12:00:00Z"\n')
    cur = tmp_path / "current.json"
    cur.write_text('{"placements": {"bookinfo/details": {"mars-1": 1}},\n'
                   ' "draining": {"bookinfo/ratings": {"mars-1": 1}}}\n')
    code, out, err = _run(capsys, "--observed", str(obs), "--current", str(cur), "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    assert sum(data["placements"]["bookinfo/details"].values()) == 1 and "mars-1" not in data["placements"]["bookinfo/details"]
    moves = [m for m in data["moves"] if m["component"] == "bookinfo/details"]
    assert [(m["from"], m["replicas"], m["goal"]) for m in moves] == [("mars-1", 1, "health")]
    assert "mars-1 is no longer declared" in moves[0]["detail"]


@pytest.mark.parametrize(
    ("current", "observed", "expected"),
    [
        # A far-future clock crashed the second cycle (a cooldown past the year 9999).
        ("{}", 'now: "9999-12-31T23:59:59Z"\n', "observed.yaml:1:6: now: 9999-12-31T23:59:59+00:00 is out of range"),
        ('{"lastMoved": {"bookinfo/details": "9999-06-01T00:00:00Z"}}', 'now: "2026-11-29T12:00:00Z"\n',
         "current.json:1:36: lastMoved.bookinfo/details: 9999-06-01T00:00:00+00:00 is out of range"),
        # A replica count past what the goals allow made a plan take time linear in it.
        ('{"placements": {"bookinfo/details": {"edge-1": 10000000000}}}', 'now: "2026-11-29T12:00:00Z"\n',
         "current.json:1:48: placements.bookinfo/details.edge-1: got 10000000000; expected less than or equal to 100000"),
        ('{"placements": {"bookinfo/details": {"edge-1": 60000, "edge-2": 60000}}}', 'now: "2026-11-29T12:00:00Z"\n',
         "current.json:1:37: placements.bookinfo/details: 120,000 replicas in all; expected at most 100,000"),
        # A measured latency past the ten minutes goals allow.
        ("{}", 'now: "2026-11-29T12:00:00Z"\nlatencies:\n  - {from: edge-1, to: eu-central, ms: 1e308}\n',
         "observed.yaml:3:40: latencies[0].ms: got 1e+308; expected less than or equal to 600000"),
    ],
    ids=["far-future-now", "far-future-last-moved", "replica-count", "component-total", "latency"],
)
def test_timestamps_counts_and_latencies_are_bounded_like_the_goals(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], current: str, observed: str, expected: str) -> None:
    (tmp_path / "current.json").write_text(current)
    (tmp_path / "observed.yaml").write_text(observed)
    code, out, err = _run(capsys, "--observed", str(tmp_path / "observed.yaml"),
                          "--current", str(tmp_path / "current.json"))
    assert code == 1 and out == "" and "Traceback" not in err
    assert expected in err, err
