"""Operating-system names for the lead's threads."""

from __future__ import annotations

import ctypes
import sys

_PR_SET_NAME = 15


def name_os_thread(name: str) -> None:
    """Give the calling thread ``name`` (15 bytes at most) in the operating system, so
    ``top -H`` and ``/proc/<pid>/task/<tid>/comm`` tell the Raft, HTTP and batcher
    threads apart (how ``benchmarks/lead.py`` splits a lead's CPU). Linux only;
    elsewhere, or if the call fails, nothing happens."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_NAME, name.encode("ascii", "replace")[:15], 0, 0, 0)
    except (OSError, AttributeError):
        pass
