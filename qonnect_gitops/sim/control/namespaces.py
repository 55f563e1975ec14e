"""What every namespace gets from the control plane: the ``default`` ServiceAccount and ``kube-root-ca.crt``.

The service account controller and the root CA publisher create them as soon as a
namespace exists and create them again when someone deletes them, as upstream.
"""

from __future__ import annotations

from collections.abc import Iterable

from qonnect_gitops.sim import subresources
from qonnect_gitops.sim.control.base import Context, key_of, meta, terminating
from qonnect_gitops.sim.defaults import ROOT_CA
from qonnect_gitops.sim.store import Event, ObjKey

NAMESPACES = ("", "namespaces")
SERVICE_ACCOUNTS = ("", "serviceaccounts")
CONFIG_MAPS = ("", "configmaps")



class Namespaces:
    """Creates the ``default`` ServiceAccount and the ``kube-root-ca.crt`` ConfigMap in every namespace."""

    name = "namespace"

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def keys(self, ev: Event) -> Iterable[ObjKey]:
        """A namespace that appeared, or whose default objects were deleted."""
        if ev.gr == NAMESPACES and ev.type == "ADDED":
            return (("", meta(ev.obj)["name"]),)
        if ev.type == "DELETED" and ((ev.gr == SERVICE_ACCOUNTS and meta(ev.obj).get("name") == "default")
                                     or (ev.gr == CONFIG_MAPS and meta(ev.obj).get("name") == ROOT_CA)):
            return (("", meta(ev.obj).get("namespace", "")),)
        return ()

    def all_keys(self) -> Iterable[ObjKey]:
        """Every namespace."""
        return [key_of(n) for n in self.ctx.store.list(NAMESPACES)]

    def sync(self, key: ObjKey) -> None:
        """Create what is missing in an active namespace."""
        ns = self.ctx.get(NAMESPACES, key)
        if ns is None or terminating(ns):
            return
        subresources.namespace_defaults(self.ctx.core, key[1])
