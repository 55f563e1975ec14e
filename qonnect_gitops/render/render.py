"""Turn a plan into per-cluster file trees, byte for byte deterministic.

Layout of the plan tree (the cluster branches carry the ``clusters/<name>`` subtrees)::

    placement.yaml                                             the decision (placement_file.py)
    placement/<hh>.yaml                                        its components, in 256 shards
    clusters/<cluster>/_cluster/namespace-<ns>.yaml
    clusters/<cluster>/<ns>/<component>/<kind>-<name>.yaml     one object per file
    clusters/<cluster>/<ns>/<component>/sops-<file>            SOPS files, untouched
    clusters/<cluster>/Kustomization                           the objects' files, for kustomize

Every object gets the ownership labels and a digest annotation of its own rendered
content, so a change elsewhere in the goals repository touches no cluster branch.

Each cluster that hosts something also gets a ``Kustomization`` file listing its object
files, so ``kubectl kustomize``, Flux and Argo CD build the branch as it is (see
``kustomization``). A cluster hosting nothing keeps the empty tree.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import posixpath
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from qonnect_gitops.model.goals import Component, Goals, Manifest, exposes_nodes
from qonnect_gitops.model.labels import (
    ADOPT_ANNOTATION,
    APP_LABEL,
    CILIUM_GLOBAL,
    CILIUM_SHARED,
    COMPONENT_LABEL,
    DIGEST_ANNOTATION,
    ENABLED,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
)
from qonnect_gitops.model.plan import Plan
from qonnect_gitops.model.pool import POOL_APP
from qonnect_gitops.model.secrets import plain_secrets
from qonnect_gitops.render.capi import capi_objects
from qonnect_gitops.render.nodes import constrain_pods
from qonnect_gitops.render.placement_file import PLACEMENT_FILE as PLACEMENT_FILE  # where readers look
from qonnect_gitops.render.placement_file import placement_files
from qonnect_gitops.render.shared import SharedObject, borrowed, definitions

SERVICE_EXPORT_API = "multicluster.x-k8s.io/v1alpha1"
# The name kustomize, Flux and Argo CD all recognise beside kustomization.yaml/.yml. Agents
# read only *.yaml and *.yml files, so this one is never taken for an object: an agent of
# an older version reads a branch that holds it exactly as before (a kustomization.yaml
# would stall every such agent with BranchUnreadable until it is upgraded).
KUSTOMIZATION_FILE = "Kustomization"
_PLAIN_PATH = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./-]*")


class RenderError(Exception):
    """The plan cannot be rendered as asked (e.g. plain secret data without the opt-in)."""


class PlanFiles(Mapping[str, bytes]):
    """The plan tree as ``{path: bytes}``, held grouped by cluster: each cluster's files as
    (path relative to ``clusters/<name>/``, bytes) pairs in path order, and the files
    outside ``clusters/`` (``placement.yaml`` and its shards).

    A reader of one cluster, or of which clusters have files, costs that cluster or the
    number of clusters, not a walk over every path of the fleet; the decision writer
    reads it this way (``gitstore.tree.GroupedFiles``) and remembers what it derived from
    it by identity, so it never changes once made. As a mapping it is the flat tree,
    iterated in path order (the full list is built on the first iteration)."""

    grouped_under = "clusters"

    def __init__(self, loose: Mapping[str, bytes],
                 clusters: Mapping[str, tuple[tuple[str, bytes], ...]]) -> None:
        self._loose = dict(loose)
        self._clusters = {name: files for name, files in clusters.items() if files}
        self._dicts: dict[str, dict[str, bytes]] = {}
        self._paths: list[str] | None = None

    def directories(self) -> Mapping[str, tuple[tuple[str, bytes], ...]]:
        """Each cluster with files and its files, relative to ``clusters/<name>/`` (read only)."""
        return self._clusters

    def loose(self) -> Mapping[str, bytes]:
        """The files outside ``clusters/``."""
        return self._loose

    def cluster(self, name: str) -> dict[str, bytes]:
        """One cluster's files, relative to its directory (a new dict each call)."""
        return dict(self._clusters.get(name, ()))

    def __getitem__(self, path: str) -> bytes:
        top, _, rest = path.partition("/")
        if top == self.grouped_under and rest:
            name, _, inside = rest.partition("/")
            files = self._dicts.get(name)
            if files is None:
                files = self._dicts[name] = dict(self._clusters.get(name, ()))
            return files[inside]
        return self._loose[path]

    def __contains__(self, path: object) -> bool:
        try:
            self[path]  # type: ignore[index]
        except (KeyError, TypeError):
            return False
        return True

    def __iter__(self) -> Iterator[str]:
        if self._paths is None:
            prefix = self.grouped_under
            self._paths = sorted([*self._loose, *(f"{prefix}/{name}/{path}" for name, files in self._clusters.items()
                                                  for path, _ in files)])
        return iter(self._paths)

    def __len__(self) -> int:
        return len(self._loose) + sum(len(files) for files in self._clusters.values())


