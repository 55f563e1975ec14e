"""Render deploy/helm/qonnect-gitops with Helm's own engine, and compare object lists.

No package of Debian or PyPI ships the ``helm`` command for Linux, so the chart is rendered
by ``helm-python-sdk``: Helm's official Go SDK (v4: its engine, values coalescing, JSON
schema validation and lint) compiled into a library, called in-process. It renders what
``helm template`` renders: the same engine, functions and values, minus the command line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT

CHART = ROOT / "deploy" / "helm" / "qonnect-gitops"
NAMESPACE = "qonnect-system"

Key = tuple[str, str, str | None, str]


def sdk() -> Any:
    """The helm_python module, or skip (the `test` extra installs it where a wheel exists)."""
    return pytest.importorskip("helm_python", reason="helm-python-sdk (Helm's engine) is not installed")


def render(values: dict[str, Any] | None = None, namespace: str = NAMESPACE,
           chart: Path = CHART) -> list[dict[str, Any]]:
    """Every object the chart renders for ``values`` in ``namespace``, as `helm template` would."""
    helm = sdk()
    with helm.Chart.load(str(chart)) as loaded:
        manifests = loaded.render(values, name="qonnect", namespace=namespace, is_install=True)
    objects: list[dict[str, Any]] = []
    for path in sorted(manifests):
        if path.endswith(".yaml"):
            objects += [d for d in yaml.safe_load_all(manifests[path]) if d]
    return objects


def key(obj: dict[str, Any]) -> Key:
    meta = obj["metadata"]
    return obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"]


def by_key(objects: list[dict[str, Any]]) -> dict[Key, dict[str, Any]]:
    keyed = {key(o): o for o in objects}
    assert len(keyed) == len(objects), "two objects of the same kind and name"
    return keyed


def differences(a: Any, b: Any, path: str = "") -> list[str]:
    """Where ``a`` and ``b`` differ, as readable paths (empty: equal)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{path}/{k}: only in {'the first' if k in a else 'the second'}"
               for k in sorted(set(a) ^ set(b), key=str)]
        for k in sorted(set(a) & set(b), key=str):
            out += differences(a[k], b[k], f"{path}/{k}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in differences(x, y, f"{path}[{i}]")]
    return [] if a == b and type(a) is type(b) else [f"{path}: {a!r} != {b!r}"]


def compare(first: list[dict[str, Any]], second: list[dict[str, Any]]) -> list[str]:
    """Every difference between two renderings: objects missing on either side, fields."""
    one, two = by_key(first), by_key(second)
    out = [f"{k}: only in the first" for k in sorted(set(one) - set(two), key=str)]
    out += [f"{k}: only in the second" for k in sorted(set(two) - set(one), key=str)]
    for k in sorted(set(one) & set(two), key=str):
        out += [f"{k[1]}/{k[3]}{d}" for d in differences(one[k], two[k])]
    return out
