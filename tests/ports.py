"""Ports for the processes a test starts, that no other test on this machine is given.

``gitstore.daemon.free_ports`` finds ports the OS has free now, but a port is only used
once the child process binds it, and in between a concurrent test run (two pytest runs,
or xdist workers) can be handed the same one. Each port here is also claimed with an
exclusive lock on a file named after it, held until this test process exits, so no two
test processes (and no two tests of one process) get the same port.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from pathlib import Path

from qonnect_gitops.gitstore.daemon import free_ports as os_free_ports

CLAIMS = Path(tempfile.gettempdir()) / "qonnect-test-ports"
_held: list[int] = []  # open descriptors of the claimed ports' lock files; closed at exit


def _claim(port: int) -> bool:
    CLAIMS.mkdir(exist_ok=True)
    fd = os.open(CLAIMS / str(port), os.O_CREAT | os.O_RDWR, 0o600)
    try:
        # flock locks belong to the open file, so a second claim from this process fails too.
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return False
    _held.append(fd)
    return True


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports free now and claimed for this test process alone."""
    ports: list[int] = []
    while len(ports) < count:
        ports += [p for p in os_free_ports(count - len(ports), host) if p not in ports and _claim(p)]
    return ports
