"""The forge settings a command line reads before anything else (light: no model, no
pydantic), so `qonnect lead --help` can show their defaults."""

from __future__ import annotations

from dataclasses import dataclass

FORGES_ENV = "QONNECT_FORGES"
"""The environment variable naming the lead's forges file (``--forges``)."""


@dataclass(frozen=True)
class SandboxLimits:
    """What one preview may take (``qonnect lead --preview-cpu-seconds`` and friends). The
    defaults hold a preview of a 10,000-cluster fleet (two cold loads and two plans) with room."""

    cpu_seconds: int = 300
    memory_mib: int = 4096
    timeout_seconds: float = 900.0
