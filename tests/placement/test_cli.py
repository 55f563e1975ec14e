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
    cur.write_text('{\n  "placements": {\n    "bookinfo/details": {"mars-1": 1}\n  }\n}\n')
    code, _, err = _run(capsys, "--current", str(cur))
    assert code == 1 and "current.json:3:26: placements.bookinfo/details.mars-1: unknown cluster 'mars-1'" in err, err
    cur.write_text('{"placements": {"bookinfo/details": {"edge-1": -1}}}')
    code, _, err = _run(capsys, "--current", str(cur))
    assert code == 1 and "current.json:1:" in err and "greater than or equal to 0" in err, err
