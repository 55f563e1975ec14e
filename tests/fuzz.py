"""Hypothesis strategies for hostile input: random YAML, random Kubernetes-looking objects with
random names, kinds and namespaces, alias bombs, deep nesting, odd bytes and large sizes.

Shared by the goals fuzzer (``tests/model/test_fuzz_goals.py``) and the branch fuzzer
(``tests/agent/test_fuzz_branches.py``).
"""

from __future__ import annotations

import resource
from typing import Any

import yaml
from hypothesis import strategies as st

from qonnect_gitops.model.limits import MAX_FILE_BYTES

NAMES = st.one_of(
    st.sampled_from(["web", "a", "a/b", "UPPER_case", "kube-system", "default", "qonnect-system", "..", ".",
                     "x" * 300, "qonnect-inventory", "coredns", "théâtre", "a.b", "-x", "system:reader", "9lives",
                     "with space", ""]),
    st.from_regex(r"[a-z][a-z0-9-]{0,12}", fullmatch=True),
    st.text(max_size=12),
)
NAMESPACES = st.one_of(
    st.sampled_from(["shop", "bookinfo", "kube-system", "kube-public", "kube-node-lease", "default",
                     "qonnect-system", "other", "Bad_NS", ""]),
    st.from_regex(r"[a-z][a-z0-9-]{0,8}", fullmatch=True),
)
KINDS = st.sampled_from([
    ("v1", "ConfigMap"), ("v1", "ConfigMap"), ("v1", "Secret"), ("v1", "Namespace"), ("v1", "Service"),
    ("v1", "ServiceAccount"), ("apps/v1", "Deployment"), ("v1", "List"), ("example.org/v1", "Widget"),
    ("v1", "Config/Map"), ("apiregistration.k8s.io/v1", "APIService"), ("rbac.authorization.k8s.io/v1", "ClusterRole"),
    ("apps/v1beta1", "Deployment"), ("authentication.k8s.io/v1", "TokenReview"), ("v1", "PersistentVolumeClaim"),
])
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(min_value=-2**70, max_value=2**70),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                      max_leaves=16)
LABEL_KEYS = st.sampled_from(["app.kubernetes.io/managed-by", "qonnect.io/app", "qonnect.io/component", "team",
                              "bad key", "a/b/c"])
ANNOTATIONS = st.sampled_from([{}, {"qonnect.io/prune": "enabled"}, {"qonnect.io/prune": "disabled"},
                               {"qonnect.io/adopt": "enabled"}, {"qonnect.io/reconcile": "disabled"},
                               {"qonnect.io/recreate": "enabled"}])


@st.composite
def k8s_objects(draw: st.DrawFn, namespaces: st.SearchStrategy[str] = NAMESPACES) -> dict[str, Any]:
    """One object that may or may not be valid: random kind, name, namespace, labels, fields."""
    api_version, kind = draw(KINDS)
    meta: dict[str, Any] = {"name": draw(NAMES)}
    if draw(st.booleans()):
        meta["namespace"] = draw(namespaces)
    labels = draw(st.dictionaries(LABEL_KEYS, st.sampled_from(["qonnect", "shop", "web", "not valid", ""]),
                                  max_size=3))
    if labels:
        meta["labels"] = labels
    annotations = draw(ANNOTATIONS)
    if annotations:
        meta["annotations"] = annotations
    obj: dict[str, Any] = {"apiVersion": api_version, "kind": kind, "metadata": meta}
    if kind in ("ConfigMap", "Secret"):
        obj[draw(st.sampled_from(["data", "stringData", "dataa"]))] = draw(
            st.dictionaries(st.from_regex(r"[a-z]{1,6}", fullmatch=True), st.one_of(st.text(max_size=10), SCALARS),
                            max_size=3))
    elif kind == "List":
        obj["items"] = [{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "inner"},
                         "stringData": {"password": "hunter2"}}]
    elif draw(st.booleans()):
        obj["spec"] = draw(VALUES)
    return obj


DNS_NAMES = st.from_regex(r"[a-z]([a-z0-9-]{0,10}[a-z0-9])?", fullmatch=True)


