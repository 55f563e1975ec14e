"""The API semantics of a simulated cluster, independent of HTTP.

``ApiCore`` implements the verbs (get, list, watch, create, update, patch,
apply, delete, deletecollection) with the behaviour of a real API server:
metadata (uid, generation, resourceVersion, timestamps), optimistic
concurrency, field validation, status and scale subresources, field ownership,
finalizers, garbage collection of dependents and namespace deletion. The HTTP
layer (``server.py``) only parses requests and serializes answers, so in-process
components (the fake kubelet and controllers of part 2) can call it directly.
"""

from __future__ import annotations

import base64
import builtins
import copy
import itertools
import json
import random
import re
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from qonnect_gitops.logs import get_logger
from qonnect_gitops.sim import (
    crdvalidation,
    defaults,
    errors,
    schema,
    selectors,
    ssa,
    subresources,
    typed,
)
from qonnect_gitops.sim import fieldpath as fp
from qonnect_gitops.sim.admission import Admission
from qonnect_gitops.sim.authz import ADMIN_GROUPS, Authorizer, User, Users
from qonnect_gitops.sim.patch import (
    PatchError,
    json_merge_patch,
    json_patch,
    strategic_merge_patch,
)
from qonnect_gitops.sim.resources import Registry, ResourceType
from qonnect_gitops.sim.store import Expired, Store

log = get_logger(__name__)

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
APPLY_PATCH_CBOR = "application/apply-patch+cbor"

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_SUBDOMAIN_MSG = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
                  "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
                  "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
_LABEL_MSG = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
              "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
              "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
_DNS1035_MSG = ("a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
                "alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', "
                "regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')")
_GENERATE_CHARS = "bcdfghjklmnpqrstvwxz2456789"
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
# Namespaces the API server refuses to delete (NamespaceLifecycle's immortal namespaces).
IMMORTAL_NAMESPACES = ("default", "kube-system", "kube-public")
MAX_NAME = 253
# ObjectMeta validation (apimachinery ``ValidateAnnotations``): the keys and values of all
# annotations together, in bytes, may not exceed 256 KiB.
TOTAL_ANNOTATION_SIZE_LIMIT = 256 * (1 << 10)
RETURN_DELETED = frozenset({
    ("", "Pod"), ("", "Service"), ("", "PersistentVolumeClaim"), ("", "PersistentVolume"), ("", "PodTemplate"),
    ("", "ResourceQuota"), ("", "ServiceAccount"), ("storage.k8s.io", "CSIDriver"), ("storage.k8s.io", "CSINode"),
    ("storage.k8s.io", "StorageClass"), ("storage.k8s.io", "VolumeAttachment"),
    ("storage.k8s.io", "VolumeAttributesClass"), ("resource.k8s.io", "DeviceClass"),
    ("resource.k8s.io", "ResourceClaim"), ("resource.k8s.io", "ResourceClaimTemplate"),
    ("resource.k8s.io", "ResourceSlice")})


@dataclass
class WriteOptions:
    """Query parameters of a write request."""

    field_manager: str | None = None
    field_validation: str = "Warn"  # the API's default when the client sends none
    dry_run: bool = False
    force: bool = False
    user_agent: str = ""

    def manager(self) -> str:
        """The field manager: explicit, or the user agent's first segment as the API derives it."""
        if self.field_manager:
            return self.field_manager
        return (self.user_agent.split("/")[0] or "unknown")[:128]


@dataclass
class Result:
    """An answer: the object (or Status), the HTTP code and any ``Warning`` headers."""

    body: dict[str, Any]
    code: int = 200
    warnings: builtins.list[str] = field(default_factory=list)


def _now() -> str:
    return ssa.now_rfc3339()


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    return obj.get("metadata") or {}


def go_selector(selector: Any) -> str:
    """A LabelSelector printed the way Go's %#v prints it in the API's validation messages."""
    if not isinstance(selector, dict):
        return "(*v1.LabelSelector)(nil)"
    labels = selector.get("matchLabels") or {}
    ml = "map[string]string{" + ", ".join(f'"{k}":"{v}"' for k, v in sorted(labels.items())) + "}" \
        if labels else "map[string]string(nil)"
    exprs = selector.get("matchExpressions")
    me = "[]v1.LabelSelectorRequirement(nil)" if not exprs else "[]v1.LabelSelectorRequirement{...}"
    return f"v1.LabelSelector{{MatchLabels:{ml}, MatchExpressions:{me}}}"


