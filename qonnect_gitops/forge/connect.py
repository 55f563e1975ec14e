"""Build the client of one of the lead's forges (``config.ForgeSettings``), with its token."""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Mapping
from pathlib import Path

from qonnect_gitops.forge.base import Forge, ForgeError, ForgeKind
from qonnect_gitops.forge.config import ForgeSettings
from qonnect_gitops.forge.gitea import Gitea
from qonnect_gitops.forge.github import API_VERSION, GitHub
from qonnect_gitops.forge.gitlab import GitLab
from qonnect_gitops.forge.http import RetryPolicy, Transport

TOKEN_ENV = "QONNECT_FORGE_TOKEN"
MAX_TOKEN_BYTES = 4096


def read_token(settings: ForgeSettings, env: Mapping[str, str] | None = None) -> str:
    """The API token: the forge's ``tokenFile`` when set, else ``$QONNECT_FORGE_TOKEN``. Raises
    ``ForgeError`` (naming the file or variable, never the token) when there is none."""
    if settings.token_file:
        path = Path(settings.token_file)
        try:
            raw = path.read_bytes()[: MAX_TOKEN_BYTES + 1]
        except OSError as exc:
            raise ForgeError(f"forge token file {path}: {exc.strerror or exc}") from None
        if len(raw) > MAX_TOKEN_BYTES:
            raise ForgeError(f"forge token file {path} is larger than {MAX_TOKEN_BYTES} bytes")
        token = raw.decode("utf-8", "replace").strip()
        if not token:
            raise ForgeError(f"forge token file {path} is empty")
        return token
    token = (os.environ if env is None else env).get(TOKEN_ENV, "").strip()
    if not token:
        raise ForgeError(f"no token for forge '{settings.name}': set its tokenFile in the forges file, or ${TOKEN_ENV}")
    return token


def api_base(settings: ForgeSettings) -> str:
    """The API base URL for the forge's web URL (the API path added when missing)."""
    kind = ForgeKind(settings.type)
    url = (settings.url or {ForgeKind.GITHUB: "https://github.com",
                            ForgeKind.GITLAB: "https://gitlab.com"}.get(kind, "")).rstrip("/")
    if kind is ForgeKind.GITHUB:
        host = urllib.parse.urlsplit(url).netloc.lower()
        if host in ("github.com", "www.github.com"):
            return "https://api.github.com"
        if host == "api.github.com" or url.endswith("/api/v3"):
            return url
        return url + "/api/v3"  # GitHub Enterprise Server
    suffix = "/api/v4" if kind is ForgeKind.GITLAB else "/api/v1"
    return url if url.endswith(suffix) else url + suffix


def connect(settings: ForgeSettings, token: str, policy: RetryPolicy | None = None) -> Forge:
    """The client for ``settings`` authenticated with ``token``."""
    kind = ForgeKind(settings.type)
    base = api_base(settings)
    policy = policy or RetryPolicy()
    if kind is ForgeKind.GITHUB:
        transport = Transport(base, ("Authorization", f"Bearer {token}"), policy,
                              extra_headers={"X-GitHub-Api-Version": API_VERSION,
                                             "Accept": "application/vnd.github+json"})
        return GitHub(transport, settings.repository)
    if kind is ForgeKind.GITLAB:
        return GitLab(Transport(base, ("PRIVATE-TOKEN", token), policy), settings.repository)
    return Gitea(Transport(base, ("Authorization", f"token {token}"), policy), settings.repository)
