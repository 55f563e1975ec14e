"""Load a goals repository: parse every file, validate it, cross-check the files against
each other, and resolve components. Reports every problem at once.

The loader is pure: it takes ``{path: bytes}`` (from ``source.read_directory`` or from a
Git tree) and returns ``Goals`` or raises ``GoalsError``.
"""

from __future__ import annotations

import gc
import hashlib
import posixpath
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any

from qonnect_gitops.model.advice import Advice, advise
from qonnect_gitops.model.app import ComponentSpec, QoS, QoSApp
from qonnect_gitops.model.cluster import Cluster
from qonnect_gitops.model.errors import GoalsError, Problem
from qonnect_gitops.model.fleet import Fleet
from qonnect_gitops.model.goals import (
    WORKLOAD_KINDS,
    App,
    Component,
    Goals,
    Manifest,
    StabilityRules,
)
from qonnect_gitops.model.kubeschema import KindCatalog, custom_kinds, split_api_version
from qonnect_gitops.model.labels import ADOPT_ANNOTATION, PRUNE_ANNOTATION
from qonnect_gitops.model.limits import (
    DEFAULT_TREE_LIMITS,
    GOALS_LIMIT_OPTIONS,
    MAX_NODE_CPU,
    MAX_NODE_MEMORY,
    MAX_REPLICAS,
    MAX_TREE_FILES,
    RESERVED_NAMESPACES,
    TreeLimits,
    system_rbac_name,
)
from qonnect_gitops.model.network import Network, latency_table
from qonnect_gitops.model.parsing import check_tree, load_documents
from qonnect_gitops.model.pool import ClusterPool
from qonnect_gitops.model.quantity import (
    format_bytes,
    format_millicores,
    to_bytes,
    to_millicores,
)
from qonnect_gitops.model.secrets import is_sops_encrypted, plain_secrets
from qonnect_gitops.model.yamlpos import M, YamlDocument, detached, parse_yaml, validate_document

FLEET_FILE = "qonnect.yaml"
NETWORK_FILE = "network.yaml"
CLUSTERS_DIR = "clusters/"
APPS_DIR = "apps/"
POOLS_DIR = "clusterPools/"
APP_FILE = "app.yaml"


def load_goals(files: Mapping[str, bytes], cache: ParseCache | None = None,
               limits: TreeLimits = DEFAULT_TREE_LIMITS) -> Goals:
    """Validate and resolve a goals tree. Raises GoalsError listing every problem found.

    A tree over ``limits`` (files, bytes) is refused before anything is parsed.

    Warnings (custom resources that could not be checked) are on ``Goals.warnings``.
    With ``cache`` (one per long-lived caller, such as the lead's loop), a file whose
    bytes were parsed by an earlier call is not parsed or validated again; the checks
    across files run every time, so the result is the same with or without it."""
    # A load allocates a large graph of small acyclic objects: the cyclic collector would
    # rescan it again and again as it grows (a quarter of a cold load, and long pauses in
    # the lead's process). Cycles made meanwhile are collected once it is re-enabled.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        if cache is None:
            return _Loader(files, ParseCache(), limits).load()
        cache.begin()
        return _Loader(files, cache, limits).load()
    finally:
        if was_enabled:
            gc.enable()


def blob_id(raw: bytes) -> str:
    """The Git blob id of ``raw``: the cache key, so an unchanged file in a new commit
    (same blob in the tree) is found without comparing contents."""
    return hashlib.sha1(b"blob %d\0" % len(raw) + raw, usedforsecurity=False).hexdigest()


