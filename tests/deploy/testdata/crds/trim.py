"""Trim the upstream CRDs to what qonnect's Flux and Argo CD manifests and the observer use.

    python tests/deploy/testdata/crds/trim.py UPSTREAM.yaml > NAME.yaml

Keeps the served version named below, drops every ``description`` (documentation, not
validation), and, for the two large Argo CD schemas, the subtrees named in ``DROP``
(fields qonnect neither writes nor reads). Every kept field keeps its upstream schema
unchanged, so an object using only kept fields validates exactly as upstream; a field that
was dropped is an unknown field, which a strict apply refuses. See README.md for sources.
"""

from __future__ import annotations

import sys
from typing import Any

import yaml

VERSION = {"gitrepositories.source.toolkit.fluxcd.io": "v1",
           "kustomizations.kustomize.toolkit.fluxcd.io": "v1",
           "applications.argoproj.io": "v1alpha1",
           "applicationsets.argoproj.io": "v1alpha1"}
# Paths of properties under openAPIV3Schema.properties, dot-separated; "*" is "items".
DROP = {
    "applications.argoproj.io": [
        "operation", "status.sourceHydrator", "status.resources", "status.summary",
        "status.observedAt", "status.resourceHealthSource", "status.controllerNamespace",
        "status.sourceType", "status.sourceTypes", "spec.sources", "spec.sourceHydrator",
        "status.history.*.sources", "status.operationState.operation.sync.sources",
        "status.operationState.syncResult.sources",
        "status.sync.comparedTo.sources",
    ],
    "applicationsets.argoproj.io": [
        "status", *(f"spec.generators.*.{g}" for g in (
            "clusterDecisionResource", "clusters", "list", "matrix", "merge", "plugin", "pullRequest",
            "scmProvider", "selector")),
        "spec.generators.*.git.template", "spec.template.spec.sources", "spec.template.spec.sourceHydrator",
    ],
}


def _strip(node: Any, in_properties: bool = False) -> Any:
    """``node`` without ``description`` keywords (a property of that name stays)."""
    if isinstance(node, dict):
        return {k: _strip(v, k == "properties" and not in_properties)
                for k, v in node.items() if in_properties or k != "description"}
    if isinstance(node, list):
        return [_strip(v) for v in node]
    return node


def _drop(schema: dict[str, Any], path: str) -> None:
    node = schema
    *parents, last = path.split(".")
    for part in parents:
        node = node["items"] if part == "*" else node["properties"][part]
    if last in node.get("required", ()):  # an object Argo CD writes could not validate any more
        raise ValueError(f"{path} is required: it cannot be dropped")
    del node["properties"][last]


def trim(crd: dict[str, Any]) -> dict[str, Any]:
    name = crd["metadata"]["name"]
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == VERSION[name]]
    schema = version["schema"]["openAPIV3Schema"]
    for path in DROP.get(name, []):
        _drop(schema, path)
    spec = {k: v for k, v in crd["spec"].items() if k != "versions"}
    return {"apiVersion": crd["apiVersion"], "kind": crd["kind"], "metadata": {"name": name},
            "spec": {**spec, "versions": [_strip(version)]}}


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as fh:
        docs = [d for d in yaml.safe_load_all(fh) if d]
    yaml.safe_dump_all([trim(d) for d in docs], sys.stdout, sort_keys=False, width=120)