@st.composite
def plausible_objects(draw: st.DrawFn, namespaces: st.SearchStrategy[str]) -> dict[str, Any]:
    """An object that is mostly valid: the cases where valid goals must render valid branches."""
    name = draw(DNS_NAMES)
    meta: dict[str, Any] = {"name": name}
    if draw(st.booleans()):
        meta["namespace"] = draw(namespaces)
    if draw(st.booleans()):
        meta["labels"] = {"team": draw(st.sampled_from(["a", "web", "x-1"]))}
    if draw(st.booleans()):
        meta["annotations"] = draw(ANNOTATIONS)
    kind = draw(st.sampled_from(["ConfigMap", "Service", "ServiceAccount", "ClusterRole", "Role", "Widget",
                                 "PersistentVolumeClaim", "NetworkPolicy"]))
    if kind == "ConfigMap":
        return {"apiVersion": "v1", "kind": kind, "metadata": meta,
                "data": draw(st.dictionaries(st.from_regex(r"[a-z]{1,6}", fullmatch=True), st.text(max_size=10),
                                             max_size=3))}
    if kind == "Service":
        return {"apiVersion": "v1", "kind": kind, "metadata": meta,
                "spec": {"ports": [{"port": draw(st.integers(1, 65535))}], "selector": {"app": name}}}
    if kind in ("ClusterRole", "Role"):
        return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": meta, "rules": []}
    if kind == "Widget":
        return {"apiVersion": "example.org/v1", "kind": kind, "metadata": meta, "spec": draw(VALUES)}
    if kind == "PersistentVolumeClaim":
        return {"apiVersion": "v1", "kind": kind, "metadata": meta,
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}
    if kind == "NetworkPolicy":
        return {"apiVersion": "networking.k8s.io/v1", "kind": kind, "metadata": meta, "spec": {"podSelector": {}}}
    return {"apiVersion": "v1", "kind": kind, "metadata": meta}


def alias_bomb(levels: int, width: int = 10) -> bytes:
    """``levels`` lines of ``width`` aliases each, each line referring to the one before."""
    lines = [b"l0: &l0 [" + b",".join([b"lol"] * width) + b"]"]
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [".encode() + b",".join([f"*l{i - 1}".encode()] * width) + b"]")
    return b"\n".join(lines) + b"\n"


@st.composite
def yaml_files(draw: st.DrawFn, namespaces: st.SearchStrategy[str] = NAMESPACES) -> bytes:
    """The bytes of one hostile YAML file."""
    shape = draw(st.sampled_from(["plausible", "plausible", "plausible", "plausible", "objects", "objects",
                                  "values", "binary", "text", "bomb", "deep", "big-document", "big-file"]))
    if shape == "plausible":
        docs = draw(st.lists(plausible_objects(namespaces), min_size=1, max_size=3))
        return yaml.safe_dump_all(docs, allow_unicode=True).encode()
    if shape == "objects":
        docs = draw(st.lists(k8s_objects(namespaces), min_size=1, max_size=3))
        return yaml.safe_dump_all(docs, allow_unicode=True).encode()
    if shape == "values":
        return yaml.safe_dump(draw(VALUES), allow_unicode=True).encode()
    if shape == "binary":
        return draw(st.binary(max_size=120))
    if shape == "text":
        return draw(st.text(max_size=120)).encode("utf-8", "surrogatepass")
    if shape == "bomb":
        return b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bomb}\ndata:\n" + b"".join(
            b"  " + line + b"\n" for line in alias_bomb(draw(st.integers(2, 9))).splitlines())
    if shape == "deep":
        depth = draw(st.integers(50, 3000))
        return b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: deep}\ndata: " + b"[" * depth + b"]" * depth + b"\n"
    size = 1024 * 1024 + 10 if shape == "big-document" else MAX_FILE_BYTES + 10
    return b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: big}\ndata: {x: '" + b"y" * size + b"'}\n"


@st.composite
def plausible_files(draw: st.DrawFn, namespaces: st.SearchStrategy[str]) -> bytes:
    """A YAML file of mostly valid objects."""
    return yaml.safe_dump_all(draw(st.lists(plausible_objects(namespaces), min_size=1, max_size=3)),
                              allow_unicode=True).encode()


def max_rss_mib() -> float:
    """The process's peak resident memory so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
