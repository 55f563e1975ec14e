"""Verification of push webhooks from Git forges (pure: bytes and strings in, a verdict out).

Three header conventions are accepted, each checked in constant time, as bytes: a header
of any value (non-ASCII, the wrong length, not hex) is only a wrong signature (401), never
an error:

* GitHub (and Gitea/Forgejo, which send it too): ``X-Hub-Signature-256: sha256=<hex>``,
  the HMAC-SHA256 of the raw body under the shared secret;
* Gitea: ``X-Gitea-Signature: <hex>``, the same HMAC without the prefix;
* GitLab: ``X-Gitlab-Token: <secret>``, the secret itself (GitLab does not sign bodies).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from pathlib import Path


class WebhookRejected(Exception):
    """The request carries no valid signature or token."""


def _get(headers: Mapping[str, str], name: str) -> str | None:
    # HTTP header names are case-insensitive; plain dicts (tests) are not.
    for key, value in headers.items():
        if key.lower() == name.lower():
            return value
    return None


def _bytes(value: str) -> bytes:
    # The server decodes header bytes as ISO-8859-1, so each maps back to its byte; a character
    # beyond it (from a client library) cannot match a hex digest or a secret read as bytes.
    return value.encode("iso-8859-1", "replace")


def verify(headers: Mapping[str, str], body: bytes, secret: bytes) -> str:
    """Return the forge whose convention the request satisfied; raise ``WebhookRejected``."""
    if not secret:
        raise WebhookRejected("no webhook secret is configured")
    digest = hmac.new(secret, body, hashlib.sha256).hexdigest().encode()
    github = _get(headers, "X-Hub-Signature-256")
    if github is not None:
        scheme, _, given = github.strip().partition("=")
        if scheme == "sha256" and hmac.compare_digest(_bytes(given).lower(), digest):
            return "github"
        raise WebhookRejected("X-Hub-Signature-256 does not match the body")
    gitea = _get(headers, "X-Gitea-Signature")
    if gitea is not None:
        if hmac.compare_digest(_bytes(gitea.strip()).lower(), digest):
            return "gitea"
        raise WebhookRejected("X-Gitea-Signature does not match the body")
    gitlab = _get(headers, "X-Gitlab-Token")
    if gitlab is not None:
        if hmac.compare_digest(_bytes(gitlab), secret):
            return "gitlab"
        raise WebhookRejected("X-Gitlab-Token is wrong")
    raise WebhookRejected("no X-Hub-Signature-256, X-Gitea-Signature or X-Gitlab-Token header")


def read_secret(path: Path | None) -> bytes:
    """The secret from its file (surrounding whitespace dropped); empty when unset."""
    if path is None:
        return b""
    return path.read_bytes().strip()
