"""Each forge client against the fake forge: pull requests, comments, statuses, merges,
retries and rate limits. Every request and answer is checked against the forge's
published OpenAPI description (the ``fake`` fixture fails on any violation)."""

from __future__ import annotations

import json
import time
import urllib.request

import pytest

from qonnect_gitops.forge import (
    CommitState,
    CommitStatus,
    ForgeError,
    ForgeRateLimited,
    PullRequestDraft,
    PullState,
)
from qonnect_gitops.forge.config import ForgeSettings
from qonnect_gitops.forge.connect import api_base
from qonnect_gitops.forge.fake import FakeForge
from qonnect_gitops.forge.fake.server import Fault
from qonnect_gitops.forge.http import RetryPolicy
from tests.forge.conftest import DIALECTS, REPOSITORY, TOKEN, Repo, client, git

DRAFT = PullRequestDraft("feature", "main", "rescheduling: 3 components", "| a | b |\n|---|---|", ("qonnect",))


@pytest.mark.parametrize("dialect", DIALECTS)
def test_open_look_up_update_and_close(fake: FakeForge, repo: Repo, dialect: str) -> None:
    forge = client(fake, dialect)
    pull = forge.open_pull_request(DRAFT)
    assert (pull.state, pull.head_branch, pull.base_branch, pull.labels) == (PullState.OPEN, "feature", "main",
                                                                             ("qonnect",))
    assert pull.head_sha == repo.rev("feature") and pull.title == DRAFT.title and pull.body == DRAFT.body
    assert pull.url.startswith(fake.url) and str(pull.number) in pull.url
    assert [p.number for p in forge.find_pull_requests("feature")] == [pull.number]
    assert forge.find_pull_requests("nothing-here") == []
    updated = forge.update_pull_request(pull.number, title="new title", body="new body")
    assert (updated.title, updated.body) == ("new title", "new body")
    # The forge keeps refs/pull/N/head (GitHub, Gitea) and refs/merge-requests/N/head (GitLab).
    assert repo.rev(f"refs/pull/{pull.number}/head") == pull.head_sha
    closed = forge.close_pull_request(pull.number)
    assert closed.state is PullState.CLOSED
    assert forge.find_pull_requests("feature") == []
    assert [p.state for p in forge.find_pull_requests("feature", only_open=False)] == [PullState.CLOSED]
    assert repo.rev("main") != pull.head_sha  # closing merges nothing


@pytest.mark.parametrize("dialect", DIALECTS)
def test_merge_moves_the_base_branch_with_a_merge_commit(fake: FakeForge, repo: Repo, dialect: str) -> None:
    forge = client(fake, dialect)
    base = repo.rev("main")
    pull = forge.open_pull_request(DRAFT)
    merged = forge.merge_pull_request(pull.number)
    assert merged.state is PullState.MERGED
    head = repo.rev("main")
    parents = git("-C", repo.bare, "log", "-1", "--format=%P", head).split()
    assert parents == [base, pull.head_sha]
    with pytest.raises(ForgeError) as err:  # merging twice is refused, as the forges do
        forge.merge_pull_request(pull.number)
    assert err.value.status == 405


@pytest.mark.parametrize("dialect", DIALECTS)
def test_supersede_comment_links_the_new_pull_request(fake: FakeForge, repo: Repo, dialect: str) -> None:
    forge = client(fake, dialect)
    old = forge.open_pull_request(DRAFT)
    git("checkout", "-q", "-b", "feature-2", "main", cwd=repo.work)
    repo.commit_on("feature-2", "other", "two\n")
    new = forge.open_pull_request(PullRequestDraft("feature-2", "main", "newer decision", "body", ("qonnect",)))
    forge.comment(old.number, f"Superseded by #{new.number} ({new.url}).")
    forge.close_pull_request(old.number)
    assert [c.body for c in forge.list_comments(old.number)] == [f"Superseded by #{new.number} ({new.url})."]
    assert forge.get_pull_request(old.number).state is PullState.CLOSED
    assert forge.get_pull_request(new.number).state is PullState.OPEN


@pytest.mark.parametrize("dialect", DIALECTS)
def test_comment_updated_in_place(fake: FakeForge, dialect: str) -> None:
    forge = client(fake, dialect)
    pull = forge.open_pull_request(DRAFT)
    first = forge.comment(pull.number, "<!-- qonnect-preview -->\nfirst")
    forge.comment(pull.number, "a human's comment")
    again = forge.update_comment(pull.number, first.id, "<!-- qonnect-preview -->\nsecond")
    assert again.id == first.id
    bodies = [(c.id, c.body) for c in forge.list_comments(pull.number)]
    assert bodies[0] == (first.id, "<!-- qonnect-preview -->\nsecond") and len(bodies) == 2


@pytest.mark.parametrize("dialect", DIALECTS)
def test_commit_statuses(fake: FakeForge, repo: Repo, dialect: str) -> None:
    forge = client(fake, dialect)
    sha = repo.rev("feature")
    forge.set_status(sha, CommitStatus("qonnect/validate", CommitState.PENDING, "planning"))
    forge.set_status(sha, CommitStatus("qonnect/validate", CommitState.FAILURE, "x" * 500,
                                       "http://127.0.0.1:1/v1/status"))
    forge.set_status(sha, CommitStatus("qonnect/placed", CommitState.SUCCESS, "applied"))
    statuses = forge.list_statuses(sha)
    latest = {}
    for status in reversed(statuses):  # newest first
        latest[status.context] = status
    assert latest["qonnect/validate"].state is CommitState.FAILURE
    assert len(latest["qonnect/validate"].description) == 140  # GitHub's limit, clipped by the client
    assert latest["qonnect/validate"].target_url == "http://127.0.0.1:1/v1/status"
    assert latest["qonnect/placed"].state is CommitState.SUCCESS
    assert forge.list_statuses(repo.rev("main")) == []