class ApiCore:
    """The verbs of the Kubernetes API over one ``Store`` and ``Registry``."""

    def __init__(self, cluster_name: str, registry: Registry | None = None, store: Store | None = None,
                 namespace_delay: float = 0.2) -> None:
        self.cluster_name = cluster_name
        self.namespace_delay = namespace_delay  # seconds before a deleted namespace's contents go
        self.registry = registry or Registry()
        self.store = store or Store()
        self._ip_lock = threading.Lock()
        self._next_ip = 0
        self.admission = Admission(self)
        self.users = Users(admin_token=f"sim-{cluster_name}", admin=User("kubernetes-admin", ADMIN_GROUPS))
        self.authz = Authorizer(self.store)
        for ns in SYSTEM_NAMESPACES:
            self.create(self._type("", "v1", "namespaces"), "", {
                "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
                WriteOptions(field_manager="kube-apiserver"))
        self.sync_apiservices()

    # ------------------------------------------------------------------ lookup helpers

    def _type(self, group: str, version: str, plural: str) -> ResourceType:
        rt = self.registry.find(group, version, plural)
        if rt is None:
            raise errors.ApiError(404, "NotFound", "the server could not find the requested resource", {})
        return rt

    @staticmethod
    def _gr(rt: ResourceType) -> tuple[str, str]:
        return rt.storage_gr

    def storage_type(self, rt: ResourceType) -> ResourceType:
        """The type whose objects ``rt`` shows (itself, or the stored version of a converted one)."""
        if rt.storage is None:
            return rt
        stored = self.registry.by_kind(rt.storage[0], "v1", rt.kind)
        return stored or rt

    def _present(self, rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        if rt.from_storage is not None:
            return rt.from_storage(obj)  # type: ignore[no-any-return]
        if obj.get("apiVersion") == rt.group_version and obj.get("kind") == rt.kind:
            return obj
        out = dict(obj)
        out["apiVersion"], out["kind"] = rt.group_version, rt.kind
        return out

    def _must_get(self, rt: ResourceType, ns: str, name: str) -> dict[str, Any]:
        obj = self.store.get(self._gr(rt), ns if rt.namespaced else "", name)
        if obj is None:
            raise errors.not_found(rt.group, rt.plural, name)
        return obj

    # ------------------------------------------------------------------ reads

    def get(self, rt: ResourceType, ns: str, name: str) -> dict[str, Any]:
        """One object, or 404."""
        return self._present(rt, self._must_get(rt, ns, name))

    def matcher(self, rt: ResourceType, label_selector: str | None, field_selector: str | None) -> Any:
        """A predicate for label and field selectors (400 BadRequest when they do not parse)."""
        try:
            labels = selectors.parse_label_selector(label_selector)
            supported = ("metadata.name", "metadata.namespace") + rt.extra_field_selectors
            fields = selectors.parse_field_selector(field_selector, supported)
            if rt.field_aliases and field_selector:
                # Selectors name the fields of this version; objects are stored in another.
                for here, there in rt.field_aliases:
                    field_selector = field_selector.replace(here, there)
                    supported = tuple(p.replace(here, there) for p in supported)
                fields = selectors.parse_field_selector(field_selector, supported)
        except selectors.SelectorError as exc:
            raise errors.bad_request(str(exc)) from None
        return lambda o: labels(_meta(o).get("labels") or {}) and fields(o)

    def list(self, rt: ResourceType, ns: str | None, label_selector: str | None = None,
             field_selector: str | None = None, limit: int | None = None,
             continue_token: str | None = None) -> dict[str, Any]:
        """A ``<Kind>List`` of matching objects, in one namespace or all, with paging.

        Like the API's storage, a page ends after ``limit`` matches and carries a
        ``continue`` token while more keys follow; ``remainingItemCount`` is given only
        for unfiltered lists (counting matches would mean reading them all).
        """
        match = self.matcher(rt, label_selector, field_selector)
        filtered = bool((label_selector or "").strip() or (field_selector or "").strip())
        gr = self._gr(rt)
        ns_filter = ns if rt.namespaced else None
        start: tuple[Any, ...] | None = None
        with self.store.lock:
            rv = self.store.resource_version
            if continue_token:
                start, rv = self._decode_continue(continue_token)
            items: builtins.list[dict[str, Any]] = []
            last: tuple[Any, ...] | None = None
            more = False
            for skey, o in self.store.scan(gr, ns_filter, start):
                if limit and len(items) >= limit:
                    more = True
                    break
                if match(o):
                    items.append(o)
                    last = skey
            meta: dict[str, Any] = {"resourceVersion": str(rv)}
            if more and last is not None:
                meta["continue"] = base64.urlsafe_b64encode(json.dumps(
                    {"rv": rv, "start": builtins.list(last)}).encode()).decode()
                if not filtered:
                    meta["remainingItemCount"] = self.store.count_after(gr, ns_filter, last)
        if rt.builtin:
            # Lists of built-in kinds carry no apiVersion/kind on their items, like the real API.
            items = [{k: v for k, v in self._present(rt, o).items() if k not in ("apiVersion", "kind")}
                     for o in items]
        else:
            items = [self._present(rt, o) for o in items]
        return {"kind": rt.list_kind, "apiVersion": rt.group_version, "metadata": meta, "items": items}

    @staticmethod
    def _decode_continue(token: str) -> tuple[tuple[Any, ...], int]:
        try:
            doc = json.loads(base64.urlsafe_b64decode(token.encode()))
            start, rv = doc["start"], doc["rv"]
            if not isinstance(start, builtins.list) or not isinstance(rv, int) or len(start) > 8:
                raise ValueError("bad token")
            return tuple(start), rv
        except (ValueError, KeyError, TypeError):
            raise errors.bad_request("continue key is not valid: malformed token") from None

    def watch(self, rt: ResourceType, ns: str | None, label_selector: str | None = None,
              field_selector: str | None = None, resource_version: str | None = None,
              bookmarks: bool = False, send_initial_events: bool | None = None,
              timeout: float = 1800.0, bookmark_interval: float = 10.0) -> Iterator[dict[str, Any]]:
        """Watch events (``{"type", "object"}``) until ``timeout`` or the store closes."""
        match = self.matcher(rt, label_selector, field_selector)
        gr = self._gr(rt)
        ns_filter = ns if rt.namespaced else None

        def visible(o: dict[str, Any] | None) -> bool:
            return o is not None and (ns_filter is None or _meta(o).get("namespace") == ns_filter) and match(o)

        deadline = time.monotonic() + timeout
        with self.store.lock:
            current = self.store.resource_version
            initial: Iterator[dict[str, Any]] = iter(())
            if resource_version in (None, "", "0") or send_initial_events:
                initial = self._scan_batches(gr, ns_filter, match)
                start = current
            else:
                try:
                    start = int(resource_version)
                except ValueError:
                    raise errors.bad_request(f"invalid resource version: {resource_version}") from None
                try:
                    self.store.events_after(start)
                except Expired as exc:
                    yield {"type": "ERROR", "object": errors.gone(str(exc)).status()}
                    return
        for o in initial:
            yield {"type": "ADDED", "object": self._present(rt, o)}
        if send_initial_events and bookmarks:
            yield self._bookmark(rt, start, initial_end=True)
        last = start
        next_bookmark = time.monotonic() + bookmark_interval
        while True:
            with self.store.lock:
                try:
                    events = self.store.events_after(last)
                except Expired as exc:
                    yield {"type": "ERROR", "object": errors.gone(str(exc)).status()}
                    return
                if not events and not self.store.closed:
                    wait = min(deadline, next_bookmark) - time.monotonic()
                    if wait > 0:
                        self.store.changed.wait(wait)
                    events = self.store.events_after(last)
                closed = self.store.closed
            for ev in events:
                last = ev.rv
                if ev.gr != gr:
                    continue
                now_in, was_in = visible(ev.obj), visible(ev.prev)
                if ev.type == "MODIFIED" and not now_in and was_in:
                    # Leaving the selection looks like a deletion to this watcher.
                    yield {"type": "DELETED", "object": self._present(rt, ev.obj)}
                elif ev.type == "MODIFIED" and now_in and not was_in:
                    yield {"type": "ADDED", "object": self._present(rt, ev.obj)}
                elif now_in:
                    yield {"type": ev.type, "object": self._present(rt, ev.obj)}
            if closed or time.monotonic() >= deadline:
                return
            if bookmarks and time.monotonic() >= next_bookmark:
                yield self._bookmark(rt, max(last, self.store.resource_version))
                next_bookmark = time.monotonic() + bookmark_interval
            elif time.monotonic() >= next_bookmark:
                next_bookmark = time.monotonic() + bookmark_interval

    def _scan_batches(self, gr: tuple[str, str], ns: str | None, match: Any) -> Iterator[dict[str, Any]]:
        """Matching objects in list order, read a page at a time (a pool of nodes is never read whole)."""
        after: tuple[Any, ...] | None = None
        while True:
            with self.store.lock:
                batch = builtins.list(itertools.islice(self.store.scan(gr, ns, after), 500))
            if not batch:
                return
            after = batch[-1][0]
            yield from (o for _, o in batch if match(o))

    def _bookmark(self, rt: ResourceType, rv: int, initial_end: bool = False) -> dict[str, Any]:
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if initial_end:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        return {"type": "BOOKMARK", "object": {"kind": rt.kind, "apiVersion": rt.group_version, "metadata": meta}}

    # ------------------------------------------------------------------ checks

    def _check_namespace(self, rt: ResourceType, ns: str, name: str = "") -> None:
        if not rt.namespaced:
            return
        nso = self.store.get(("", "namespaces"), "", ns)
        if nso is None:
            raise errors.not_found("", "namespaces", ns)
        if _meta(nso).get("deletionTimestamp"):
            raise errors.ApiError(403, "Forbidden",
                                  f"{rt.plural} \"{name}\" is forbidden: unable to create new content in "
                                  f"namespace {ns} because it is being terminated",
                                  {"name": name, **({"group": rt.group} if rt.group else {}), "kind": rt.plural})

    def _decode_problems(self, rt: ResourceType, problems: typed.Problems, mode: str) -> builtins.list[str]:
        prefix = f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: '
        if problems.types and rt.builtin:
            # Custom resources decode as plain JSON; their schema's types are checked by validation (422).
            raise errors.bad_request(prefix + "; ".join(problems.types))
        if not problems.unknown:
            return []
        if mode == "Strict":
            raise errors.bad_request(prefix + "strict decoding error: " +
                                     ", ".join(f'unknown field "{p}"' for p in problems.unknown))
        if mode == "Warn":
            return [f'unknown field "{p}"' for p in problems.unknown]
        return []

    def _validate(self, rt: ResourceType, obj: dict[str, Any]) -> None:
        meta = _meta(obj)
        name = meta.get("name") or ""
        causes: builtins.list[dict[str, str]] = []
        if not name:
            causes.append({"reason": "FieldValueRequired", "message": "Required value: name or generateName is required",
                           "field": "metadata.name"})
        else:
            if rt.group == "rbac.authorization.k8s.io":
                ok, msg = ("/" not in name and "%" not in name and name not in (".", "..")), \
                    "may not contain '/' or '%'"
            elif rt.kind == "Namespace":
                ok, msg = bool(_LABEL.match(name)) and len(name) <= 63, _LABEL_MSG
            elif rt.kind == "APIService":
                spec = obj.get("spec") or {}
                want = f"{spec.get('version', '')}.{spec.get('group', '')}"
                ok, msg = name == want, f"must be {want}"
            elif rt.kind == "Service":
                ok, msg = bool(_DNS1035.match(name)) and len(name) <= 63, _DNS1035_MSG
            else:
                ok, msg = bool(_SUBDOMAIN.match(name)) and len(name) <= 253, _SUBDOMAIN_MSG
            if not ok:
                causes.append({"reason": "FieldValueInvalid", "message": f'Invalid value: "{name}": {msg}',
                               "field": "metadata.name"})
        annotations = meta.get("annotations") or {}
        if isinstance(annotations, dict) and sum(len(str(k).encode()) + len(str(v).encode())
                                                 for k, v in annotations.items()) > TOTAL_ANNOTATION_SIZE_LIMIT:
            causes.append({"reason": "FieldValueTooLong", "field": "metadata.annotations",
                           "message": f"Too long: may not be more than {TOTAL_ANNOTATION_SIZE_LIMIT} bytes"})
        root = rt.schema_root()
        if root is not None and rt.builtin:
            for path in typed.missing_required(obj, root):
                if path.startswith(("metadata.", "status.")):
                    continue
                causes.append({"reason": "FieldValueRequired", "message": "Required value", "field": path})
        elif root is not None and rt.crd_name:
            # metadata is validated as ObjectMeta above; a schema that lists it as required
            # (Argo CD's do) is satisfied by every object, as on a real API server.
            body_schema = {**root, "required": [r for r in root.get("required") or () if r != "metadata"]}
            causes += crdvalidation.validate({k: v for k, v in obj.items() if k != "metadata"}, body_schema)
        if causes:
            raise errors.invalid(rt.group, rt.kind, name, causes)

    def _validate_update(self, rt: ResourceType, old: dict[str, Any], new: dict[str, Any]) -> None:
        """Update rules of the real API that clients must cope with (immutable fields)."""
        name = _meta(new).get("name", "")
        causes: builtins.list[dict[str, str]] = []
        old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
        workload = rt.group in ("apps", "batch") and rt.kind in (
            "Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job")
        if workload and old_spec.get("selector") != new_spec.get("selector"):
            causes.append({"reason": "FieldValueInvalid", "field": "spec.selector",
                           "message": f"Invalid value: {go_selector(new_spec.get('selector'))}: field is immutable"})
        if rt.kind == "Job" and rt.group == "batch" and old_spec.get("template") != new_spec.get("template"):
            causes.append({"reason": "FieldValueInvalid", "field": "spec.template",
                           "message": "Invalid value: core.PodTemplateSpec{...}: field is immutable"})
        if rt.kind in ("ConfigMap", "Secret") and rt.group == "" and old.get("immutable"):
            for key in ("data", "binaryData"):
                if old.get(key) != new.get(key):
                    causes.append({"reason": "FieldValueForbidden", "field": key,
                                   "message": "Forbidden: field is immutable when `immutable` is set"})
            if new.get("immutable") is not True:
                causes.append({"reason": "FieldValueForbidden", "field": "immutable",
                               "message": "Forbidden: field is immutable when `immutable` is set"})
        if rt.kind == "Service" and rt.group == "" and old_spec.get("clusterIP") and \
                new_spec.get("clusterIP") != old_spec.get("clusterIP") and new_spec.get("type") != "ExternalName":
            causes.append({"reason": "FieldValueInvalid", "field": "spec.clusterIPs[0]",
                           "message": f'Invalid value: []string{{"{new_spec.get("clusterIP")}"}}: may not change once set'})
        if causes:
            raise errors.invalid(rt.group, rt.kind, name, causes)

    # ------------------------------------------------------------------ defaulting

    def _default(self, rt: ResourceType, obj: dict[str, Any], live: dict[str, Any] | None) -> None:
        """Server-side defaults of built-in kinds (``defaults``) plus allocated values (Service IPs)."""
        spec = obj.get("spec")
        if rt.builtin:
            defaults.apply_defaults(rt.kind, obj)
        if rt.kind == "Namespace":
            obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        if rt.kind == "Secret" and rt.group == "":
            obj.setdefault("type", "Opaque")
            # stringData is write-only: the API folds it into data, base64-encoded.
            string_data = obj.pop("stringData", None)
            if isinstance(string_data, dict) and string_data:
                data = dict(obj.get("data") or {})
                for k, v in string_data.items():
                    data[k] = base64.b64encode(str(v).encode()).decode()
                obj["data"] = data
        if rt.kind == "Service" and isinstance(spec, dict):
            spec.setdefault("type", "ClusterIP")
            spec.setdefault("sessionAffinity", "None")
            if spec.get("type") != "ExternalName" and not spec.get("clusterIP"):
                old = ((live or {}).get("spec") or {}).get("clusterIP")
                spec["clusterIP"] = old or self._allocate_ip()
                spec["clusterIPs"] = [spec["clusterIP"]]

    @staticmethod
    def _initial_status(rt: ResourceType) -> dict[str, Any]:
        """The status a new object starts with: its kind's zero status, required fields included."""
        status = defaults.initial_status(rt.kind)
        root = rt.schema_root()
        node = schema.describe(root).fields.get("status") if root is not None else None
        if node is not None:
            info = schema.describe(node)
            for name in info.required:
                kinds = schema.describe(info.fields.get(name)).scalar_types
                zero: Any = 0 if kinds & {"integer", "number"} else False if "boolean" in kinds else ""
                status.setdefault(name, zero)
        return status

    def _allocate_ip(self) -> str:
        with self._ip_lock:
            n = self._next_ip
            self._next_ip += 1
        return f"10.96.{n // 254}.{n % 254 + 1}"

    # ------------------------------------------------------------------ the write path

    def _zero(self, rt: ResourceType) -> dict[str, Any]:
        # A create starts from the Go zero value, in which by-value structs already exist.
        root = rt.schema_root()
        return typed.zero_object(root) if root is not None and rt.builtin else {}

    def _ignored(self, rt: ResourceType, subresource: str) -> tuple[fp.Path, ...]:
        if subresource == "status":
            root = rt.schema_root()
            fields = schema.describe(root).fields if root else {}
            return tuple(("f:" + k,) for k in fields if k not in ("status", "apiVersion", "kind"))
        if "status" in rt.subresources:
            return (("f:status",),)
        return ()

    def _commit(self, rt: ResourceType, ns: str, live: dict[str, Any] | None, candidate: dict[str, Any],
                opts: WriteOptions, subresource: str = "",
                managers: builtins.list[ssa.Manager] | None = None, warnings: builtins.list[str] | None = None) -> Result:
        """Finish a write: server fields, status, defaults, ownership, validation, generation, store."""
        warnings = list(warnings or [])
        root = rt.schema_root()
        candidate = self._with_server_fields(rt, ns, live, candidate)
        candidate = self._with_status(rt, live, candidate, subresource)
        candidate = self._defaulted(rt, ns, live, candidate, root, subresource)
        self._own(rt, live, candidate, root, opts, subresource, managers)
        self._validate(rt, candidate)
        if live is not None:
            self._validate_update(rt, live, candidate)
            if self._same(live, candidate):
                return Result(self._present(rt, live), 200, warnings)
        if subresource in ("", "status"):
            self.admission.validate(rt, candidate, live, ns)
        code = 201 if live is None else 200
        if opts.dry_run:
            if live is None:
                candidate["metadata"].pop("resourceVersion", None)
            return Result(self._present(rt, candidate), code, warnings)
        return Result(self._present(rt, self._store_write(rt, live, candidate, subresource)), code, warnings)

    @staticmethod
    def _with_server_fields(rt: ResourceType, ns: str, live: dict[str, Any] | None,
                            candidate: dict[str, Any]) -> dict[str, Any]:
        """The candidate with its type, its namespace (none when cluster-scoped) and the
        fields the server owns (uid, creation, generation, deletion) as the live object has them."""
        meta = dict(_meta(candidate))
        candidate = dict(candidate)
        candidate["apiVersion"], candidate["kind"] = rt.group_version, rt.kind
        if rt.namespaced:
            meta["namespace"] = ns
        else:
            meta.pop("namespace", None)
        if live is not None:
            lm = _meta(live)
            for k in ("uid", "creationTimestamp", "generation", "deletionTimestamp", "deletionGracePeriodSeconds"):
                if k in lm:
                    meta[k] = lm[k]
                else:
                    meta.pop(k, None)
        candidate["metadata"] = meta
        return candidate

    def _with_status(self, rt: ResourceType, live: dict[str, Any] | None, candidate: dict[str, Any],
                     subresource: str) -> dict[str, Any]:
        """Status belongs to its subresource: the main resource cannot change it and vice
        versa. A new object of a built-in type starts from its initial status."""
        if subresource == "status" and live is not None:
            candidate = self._status_written(live, candidate)
        elif "status" in rt.subresources and not subresource:
            self._status_kept(rt, live, candidate)
        if live is None and rt.kind == "Namespace":
            candidate["status"] = {"phase": "Active"}
        return candidate

    @staticmethod
    def _status_written(live: dict[str, Any], candidate: dict[str, Any]) -> dict[str, Any]:
        """A write of the status subresource: the live object with the candidate's status."""
        new = copy.deepcopy(live)
        managed = candidate["metadata"].get("managedFields", _meta(live).get("managedFields"))
        new["metadata"] = dict(_meta(live), managedFields=managed)
        if "status" in candidate:
            new["status"] = candidate["status"]
        else:
            new.pop("status", None)
        return new

    def _status_kept(self, rt: ResourceType, live: dict[str, Any] | None, candidate: dict[str, Any]) -> None:
        """A write of the main resource keeps the live status; a new object of a built-in
        type starts from its initial status, any other from none."""
        if live is not None and "status" in live:
            candidate["status"] = live["status"]
        elif live is not None:
            candidate.pop("status", None)
        elif rt.builtin and rt.kind != "CustomResourceDefinition":
            candidate["status"] = self._initial_status(rt)
        else:
            candidate.pop("status", None)

    def _defaulted(self, rt: ResourceType, ns: str, live: dict[str, Any] | None, candidate: dict[str, Any],
                   root: dict[str, Any] | None, subresource: str) -> dict[str, Any]:
        """The candidate with its defaults: the schema's key fields, the type's defaults, a
        custom resource's schema defaults, mutating admission; then empty fields dropped."""
        if root is not None:
            # Key fields with defaults (ports' protocol) are filled in on every stored object.
            # sanitize also rebuilds every map and list, so defaulting below cannot touch
            # containers shared with the stored (live) object.
            candidate = typed.sanitize(candidate, root, typed.Problems(), default_keys=True)
        else:
            candidate = copy.deepcopy(candidate)
        self._default(rt, candidate, live)
        if rt.crd_name and not rt.builtin and root is not None:
            candidate = crdvalidation.apply_defaults(candidate, root)
        if not subresource:
            self.admission.mutate(rt, candidate, live, ns)
        return self._without_empty(rt, live, candidate, root)

    def _without_empty(self, rt: ResourceType, live: dict[str, Any] | None, candidate: dict[str, Any],
                       root: dict[str, Any] | None) -> dict[str, Any]:
        """A built-in object without the empty fields Go's encoding leaves out (a new one
        whose status that removed gets its initial status back)."""
        if rt.builtin and root is not None:
            candidate = typed.drop_empty(candidate, root)
            if live is None and "status" in rt.subresources and "status" not in candidate:
                candidate["status"] = self._initial_status(rt)
        return candidate

    def _own(self, rt: ResourceType, live: dict[str, Any] | None, candidate: dict[str, Any],
             root: dict[str, Any] | None, opts: WriteOptions, subresource: str,
             managers: builtins.list[ssa.Manager] | None) -> None:
        """Record who manages which fields (managedFields: ``managers`` as given, or this
        write's manager's update) and the server's fields of a new object (uid, creation
        time, generation 1) or a changed one (the generation counts spec changes)."""
        if managers is None:
            managers = ssa.update(live, candidate, root, opts.manager(), rt.group_version, subresource,
                                  self._ignored(rt, subresource), zero=self._zero(rt))
        meta = dict(_meta(candidate))
        if managers:
            meta["managedFields"] = ssa.encode_managed(managers)
        else:
            meta.pop("managedFields", None)
        candidate["metadata"] = meta
        if live is None:
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = _now()
            if rt.tracks_generation:
                meta["generation"] = 1
        elif rt.tracks_generation:
            meta["generation"] = int(_meta(live).get("generation", 0)) + (1 if self._spec_changed(rt, live, candidate) else 0)

    def _store_write(self, rt: ResourceType, live: dict[str, Any] | None, candidate: dict[str, Any],
                     subresource: str) -> dict[str, Any]:
        """Store the object, finalize it if it is deleted and nothing holds it, and run what
        follows a write (controllers' hooks, admission's bookkeeping); the stored object."""
        meta = candidate["metadata"]
        with self.store.lock:
            stored = self.store.put(self._gr(rt), candidate, "ADDED" if live is None else "MODIFIED")
            log.debug("object_written", cluster=self.cluster_name, resource=rt.qualified, name=meta["name"],
                      rv=stored["metadata"]["resourceVersion"])
            if meta.get("deletionTimestamp") and not meta.get("finalizers"):
                self._finalize(rt, stored)
            self._after_write(rt, stored, live)
            self.admission.written(rt, stored, live, subresource)
        return stored

    @staticmethod
    def _same(live: dict[str, Any], new: dict[str, Any]) -> bool:
        a = dict(live, metadata={k: v for k, v in _meta(live).items() if k != "resourceVersion"})
        b = dict(new, metadata={k: v for k, v in _meta(new).items() if k != "resourceVersion"})
        return a == b

    @staticmethod
    def _spec_changed(rt: ResourceType, old: dict[str, Any], new: dict[str, Any]) -> bool:
        if rt.builtin:
            return old.get("spec") != new.get("spec")
        skip = ("metadata", "status") if "status" in rt.subresources else ("metadata",)
        return {k: v for k, v in old.items() if k not in skip} != {k: v for k, v in new.items() if k not in skip}

    def _after_write(self, rt: ResourceType, stored: dict[str, Any], live: dict[str, Any] | None) -> None:
        if rt.kind == "CustomResourceDefinition" and rt.group == "apiextensions.k8s.io":
            self._crd_changed(stored)
            self.sync_apiservices()
        elif rt.kind == "Namespace" and rt.group == "" and live is None:
            subresources.namespace_defaults(self, _meta(stored)["name"])
        elif rt.kind == "APIService" and rt.group == "apiregistration.k8s.io":
            subresources.apiservice_status(self, stored)

    def sync_apiservices(self) -> None:
        """Local APIServices for every served group version, as the API server's autoregistration keeps them."""
        subresources.sync_apiservices(self)

    def _crd_changed(self, crd: dict[str, Any]) -> None:
        """Serve the CRD's kinds and report it Established, as the apiextensions controllers do."""
        terminating = bool(_meta(crd).get("deletionTimestamp"))
        self.registry.sync_crd(crd, established=not terminating)
        if terminating:
            return
        names = (crd.get("spec") or {}).get("names") or {}
        status = {
            "acceptedNames": {k: v for k, v in names.items()},
            "conditions": [
                {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
                 "message": "no conflicts found", "lastTransitionTime": _now()},
                {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
                 "message": "the initial names have been accepted", "lastTransitionTime": _now()},
            ],
            "storedVersions": [v["name"] for v in (crd.get("spec") or {}).get("versions", []) if v.get("storage")],
        }
        old = crd.get("status") or {}
        if old.get("acceptedNames") == status["acceptedNames"] and old.get("storedVersions") == status["storedVersions"]:
            return
        self.store.put(("apiextensions.k8s.io", "customresourcedefinitions"), dict(crd, status=status), "MODIFIED")

    # ------------------------------------------------------------------ create / update / patch

    def _prepare_body(self, rt: ResourceType, body: Any, mode: str, default_keys: bool = True) -> tuple[dict[str, Any], builtins.list[str]]:
        if not isinstance(body, dict):
            raise errors.bad_request("the body of the request was in an unknown format")
        api_version, kind = body.get("apiVersion"), body.get("kind")
        if (api_version and api_version != rt.group_version) or (kind and kind != rt.kind):
            raise errors.bad_request(
                f"the API version in the data ({api_version}) does not match the expected API version "
                f"({rt.group_version})" if api_version != rt.group_version else
                f"the kind in the data ({kind}) does not match the expected kind ({rt.kind})")
        root = rt.schema_root()
        if root is None:
            return copy.deepcopy(body), []
        problems = typed.Problems()
        clean = typed.sanitize(body, root, problems, default_keys)
        return clean, self._decode_problems(rt, problems, mode)

    def create(self, rt: ResourceType, ns: str, body: Any, opts: WriteOptions) -> Result:
        """POST: create an object (201), honouring generateName and dryRun."""
        if rt.to_storage is not None:
            return self._converted(rt, self.create(self.storage_type(rt), ns, self._to_storage(rt, body), opts))
        obj, warnings = self._prepare_body(rt, body, opts.field_validation)
        meta = dict(_meta(obj))
        if rt.namespaced:
            body_ns = meta.get("namespace")
            if body_ns and body_ns != ns:
                raise errors.bad_request("the namespace of the provided object does not match the namespace "
                                         "sent on the request")
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + "".join(random.choice(_GENERATE_CHARS) for _ in range(5))
        for k in ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp", "generation"):
            meta.pop(k, None)
        obj["metadata"] = meta
        with self.store.lock:
            name = meta.get("name") or ""
            self._check_namespace(rt, ns, name)
            if name and self.store.get(self._gr(rt), ns if rt.namespaced else "", name) is not None:
                raise errors.already_exists(rt.group, rt.plural, name)
            return self._commit(rt, ns, None, obj, opts, warnings=warnings)

    def _to_storage(self, rt: ResourceType, body: Any) -> Any:
        if not isinstance(body, dict):
            raise errors.bad_request("the body of the request was in an unknown format")
        if body.get("apiVersion") not in (None, rt.group_version) or body.get("kind") not in (None, rt.kind):
            self._prepare_body(rt, body, "Ignore")  # the API's mismatch errors
        return rt.to_storage(body)

    def _converted(self, rt: ResourceType, res: Result) -> Result:
        return Result(self._present(rt, res.body) if res.body.get("kind") != "Status" else res.body,
                      res.code, res.warnings)

    def _check_rv(self, rt: ResourceType, live: dict[str, Any], wanted: str | None) -> None:
        if wanted and wanted != _meta(live).get("resourceVersion"):
            raise errors.conflict(rt.group, rt.plural, _meta(live)["name"], errors.STALE)

    def replace(self, rt: ResourceType, ns: str, name: str, body: Any, opts: WriteOptions,
                subresource: str = "") -> Result:
        """PUT: replace an object (409 on a stale resourceVersion)."""
        if subresource == "scale":
            return self._write_scale(rt, ns, name, lambda scale: body, opts, update=True)
        if rt.to_storage is not None:
            return self._converted(rt, self.replace(self.storage_type(rt), ns, name, self._to_storage(rt, body),
                                                    opts, subresource))
        obj, warnings = self._prepare_body(rt, body, opts.field_validation)
        meta = _meta(obj)
        if meta.get("name") and meta["name"] != name:
            raise errors.bad_request(f"the name of the object ({meta['name']}) does not match the name on the URL ({name})")
        with self.store.lock:
            live = self.store.get(self._gr(rt), ns if rt.namespaced else "", name)
            if live is None:
                if subresource:
                    raise errors.not_found(rt.group, rt.plural, name)
                # PUT creates when the object is absent, for kinds that allow it; most do not.
                raise errors.not_found(rt.group, rt.plural, name)
            # Built-in kinds allow unconditional updates; custom resources and CRDs do not.
            if not meta.get("resourceVersion") and (not rt.builtin or rt.kind == "CustomResourceDefinition"):
                raise errors.ApiError(422, "Invalid", f'{rt.kind} "{name}" is invalid: metadata.resourceVersion: '
                                      "Invalid value: 0x0: must be specified for an update",
                                      {"name": name, **({"group": rt.group} if rt.group else {}), "kind": rt.kind,
                                       "causes": [{"reason": "FieldValueInvalid", "message": "Invalid value: 0x0: must be specified for an update",
                                                   "field": "metadata.resourceVersion"}]})
            self._check_rv(rt, live, meta.get("resourceVersion"))
            return self._commit(rt, ns, live, obj, opts, subresource, warnings=warnings)

    def patch(self, rt: ResourceType, ns: str, name: str, patch_type: str, patch: Any, opts: WriteOptions,
              subresource: str = "") -> Result:
        """PATCH: JSON patch, merge patch, strategic merge patch or server-side apply."""
        if patch_type.startswith("application/apply-patch"):
            return self.apply(rt, ns, name, patch, opts, subresource)
        if patch_type == STRATEGIC_PATCH and not rt.builtin:
            raise errors.ApiError(415, "UnsupportedMediaType",
                                  "strategic merge patch is not supported for custom resources", {})

        def patched(current: dict[str, Any], node: Any) -> dict[str, Any]:
            try:
                if patch_type == JSON_PATCH:
                    return json_patch(current, patch)
                if patch_type == MERGE_PATCH:
                    return json_merge_patch(current, patch)
                if patch_type == STRATEGIC_PATCH:
                    return strategic_merge_patch(current, patch, node)
            except PatchError as exc:
                raise errors.ApiError(422, "Invalid", str(exc)) from None
            raise errors.ApiError(415, "UnsupportedMediaType", f"the content type {patch_type} is not supported", {})

        if subresource == "scale":
            return self._write_scale(rt, ns, name, lambda scale: patched(scale, None), opts, update=False)
        with self.store.lock:
            live = self._must_get(rt, ns, name)
            current = self._present(rt, live)
            new = patched(copy.deepcopy(current), rt.schema_root())
            if rt.to_storage is not None:
                if isinstance(new, dict):
                    new.setdefault("metadata", {})["resourceVersion"] = _meta(live).get("resourceVersion")
                return self._converted(rt, self.replace(self.storage_type(rt), ns, name,
                                                        self._to_storage(rt, new), opts, subresource))
            if not isinstance(new, dict):
                raise errors.bad_request("the patch did not produce an object")
            nm = _meta(new)
            if nm.get("name") and nm["name"] != name:
                raise errors.bad_request(f"the name of the object ({nm['name']}) does not match the name on the URL ({name})")
            # A resourceVersion in the patch is a precondition, as with PUT.
            if nm.get("resourceVersion") != _meta(live).get("resourceVersion"):
                self._check_rv(rt, live, nm.get("resourceVersion"))
            obj, warnings = self._prepare_body(rt, new, opts.field_validation)
            return self._commit(rt, ns, live, obj, opts, subresource, warnings=warnings)

    def apply(self, rt: ResourceType, ns: str, name: str, config: Any, opts: WriteOptions,
              subresource: str = "") -> Result:
        """Server-side apply: create or merge ``config`` with field ownership and conflicts."""
        if not opts.field_manager:
            raise errors.bad_request("PATCH request with apply content type requires fieldManager param")
        if not isinstance(config, dict):
            raise errors.bad_request("error decoding YAML: the body is not an object")
        meta = _meta(config)
        if "managedFields" in meta and meta["managedFields"] is not None:
            raise errors.bad_request("metadata.managedFields must be nil")
        if meta.get("name") and meta["name"] != name:
            raise errors.bad_request(f"the name of the object ({meta['name']}) does not match the name on the URL ({name})")
        if rt.namespaced and meta.get("namespace") and meta["namespace"] != ns:
            raise errors.bad_request("the namespace of the provided object does not match the namespace sent on the request")
        if subresource == "scale":
            return self._write_scale(rt, ns, name, lambda scale: typed.merge(scale, config, None), opts, update=False)
        if rt.to_storage is not None:
            return self._converted(rt, self.apply(self.storage_type(rt), ns, name, self._to_storage(rt, config),
                                                  opts, subresource))
        root = rt.schema_root()
        if config.get("apiVersion") != rt.group_version or config.get("kind") != rt.kind:
            raise errors.bad_request(
                f"the API version in the data ({config.get('apiVersion')}) does not match the expected API version "
                f"({rt.group_version})" if config.get("apiVersion") != rt.group_version else
                f"the kind in the data ({config.get('kind')}) does not match the expected kind ({rt.kind})")
        gvknn = f"{ns}/{name}; {rt.group}/{rt.version}, Kind={rt.kind}"
        if root is not None:
            problems = typed.Problems()
            config = typed.sanitize(config, root, problems, default_keys=False)
            if problems.unknown_typed or problems.types:
                detail = problems.unknown_typed[0] + ": field not declared in schema" if problems.unknown_typed \
                    else problems.types[0]
                raise errors.internal(f"failed to create typed patch object ({gvknn}): {detail}")
        with self.store.lock:
            live = self.store.get(self._gr(rt), ns if rt.namespaced else "", name)
            if live is None:
                if subresource:
                    raise errors.not_found(rt.group, rt.plural, name)
                self._check_namespace(rt, ns, name)
            elif meta.get("resourceVersion"):
                self._check_rv(rt, live, meta.get("resourceVersion"))
            base = live if live is not None else {
                "apiVersion": rt.group_version, "kind": rt.kind,
                "metadata": {"name": name, **({"namespace": ns} if rt.namespaced else {})}}
            try:
                merged, managers = ssa.apply(base if live is not None else None, config, root, opts.field_manager,
                                             opts.force, rt.group_version, subresource, self._ignored(rt, subresource))
            except ssa.ApplyConflict as exc:
                raise errors.ApiError(409, "Conflict", exc.message(), {"causes": exc.causes()}) from None
            if live is None:
                merged = typed.merge(base, merged, root)
            return self._commit(rt, ns, live, merged, opts, subresource, managers=managers)

    def render_stored(self, rt: ResourceType, obj: dict[str, Any], status: dict[str, Any] | None,
                      manager: str) -> dict[str, Any]:
        """What creating ``obj`` and then writing ``status`` would store, without storing it.

        Node pools use it for the template their virtual nodes are generated from.
        """
        opts = WriteOptions(field_manager=manager, dry_run=True)
        with self.store.lock:
            created = self._commit(rt, "", None, copy.deepcopy(obj), opts).body
            created["metadata"]["resourceVersion"] = str(self.store.next_rv())
            if status is None:
                return created
            return self._commit(rt, "", created, dict(created, status=status), opts, "status").body

    # ------------------------------------------------------------------ scale

    def _scale_of(self, rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        def get(path: str) -> Any:
            cur: Any = obj
            for part in path.split("."):
                cur = cur.get(part) if isinstance(cur, dict) else None
            return cur

        meta = _meta(obj)
        selector = get(rt.label_selector_path) if rt.label_selector_path and not rt.builtin else None
        if rt.builtin:
            sel = (obj.get("spec") or {}).get("selector")
            selector = selectors.selector_to_string(sel) if isinstance(sel, dict) else sel
        status: dict[str, Any] = {"replicas": get(rt.status_replicas_path) or 0}
        if selector:
            status["selector"] = selector
        return {"kind": "Scale", "apiVersion": "autoscaling/v1",
                "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                             if k in meta},
                "spec": {"replicas": get(rt.spec_replicas_path) or 0}, "status": status}

    def get_scale(self, rt: ResourceType, ns: str, name: str) -> dict[str, Any]:
        """GET .../scale: an ``autoscaling/v1`` Scale."""
        if "scale" not in rt.subresources:
            raise errors.not_found(rt.group, rt.plural, name)
        return self._scale_of(rt, self._must_get(rt, ns, name))

    def _write_scale(self, rt: ResourceType, ns: str, name: str, change: Any, opts: WriteOptions, update: bool) -> Result:
        if "scale" not in rt.subresources:
            raise errors.not_found(rt.group, rt.plural, name)
        with self.store.lock:
            live = self._must_get(rt, ns, name)
            scale = change(self._scale_of(rt, live))
            if not isinstance(scale, dict):
                raise errors.bad_request("the body is not a Scale")
            wanted_rv = _meta(scale).get("resourceVersion")
            if update or wanted_rv:
                self._check_rv(rt, live, wanted_rv)
            replicas = (scale.get("spec") or {}).get("replicas")
            if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
                raise errors.invalid("autoscaling", "Scale", name, [{
                    "reason": "FieldValueInvalid", "field": "spec.replicas",
                    "message": f"Invalid value: {json.dumps(replicas)}: must be greater than or equal to 0"}])
            new = copy.deepcopy(live)
            cur = new
            parts = rt.spec_replicas_path.split(".")
            for part in parts[:-1]:
                cur = cur.setdefault(part, {})
            cur[parts[-1]] = replicas
            res = self._commit(rt, ns, live, new, opts, "scale")
            return Result(self._scale_of(rt, res.body), res.code, res.warnings)

    # ------------------------------------------------------------------ delete

    def delete(self, rt: ResourceType, ns: str, name: str, options: dict[str, Any] | None = None,
               dry_run: bool = False) -> Result:
        """DELETE: honours preconditions, propagationPolicy and finalizers."""
        options = options or {}
        if (rt.group, rt.kind) == ("", "Namespace") and name in IMMORTAL_NAMESPACES:
            raise errors.ApiError(403, "Forbidden", f'namespaces "{name}" is forbidden: this namespace may not be '
                                  "deleted", {"name": name, "kind": "namespaces"})
        with self.store.lock:
            live = self._must_get(rt, ns, name)
            pre = options.get("preconditions") or {}
            if pre.get("uid") and pre["uid"] != _meta(live).get("uid"):
                raise errors.conflict(rt.group, rt.plural, name,
                                      f"Precondition failed: UID in precondition: {pre['uid']}, UID in object meta: "
                                      f"{_meta(live).get('uid')}")
            if pre.get("resourceVersion"):
                self._check_rv(rt, live, pre["resourceVersion"])
            if dry_run or "All" in (options.get("dryRun") or []):
                return Result(self._present(rt, live))
            policy = options.get("propagationPolicy")
            if policy is None and options.get("orphanDependents") is not None:
                policy = "Orphan" if options["orphanDependents"] else "Background"
            return self._delete(rt, live, policy or "Background")

    def _delete(self, rt: ResourceType, live: dict[str, Any], policy: str) -> Result:
        meta = dict(_meta(live))
        finalizers = list(meta.get("finalizers") or [])
        if rt.kind == "Namespace" and rt.group == "":
            return self._delete_namespace(rt, live)
        if policy == "Foreground" and "foregroundDeletion" not in finalizers and self._dependents(live):
            finalizers.append("foregroundDeletion")
        if policy == "Orphan" and "orphan" not in finalizers and self._dependents(live):
            finalizers.append("orphan")
        if not finalizers:
            gone = self._finalize(rt, live)
            return Result(self._deleted_status(rt, gone))
        if not meta.get("deletionTimestamp"):
            meta["deletionTimestamp"] = _now()
            meta["deletionGracePeriodSeconds"] = 0
            if "generation" in meta:
                meta["generation"] = int(meta["generation"]) + 1
        meta["finalizers"] = finalizers
        stored = self.store.put(self._gr(rt), dict(live, metadata=meta), "MODIFIED")
        if rt.kind == "CustomResourceDefinition":
            self._crd_changed(stored)
        remaining = self._run_gc_finalizers(rt, stored)
        if remaining is None:
            return Result(self._deleted_status(rt, live))
        return Result(self._present(rt, remaining), 200)

    def _deleted_status(self, rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        # Kinds whose storage sets ReturnDeletedObject answer a delete with the object, as do
        # custom resources; other built-ins with a Status.
        if not rt.builtin or (rt.group, rt.kind) in RETURN_DELETED:
            return self._present(rt, obj)
        details: dict[str, Any] = {"name": _meta(obj)["name"]}
        if rt.group:
            details["group"] = rt.group
        details["kind"] = rt.plural
        details["uid"] = _meta(obj).get("uid")
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}

    def _all_types(self) -> dict[tuple[str, str], ResourceType]:
        out: dict[tuple[str, str], ResourceType] = {}
        for rt in self.registry.all():
            out.setdefault((rt.group, rt.plural), rt)
        return out

    def _dependents(self, owner: dict[str, Any]) -> builtins.list[tuple[ResourceType, dict[str, Any]]]:
        types = self._all_types()
        return [(types[gr], o) for gr, o in self.store.dependents(_meta(owner).get("uid") or "") if gr in types]

    def _run_gc_finalizers(self, rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any] | None:
        """Do the garbage collector's work for the foregroundDeletion and orphan finalizers, synchronously."""
        finalizers = list(_meta(obj).get("finalizers") or [])
        if "orphan" in finalizers:
            uid = _meta(obj).get("uid")
            for drt, dep in self._dependents(obj):
                refs = [r for r in _meta(dep).get("ownerReferences") or [] if r.get("uid") != uid]
                dmeta = dict(_meta(dep))
                if refs:
                    dmeta["ownerReferences"] = refs
                else:
                    dmeta.pop("ownerReferences", None)
                self.store.put(self._gr(drt), dict(dep, metadata=dmeta), "MODIFIED")
            finalizers.remove("orphan")
        if "foregroundDeletion" in finalizers:
            for drt, dep in self._dependents(obj):
                if self.store.get(self._gr(drt), _meta(dep).get("namespace", ""), _meta(dep)["name"]) is not None:
                    self._delete(drt, dep, "Foreground")
            if not self._dependents(obj):
                finalizers.remove("foregroundDeletion")
        if finalizers == list(_meta(obj).get("finalizers") or []):
            return obj
        meta = dict(_meta(obj), finalizers=finalizers)
        if not finalizers:
            meta.pop("finalizers")
            self._finalize(rt, dict(obj, metadata=meta))
            return None
        return self.store.put(self._gr(rt), dict(obj, metadata=meta), "MODIFIED")

    def _finalize(self, rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        """Remove an object for good, then collect what it owned and finish its namespace if it was the last."""
        gone = self.store.remove(self._gr(rt), obj)
        self.admission.written(rt, None, obj)
        meta = _meta(obj)
        if rt.kind == "CustomResourceDefinition" and rt.group == "apiextensions.k8s.io":
            self._drop_crd(obj)
            self.sync_apiservices()
        # Background propagation: dependents whose owners are all gone are deleted.
        for drt, dep in self._dependents(obj):
            owners = [r.get("uid") for r in _meta(dep).get("ownerReferences") or []]
            if not any(self._uid_exists(u) for u in owners if u != meta.get("uid")):
                current = self.store.get(self._gr(drt), _meta(dep).get("namespace", ""), _meta(dep)["name"])
                if current is not None and not _meta(current).get("deletionTimestamp"):
                    self._delete(drt, current, "Background")
        ns = meta.get("namespace")
        if ns:
            self._maybe_finish_namespace(ns)
        for owner_rt, owner in self._owners_waiting(obj):
            self._run_gc_finalizers(owner_rt, owner)
        return gone

    def _owners_waiting(self, obj: dict[str, Any]) -> builtins.list[tuple[ResourceType, dict[str, Any]]]:
        # Owners being deleted in the foreground wait for this dependent to go.
        out: builtins.list[tuple[ResourceType, dict[str, Any]]] = []
        types = self._all_types()
        for ref in _meta(obj).get("ownerReferences") or []:
            hit = self.store.by_uid(ref.get("uid") or "")
            if hit and hit[0] in types and "foregroundDeletion" in (_meta(hit[1]).get("finalizers") or []):
                out.append((types[hit[0]], hit[1]))
        return out

    def _uid_exists(self, uid: str | None) -> bool:
        return bool(uid) and self.store.by_uid(uid or "") is not None

    def _drop_crd(self, crd: dict[str, Any]) -> None:
        spec = crd.get("spec") or {}
        gr = (spec.get("group", ""), (spec.get("names") or {}).get("plural", ""))
        for o in self.store.list(gr):
            self.store.remove(gr, o)
        self.registry.sync_crd(crd, established=False)

    def _delete_namespace(self, rt: ResourceType, live: dict[str, Any]) -> Result:
        name = _meta(live)["name"]
        meta = dict(_meta(live))
        if not meta.get("deletionTimestamp"):
            meta["deletionTimestamp"] = _now()
            meta["deletionGracePeriodSeconds"] = 0
        ns_obj = dict(live, metadata=meta, status=dict(live.get("status") or {}, phase="Terminating"))
        if ns_obj != live:
            ns_obj = self.store.put(("", "namespaces"), ns_obj, "MODIFIED")
        if self.namespace_delay > 0:
            # The namespace controller works asynchronously: the namespace stays Terminating
            # (refusing new content) for a moment while its contents are deleted.
            timer = threading.Timer(self.namespace_delay, self._empty_namespace, args=(name,))
            timer.daemon = True
            timer.start()
        else:
            self._empty_namespace(name)
        return Result(self._present(rt, ns_obj))

    def _empty_namespace(self, name: str) -> None:
        """The namespace controller's job: delete everything in it, then drop the namespace."""
        with self.store.lock:
            types = self._all_types()
            for gr, obj in builtins.list(self.store.namespaced_objects(name)):
                drt = types.get(gr)
                current = self.store.get(gr, name, _meta(obj)["name"])
                if drt is not None and current is not None and not _meta(current).get("deletionTimestamp"):
                    self._delete(drt, current, "Background")
            self._maybe_finish_namespace(name)
        log.debug("namespace_emptied", cluster=self.cluster_name, namespace=name)

    def _maybe_finish_namespace(self, name: str) -> None:
        nso = self.store.get(("", "namespaces"), "", name)
        if nso is None or not _meta(nso).get("deletionTimestamp"):
            return
        if self.store.namespace_count(name):
            return
        self.store.remove(("", "namespaces"), dict(nso, spec=dict(nso.get("spec") or {}, finalizers=[])))

    def delete_collection(self, rt: ResourceType, ns: str | None, label_selector: str | None,
                          field_selector: str | None, options: dict[str, Any] | None = None) -> Result:
        """DELETE on a collection: delete every matching object."""
        listed = self.list(rt, ns, label_selector, field_selector)
        for item in listed["items"]:
            m = item["metadata"]
            try:
                self.delete(rt, m.get("namespace", ""), m["name"], options)
            except errors.ApiError as exc:
                if exc.code != 404:
                    raise
        return Result(listed)
