"""Webhooks from the fake forge to a receiver that verifies them as the lead does (HMAC for
GitHub and Gitea, token for GitLab) and reads them into one pull request event."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest

from qonnect_gitops.forge import PullRequestDraft
from qonnect_gitops.forge.events import PullAction, parse_pull_request_event
from qonnect_gitops.forge.fake import HookTarget
from qonnect_gitops.lead.webhook import WebhookRejected, verify
from tests.forge.conftest import DIALECTS, Repo, client, make_forge

SECRET = b"the-webhook-secret"


class Receiver:
    def __init__(self, secret: bytes) -> None:
        self.events: list[Any] = []
        self.rejected: list[str] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                try:
                    verify(dict(self.headers.items()), body, secret)
                except WebhookRejected as exc:
                    receiver.rejected.append(str(exc))
                    self.send_response(401)
                else:
                    receiver.events.append(parse_pull_request_event(dict(self.headers.items()), body))
                    self.send_response(202)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.mark.parametrize("dialect", DIALECTS)
def test_pull_request_events_are_signed_and_read(repo: Repo, dialect: str, tmp_path: Path) -> None:
    good, bad = Receiver(SECRET), Receiver(b"another-secret")
    hooks = (HookTarget(good.url, SECRET.decode(), dialect), HookTarget(bad.url, SECRET.decode(), dialect))
    with make_forge(repo, hooks) as fake:
        forge = client(fake, dialect)
        pull = forge.open_pull_request(PullRequestDraft("feature", "main", "t", "b"))
        head = repo.commit_on("feature", "more", "x\n")
        fake.pushed("demo/goals")
        forge.merge_pull_request(pull.number)
        fake.wait_deliveries(6)
        assert fake.violations == []
    events = [e for e in good.events if e is not None]
    assert [e.action for e in events] == [PullAction.OPENED, PullAction.UPDATED, PullAction.MERGED]
    assert {(e.number, e.head_branch, e.base_branch) for e in events} == {(pull.number, "feature", "main")}
    assert events[1].head_sha == head
    assert bad.events == [] and len(bad.rejected) == 3  # a receiver with another secret refuses them all


def test_malformed_events_are_ignored() -> None:
    github = {"X-GitHub-Event": "pull_request"}
    assert parse_pull_request_event(github, b"not json") is None
    assert parse_pull_request_event(github, b'{"action": "opened", "pull_request": {"number": "1"}}') is None
    assert parse_pull_request_event(github, b'{"action": "opened", "pull_request": {"number": 1, '
                                            b'"head": {"ref": "a b", "sha": "0123456"}, "base": {"ref": "main"}}}') is None
    assert parse_pull_request_event({"X-GitHub-Event": "push"}, b"{}") is None
    ok = parse_pull_request_event(github, b'{"action": "closed", "pull_request": {"number": 3, "merged": false, '
                                          b'"head": {"ref": "x", "sha": "0123456"}, "base": {"ref": "main"}}}')
    assert ok is not None and ok.action is PullAction.CLOSED
