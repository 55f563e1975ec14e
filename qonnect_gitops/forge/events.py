"""Pull request webhooks of the three forges, read into one event (pure).

The body has already passed the lead's size limit and signature check; it is still read
defensively: anything that is not a well-formed pull request event is None.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

_SHA = re.compile(r"^[0-9a-f]{7,64}$")
_MAX_BRANCH = 255


class PullAction(StrEnum):
    """What happened to a pull request, in our words."""

    OPENED = "opened"  # opened or reopened
    UPDATED = "updated"  # new commits on the head (or a new base)
    CLOSED = "closed"  # closed without merging
    MERGED = "merged"
    OTHER = "other"  # title edits, labels, reviews...


@dataclass(frozen=True)
class PullRequestEvent:
    action: PullAction
    number: int
    head_branch: str
    head_sha: str
    base_branch: str


def _header(headers: Mapping[str, str], name: str) -> str | None:
    for key, value in headers.items():
        if key.lower() == name.lower():
            return value
    return None


def event_name(headers: Mapping[str, str]) -> str | None:
    """The forge's event name (``push``, ``pull_request``, ``Merge Request Hook``...)."""
    for name in ("X-GitHub-Event", "X-Gitea-Event", "X-Forgejo-Event", "X-Gitlab-Event"):
        value = _header(headers, name)
        if value:
            return value.strip()
    return None


def _branch(value: Any) -> str | None:
    if not isinstance(value, str) or not value or len(value) > _MAX_BRANCH or any(c in value for c in "\0\n "):
        return None
    return value


_GITHUB_ACTIONS = {"opened": PullAction.OPENED, "reopened": PullAction.OPENED,
                   "ready_for_review": PullAction.OPENED, "synchronize": PullAction.UPDATED,
                   "synchronized": PullAction.UPDATED}
_GITLAB_ACTIONS = {"open": PullAction.OPENED, "reopen": PullAction.OPENED, "update": PullAction.UPDATED,
                   "close": PullAction.CLOSED, "merge": PullAction.MERGED}


def parse_pull_request_event(headers: Mapping[str, str], body: bytes) -> PullRequestEvent | None:
    """The pull request event in a webhook, or None for other events and malformed bodies."""
    name = event_name(headers)
    if name not in ("pull_request", "Merge Request Hook"):
        return None
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(data, dict):
        return None
    try:
        if name == "Merge Request Hook":
            attrs = data["object_attributes"]
            action = _GITLAB_ACTIONS.get(str(attrs.get("action")), PullAction.OTHER)
            number, head = attrs["iid"], _branch(attrs.get("source_branch"))
            base, sha = _branch(attrs.get("target_branch")), (attrs.get("last_commit") or {}).get("id")
        else:
            pull = data["pull_request"]
            raw = str(data.get("action"))
            action = _GITHUB_ACTIONS.get(raw, PullAction.OTHER)
            if raw == "closed":
                action = PullAction.MERGED if pull.get("merged") else PullAction.CLOSED
            if raw == "edited" and isinstance(data.get("changes"), dict) and "base" in data["changes"]:
                action = PullAction.UPDATED
            number, head = pull["number"], _branch(pull["head"]["ref"])
            base, sha = _branch(pull["base"]["ref"]), pull["head"].get("sha")
    except (KeyError, TypeError, AttributeError):
        return None
    if not isinstance(number, int) or isinstance(number, bool) or not 0 < number < 2**31:
        return None
    if head is None or base is None or not isinstance(sha, str) or not _SHA.match(sha):
        return None
    return PullRequestEvent(action, number, head, sha, base)
