"""Render a kustomization with the real kubectl (the venv's, else the one on PATH)."""

from __future__ import annotations

import os
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


def overlay(directory: Path, base: Path, components: tuple[str, ...] = (), **fields: Any) -> list[dict[str, Any]]:
    """Render an overlay written in ``directory``: ``base`` (a kustomization directory) with
    ``components`` (paths relative to ``base``) and more kustomization ``fields``, as a
    user's own overlay would (kustomize takes relative paths only)."""
    rel = Path(os.path.relpath(base, directory))
    doc = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
           "resources": [str(rel)], **fields}
    if components:
        doc["components"] = [str(rel / c) for c in components]
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "kustomization.yaml").write_text(yaml.safe_dump(doc))
    return kustomize(directory)
