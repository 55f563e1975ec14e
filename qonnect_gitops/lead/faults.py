"""Test-only fault injection at named points of a write (never armed in production).

A lead started with ``QONNECT_FAULT_FILE=<path>`` checks that file at each named
point. If it holds ``<point>`` the fault fires once: the file is renamed to
``<path>.hit`` (so a restarted lead does not fire it again) and the process stops
there, sleeping until the test kills it with SIGKILL. The crash-recovery tests use
it to kill a leader between its local plan commit and the push, and between the
plan push and the fan-out push. Without the variable every point is a no-op.

``<point> wait <release-file> unfenced`` instead stalls until the release file
exists and then tells the caller to skip its last leadership check: it models a
leader deposed in the instant between that check and its push (a window no check
can close), so the partition test can show the Git server refusing that push.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from qonnect_gitops.logs import get_logger

log = get_logger(__name__)

ENV = "QONNECT_FAULT_FILE"
POINTS = ("before-publish", "between-pushes")


def _armed_at(name: str) -> tuple[Path, list[str]] | None:
    """The armed fault file and its words when it names this point, else None."""
    path = os.environ.get(ENV)
    if not path:
        return None
    try:
        words = Path(path).read_text().split()
    except FileNotFoundError:
        return None
    return (Path(path), words) if words and words[0] == name else None


def armed(name: str) -> bool:
    """Whether the armed fault names this point (it has not fired yet). A lead publishes a
    decision in two pushes while ``between-pushes`` is armed, so the point exists."""
    return _armed_at(name) is not None


def fault_point(name: str) -> bool:
    """Stop here if the armed fault names this point (see the module docstring).

    Returns True only for an ``unfenced`` fault once released: skip the last fence."""
    found = _armed_at(name)
    if found is None:
        return False
    armed_file, words = found
    hit = armed_file.with_name(armed_file.name + ".hit")
    try:
        armed_file.rename(hit)  # atomic: exactly one process fires it
    except FileNotFoundError:
        return False
    hit.write_text(f"{name} {os.getpid()}\n")  # tells the test which process to kill
    log.warning("fault_point_reached", point=name, pid=os.getpid())
    if len(words) >= 3 and words[1] == "wait":
        release = Path(words[2])
        while not release.exists():
            time.sleep(0.02)
        log.warning("fault_point_released", point=name, unfenced="unfenced" in words)
        return "unfenced" in words
    while True:  # wait for SIGKILL; nothing after this point may run
        time.sleep(3600)
