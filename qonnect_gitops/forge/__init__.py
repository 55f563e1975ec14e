"""Forge clients: pull requests, comments and commit statuses on GitHub, GitLab and Gitea/Forgejo.

One small interface (``Forge`` in ``base``) with one thin HTTP client per dialect
(``github``, ``gitlab``, ``gitea``) on a shared transport (``http``: timeouts, bounded
answers, retries with backoff on 5xx and rate limits). ``connect(settings, token)``
builds the right client for one of the forges of the lead's own configuration (``config``:
goals only select one by name). ``fake`` is an in-memory forge
speaking all three dialects, validated against their published OpenAPI descriptions,
for tests and the demo. See ``docs/review.md``.
"""

from typing import TYPE_CHECKING

from qonnect_gitops._lazy import exports

# name -> the module of the package that defines it: imported on first use, so a light
# module of the package (``forge.limits``) costs itself alone (``qonnect lead --help``).
_EXPORTS = {
    "Comment": "base", "CommitState": "base", "CommitStatus": "base", "Forge": "base", "ForgeError": "base",
    "ForgeKind": "base", "ForgeRateLimited": "base", "PullRequest": "base", "PullRequestDraft": "base",
    "PullState": "base",
    "ForgeSettings": "config", "find_forge": "config", "load_forges": "config", "unknown_forge": "config",
    "TOKEN_ENV": "connect", "connect": "connect", "read_token": "connect",
}
__getattr__ = exports(__name__, _EXPORTS)

if TYPE_CHECKING:
    from qonnect_gitops.forge.base import (
        Comment,
        CommitState,
        CommitStatus,
        Forge,
        ForgeError,
        ForgeKind,
        ForgeRateLimited,
        PullRequest,
        PullRequestDraft,
        PullState,
    )
    from qonnect_gitops.forge.config import ForgeSettings, find_forge, load_forges, unknown_forge
    from qonnect_gitops.forge.connect import TOKEN_ENV, connect, read_token

__all__ = [
    "TOKEN_ENV",
    "Comment",
    "CommitState",
    "CommitStatus",
    "Forge",
    "ForgeError",
    "ForgeKind",
    "ForgeRateLimited",
    "ForgeSettings",
    "PullRequest",
    "PullRequestDraft",
    "PullState",
    "connect",
    "find_forge",
    "load_forges",
    "read_token",
    "unknown_forge",
]
