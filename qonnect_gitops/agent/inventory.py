"""The inventory: every object the agent applied, kept in the cluster itself, and the
journal of the pass in progress.

A ConfigMap ``qonnect-inventory`` in the agent's namespace holds JSON with the last
fully applied commit, its plan generation and term, and the list of objects
(group, version, kind, namespace, name) the agent may have created and not deleted
yet. It survives agent restarts and reschedules, so a restarted agent still refuses a
generation regression and still knows what it may prune.

The list is split three ways, so that a pass killed at any point (``kill -9``) leaves a
record the next pass can finish or undo without taking the leftovers for removals the
leader never ordered (issue 30, 3):

* *settled*: the objects of the applied commit (``commit``);
* *leaving*: removals an applied commit already ordered and that are not done yet (a
  pass interrupted mid-prune, a protected kind waiting for a person, a failed delete);
* *arriving*: objects an unfinished pass recorded before creating them, which the
  applied commit does not hold.

``pass`` names that unfinished pass: the commit it applies, its generation and term, and
its phase (``apply``: objects of the commit may exist in part; ``prune``: the commit is
applied and its removals, listed as leaving, are running). The prune guard counts only
settled objects, so what a pass left behind is never counted against the next commit's
``Qonnect-Prune-Limit``.

In JSON, ``objects`` is the whole list (settled, leaving and arriving, sorted) and
``leaving``/``arriving`` are positions in it: an agent of an earlier version still reads
every object it may prune, and a journal costs a few bytes per object.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from qonnect_gitops.agent.config import INVENTORY_NAME
from qonnect_gitops.agent.kube import Kube, split_api_version
from qonnect_gitops.model.labels import (
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    NAME_LABEL,
    PART_OF_LABEL,
)
from qonnect_gitops.model.limits import RBAC_GROUP, RBAC_KINDS, system_rbac_name
from qonnect_gitops.model.report import MAX_GENERATION

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


class PassPhase(StrEnum):
    """Where an unfinished pass was (see the module docstring)."""

    APPLY = "apply"
    PRUNE = "prune"


@dataclass(frozen=True)
class PassRecord:
    """The pass in progress, recorded before it changes the cluster."""

    commit: str
    generation: int | None
    term: int | None
    phase: PassPhase


@dataclass
class Inventory:
    commit: str | None = None
    generation: int | None = None
    term: int | None = None
    objects: set[ObjKey] = field(default_factory=set)  # everything the agent may have created
    leaving: set[ObjKey] = field(default_factory=set)  # of ``objects``: removals already ordered
    arriving: set[ObjKey] = field(default_factory=set)  # of ``objects``: an unfinished pass's new objects
    pending: PassRecord | None = None  # the unfinished pass

    @property
    def settled(self) -> set[ObjKey]:
        """The objects of the applied commit: what a new commit's removals are counted from."""
        return self.objects - self.leaving - self.arriving

    @property
    def floor(self) -> int | None:
        """The lowest generation a head may have: the applied one, or the generation an
        unfinished pass started to apply (its objects may exist in part)."""
        found = [g for g in (self.generation, self.pending.generation if self.pending else None) if g is not None]
        return max(found) if found else None

    def to_json(self) -> str:
        order = sorted(self.objects)
        doc: dict[str, Any] = {"commit": self.commit, "generation": self.generation, "term": self.term,
                               "objects": [list(k) for k in order]}
        for name, marked in (("leaving", self.leaving), ("arriving", self.arriving)):
            if marked & self.objects:
                doc[name] = [i for i, k in enumerate(order) if k in marked]
        if self.pending is not None:
            doc["pass"] = {"commit": self.pending.commit, "generation": self.pending.generation,
                           "term": self.pending.term, "phase": self.pending.phase.value}
        return json.dumps(doc, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Inventory:
        """Read what ``to_json`` wrote; anything else raises ``ValueError`` (the inventory is
        then not what the agent wrote, and nothing is applied or pruned without it)."""
        doc = json.loads(text)
        if not isinstance(doc, dict):
            raise ValueError("not a JSON object")
        entries = doc.get("objects", [])
        if not isinstance(entries, list) or not all(
                isinstance(k, list) and len(k) == 5 and all(isinstance(part, str) for part in k) for k in entries):
            raise ValueError("objects must be a list of [group, version, kind, namespace, name]")
        order: list[ObjKey] = [tuple(k) for k in entries]  # type: ignore[misc]
        marked = {name: _positions(doc.get(name, []), len(order), name) for name in ("leaving", "arriving")}
        if marked["leaving"] & marked["arriving"]:
            raise ValueError("an object is both leaving and arriving")
        record = doc.get("pass")
        pending = None
        if record is not None:
            if not isinstance(record, dict) or record.get("phase") not in {p.value for p in PassPhase}:
                raise ValueError("pass must name a commit and a phase (apply or prune)")
            pending = PassRecord(_commit(record.get("commit"), "pass.commit", required=True) or "",
                                 _number(record.get("generation"), "pass.generation"),
                                 _number(record.get("term"), "pass.term"), PassPhase(record["phase"]))
        return cls(_commit(doc.get("commit"), "commit"), _number(doc.get("generation"), "generation"),
                   _number(doc.get("term"), "term"), set(order),
                   {order[i] for i in marked["leaving"]}, {order[i] for i in marked["arriving"]}, pending)


_COMMIT = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


def _commit(value: Any, name: str, *, required: bool = False) -> str | None:
    if value is None and not required:
        return None
    if not isinstance(value, str) or not _COMMIT.fullmatch(value):
        raise ValueError(f"{name} must be a commit id")
    return value


def _number(value: Any, name: str) -> int | None:
    """Generations and terms as a report carries them: whole numbers from 0 to 2^53."""
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_GENERATION:
        raise ValueError(f"{name} must be a whole number from 0 to {MAX_GENERATION}")
    return value


def _positions(value: Any, size: int, name: str) -> set[int]:
    if not isinstance(value, list) or not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < size
                                              for i in value):
        raise ValueError(f"{name} must list positions in objects")
    return set(value)


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


_RBAC_KINDS = RBAC_KINDS
# The API server's own RBAC policy (cluster-admin, admin, edit, view, system:*) carries it.
BOOTSTRAP_LABEL, BOOTSTRAP_VALUE = "kubernetes.io/bootstrapping", "rbac-defaults"

SystemName = tuple[str, str, str]
"""(kind, namespace, name) of a system RBAC object the agent's configuration lets it manage."""


def system_object(key: ObjKey, live: dict[str, Any] | None = None,
                  allowed: frozenset[SystemName] = frozenset()) -> bool:
    """Whether the object is part of the cluster's own RBAC: a ClusterRole, ClusterRoleBinding,
    Role or RoleBinding named ``system:...`` or ``cluster-admin``, or a live one the API
    server bootstrapped (``kubernetes.io/bootstrapping: rbac-defaults``). The agent never
    adopts, changes or deletes one unless its configuration lists it in ``allowed``."""
    group, _, kind, ns, name = key
    if group != RBAC_GROUP or kind not in _RBAC_KINDS or (kind, ns, name) in allowed:
        return False
    if system_rbac_name(group, kind, name):
        return True
    labels = ((live or {}).get("metadata") or {}).get("labels") or {}
    return isinstance(labels, dict) and labels.get(BOOTSTRAP_LABEL) == BOOTSTRAP_VALUE


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
