"""JSON Schemas of the goals files, so editors validate as users type."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from qonnect_gitops.model.app import QoSApp
from qonnect_gitops.model.cluster import Cluster
from qonnect_gitops.model.fleet import Fleet
from qonnect_gitops.model.network import Network
from qonnect_gitops.model.pool import ClusterPool

KINDS: dict[str, type[BaseModel]] = {
    "Fleet": Fleet,
    "Cluster": Cluster,
    "Network": Network,
    "QoSApp": QoSApp,
    "ClusterPool": ClusterPool,
}
DIALECT = "https://json-schema.org/draft/2020-12/schema"


def schema_for(kind: str) -> dict[str, Any]:
    """The JSON Schema of one file kind (``Fleet``, ``Cluster``, ``Network``, ``QoSApp``,
    ``ClusterPool``)."""
    model = KINDS[kind]
    return {"$schema": DIALECT, **model.model_json_schema(mode="validation", by_alias=True)}


def combined_schema() -> dict[str, Any]:
    """One schema accepting any goals file; its ``kind`` selects the document type."""
    _, defs = models_json_schema(
        [(model, "validation") for model in KINDS.values()],
        by_alias=True,
        ref_template="#/$defs/{model}",
    )
    return {
        "$schema": DIALECT,
        "title": "qonnect goals file",
        "description": "Any file of a qonnect goals repository; `kind` selects which.",
        "oneOf": [{"$ref": f"#/$defs/{name}"} for name in KINDS],
        "$defs": defs["$defs"],
    }