@dataclass(frozen=True)
class RenderedPlan:
    """The plan tree (``files``: ``{path: bytes}``, grouped by cluster) and the clusters it covers."""

    files: PlanFiles
    clusters: tuple[str, ...]  # every cluster of the fleet, hosting something or not
    objects: Mapping[str, int] = field(default_factory=dict)  # files per cluster

    def cluster_files(self, cluster: str) -> dict[str, bytes]:
        """The files of one cluster branch, relative to its root."""
        return self.files.cluster(cluster)


def render(goals: Goals, plan: Plan) -> RenderedPlan:
    """Render every cluster's manifests for ``plan``. Pure and deterministic."""
    placement = placement_files(plan)
    # Each cluster's files as they are rendered (path inside clusters/<name>/ -> bytes).
    by_cluster: dict[str, dict[str, bytes]] = {}
    hosts = {key: plan.clusters_of(key) for key in sorted(plan.components)}
    callers_on = _caller_clusters(goals, hosts)
    app_hosts: dict[str, set[str]] = {}
    for key, where in hosts.items():
        app_hosts.setdefault(key.partition("/")[0], set()).update(where)
    defined = {name: definitions(app) for name, app in goals.apps.items()}
    for component in goals.components():
        for cluster, replicas in hosts.get(component.key, {}).items():
            files = by_cluster.setdefault(cluster, {})
            for path, body in _component_files_cached(goals, component, cluster, hosts[component.key], replicas):
                files[path] = body
            for shared in borrowed(component, defined[component.app]):
                path, body = _shared_file(goals, shared)
                files[path] = body
        consumers = app_hosts.get(component.app, set())
        for cluster, path, body in _service_files(goals, component, hosts, callers_on, consumers):
            by_cluster.setdefault(cluster, {})[path] = body
    for cluster, folder, obj in capi_objects(goals, plan):
        where = obj["metadata"]
        path = f"{where['namespace']}/{folder}/{obj['kind'].lower()}-{where['name']}.yaml"
        by_cluster.setdefault(cluster, {})[path] = _dump(_owned(obj, POOL_APP, folder))
    objects: dict[str, int] = {}
    adopted = {app.namespace for app in goals.apps.values() if app.document.spec.adopt_namespace}
    for cluster in goals.clusters:
        files = by_cluster.get(cluster, {})
        namespaces = sorted({p.split("/", 1)[0] for p in files} - {"_cluster"})
        for ns in namespaces:
            meta: dict[str, Any] = {"name": ns}
            if ns in adopted:
                meta["annotations"] = {ADOPT_ANNOTATION: ENABLED}
            files[f"_cluster/namespace-{ns}.yaml"] = _dump(_owned(
                {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}, None, None))
        objects[cluster] = len(files)
        if files:
            files[KUSTOMIZATION_FILE] = kustomization(files)
    grouped = {cluster: tuple(sorted(by_cluster[cluster].items())) for cluster in sorted(by_cluster)}
    return RenderedPlan(PlanFiles(placement, grouped), tuple(goals.clusters), objects)


