"""The demo's children: stopped as whole groups; an agent that exits on its own is
started again, as kubelet restarts a crashed pod (demo/procs)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from qonnect_gitops.demo.procs import Processes


def wait_until(pred: object, timeout: float = 15.0) -> None:
    assert callable(pred)
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_child_that_exits_on_its_own_is_restarted_and_one_killed_is_not(tmp_path: Path) -> None:
    # Fails at its first start (a port taken, say), runs at the second.
    flag = tmp_path / "second-start"
    script = (f"import pathlib, sys, time\n"
              f"p = pathlib.Path({str(flag)!r})\n"
              f"if not p.exists():\n"
              f"    p.write_text('x'); print('OSError: [Errno 98] Address already in use', flush=True); sys.exit(1)\n"
              f"print('serving', flush=True); time.sleep(600)\n")
    procs = Processes(tmp_path)
    try:
        child = procs.start("agent-edge-1", [sys.executable, "-c", script], tmp_path / "agent-edge-1.log",
                            restart=True)
        wait_until(lambda: child.restarts == 1 and child.alive())
        log = (tmp_path / "agent-edge-1.log").read_text()
        assert "Address already in use" in log and "event=process_restarted process=agent-edge-1" in log
        assert "exited with code 1; restarting in 1s" in log and "restart 1" in log
        wait_until(lambda: "serving" in (tmp_path / "agent-edge-1.log").read_text())

        # Killed on purpose (a deprovisioned cluster): it stays down.
        procs.kill("agent-edge-1")
        time.sleep(1.5)
        assert not child.alive() and child.restarts == 1
        # Started again by its owner: supervised again.
        procs.restart("agent-edge-1")
        wait_until(child.alive)
    finally:
        procs.stop_all()
    assert not child.alive()


def test_a_child_without_the_policy_stays_down_and_stop_all_ends_the_restarts(tmp_path: Path) -> None:
    procs = Processes(tmp_path)
    try:
        lead = procs.start("lead-1", [sys.executable, "-c", "raise SystemExit(2)"], tmp_path / "lead-1.log")
        crashing = procs.start("agent-fog-1", [sys.executable, "-c", "raise SystemExit(3)"],
                               tmp_path / "agent-fog-1.log", restart=True)
        wait_until(lambda: crashing.restarts >= 2, timeout=20)  # after 1 s, then 2 s
        assert lead.proc is not None and lead.proc.poll() == 2 and lead.restarts == 0
        assert "restarting in 2s" in (tmp_path / "agent-fog-1.log").read_text()
    finally:
        procs.stop_all()
    restarts = crashing.restarts
    time.sleep(1.5)
    assert crashing.restarts == restarts and not crashing.alive()
