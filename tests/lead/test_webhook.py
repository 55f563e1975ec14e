"""Webhook verification (pure): the three forge conventions, and what is refused."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from qonnect_gitops.lead.webhook import WebhookRejected, verify

SECRET = b"topsecret"
BODY = b'{"ref": "refs/heads/main"}'
DIGEST = hmac.new(SECRET, BODY, hashlib.sha256).hexdigest()


@pytest.mark.parametrize(("headers", "forge"), [
    ({"X-Hub-Signature-256": f"sha256={DIGEST}"}, "github"),
    ({"x-hub-signature-256": f"sha256={DIGEST.upper()}"}, "github"),
    ({"X-Gitea-Signature": DIGEST}, "gitea"),
    ({"X-Gitlab-Token": SECRET.decode()}, "gitlab"),
])
def test_accepted(headers: dict[str, str], forge: str) -> None:
    assert verify(headers, BODY, SECRET) == forge


@pytest.mark.parametrize("headers", [
    {},
    {"X-Hub-Signature-256": DIGEST},  # no scheme
    {"X-Hub-Signature-256": "sha1=" + DIGEST},
    {"X-Hub-Signature-256": "sha256=" + hmac.new(b"other", BODY, hashlib.sha256).hexdigest()},
    {"X-Gitea-Signature": "0" * 64},
    {"X-Gitlab-Token": "topsecret "},
    # A GitHub signature that fails is not rescued by a valid token alongside it.
    {"X-Hub-Signature-256": "sha256=" + "0" * 64, "X-Gitlab-Token": SECRET.decode()},
])
def test_refused(headers: dict[str, str]) -> None:
    with pytest.raises(WebhookRejected):
        verify(headers, BODY, SECRET)


def test_a_changed_body_is_refused_and_no_secret_refuses_all() -> None:
    with pytest.raises(WebhookRejected):
        verify({"X-Hub-Signature-256": f"sha256={DIGEST}"}, BODY + b" ", SECRET)
    with pytest.raises(WebhookRejected):
        verify({"X-Gitlab-Token": ""}, BODY, b"")
