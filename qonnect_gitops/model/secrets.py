"""Recognising secrets in manifests, so plain ones never reach a cluster branch unnoticed.

A document counts as SOPS-encrypted only when it carries a real SOPS metadata block: a
``sops`` mapping with a ``version``, a ``mac`` that is itself an ``ENC[...]`` value, and
at least one encrypted ``ENC[AES256_GCM,...]`` value elsewhere in the document. A fake
``sops: {}`` is not enough. Plain Secrets are looked for everywhere in a document, not only
at its top: inside ``List`` items, templates and any other wrapper.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

_ENC = re.compile(r"^ENC\[AES256_GCM,data:[A-Za-z0-9+/=]*,iv:[A-Za-z0-9+/=]+,tag:[A-Za-z0-9+/=]+,type:[a-z]+\]$")

Loc = tuple[int | str, ...]


def is_encrypted_value(value: Any) -> bool:
    """Whether ``value`` is one SOPS-encrypted scalar (``ENC[AES256_GCM,data:...,type:str]``)."""
    return isinstance(value, str) and bool(_ENC.match(value))


def is_sops_encrypted(obj: Mapping[str, Any]) -> bool:
    """Whether a manifest document was encrypted with SOPS: a real metadata block (version
    and MAC) and at least one encrypted value."""
    meta = obj.get("sops")
    if not isinstance(meta, Mapping):
        return False
    version = meta.get("version")
    if not isinstance(version, str) or not version or not is_encrypted_value(meta.get("mac")):
        return False
    return any(is_encrypted_value(v) for loc, v in _scalars(obj) if loc[:1] != ("sops",))


def plain_secrets(obj: Any) -> list[Loc]:
    """Where in ``obj`` (``()`` for the object itself) a ``Secret`` holds data in clear:
    a mapping of kind Secret whose ``data`` or ``stringData`` has a value that is not
    SOPS-encrypted. Searches every nested mapping and list."""
    found = []
    for loc, node in _mappings(obj):
        if node.get("kind") != "Secret":
            continue
        for section in ("data", "stringData"):
            values = node.get(section)
            if isinstance(values, Mapping) and any(not is_encrypted_value(v) for v in values.values()):
                found.append(loc)
                break
            if values and not isinstance(values, Mapping):
                found.append(loc)
                break
    return found


def has_plain_secret_data(obj: Mapping[str, Any]) -> bool:
    """Whether the document holds a Secret with plain data anywhere."""
    return bool(plain_secrets(obj))


def _mappings(node: Any, loc: Loc = ()) -> Iterator[tuple[Loc, Mapping[str, Any]]]:
    if isinstance(node, Mapping):
        yield loc, node
        for key, value in node.items():
            yield from _mappings(value, loc + (key,))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _mappings(value, loc + (i,))


def _scalars(node: Any, loc: Loc = ()) -> Iterator[tuple[Loc, Any]]:
    if isinstance(node, Mapping):
        for key, value in node.items():
            yield from _scalars(value, loc + (key,))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _scalars(value, loc + (i,))
    else:
        yield loc, node
