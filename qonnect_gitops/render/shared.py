"""Objects one component defines and another one's pods use: a ServiceAccount, ConfigMap,
Secret or PersistentVolumeClaim is rendered on every cluster where a component that
refers to it runs, not only where the component defining it runs (a pod whose
ServiceAccount or volume source is missing never starts)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from qonnect_gitops.model.goals import App, Component, Manifest

SHAREABLE_KINDS = ("ServiceAccount", "ConfigMap", "Secret", "PersistentVolumeClaim")


@dataclass(frozen=True)
class SharedObject:
    """An object of ``owner`` that another component refers to."""

    owner: Component
    manifest: Manifest
    index: int  # position of the object in the manifest


def definitions(app: App) -> dict[tuple[str, str], SharedObject]:
    """``{(kind, name): where it is defined}`` for the shareable objects of an app."""
    found: dict[tuple[str, str], SharedObject] = {}
    for component in app.components:
        for manifest in component.manifests:
            for index, obj in enumerate(manifest.objects):
                kind = obj.get("kind")
                if kind in SHAREABLE_KINDS and obj.get("apiVersion") == "v1":
                    found.setdefault((str(kind), obj["metadata"]["name"]), SharedObject(component, manifest, index))
    return found


def borrowed(component: Component, defined: dict[tuple[str, str], SharedObject]) -> Iterator[SharedObject]:
    """The objects of other components that ``component``'s pods refer to, sorted."""
    for ref in sorted(component.references):
        where = defined.get(ref)
        if where is not None and where.owner.key != component.key:
            yield where