def kustomization(files: Mapping[str, bytes]) -> bytes:
    """The ``Kustomization`` of one cluster's files: every object file, in path order.

    SOPS files (``sops-*``) are left out: the agent cannot decrypt them and skips them, and
    a build must yield what the agent applies. Written by hand, not by the YAML emitter: it
    is one line per file, and every cluster asks for it on every cycle (remembered by its names)."""
    paths = tuple(sorted(files))
    text = _KUSTOMIZATIONS.get(paths)
    if text is None:
        if len(_KUSTOMIZATIONS) >= _KUSTOMIZATIONS_MAX:
            _KUSTOMIZATIONS.clear()
        text = _KUSTOMIZATIONS[paths] = _kustomization_text(paths)
    return text


# A cluster's file names change far less often than it is rendered (every cycle, every
# cluster): the text by the sorted names. Content-keyed, so rendering stays pure.
_KUSTOMIZATIONS: dict[tuple[str, ...], bytes] = {}
_KUSTOMIZATIONS_MAX = 1 << 15


def _kustomization_text(paths: tuple[str, ...]) -> bytes:
    lines = ["# Written by qonnect: the objects of this cluster branch, for kubectl kustomize, Flux and Argo CD.\n",
             "apiVersion: kustomize.config.k8s.io/v1beta1\n", "kind: Kustomization\n", "resources:\n"]
    for path in paths:
        if path == KUSTOMIZATION_FILE or posixpath.basename(path).startswith("sops-") \
                or not path.endswith((".yaml", ".yml")):
            continue
        # A path of plain characters is a plain YAML scalar; any other is JSON-quoted,
        # which is a valid YAML double-quoted scalar.
        lines.append(f"- {path if _PLAIN_PATH.fullmatch(path) else json.dumps(path)}\n")
    return "".join(lines).encode()


def _caller_clusters(goals: Goals, hosts: Mapping[str, Mapping[str, int]]) -> dict[str, set[str]]:
    """For each component, the clusters where some component calling it runs."""
    result: dict[str, set[str]] = {}
    for component in goals.components():
        for callee in component.calls:
            result.setdefault(callee, set()).update(hosts.get(component.key, {}))
    return result


# A component's files on a cluster, by what they are a function of: the component's
# names and kind, its manifest objects and its app's document (by identity: the loader's
# parse cache hands the same objects to every Goals whose file blob did not change), the
# cluster and its Cluster object (pods are constrained to its nodes), and the replicas
# there and in all. An idle cycle renders nothing anew and a goals push re-renders only
# the components whose files it changed. Each entry holds the objects its key names by
# id, so their ids stay theirs while it lives.
_COMPONENT_FILES: dict[tuple[Any, ...], tuple[Any, tuple[tuple[str, bytes], ...]]] = {}
_COMPONENT_FILES_MAX = 1 << 17


def _component_files_cached(
    goals: Goals, component: Component, cluster: str, placed: Mapping[str, int], replicas: int
) -> tuple[tuple[str, bytes], ...]:
    document = goals.apps[component.app].document
    target = goals.clusters[cluster]
    manifests = tuple((m.path, m.encrypted, m.raw if m.encrypted else None, tuple(map(id, m.objects)),
                       m.namespaced) for m in component.manifests)
    key = (component.app, component.name, component.namespace, component.kind, id(component.workload),
           id(document), cluster, id(target), manifests, replicas, sum(placed.values()))
    hit = _COMPONENT_FILES.get(key)
    if hit is not None:
        return hit[1]
    out = tuple(_component_files(goals, component, cluster, placed, replicas))
    if len(_COMPONENT_FILES) >= _COMPONENT_FILES_MAX:
        _COMPONENT_FILES.clear()
    _COMPONENT_FILES[key] = ((component.manifests, component.workload, document, target), out)
    return out


