"""The scope of every Kubernetes 1.37 kind as the official client (generated from the 1.37
OpenAPI paths) knows it: the reference ``model/kube_scopes.py`` is checked against."""

from __future__ import annotations

import json
import re
from importlib import util as importlib_util
from pathlib import Path

import kubernetes.client.api as client_api


def schema_kinds() -> set[tuple[str, str, str]]:
    """(group, version, kind) of every object kind in the 1.37 schemas (lists excluded)."""
    spec = importlib_util.find_spec("kubernetes_validate")
    assert spec is not None and spec.origin is not None
    path = Path(spec.origin).parent / "kubernetes-json-schema" / "v1.37.0-local-strict" / "_definitions.json"
    defs = json.loads(path.read_text())["$defs"]
    out = set()
    for node in defs.values():
        for gvk in node.get("x-kubernetes-group-version-kind", []):
            if "metadata" in (node.get("properties") or {}) and not gvk["kind"].endswith("List"):
                out.add((gvk["group"], gvk["version"], gvk["kind"]))
    return out


def _snake(kind: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", kind)).lower()


def official_scopes() -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """(cluster-scoped, not stored) (group, kind) pairs, read from the client's API methods:
    ``read_namespaced_<kind>`` exists for namespaced kinds, ``read_<kind>`` for cluster-scoped
    ones, and neither for kinds that are only ever posted (reviews, token requests)."""
    source = "".join(p.read_text() for p in Path(client_api.__file__).parent.glob("*_api.py"))
    cluster, virtual = set(), set()
    for group, _version, kind in schema_kinds():
        name = _snake(kind)
        if f"def read_namespaced_{name}(" in source:
            continue
        if f"def read_{name}(" in source:
            cluster.add((group, kind))
        else:
            virtual.add((group, kind))
    return cluster, virtual
