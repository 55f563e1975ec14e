"""Shared building blocks of the goals-file models.

Every user-facing model forbids unknown fields and uses the camelCase names
users write in YAML (``maxMs``, ``minClusters``), like Kubernetes objects.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Literal

from pydantic import AfterValidator, AwareDatetime, BaseModel, ConfigDict, Field, WithJsonSchema
from pydantic.alias_generators import to_camel

from qonnect_gitops import API_VERSION
from qonnect_gitops.model.limits import EARLIEST_TIME, LATEST_TIME

DNS_LABEL_CHARS = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
"""An RFC 1123 label's characters (at most 63; anchor it to use it)."""
_DNS_LABEL = re.compile(rf"^{DNS_LABEL_CHARS}$")


def _dns_label(value: str) -> str:
    if len(value) > 63 or not _DNS_LABEL.match(value):
        raise ValueError(
            f"'{value}' is not a valid name; expected at most 63 lowercase letters, digits "
            "and '-', starting and ending with a letter or digit (RFC 1123 label)"
        )
    return value


Name = Annotated[
    str,
    AfterValidator(_dns_label),
    WithJsonSchema(
        {"type": "string", "maxLength": 63, "pattern": _DNS_LABEL.pattern}, mode="validation"
    ),
]
"""A cluster, region, app or component name: an RFC 1123 label, as Kubernetes names are."""

def _in_time_range(value: datetime) -> datetime:
    if not EARLIEST_TIME <= value < LATEST_TIME:
        raise ValueError(f"{value.isoformat()} is out of range; expected a time from "
                         f"{EARLIEST_TIME:%Y-%m-%d} to before {LATEST_TIME:%Y-%m-%d}")
    return value


Timestamp = Annotated[AwareDatetime, AfterValidator(_in_time_range)]
"""A time with its zone, within the range plans and observations may carry."""

Tier = Literal["cloud", "fog", "edge"]
Arch = Literal["amd64", "arm64"]
TIERS: tuple[Tier, ...] = ("cloud", "fog", "edge")


class UserModel(BaseModel):
    """Base of every model read from a goals repository."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        alias_generator=to_camel,
        populate_by_name=True,
        str_strip_whitespace=False,
        # Infinity and NaN pass every `ge`/`le` check in odd ways and break arithmetic later.
        allow_inf_nan=False,
    )


class Metadata(UserModel):
    """``metadata`` of a goals document: its name and free-form labels."""

    name: Name
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class Header(UserModel):
    """The Kubernetes-style envelope every goals document shares."""

    api_version: Literal["qonnect.io/v1alpha1"] = Field(
        alias="apiVersion", description=f"Always `{API_VERSION}`."
    )
