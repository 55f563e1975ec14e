"""Advice on valid goals: things that work but probably not as the user means them.

Pure: reads a loaded ``Goals`` and says where (file, object, field) and why. The loader
turns each ``Advice`` into a warning with a line and column, shown by ``qonnect validate``
and ``qonnect plan``; nothing is refused for it.

* A container (its env, command or args, or a ConfigMap of its component) names the
  Service of a component that ``calls`` does not list: the planner then does not keep
  the two close, and a Service of another app is not rendered where the caller runs, so
  the name does not resolve there.
* ``calls`` names a component that no Service leads to: nothing can reach it by name.
* A pod refers to a ServiceAccount, ConfigMap, Secret or PersistentVolumeClaim that no
  manifest of its app defines: it starts only where someone created that object by hand.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from qonnect_gitops.model.goals import App, Component, Goals

Loc = tuple[str | int, ...]

# A host name as it appears in a URL or host:port (labels of letters, digits, '-', '.').
_HOST = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?")
_CLUSTER_SUFFIXES = ("", ".svc", ".svc.cluster.local")


@dataclass(frozen=True)
class Advice:
    """One warning about valid goals, located by file, object and field."""

    path: str  # the app.yaml or manifest file
    index: int  # the object's position in a multi-document manifest (0 for app.yaml)
    loc: Loc
    message: str


@dataclass(frozen=True)
class _Service:
    app: App
    owner: Component
    name: str
    backends: frozenset[str]  # component keys the Service leads to


def advise(goals: Goals) -> list[Advice]:
    """Every piece of advice on ``goals``, in a stable order."""
    services = list(_services(goals))
    return sorted(
        [*_unlisted_calls(goals, services), *_calls_without_service(goals, services),
         *_undefined_references(goals)],
        key=lambda a: (a.path, a.index, a.loc, a.message),
    )


def _services(goals: Goals) -> Iterator[_Service]:
    for app in goals.apps.values():
        for component in app.components:
            for manifest in component.manifests:
                if manifest.encrypted:
                    continue
                for obj in manifest.objects:
                    if obj.get("kind") == "Service" and obj.get("apiVersion") == "v1":
                        backends = frozenset({component.key} | app.selected_by(obj))
                        yield _Service(app, component, obj["metadata"]["name"], backends)


def _host_names(service: _Service) -> tuple[set[str], set[str]]:
    """(names that count anywhere, names that count only in the service's own namespace
    and only in URL or host:port form)."""
    ns = service.app.namespace
    qualified = {f"{service.name}.{ns}{suffix}" for suffix in _CLUSTER_SUFFIXES}
    return qualified, {service.name}


def _hosts_in(text: str) -> Iterator[tuple[str, bool]]:
    """Host-like words of ``text`` and whether each looks like a host (after ``://`` or
    before ``:<port>``), as opposed to a plain word."""
    for match in _HOST.finditer(text):
        before, after = text[: match.start()], text[match.end():]
        url_like = before.endswith("://") or re.match(r":\d", after) is not None
        yield match.group(0).lower(), url_like


def references(text: str, service: _Service, same_namespace: bool) -> bool:
    """Whether ``text`` names the Service as a host."""
    qualified, bare = _host_names(service)
    return any(host in qualified or (same_namespace and url_like and host in bare)
               for host, url_like in _hosts_in(text))


def _strings(component: Component) -> Iterator[tuple[str, int, Loc, str]]:
    """(manifest path, object index, field, text) of every container env value, command
    and args of the workload's pods, and every value of the component's ConfigMaps."""
    for manifest in component.manifests:
        if manifest.encrypted:
            continue
        for index, obj in enumerate(manifest.objects):
            if obj.get("kind") == "ConfigMap":
                for key, value in sorted((obj.get("data") or {}).items()):
                    if isinstance(value, str):
                        yield manifest.path, index, ("data", key), value
            elif _workload_position(component) == (manifest.path, index):
                yield from _container_strings(manifest.path, index, obj, component.kind)


def _container_strings(path: str, index: int, obj: Mapping[str, Any], kind: str) -> Iterator[tuple[str, int, Loc, str]]:
    prefix: Loc = ("spec", "jobTemplate", "spec", "template", "spec") if kind == "CronJob" \
        else ("spec", "template", "spec")
    spec: Any = obj
    for part in prefix:
        spec = spec.get(part) if isinstance(spec, Mapping) else None
    if not isinstance(spec, Mapping):
        return
    for group in ("initContainers", "containers"):
        for ci, container in enumerate(spec.get(group) or []):
            if not isinstance(container, Mapping):
                continue
            for ei, env in enumerate(container.get("env") or []):
                if isinstance(env, Mapping) and isinstance(env.get("value"), str):
                    yield path, index, (*prefix, group, ci, "env", ei, "value"), env["value"]
            for field in ("command", "args"):
                for ai, arg in enumerate(container.get(field) or []):
                    if isinstance(arg, str):
                        yield path, index, (*prefix, group, ci, field, ai), arg


def _unlisted_calls(goals: Goals, services: list[_Service]) -> Iterator[Advice]:
    for component in goals.components():
        listed = set(component.calls)
        for path, index, loc, text in _strings(component):
            for service in services:
                if component.key in service.backends or listed & service.backends:
                    continue
                same = service.app.name == component.app
                if not references(text, service, same):
                    continue
                targets = ", ".join(sorted(service.backends))
                consequence = (
                    "the planner does not keep them close" if same else
                    "the Service is rendered only where its own app runs or a declared caller "
                    "runs, so the name may not resolve where this component runs"
                )
                yield Advice(path, index, loc,
                             f"names Service '{service.name}' ({targets}) but 'calls' of "
                             f"{component.key} does not list it: {consequence}; add it to 'calls'")


def _calls_without_service(goals: Goals, services: list[_Service]) -> Iterator[Advice]:
    reachable = {key for service in services for key in service.backends}
    for app in goals.apps.values():
        path = f"apps/{app.name}/app.yaml"
        for ci, spec in enumerate(app.document.spec.components):
            for k, call in enumerate(spec.calls):
                target = call if "/" in call else f"{app.name}/{call}"
                if target not in reachable:
                    yield Advice(path, 0, ("spec", "components", ci, "calls", k),
                                 f"'{call}' has no Service leading to it (none of its own, "
                                 "no selector matching its pods): callers cannot reach it by name")


# What every namespace has without anyone writing it.
_BUILT_IN = {("ServiceAccount", "default"), ("ConfigMap", "kube-root-ca.crt")}


def _undefined_references(goals: Goals) -> Iterator[Advice]:
    for app in goals.apps.values():
        defined = {
            (str(obj.get("kind")), str(obj["metadata"]["name"]))
            for component in app.components for manifest in component.manifests for obj in manifest.objects
        }
        for component in app.components:
            missing = sorted(component.references - defined - _BUILT_IN)
            if not missing:
                continue
            path, index = _workload_position(component)
            names = ", ".join(f"{kind} '{name}'" for kind, name in missing)
            yield Advice(path, index, ("metadata", "name"),
                         f"its pods use {names}, which no manifest of app '{app.name}' defines: "
                         "they start only on clusters where it was created by other means")


def _workload_position(component: Component) -> tuple[str, int]:
    for manifest in component.manifests:
        for index, obj in enumerate(manifest.objects):
            if obj is component.workload:
                return manifest.path, index
    for manifest in component.manifests:
        for index, obj in enumerate(manifest.objects):
            if obj.get("kind") == component.kind and \
                    obj["metadata"]["name"] == component.workload["metadata"]["name"]:
                return manifest.path, index
    raise LookupError(component.key)  # the loader found the workload in these manifests
