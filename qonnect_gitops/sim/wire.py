"""Protobuf bodies (placeholder until the codec lands)."""

from __future__ import annotations

from typing import Any

from qonnect_gitops.sim import errors

PROTOBUF = "application/vnd.kubernetes.protobuf"
PROTOBUF_STREAM = "application/vnd.kubernetes.protobuf;stream=watch"


def has_message(rt: Any) -> bool:
    return False


def encode(body: dict[str, Any], rt: Any) -> bytes | None:
    return None


def encode_watch_event(ev: dict[str, Any], rt: Any) -> bytes:
    raise NotImplementedError


def decode(raw: bytes) -> Any:
    raise errors.ApiError(415, "UnsupportedMediaType", "protobuf not yet supported", {})
