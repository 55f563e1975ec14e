"""Render a kustomization with the real kubectl (the venv's, else the one on PATH)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml


def kubectl() -> str:
    """The kubectl next to the running Python, else the one on PATH."""
    beside = Path(sys.executable).parent / "kubectl"
    if beside.exists():
        return str(beside)
    found = shutil.which("kubectl")
    if found is None:
        raise FileNotFoundError("kubectl")
    return found


def kustomize(path: Path) -> list[dict[str, Any]]:
    """Every object `kubectl kustomize <path>` prints, in its order."""
    out = subprocess.run([kubectl(), "kustomize", str(path)], check=True,
                         capture_output=True, text=True, timeout=60).stdout
    return [d for d in yaml.safe_load_all(out) if d]
