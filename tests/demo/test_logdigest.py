"""The digest of what the stack's processes logged while a scenario ran (demo/logdigest)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from qonnect_gitops.demo import logdigest
from qonnect_gitops.logs import KeyValueFormatter


def kv(level: int, event: str, **fields: object) -> str:
    record = logging.LogRecord("qonnect_gitops.x", level, __file__, 1, event, None, None)
    record.fields = fields  # type: ignore[attr-defined]
    return KeyValueFormatter().format(record) + "\n"


def test_only_what_was_logged_after_the_mark_is_digested_most_severe_and_busiest_first(tmp_path: Path) -> None:
    lead = tmp_path / "lead-1.log"
    agent = tmp_path / "agent-edge-1.log"
    lead.write_text(kv(logging.ERROR, "cycle_failed", error="before the mark"))
    agent.write_text(kv(logging.INFO, "applied"))
    at = logdigest.mark(tmp_path)
    assert at == {"lead-1": lead.stat().st_size, "agent-edge-1": agent.stat().st_size}

    with open(agent, "a") as fh:
        fh.write(kv(logging.WARNING, "report_failed", error="http://127.0.0.1:1: 503 no leader"))
        fh.write(kv(logging.WARNING, "report_failed", error="again"))
        fh.write(kv(logging.INFO, "applied"))
    with open(lead, "a") as fh:
        fh.write(kv(logging.WARNING, "report_failed", error="the lead's own"))
        fh.write("Traceback (most recent call last):\n  File \"x.py\", line 1\nValueError: boom\n")
        fh.write(kv(logging.CRITICAL, "truncating already-applied log entries"))
    (tmp_path / "sim.log").write_text(kv(logging.ERROR, "sim_failed", why="new since the mark: read whole"))

    groups = logdigest.digest(tmp_path, at)
    assert [(g.level, g.event, g.count, sorted(g.processes)) for g in groups] == [
        ("critical", "truncating already-applied log entries", 1, ["lead-1"]),
        ("error", "sim_failed", 1, ["sim"]),
        ("traceback", "traceback", 1, ["lead-1"]),
        ("warning", "report_failed", 3, ["agent-edge-1", "lead-1"]),
    ]
    assert "before the mark" not in " ".join(g.sample for g in groups)
    lines = logdigest.render(groups, limit=2)
    assert lines[0].startswith("1 x critical truncating already-applied log entries (lead-1): ts=")
    assert lines[-1] == "... and 2 other events"


def test_a_quiet_run_says_so_and_a_log_rewritten_since_the_mark_is_read_whole(tmp_path: Path) -> None:
    log = tmp_path / "lead-2.log"
    log.write_text(kv(logging.INFO, "cycle_done") * 20)
    at = logdigest.mark(tmp_path)
    assert logdigest.render(logdigest.digest(tmp_path, at)) == [
        "the processes logged no warning, error or traceback while it ran"]
    log.write_text(kv(logging.ERROR, "lead_failed"))  # shorter than the mark: a new file
    assert [g.event for g in logdigest.digest(tmp_path, at)] == ["lead_failed"]


def test_a_huge_log_is_read_from_its_newest_part_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(logdigest, "READ_LIMIT_BYTES", 500)  # about five of the lines
    log = tmp_path / "agent-fog-1.log"
    log.write_text("")
    at = logdigest.mark(tmp_path)
    with open(log, "a") as fh:
        for i in range(100):
            fh.write(kv(logging.WARNING, "old_warning" if i < 90 else "new_warning", i=i))
    groups = logdigest.digest(tmp_path, at)
    assert {g.event for g in groups} == {"new_warning"}
    assert 3 <= groups[0].count < 10
    assert all(g.sample.startswith("ts=") for g in groups)  # no line cut in the middle