def _component_files(
    goals: Goals, component: Component, cluster: str, placed: Mapping[str, int], replicas: int
) -> list[tuple[str, bytes]]:
    """Everything a component runs on one cluster, except its Services (see _service_files)."""
    out: list[tuple[str, bytes]] = []
    hpa = _autoscaler_of(component)
    total = sum(placed.values())
    for manifest in component.manifests:
        if manifest.encrypted:
            name = posixpath.basename(manifest.path)
            out.append((f"{component.namespace}/{component.name}/sops-{name}", manifest.raw))
            continue
        for index, source in enumerate(manifest.objects):
            if source.get("kind") == "Service":
                continue
            _refuse_plain_secret(goals, component, manifest, source)
            obj = copy.deepcopy(dict(source))
            if _same_object(source, component.workload):
                _set_replicas(obj, component, replicas, autoscaled=hpa is not None)
                constrain_pods(obj, component, goals.clusters[cluster])
            elif hpa is not None and _same_object(source, hpa):
                _split_autoscaler(obj, replicas, total)
            out.append(_object_file(obj, component, manifest.is_namespaced(index)))
    return out


def _refuse_plain_secret(goals: Goals, component: Component, manifest: Manifest, source: Mapping[str, Any]) -> None:
    if plain_secrets(source) and not goals.apps[component.app].document.spec.allow_plain_secrets:
        raise RenderError(
            f"{manifest.path}: a Secret in '{source['metadata']['name']}' holds plain data; "
            "refusing to write it to cluster branches"
        )


def _shared_file(goals: Goals, shared: SharedObject) -> tuple[str, bytes]:
    """An object another component's pods use, as its own component renders it (same path,
    same bytes: where both run it is one file)."""
    owner, manifest = shared.owner, shared.manifest
    if manifest.encrypted:
        return f"{owner.namespace}/{owner.name}/sops-{posixpath.basename(manifest.path)}", manifest.raw
    source = manifest.objects[shared.index]
    _refuse_plain_secret(goals, owner, manifest, source)
    return _object_file(copy.deepcopy(dict(source)), owner, manifest.is_namespaced(shared.index))


def _service_files(
    goals: Goals, component: Component, hosts: Mapping[str, Mapping[str, int]],
    callers_on: Mapping[str, set[str]], app_clusters: set[str],
) -> list[tuple[str, str, bytes]]:
    """A component's Services, as ``(cluster, path, bytes)``.

    A Service goes wherever its backends run (the components its selector matches, as
    with reviews v1/v2/v3 behind one Service). A ClusterIP Service (or headless or
    ExternalName) goes, made global by the mesh, also wherever a component of the same
    app runs (its name resolves app-wide, as in one cluster, whether or not ``calls``
    says so) and wherever a declared caller from another app runs. A LoadBalancer or
    NodePort Service opens a port to the outside: only where its backends run, never a
    public address with nothing behind it.
    """
    out = []
    mesh = goals.fleet.spec.mesh
    for manifest in component.manifests:
        if manifest.encrypted:
            continue
        for source in manifest.objects:
            if source.get("kind") != "Service":
                continue
            backends = {component.key} | goals.apps[component.app].selected_by(source)
            hosting = {c for key in backends for c in hosts.get(key, {})}
            consumers: set[str] = set()
            if not exposes_nodes(source):
                consumers = app_clusters | {c for key in backends for c in callers_on.get(key, set())}
            for cluster in sorted(hosting | consumers):
                obj = copy.deepcopy(dict(source))
                hosted = cluster in hosting
                _mark_for_mesh(obj, mesh, hosted=hosted)
                path, body = _object_file(obj, component, namespaced=True)
                out.append((cluster, path, body))
                if mesh == "mcs" and hosted:
                    path, body = _object_file(_service_export(obj), component, namespaced=True)
                    out.append((cluster, path, body))
    return out


