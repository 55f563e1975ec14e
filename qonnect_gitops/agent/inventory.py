"""The inventory: every object the agent applied, kept in the cluster itself.

A ConfigMap ``qonnect-inventory`` in the agent's namespace holds JSON with the last
fully applied commit, its plan generation and term, and the list of objects
(group, version, kind, namespace, name). It survives agent restarts and
reschedules, so a restarted agent still refuses a generation regression and still
knows what it may prune.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from qonnect_gitops.agent.config import INVENTORY_NAME
from qonnect_gitops.agent.kube import Kube, split_api_version
from qonnect_gitops.model.labels import (
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    NAME_LABEL,
    PART_OF_LABEL,
)

ObjKey = tuple[str, str, str, str, str]
"""(group, version, kind, namespace, name); namespace is "" for cluster-scoped objects."""


def key_of(obj: dict[str, Any]) -> ObjKey:
    group, version = split_api_version(obj["apiVersion"])
    meta = obj.get("metadata") or {}
    return (group, version, obj["kind"], meta.get("namespace") or "", meta["name"])


def identity(key: ObjKey) -> tuple[str, str, str, str]:
    """The key without version: the same object served under another version is the same object."""
    return (key[0], key[2], key[3], key[4])


def describe(key: ObjKey) -> str:
    group, _, kind, ns, name = key
    kind_part = f"{kind}.{group}" if group else kind
    return f"{kind_part}/{ns}/{name}" if ns else f"{kind_part}/{name}"


@dataclass
class Inventory:
    commit: str | None = None
    generation: int | None = None
    term: int | None = None
    objects: set[ObjKey] = field(default_factory=set)

    def to_json(self) -> str:
        return json.dumps({
            "commit": self.commit, "generation": self.generation, "term": self.term,
            "objects": [list(k) for k in sorted(self.objects)],
        }, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Inventory:
        doc = json.loads(text)
        return cls(doc.get("commit"), doc.get("generation"), doc.get("term"),
                   {tuple(k) for k in doc.get("objects", [])})  # type: ignore[misc]


class InventoryStore:
    """Reads and writes the inventory ConfigMap (server-side apply, our field manager)."""

    def __init__(self, kube: Kube, namespace: str) -> None:
        self.kube = kube
        self.namespace = namespace

    def load(self) -> Inventory:
        res = self.kube.resource("v1", "ConfigMap")
        live = self.kube.get(res, self.namespace, INVENTORY_NAME)
        if live is None:
            return Inventory()
        text = (live.get("data") or {}).get("inventory")
        if not text:
            return Inventory()
        return Inventory.from_json(text)

    def ensure_namespace(self) -> None:
        res = self.kube.resource("v1", "Namespace")
        if self.kube.get(res, None, self.namespace) is None:
            self.kube.apply(res, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.namespace}},
                            manager="qonnect-agent-inventory")

    def save(self, inv: Inventory) -> None:
        self.ensure_namespace()
        res = self.kube.resource("v1", "ConfigMap")
        # The inventory itself carries no ownership label: it is never a prune candidate.
        self.kube.apply(res, {
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": INVENTORY_NAME, "namespace": self.namespace,
                         "labels": {NAME_LABEL: "qonnect-agent", PART_OF_LABEL: MANAGED_BY_VALUE}},
            "data": {"inventory": inv.to_json()},
        }, manager="qonnect-agent-inventory")


def in_namespaces(key: ObjKey, namespaces: frozenset[str]) -> bool:
    """Whether the object lives in one of ``namespaces``, or is the Namespace of one."""
    group, _, kind, ns, name = key
    return ns in namespaces or ((group, kind) == ("", "Namespace") and name in namespaces)


def owned(live: dict[str, Any]) -> bool:
    """Carries our ownership label."""
    return ((live.get("metadata") or {}).get("labels") or {}).get(MANAGED_BY_LABEL) == MANAGED_BY_VALUE


def field_managers(live: dict[str, Any], path: tuple[str, ...] = ()) -> set[str]:
    """The field managers of a live object (``metadata.managedFields``); with ``path``, only
    those owning that field (e.g. ``("metadata", "annotations", "qonnect.io/prune")``)."""
    out = set()
    for entry in (live.get("metadata") or {}).get("managedFields") or []:
        if not isinstance(entry, dict):
            continue
        node: Any = entry.get("fieldsV1") or {}
        for part in path:
            node = node.get(f"f:{part}") if isinstance(node, dict) else None
        if node is not None:
            out.add(str(entry.get("manager", "")))
    return out