@pytest.mark.parametrize("dialect", DIALECTS)
def test_5xx_answers_are_retried_with_backoff(fake: FakeForge, dialect: str) -> None:
    forge = client(fake, dialect)
    fake.inject(Fault(503, count=2))
    start = time.monotonic()
    assert forge.find_pull_requests() == []
    assert time.monotonic() - start >= 0.05  # it waited between attempts
    assert forge.http.requests == 3  # type: ignore[attr-defined]
    fake.inject(Fault(502, count=10))
    with pytest.raises(ForgeError) as err:
        forge.find_pull_requests()
    assert err.value.status == 502 and "gave up after 5 attempts" in str(err.value)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_rate_limits_are_honoured(fake: FakeForge, dialect: str) -> None:
    forge = client(fake, dialect)
    # A secondary limit: 429 with Retry-After (seconds).
    fake.inject(Fault(429, retry_after=1))
    start = time.monotonic()
    forge.find_pull_requests()
    assert time.monotonic() - start >= 0.9
    # A primary limit: remaining 0 and the reset time in the forge's own headers.
    # (the reset is a whole second in the headers: at least 1 s ahead here, plus the client's margin)
    fake.inject(Fault(403 if dialect == "github" else 429, rate_limit_reset=2))
    start = time.monotonic()
    forge.find_pull_requests()
    assert time.monotonic() - start >= 1.0
    # Longer than the caller may block: it says when to come back instead of waiting.
    fake.inject(Fault(429, retry_after=3600))
    with pytest.raises(ForgeRateLimited) as err:
        forge.find_pull_requests()
    assert err.value.retry_at > time.time() + 3000


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_refused_token_is_never_echoed(fake: FakeForge, dialect: str, caplog: pytest.LogCaptureFixture) -> None:
    forge = client(fake, dialect, token="wrong-token-value-123")
    with pytest.raises(ForgeError) as err:
        forge.find_pull_requests()
    assert err.value.status == 401 and "wrong-token-value-123" not in str(err.value)
    assert "wrong-token-value-123" not in caplog.text


def test_the_fake_refuses_requests_its_description_does_not_allow(fake: FakeForge) -> None:
    def send(method: str, path: str, body: object, headers: dict[str, str]) -> int:
        request = urllib.request.Request(fake.url + path, data=json.dumps(body).encode(), method=method,
                                         headers={"Content-Type": "application/json", **headers})
        try:
            with urllib.request.urlopen(request) as resp:
                return int(resp.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)

    github = {"Authorization": f"Bearer {TOKEN}"}
    assert send("POST", f"/api/v3/repos/{REPOSITORY}/pulls", {"title": 7, "head": "feature", "base": "main"},
                github) == 422  # title must be a string
    assert send("POST", f"/api/v1/repos/{REPOSITORY}/pulls/1/merge", {"style": "merge"},
                {"Authorization": f"token {TOKEN}"}) == 400  # Gitea requires "do"
    assert send("POST", "/api/v4/projects/demo%2Fgoals/statuses/abc", {"state": "great"},
                {"PRIVATE-TOKEN": TOKEN}) == 400  # not one of GitLab's states
    assert send("DELETE", f"/api/v3/repos/{REPOSITORY}/pulls/1", None, github) == 404  # not described
    assert len(fake.violations) == 4
    fake.shared.violations.clear()  # expected here; the fixture checks for unexpected ones


def test_api_base_urls() -> None:
    def base(kind: str, url: str | None) -> str:
        return api_base(ForgeSettings(name="f", type=kind, url=url, repository="o/r"))  # type: ignore[arg-type]

    assert base("github", None) == "https://api.github.com"
    assert base("github", "https://github.com") == "https://api.github.com"
    assert base("github", "https://ghe.example.com") == "https://ghe.example.com/api/v3"
    assert base("github", "https://ghe.example.com/api/v3/") == "https://ghe.example.com/api/v3"
    assert base("gitlab", None) == "https://gitlab.com/api/v4"
    assert base("gitlab", "https://gitlab.example.com/") == "https://gitlab.example.com/api/v4"
    assert base("gitea", "https://codeberg.org") == "https://codeberg.org/api/v1"


def test_redirects_are_refused_so_the_token_stays_put(fake: FakeForge) -> None:
    forge = client(fake, "github", policy=RetryPolicy(attempts=1))
    fake.shared.specs  # noqa: B018 - the fake answers only described routes; a redirect comes from elsewhere
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    seen: list[str] = []

    class Redirect(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.headers.get("Authorization", ""))
            self.send_response(302)
            self.send_header("Location", fake.url + self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Redirect)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        redirecting = client(fake, "github", policy=RetryPolicy(attempts=1))
        redirecting.http.base_url = f"http://127.0.0.1:{server.server_address[1]}/api/v3"  # type: ignore[attr-defined]
        with pytest.raises(ForgeError) as err:
            redirecting.find_pull_requests()
        assert err.value.status == 302
        assert fake.shared.requests == []  # the token never reached the redirect's target
    finally:
        server.shutdown()
    assert forge is not None
