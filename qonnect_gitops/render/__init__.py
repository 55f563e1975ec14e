"""Rendering (pure): a plan and the goals' manifests into the files of every cluster branch."""

from qonnect_gitops.render.render import (
    LABEL_APP,
    LABEL_COMPONENT,
    LABEL_MANAGED_BY,
    MANAGED_BY,
    ANNOTATION_DIGEST,
    RenderError,
    RenderedPlan,
    render,
)

__all__ = [
    "ANNOTATION_DIGEST",
    "LABEL_APP",
    "LABEL_COMPONENT",
    "LABEL_MANAGED_BY",
    "MANAGED_BY",
    "RenderError",
    "RenderedPlan",
    "render",
]