class ParseCache:
    """Parsed and validated goals files, keyed by (path, what it was read as, blob id), and
    resolved components and apps, keyed by everything they were resolved from.

    Parsing (ruamel, positions kept) is most of the cost of loading goals; a cycle after
    a goals push re-parses only the files whose blob changed. Entries hold plain data
    and the file's bytes, not ruamel's node trees (several times larger): a problem's
    position re-parses its file. An entry not used by the
    last two loads is dropped, so the cache holds about one goals tree. Parsed documents
    are shared between the ``Goals`` of different commits: nothing mutates them (the
    lead already reuses one ``Goals`` across cycles of a commit). One load at a time: the
    lead's loop loads goals under its cycle lock (the pure core takes no locks).

    A component is resolved again only when one of its inputs changed: its app.yaml, its
    manifest files (blob ids), the custom kinds of the goals, or the fleet's stability
    defaults; otherwise the load returns the very ``Component`` (and, when none of an app's
    components changed, ``App``) objects of the last load, so a caller may keep what it
    derived from them keyed on the objects. Only resolutions without problems are kept.
    """

    KEEP_LOADS = 2

    def __init__(self) -> None:
        self._entries: dict[tuple[Any, ...], Any] = {}
        # The last load that used each entry, apart from the entry: a hit stores an int
        # here and allocates nothing the cyclic collector tracks. (A ``(load, value)``
        # pair per hit made a new tuple for every file of every load, and a new dict
        # in ``begin``: 100,000 young containers after a cached load at 3,000 clusters,
        # which the next collection walked whole, every thread stopped.)
        self._used: dict[tuple[Any, ...], int] = {}
        self._load = 0
        self._paths: dict[tuple[str, str], str] = {}
        self.parsed = 0
        """Files parsed (cache misses) since the cache was made: what a test or a benchmark reads."""

    def __len__(self) -> int:
        return len(self._entries)

    def begin(self) -> None:
        """Start a load: entries unused by the last ``KEEP_LOADS`` loads are dropped."""
        self._load += 1
        oldest = self._load - self.KEEP_LOADS
        # Dropped in place: the dicts stay the (long-lived, often frozen) objects they were.
        for key in [key for key, used in self._used.items() if used < oldest]:
            del self._entries[key], self._used[key]

    def get(self, key: tuple[Any, ...]) -> Any:
        """The entry of ``key`` (marked used by this load), or None."""
        hit = self._entries.get(key)
        if hit is not None:
            self._used[key] = self._load
        return hit

    def put(self, key: tuple[Any, ...], value: Any) -> None:
        """Remember a parse result (documents, or the problems found)."""
        self.parsed += 1
        self.keep(key, value)

    def manifest_path(self, app_path: str, relative: str) -> str:
        """Where ``relative``, written in ``app_path``, points (normalised; it may leave the app)."""
        key = (app_path, relative)
        path = self._paths.get(key)
        if path is None:
            if len(self._paths) > 4 * MAX_TREE_FILES:
                self._paths.clear()  # names of files long gone
            path = self._paths[key] = posixpath.normpath(posixpath.join(posixpath.dirname(app_path), relative))
        return path

    def keep(self, key: tuple[Any, ...], value: Any) -> None:
        """Remember a result built from parsed files (not counted in ``parsed``)."""
        self._entries[key] = value
        self._used[key] = self._load