def _same_object(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return a.get("kind") == b.get("kind") and a["metadata"]["name"] == b["metadata"]["name"]


def _object_file(obj: dict[str, Any], component: Component, namespaced: bool) -> tuple[str, bytes]:
    kind = obj["kind"]
    name = obj["metadata"]["name"]
    if not namespaced:
        obj["metadata"].pop("namespace", None)
        folder = "_cluster"
    else:
        obj["metadata"]["namespace"] = component.namespace
        folder = f"{component.namespace}/{component.name}"
    body = _owned(obj, component.app, component.name)
    return f"{folder}/{kind.lower()}-{name}.yaml", _dump(body)


def _owned(obj: dict[str, Any], app: str | None, component: str | None) -> dict[str, Any]:
    """Add the ownership labels and the digest annotation (of everything else)."""
    meta = obj["metadata"]
    labels = dict(meta.get("labels") or {})
    labels[MANAGED_BY_LABEL] = MANAGED_BY_VALUE
    if app is not None:
        labels[APP_LABEL] = app
    if component is not None:
        labels[COMPONENT_LABEL] = component
    meta["labels"] = labels
    annotations = dict(meta.get("annotations") or {})
    annotations.pop(DIGEST_ANNOTATION, None)
    if annotations:
        meta["annotations"] = annotations
    else:
        meta.pop("annotations", None)
    canonical = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    annotations[DIGEST_ANNOTATION] = "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()
    meta["annotations"] = annotations
    return obj


def _set_replicas(obj: dict[str, Any], component: Component, replicas: int, autoscaled: bool) -> None:
    if component.kind not in ("Deployment", "StatefulSet"):
        return
    spec = obj.setdefault("spec", {})
    if autoscaled:
        # The autoscaler owns the count; a replicas field here would fight it on every sync.
        spec.pop("replicas", None)
    else:
        spec["replicas"] = replicas


def _autoscaler_of(component: Component) -> Mapping[str, Any] | None:
    workload_name = component.workload["metadata"]["name"]
    for manifest in component.manifests:
        for obj in manifest.objects:
            target = (obj.get("spec") or {}).get("scaleTargetRef") or {}
            if (obj.get("kind") == "HorizontalPodAutoscaler"
                    and target.get("kind") == component.kind and target.get("name") == workload_name):
                return obj
    return None


def _split_autoscaler(obj: dict[str, Any], replicas: int, total: int) -> None:
    """Each cluster's autoscaler bounds, in proportion to the replicas placed there."""
    spec = obj.setdefault("spec", {})
    share = replicas / total if total else 1.0
    low = max(1, round(int(spec.get("minReplicas", 1)) * share))
    high = max(low, math.ceil(int(spec["maxReplicas"]) * share))
    spec["minReplicas"] = low
    spec["maxReplicas"] = high


def _mark_for_mesh(obj: dict[str, Any], mesh: str, hosted: bool) -> None:
    if mesh != "cilium":
        return
    meta = obj["metadata"]
    annotations = dict(meta.get("annotations") or {})
    annotations[CILIUM_GLOBAL] = "true"
    # Clusters without the component only consume the global service.
    annotations[CILIUM_SHARED] = "true" if hosted else "false"
    meta["annotations"] = annotations


def _service_export(service: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": SERVICE_EXPORT_API,
        "kind": "ServiceExport",
        "metadata": {"name": service["metadata"]["name"]},
    }


# YAML text by a digest of the data it was dumped from. Every cycle renders the whole
# fleet again and almost all of it is what the last cycle rendered; PyYAML's emitter
# is most of a cycle's cost at fleet scale, JSON encoding and hashing are a small part.
# Content-keyed, so rendering stays pure and deterministic; dropped whole when full.
_DUMPED: dict[bytes, bytes] = {}
_DUMPED_MAX = 1 << 18


def _dump(data: Any) -> bytes:
    # The key keeps key order (the YAML does too) and tells types apart that JSON
    # would not (a date from a manifest and the string it prints as).
    key = hashlib.blake2b(json.dumps(data, separators=(",", ":"), ensure_ascii=False,
                                     default=_typed).encode(), digest_size=20).digest()
    text = _DUMPED.get(key)
    if text is None:
        text = yaml.dump(
            data, Dumper=yaml.SafeDumper, sort_keys=False, default_flow_style=False, allow_unicode=True, width=4096
        ).encode()
        if len(_DUMPED) >= _DUMPED_MAX:
            _DUMPED.clear()
        _DUMPED[key] = text
    return text


def _typed(value: Any) -> str:
    return f"\0{type(value).__name__}\0{value}"
