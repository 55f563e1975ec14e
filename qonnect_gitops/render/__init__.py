"""Rendering (pure): a plan and the goals' manifests into the files of every cluster branch.

The labels and annotations it writes are defined in ``qonnect_gitops.model.labels``.
"""

from qonnect_gitops.render.render import PlanFiles, RenderedPlan, RenderError, render

__all__ = [
    "PlanFiles",
    "RenderError",
    "RenderedPlan",
    "render",
]