class _Loader:
    def __init__(self, files: Mapping[str, bytes], cache: ParseCache, limits: TreeLimits) -> None:
        self.files = files
        self.cache = cache
        self.limits = limits
        self.problems: list[Problem] = []
        self.warnings: list[Problem] = []
        self.docs: dict[str, YamlDocument] = {}
        self.manifest_docs: dict[str, list[YamlDocument]] = {}
        self.kinds = KindCatalog()
        self.kinds_key = ""  # identifies the custom kinds: object checks are cached per kinds
        self._blobs: dict[str, str] = {}
        self._declared: set[str] | None = None
        self._stability: tuple[tuple[str, Any], ...] | None = None

    def _latency_table(self, network: Network) -> dict[tuple[str, str], float]:
        """``latency_table`` of network.yaml, kept with its blob: the table of an unchanged
        file is the one of the last load, not two new pairs per link (48,000 containers
        at 3,000 clusters, which the collector walks), like the parsed files it comes from."""
        key = (NETWORK_FILE, "latency-table", self._blob(NETWORK_FILE))
        table: dict[tuple[str, str], float] | None = self.cache.get(key)
        if table is None:
            table = latency_table(network.spec.latencies)
            self.cache.keep(key, table)
        return table

    def _blob(self, path: str) -> str:
        """The blob id of a file of the tree, computed once per load."""
        found = self._blobs.get(path)
        if found is None:
            found = self._blobs[path] = blob_id(self.files[path])
        return found

    # -- parsing ---------------------------------------------------------------------------

    def _document(self, path: str, model: type[M]) -> M | None:
        """Parse and validate one single-document file; None (problems recorded) when bad."""
        raw = self.files[path]
        key = (path, model.__name__, self._blob(path))
        cached = self.cache.get(key)
        if cached is None:
            doc: YamlDocument | None = None
            try:
                (doc,) = parse_yaml(path, raw)
                doc = detached(doc, raw, 0)
                cached = (doc, validate_document(model, doc), ())
            except GoalsError as exc:
                cached = (doc, None, tuple(exc.problems))
            self.cache.put(key, cached)
        doc, value, problems = cached
        if doc is not None:
            self.docs[path] = doc
        self.problems.extend(problems)
        return value if isinstance(value, model) else None

    def _parse_manifest(self, path: str) -> list[YamlDocument]:
        """Every non-empty document of a manifest file; raises GoalsError (cached too)."""
        raw = self.files[path]
        key = (path, "manifest", self._blob(path))
        cached = self.cache.get(key)
        if cached is None:
            try:
                cached = [detached(d, raw, i) for i, d in enumerate(parse_yaml(path, raw, multi=True))
                          if d.data is not None]
            except GoalsError as exc:
                cached = exc
            self.cache.put(key, cached)
        if isinstance(cached, GoalsError):
            raise GoalsError(list(cached.problems))
        return list(cached)

    def load(self) -> Goals:
        tree = check_tree(self.files, "the goals tree", self.limits, GOALS_LIMIT_OPTIONS)
        if tree:
            raise GoalsError(tree)  # nothing is parsed from a tree over the limits
        self.kinds = KindCatalog(self._custom_kinds())
        fleet = self._load_fleet()
        network = self._document(NETWORK_FILE, Network) if NETWORK_FILE in self.files else None
        clusters = self._load_clusters()
        pools = self._load_pools(set(fleet.spec.regions) if fleet else set())
        apps_docs = self._load_app_documents()
        regions = set(fleet.spec.regions) if fleet else set()
        latencies: dict[tuple[str, str], float] = {}
        if fleet is not None:
            self._check_region_names(fleet)
        if network is not None and fleet is not None:
            # References to a cluster whose own file is broken are not errors of their own:
            # one mistake should produce one problem, not one per mention.
            self._check_network(network, self._declared_clusters(), regions)
            latencies = self._latency_table(network)
        apps: dict[str, App] = {}
        if fleet is not None:
            network_broken = NETWORK_FILE in self.files and network is None
            # With network.yaml broken nothing can be said about which regions are measured.
            measured_regions = (
                set(regions) if network_broken
                else {dst for (src, dst) in latencies if src in clusters}
            )
            declared = self._declared_clusters()
            for name, (path, doc) in sorted(apps_docs.items()):
                app = self._resolve_app(path, doc, fleet, declared, regions, measured_regions)
                if app is not None:
                    apps[name] = app
            self._check_calls(apps_docs, apps)
            self._check_unique_objects(apps)
            self._check_cluster_branches(fleet, clusters)
        if self.problems:
            raise GoalsError(self.problems)
        assert fleet is not None
        goals = Goals(
            fleet=fleet,
            clusters=dict(sorted(clusters.items())),
            network=network,
            apps=dict(sorted(apps.items())),
            latencies=latencies,
            pools=dict(sorted(pools.items())),
        )
        self.warnings += [self._locate(a) for a in advise(goals)]
        return replace(goals, warnings=tuple(sorted(set(self.warnings))))

    def _locate(self, advice: Advice) -> Problem:
        """An advice as a warning with the line and column of the field it is about."""
        doc = self.docs[advice.path] if advice.path in self.docs else self.manifest_docs[advice.path][advice.index]
        return doc.problem(advice.loc, advice.message)

    def _custom_kinds(self) -> dict[tuple[str, str], Any]:
        """Kinds the CustomResourceDefinitions in the app folders define. Only files that
        mention the kind are read (with libyaml); unreadable ones are reported later, when the
        component that lists them is loaded."""
        crds: list[Any] = []
        sources = hashlib.sha1(usedforsecurity=False)
        for path, raw in sorted(self.files.items()):
            if path.startswith(APPS_DIR) and path.endswith((".yaml", ".yml")) \
                    and b"CustomResourceDefinition" in raw:
                sources.update(f"{path}\0{self._blob(path)}\0".encode())
                self.kinds_key = sources.hexdigest()
                try:
                    crds += load_documents(path, raw)
                except GoalsError:
                    continue
        return custom_kinds(crds)

    def _load_fleet(self) -> Fleet | None:
        if FLEET_FILE not in self.files:
            self.problems.append(
                Problem(FLEET_FILE, None, None, "", "missing; every goals repository needs a "
                        "Fleet document at its root")
            )
            return None
        return self._document(FLEET_FILE, Fleet)

    def _declared_clusters(self) -> set[str]:
        """Names of every cluster file, valid or not (a set the caller must not change)."""
        if self._declared is None:
            self._declared = {
                p[len(CLUSTERS_DIR):].rsplit(".", 1)[0]
                for p in self.files
                if p.startswith(CLUSTERS_DIR) and "/" not in p[len(CLUSTERS_DIR):]
                and p.endswith((".yaml", ".yml"))
            }
        return self._declared

    def _named_documents(self, folder: str, model: Any, what: str) -> Iterator[tuple[str, Any]]:
        """``(path, document)`` of every valid file directly in ``folder`` whose name is its
        file's (a mismatch is reported); ``what`` names the kind in the message."""
        for path in sorted(self.files):
            rest = path[len(folder):]
            if not path.startswith(folder) or "/" in rest or not rest.endswith((".yaml", ".yml")):
                continue
            doc = self._document(path, model)
            if doc is None:
                continue
            stem = rest.rsplit(".", 1)[0]
            if doc.metadata.name != stem:
                self._report(
                    path, ("metadata", "name"),
                    f"'{doc.metadata.name}' does not match the file name; expected '{stem}' "
                    f"(the file of {what} X is {folder}X.yaml)",
                )
                continue
            yield path, doc

    def _load_clusters(self) -> dict[str, Cluster]:
        return {cluster.name: cluster for _, cluster in self._named_documents(CLUSTERS_DIR, Cluster, "cluster")}

    def _load_pools(self, regions: set[str]) -> dict[str, ClusterPool]:
        """``clusterPools/*.yaml``: each pool's name matches its file, its management
        cluster is a fleet member, its latencies name regions or clusters."""
        declared = self._declared_clusters()
        pools: dict[str, ClusterPool] = {}
        for path, pool in self._named_documents(POOLS_DIR, ClusterPool, "pool"):
            spec = pool.spec
            if spec.management_cluster not in declared:
                self._report(path, ("spec", "managementCluster"),
                             f"unknown cluster '{spec.management_cluster}'; expected the fleet "
                             f"cluster running Cluster API, one of: {_names(declared)}")
            if regions and spec.region not in regions:
                self._report(path, ("spec", "region"), f"unknown region '{spec.region}'; expected "
                             f"one of the regions in qonnect.yaml: {_names(regions)}")
            for i, link in enumerate(spec.latencies):
                if link.to not in declared and link.to not in regions:
                    self._report(path, ("spec", "latencies", i, "to"),
                                 f"unknown cluster or region '{link.to}'; expected a cluster "
                                 f"({_names(declared)}) or a region ({_names(regions)})")
            if any(c.startswith(f"{pool.name}-") for c in declared):
                self._report(path, ("metadata", "name"),
                             f"clusters of pool '{pool.name}' are named '{pool.name}-<n>'; a fleet "
                             "cluster already uses that prefix")
            pools[pool.name] = pool
        return pools

    def _load_app_documents(self) -> dict[str, tuple[str, QoSApp]]:
        folders = sorted(
            {p[len(APPS_DIR):].split("/", 1)[0] for p in self.files
             if p.startswith(APPS_DIR) and p.count("/") >= 2}
        )
        apps: dict[str, tuple[str, QoSApp]] = {}
        for folder in folders:
            path = f"{APPS_DIR}{folder}/{APP_FILE}"
            if path not in self.files:
                self.problems.append(
                    Problem(path, None, None, "", f"missing; the folder apps/{folder}/ needs an "
                            "app.yaml with a QoSApp document")
                )
                continue
            app = self._document(path, QoSApp)
            if app is None:
                continue
            if app.metadata.name != folder:
                self._report(
                    path, ("metadata", "name"),
                    f"'{app.metadata.name}' does not match the folder; expected '{folder}'",
                )
                continue
            apps[folder] = (path, app)
        return apps

    def _report(self, path: str, loc: tuple[int | str, ...], message: str, key: bool = False) -> None:
        self.problems.append(self.docs[path].problem(loc, message, key=key))

    # -- cross-file checks -----------------------------------------------------------------

    def _check_region_names(self, fleet: Fleet) -> None:
        # network.yaml's `to` names a cluster or a region: the two must never be confused.
        for i, region in enumerate(fleet.spec.regions):
            if region in self._declared_clusters():
                self._report(FLEET_FILE, ("spec", "regions", i),
                             f"region '{region}' has the name of a cluster; expected distinct names")

    def _check_network(self, network: Network, clusters: set[str], regions: set[str]) -> None:
        seen: set[tuple[str, str]] = set()
        for i, link in enumerate(network.spec.latencies):
            loc: tuple[int | str, ...] = ("spec", "latencies", i)
            if link.from_ not in clusters:
                self._report(NETWORK_FILE, loc + ("from",),
                             f"unknown cluster '{link.from_}'; expected one of: {_names(clusters)}")
            if link.to not in clusters and link.to not in regions:
                self._report(NETWORK_FILE, loc + ("to",),
                             f"unknown cluster or region '{link.to}'; expected a cluster "
                             f"({_names(clusters)}) or a region of qonnect.yaml ({_names(regions)})")
            if link.from_ == link.to:
                self._report(NETWORK_FILE, loc + ("to",), "a link from a cluster to itself")
            if (link.from_, link.to) in seen:
                self._report(NETWORK_FILE, loc,
                             f"the latency from '{link.from_}' to '{link.to}' is given twice")
            seen.add((link.from_, link.to))

    def _check_qos_references(
        self, path: str, loc: tuple[int | str, ...], qos: QoS,
        clusters: set[str], regions: set[str], measured: set[str],
    ) -> None:
        for i, goal in enumerate(qos.latency):
            where = loc + ("latency", i, "region")
            if goal.region not in regions:
                self._report(path, where, f"unknown region '{goal.region}'; expected one of the "
                             f"regions in qonnect.yaml: {_names(regions)}")
            elif goal.region not in measured:
                self._report(path, where, f"no cluster has a latency to region '{goal.region}' "
                             "in network.yaml, so this goal cannot be checked; add one")
        for i, name in enumerate(qos.placement.clusters):
            if name not in clusters:
                self._report(path, loc + ("placement", "clusters", i),
                             f"unknown cluster '{name}'; expected one of: {_names(clusters)}")

    def _component_names_as_written(self) -> set[str]:
        """``app/component`` for every component named in a parseable app.yaml, valid or not."""
        names = set()
        for path, doc in self.docs.items():
            if not (path.startswith(APPS_DIR) and path.endswith("/" + APP_FILE)):
                continue
            app = path[len(APPS_DIR):].split("/", 1)[0]
            spec = doc.data.get("spec") if isinstance(doc.data, dict) else None
            components = spec.get("components") if isinstance(spec, dict) else None
            for item in components if isinstance(components, list) else []:
                if isinstance(item, dict) and isinstance(item.get("name"), str):
                    names.add(f"{app}/{item['name']}")
        return names

    def _check_calls(self, docs: dict[str, tuple[str, QoSApp]], apps: dict[str, App]) -> None:
        # Components of apps with problems of their own still exist as far as callers go.
        known = self._component_names_as_written()
        for name, (path, doc) in docs.items():
            if name not in apps:
                continue  # already reported
            for ci, spec in enumerate(doc.spec.components):
                for field, names, itself in (("calls", spec.calls, "call itself"),
                                             ("colocateWith", spec.colocate_with, "be colocated with itself")):
                    for k, written in enumerate(names):
                        target = written if "/" in written else f"{name}/{written}"
                        loc = ("spec", "components", ci, field, k)
                        if target == f"{name}/{spec.name}":
                            self._report(path, loc, f"a component cannot {itself}")
                        elif target not in known:
                            self._report(path, loc, f"unknown component '{written}'; expected a "
                                         f"component of this app or 'app/component' ({_names(known)})")
        self._check_colocation_cycles(apps)

    def _check_colocation_cycles(self, apps: dict[str, App]) -> None:
        """``colocateWith`` follows anchors: a chain that comes back to where it started has
        no anchor to follow."""
        follows = {c.key: c.colocate_with for app in apps.values() for c in app.components}
        for app in apps.values():
            for ci, c in enumerate(app.components):
                seen, todo = set(), list(c.colocate_with)
                while todo:
                    k = todo.pop()
                    if k == c.key:
                        self._report(f"{APPS_DIR}{app.name}/{APP_FILE}", ("spec", "components", ci, "colocateWith"),
                                     "colocateWith leads back to this component; one of them must be the anchor "
                                     "the others follow")
                        break
                    if k not in seen:
                        seen.add(k)
                        todo.extend(follows.get(k, ()))

    def _check_unique_objects(self, apps: dict[str, App]) -> None:
        """The same object (group, kind, namespace, name) may be defined once in all the goals."""
        seen: dict[tuple[str, str, str, str], str] = {}
        for app in apps.values():
            for component in app.components:
                for manifest in component.manifests:
                    if manifest.encrypted:
                        continue
                    for obj_doc, namespaced in zip(self.manifest_docs[manifest.path], manifest.namespaced,
                                                   strict=True):
                        obj = obj_doc.data
                        kind = str(obj["kind"])
                        group = split_api_version(str(obj["apiVersion"]))[0]
                        ns = app.namespace if namespaced else ""
                        ident = (group, kind, ns, str(obj["metadata"]["name"]))
                        if ident in seen:
                            self.problems.append(obj_doc.problem(
                                ("metadata", "name"),
                                f"{kind} '{ident[3]}' is also defined in {seen[ident]}; "
                                "each object must be defined once"))
                        seen.setdefault(ident, manifest.path)

    def _check_cluster_branches(self, fleet: Fleet, clusters: dict[str, Cluster]) -> None:
        """A cluster whose branch would be (or nest with) the goals or plan branch is refused."""
        for name in clusters:
            why = fleet.spec.branches.cluster_branch_conflict(name)
            if why:
                path = next(p for p in (f"{CLUSTERS_DIR}{name}.yaml", f"{CLUSTERS_DIR}{name}.yml")
                            if p in self.docs)
                self._report(path, ("metadata", "name"), why)

    # -- apps and components ---------------------------------------------------------------

    def _resolve_app(
        self, path: str, doc: QoSApp, fleet: Fleet, clusters: set[str],
        regions: set[str], measured: set[str],
    ) -> App | None:
        before = len(self.problems)
        self._check_qos_references(path, ("spec", "defaults", "qos"), doc.spec.defaults.qos,
                                   clusters, regions, measured)
        names: set[str] = set()
        used_files: dict[str, str] = {}
        components = []
        for ci, spec in enumerate(doc.spec.components):
            loc: tuple[int | str, ...] = ("spec", "components", ci)
            if spec.name in names:
                self._report(path, loc + ("name",), f"component '{spec.name}' is defined twice")
                continue
            names.add(spec.name)
            self._check_qos_references(path, loc + ("qos",), spec.qos, clusters, regions, measured)
            component = self._component(path, ci, doc, spec, fleet, used_files)
            if component is not None:
                components.append(component)
        if len(self.problems) > before:
            return None
        # The same components from the same app.yaml: the App object of the last load.
        key = ("app", path, self._blob(path))
        kept = self.cache.get(key)
        if kept is not None and kept.document is doc and len(kept.components) == len(components) \
                and all(a is b for a, b in zip(kept.components, components, strict=True)):
            return kept  # type: ignore[no-any-return]
        app = App(doc.metadata.name, doc.spec.namespace, doc, tuple(components))
        self.cache.keep(key, app)
        return app

    def _component(
        self, app_path: str, ci: int, doc: QoSApp, spec: ComponentSpec, fleet: Fleet,
        used_files: dict[str, str],
    ) -> Component | None:
        """Component ``ci`` of an app: the one resolved by an earlier load when none of its
        inputs changed (see ``ParseCache``), else resolved now."""
        inputs = []
        for relative in spec.manifests:
            path = self.cache.manifest_path(app_path, relative)
            inputs.append((path, self._blob(path) if path in self.files else None))
        if self._stability is None:  # every field of the defaults, hashed once per load
            self._stability = tuple(sorted(fleet.spec.stability.model_dump().items()))
        key = ("component", app_path, self._blob(app_path), ci, self.kinds_key, self._stability,
               tuple(inputs))
        kept = self.cache.get(key)
        if kept is not None:
            same: Component = kept[0]
            if not any(m.path in used_files for m in same.manifests):
                # As resolving it again would: its files are taken, their objects and warnings known.
                for m in same.manifests:
                    used_files[m.path] = spec.name
                    # Its files stay parsed, for when another input (the fleet's defaults) changes.
                    self.cache.get((m.path, "manifest", self._blob(m.path)))
                    self.cache.get(self._objects_key(m.path))
                for path, objects, warnings in kept[1]:
                    self.manifest_docs[path] = list(objects)
                    self.warnings.extend(warnings)
                return same
        before = len(self.problems)
        component = self._resolve_component(app_path, ("spec", "components", ci), doc, spec, fleet, used_files)
        if component is not None and len(self.problems) == before:
            read = tuple((m.path, tuple(self.manifest_docs[m.path]), self.cache.get(self._objects_key(m.path))[4])
                         for m in component.manifests)
            self.cache.keep(key, (component, read))
        return component

    def _read_manifest(
        self, app_path: str, loc: tuple[int | str, ...], relative: str
    ) -> tuple[Manifest, list[YamlDocument]] | None:
        """A component's manifest file and the document of each object in it."""
        folder = posixpath.dirname(app_path)
        path = posixpath.normpath(posixpath.join(folder, relative))
        if relative.startswith("/") or not path.startswith(folder + "/"):
            self._report(app_path, loc, f"'{relative}' leaves the app folder; expected a path "
                         f"inside {folder}/")
            return None
        if path not in self.files:
            self._report(app_path, loc, f"manifest file '{relative}' not found (looked for {path})")
            return None
        try:
            docs = self._parse_manifest(path)
        except GoalsError as exc:
            self.problems.extend(exc.problems)
            return None
        if not docs:
            self._report(app_path, loc, f"manifest file '{relative}' holds no objects")
            return None
        checked = self.cache.get(self._objects_key(path))
        if checked is None:
            checked = self._check_objects(docs)
            self.cache.put(self._objects_key(path), checked)
        objects, encrypted, namespaced, problems, warnings = checked
        self.problems.extend(problems)
        self.warnings.extend(warnings)
        self.manifest_docs[path] = list(objects)
        return Manifest(path, self.files[path], tuple(d.data for d in objects), encrypted, namespaced), list(objects)

    def _objects_key(self, path: str) -> tuple[str, str, str]:
        return (path, f"objects {self.kinds_key}", self._blob(path))

    def _check_objects(self, docs: list[YamlDocument]) -> tuple[
            tuple[YamlDocument, ...], bool, tuple[bool, ...], tuple[Problem, ...], tuple[Problem, ...]]:
        """The objects of one manifest file, whether it is SOPS-encrypted, whether each
        object is namespaced, and the problems and warnings of each: a function of the
        file's bytes and the custom kinds alone (what the cache keys it by)."""
        problems: list[Problem] = []
        warnings: list[Problem] = []
        encrypted = any(isinstance(d.data, dict) and is_sops_encrypted(d.data) for d in docs)
        objects = []
        for d in docs:
            if not isinstance(d.data, dict):
                problems.append(d.problem((), "expected a Kubernetes object (a mapping)"))
                continue
            well_formed = True
            for field in ("apiVersion", "kind"):
                if not isinstance(d.data.get(field), str) or not d.data[field]:
                    problems.append(d.problem((field,), f"every object needs a '{field}' string"))
                    well_formed = False
            meta = d.data.get("metadata")
            if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
                problems.append(d.problem(("metadata",), "every object needs metadata.name"))
                well_formed = False
            if well_formed and not encrypted:
                self._check_object(d, problems, warnings)
            objects.append(d)
        namespaced = tuple(
            self.kinds.namespaced(str(d.data.get("apiVersion", "")), str(d.data.get("kind", ""))) for d in objects
        )
        return tuple(objects), encrypted, namespaced, tuple(problems), tuple(warnings)

    def _check_object(self, doc: YamlDocument, problems: list[Problem], warnings: list[Problem]) -> None:
        """The object as the Kubernetes API would check it, and qonnect's own rules for it."""
        obj = doc.data
        for finding in self.kinds.check(obj):
            problem = doc.problem(finding.loc, finding.message, key=finding.key)
            (warnings if finding.warning else problems).append(problem)
        name = obj["metadata"]["name"]
        if obj["kind"] == "Namespace" and split_api_version(obj["apiVersion"])[0] == "" \
                and name in RESERVED_NAMESPACES:
            problems.append(doc.problem(("metadata", "name"), f"namespace '{name}' is reserved "
                                 f"({', '.join(sorted(RESERVED_NAMESPACES))}); agents never touch it"))
        if system_rbac_name(split_api_version(obj["apiVersion"])[0], obj["kind"], name):
            warnings.append(doc.problem(
                ("metadata", "name"), f"{obj['kind']} '{name}' is part of the cluster's own RBAC: agents refuse "
                "it (SystemObject) and keep running what they applied, unless an agent's own "
                "--allow-system-object lists it"))
        annotations = obj["metadata"].get("annotations")
        if isinstance(annotations, dict) and annotations.get(PRUNE_ANNOTATION) == "enabled":
            warnings.append(doc.problem(
                ("metadata", "annotations", PRUNE_ANNOTATION),
                f"{PRUNE_ANNOTATION}: enabled has no effect in goals: agents never take it from a "
                "branch; a person sets it on the live object to let a protected kind be deleted"))
        if isinstance(annotations, dict) and annotations.get(ADOPT_ANNOTATION) not in (None, "enabled"):
            problems.append(doc.problem(("metadata", "annotations", ADOPT_ANNOTATION),
                                 f"got {annotations[ADOPT_ANNOTATION]!r}; expected 'enabled' (or leave it out)"))

    def _resolve_component(
        self, app_path: str, loc: tuple[int | str, ...], doc: QoSApp, spec: ComponentSpec,
        fleet: Fleet, used_files: dict[str, str],
    ) -> Component | None:
        before = len(self.problems)
        manifests: list[Manifest] = []
        workloads: list[tuple[YamlDocument, dict[str, Any]]] = []
        for mi, relative in enumerate(spec.manifests):
            read = self._read_manifest(app_path, loc + ("manifests", mi), relative)
            if read is None:
                continue
            manifest, object_docs = read
            if manifest.path in used_files:
                self._report(app_path, loc + ("manifests", mi),
                             f"'{relative}' is already used by component '{used_files[manifest.path]}';"
                             " each manifest file belongs to one component")
                continue
            used_files[manifest.path] = spec.name
            manifests.append(manifest)
            for d, namespaced in zip(object_docs, manifest.namespaced, strict=True):
                obj = d.data
                ns = (obj.get("metadata") or {}).get("namespace") if isinstance(obj.get("metadata"), dict) else None
                if ns is not None and ns != doc.spec.namespace and namespaced:
                    self.problems.append(d.problem(("metadata", "namespace"),
                                         f"'{ns}' differs from the app namespace; expected "
                                         f"'{doc.spec.namespace}' or no namespace"))
                if not doc.spec.allow_plain_secrets:
                    for where in plain_secrets(obj):
                        self.problems.append(d.problem(where + ("kind",),
                                             f"Secret '{_secret_name(obj, where)}' holds plain data that "
                                             "would be written unencrypted to cluster branches; encrypt "
                                             "the file with SOPS, or set spec.allowPlainSecrets: true"))
                if obj.get("kind") in WORKLOAD_KINDS and not manifest.encrypted:
                    workloads.append((d, obj))
        if len(self.problems) > before:
            return None
        if not workloads:
            self._report(app_path, loc + ("manifests",),
                         f"component '{spec.name}' has no workload; expected exactly one "
                         f"{', '.join(WORKLOAD_KINDS)} in its manifests")
            return None
        if len(workloads) > 1:
            extra_doc, extra = workloads[1]
            self.problems.append(extra_doc.problem(("kind",),
                                 f"a second workload ({extra['kind']}) in component '{spec.name}'; "
                                 "expected exactly one per component: split it into two components"))
            return None
        wdoc, workload = workloads[0]
        kind = workload["kind"]
        pod_loc = _pod_spec_loc(kind)
        pod_spec = _dig(workload, pod_loc)
        containers = pod_spec.get("containers") if isinstance(pod_spec, dict) else None
        if not isinstance(containers, list) or not containers or not all(isinstance(c, dict) for c in containers):
            self.problems.append(wdoc.problem(pod_loc + ("containers",),
                                 f"{kind} '{workload['metadata']['name']}' has no containers; expected "
                                 f"a list of containers at {'.'.join(map(str, pod_loc))}.containers"))
            return None
        replicas = self._replicas(app_path, loc, spec, kind, workload, wdoc)
        resources = self._resources(app_path, loc, spec, pod_spec, pod_loc, wdoc)
        if replicas is None or resources is None:
            return None
        qos = spec.qos.overlaid_on(doc.spec.defaults.qos)
        if kind == "Deployment":
            most = qos.scaling.max_replicas if qos.scaling else replicas
            if qos.availability.min_clusters > most:
                self._report(app_path, loc, f"component '{spec.name}' must run on at least "
                             f"{qos.availability.min_clusters} clusters but has at most {most} "
                             "replicas; raise replicas (or scaling.maxReplicas) or lower minClusters")
                return None
        defaults = fleet.spec.stability
        migration = qos.migration
        stability = StabilityRules(
            cooldown_seconds=_first(migration.cooldown_seconds, defaults.cooldown_seconds),
            min_improvement=_first(migration.min_improvement, defaults.min_improvement),
            disruption_budget=_first(migration.disruption_budget, defaults.disruption_budget),
            allow_stateful=migration.allow_stateful,
            progress_deadline_seconds=_first(migration.progress_deadline_seconds,
                                             defaults.progress_deadline_seconds),
        )
        calls = sorted({c if "/" in c else f"{doc.metadata.name}/{c}" for c in spec.calls})
        return Component(
            app=doc.metadata.name,
            name=spec.name,
            namespace=doc.spec.namespace,
            kind=kind,
            workload=workload,
            manifests=tuple(manifests),
            replicas=replicas,
            cpu=resources[0],
            memory=resources[1],
            architectures=frozenset(spec.architectures),
            calls=tuple(calls),
            qos=qos,
            stability=stability,
            stateful=spec.stateful,
            colocate_with=tuple(sorted({c if "/" in c else f"{doc.metadata.name}/{c}" for c in spec.colocate_with})),
        )

    def _replicas(self, app_path: str, loc: tuple[int | str, ...], spec: ComponentSpec, kind: str,
                  workload: dict[str, Any], wdoc: YamlDocument) -> int | None:
        if kind in ("DaemonSet", "Job", "CronJob"):
            if spec.replicas not in (None, 1):
                what = ("runs one pod per node on each chosen cluster" if kind == "DaemonSet"
                        else "is placed once, on one cluster")
                self._report(app_path, loc + ("replicas",),
                             f"a {kind} {what}; replicas does not apply (leave it out)")
                return None
            return 1
        if spec.replicas is not None:
            return spec.replicas
        declared = (workload.get("spec") or {}).get("replicas", 1)
        if isinstance(declared, bool) or not isinstance(declared, int) or not 0 <= declared <= MAX_REPLICAS:
            self.problems.append(wdoc.problem(("spec", "replicas"),
                                 f"got {declared!r}; expected a whole number of replicas from 0 to "
                                 f"{MAX_REPLICAS:,}"))
            return None
        return declared

    def _resources(self, app_path: str, loc: tuple[int | str, ...], spec: ComponentSpec,
                   pod_spec: dict[str, Any], pod_loc: tuple[str, ...],
                   wdoc: YamlDocument) -> tuple[int, int] | None:
        if spec.resources is not None:
            return spec.resources.cpu, spec.resources.memory
        # The scheduler's view of a pod: containers run together, init containers one at a
        # time, except sidecars (init containers with restartPolicy Always), which keep running.
        totals = {"cpu": 0, "memory": 0}
        found = {"cpu": False, "memory": False}
        init_peak = {"cpu": 0, "memory": 0}
        parse = {"cpu": to_millicores, "memory": to_bytes}
        ok = True
        for group in ("containers", "initContainers"):
            for i, container in enumerate(pod_spec.get(group) or []):
                resources = (container.get("resources") or {}) if isinstance(container, dict) else {}
                requests = resources.get("requests") or {} if isinstance(resources, dict) else {}
                limits = resources.get("limits") or {} if isinstance(resources, dict) else {}
                for res in ("cpu", "memory"):
                    # Kubernetes sets a missing request to the limit: so does the planner.
                    source = "requests" if res in requests else "limits"
                    table = requests if res in requests else limits
                    if not isinstance(table, dict) or res not in table:
                        continue
                    try:
                        value = parse[res](table[res])
                    except ValueError as exc:
                        self.problems.append(wdoc.problem(
                            pod_loc + (group, i, "resources", source, res), str(exc)))
                        ok = False
                        continue
                    sidecar = group == "initContainers" and container.get("restartPolicy") == "Always"
                    if group == "containers" or sidecar:
                        totals[res] += value
                        found[res] = True
                    else:
                        init_peak[res] = max(init_peak[res], value)
        if not ok:
            return None
        missing = [res for res in ("cpu", "memory") if not found[res]]
        if missing:
            self._report(app_path, loc, f"component '{spec.name}' has no {' or '.join(missing)} "
                         "request; set resources on the component or resources.requests (or "
                         "limits) on its containers, so the planner knows what a replica needs")
            return None
        cpu, memory = max(totals["cpu"], init_peak["cpu"]), max(totals["memory"], init_peak["memory"])
        if cpu > MAX_NODE_CPU or memory > MAX_NODE_MEMORY:
            self._report(app_path, loc, f"component '{spec.name}' requests {format_millicores(cpu)} CPU and "
                         f"{format_bytes(memory)} memory per replica; expected at most "
                         f"{format_millicores(MAX_NODE_CPU)} CPU and {format_bytes(MAX_NODE_MEMORY)} (one node)")
            return None
        return cpu, memory


def _secret_name(obj: Any, where: tuple[int | str, ...]) -> str:
    for part in where:
        obj = obj[part]
    meta = obj.get("metadata")
    return str(meta.get("name", "?")) if isinstance(meta, dict) else "?"


def _pod_spec_loc(kind: str) -> tuple[str, ...]:
    if kind == "CronJob":
        return ("spec", "jobTemplate", "spec", "template", "spec")
    return ("spec", "template", "spec")


def _dig(obj: Any, loc: tuple[str, ...]) -> Any:
    for part in loc:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(part)
    return obj


def _first(value: Any, default: Any) -> Any:
    return default if value is None else value


def _names(names: Any) -> str:
    return ", ".join(sorted(names)) or "(none)"
