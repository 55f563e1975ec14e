"""tests/ports.py: a port claimed by one test process is not handed to another."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT
from tests.ports import _claim, free_ports


@pytest.mark.slow
def test_a_port_claimed_by_another_test_process_is_not_handed_out() -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from tests.ports import free_ports; "
         "print(free_ports(1)[0], flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    try:
        assert holder.stdout is not None and holder.stdin is not None
        port = int(holder.stdout.readline())
        assert not _claim(port)
        assert port not in free_ports(50)
    finally:
        if holder.stdin:
            holder.stdin.close()
        holder.wait(timeout=30)
    assert _claim(port)  # the claim ends with the process that held it


def test_ports_of_one_process_are_distinct_across_calls() -> None:
    first, second = free_ports(5), free_ports(5)
    assert len(set(first) | set(second)) == 10
