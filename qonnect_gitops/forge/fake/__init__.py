"""A fake forge for tests and the demo: pull requests, comments and commit statuses in
memory, over real HTTP, in the GitHub (``/api/v3``), GitLab (``/api/v4``) and Gitea
(``/api/v1``) dialects.

It is not a mock that agrees with whatever it is sent: every request is validated
against the forge's own published OpenAPI description (trimmed to the operations used,
in ``openapi/``; sources and licenses in ``openapi/SOURCES.md``) and every answer is
validated against the same description before it leaves. A request that does not
conform is refused (400/422) and recorded as a violation (``GET /_fake/violations``).
Pull requests live on real branches of bare Git repositories: opening one checks that
both branches exist, merging one writes the merge commit and moves the base branch.
"""

from qonnect_gitops.forge.fake.server import FakeForge, FakeForgeConfig, HookTarget

__all__ = ["FakeForge", "FakeForgeConfig", "HookTarget"]
