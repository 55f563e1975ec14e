"""Recognising secrets in manifests, so plain ones never reach a cluster branch unnoticed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def is_sops_encrypted(obj: Mapping[str, Any]) -> bool:
    """Whether a manifest document was encrypted with SOPS (it carries a ``sops`` block)."""
    return isinstance(obj.get("sops"), Mapping)


def has_plain_secret_data(obj: Mapping[str, Any]) -> bool:
    """A ``Secret`` whose ``data`` or ``stringData`` would be written in clear."""
    if obj.get("kind") != "Secret" or is_sops_encrypted(obj):
        return False
    return bool(obj.get("data")) or bool(obj.get("stringData"))
