"""Issue 30 against a real lead group, a goals repository on git daemon and the fake forge:
a hostile goals pull request fails its own preview and the next one is previewed (defect 4);
alias-chained goals pushed to main are recorded invalid while the leader stays ready
(defect 8); a webhook signature of non-ASCII bytes gets 401 (defect 12); and goals cannot
make a lead read a file or send a token anywhere (defect 6)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from http.client import HTTPConnection
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from qonnect_gitops.forge import CommitState, PullRequestDraft
from qonnect_gitops.forge.fake import FakeForge, FakeForgeConfig, HookTarget
from tests.forge.conftest import REPOSITORY, TOKEN, client, forges_file, git
from tests.forge.test_review_lead import FORGE_LINE, latest_status
from tests.goals_repo import GoalsRepo, served_goals
from tests.lead.conftest import make_group  # noqa: F401 - the fixture
from tests.lead.fleet import TEMPLATE_CLUSTERS, wait_for
from tests.lead.harness import Lead, LeadGroup, http
from tests.model.test_bounded_yaml import chained

SECRET = "hook-s3cret"
DETAILS = "apps/bookinfo/manifests/details.yaml"


@pytest.fixture
def goals(tmp_path: Path) -> Iterator[GoalsRepo]:
    with served_goals(tmp_path / "goals") as repo:
        yield repo


def _push_branch(goals: GoalsRepo, name: str, path: str, body: bytes) -> str:
    git("checkout", "-q", "-B", name, "main", cwd=goals.work)
    (goals.work / path).write_bytes(body)
    git("commit", "-q", "-am", name, cwd=goals.work)
    git("push", "-q", "-f", "origin", name, cwd=goals.work)
    git("checkout", "-q", "main", cwd=goals.work)
    return goals.rev(name)


def _goals_status(group: LeadGroup, leader: Lead) -> dict[str, Any]:
    return (group.status(leader) or {}).get("goals") or {}


def _signed_with_bytes(lead: Lead, signature: bytes) -> int:
    """POST a push webhook whose signature header is raw bytes, as any client may send."""
    host, port = lead.http.rsplit(":", 1)
    conn = HTTPConnection(host, int(port), timeout=5)
    try:
        body = b'{"ref": "refs/heads/main"}'
        conn.putrequest("POST", "/v1/hooks/git")
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Content-Length", str(len(body)))
        conn.putheader("X-GitHub-Event", "push")
        conn.putheader("X-Hub-Signature-256", signature)
        conn.endheaders(body)
        return conn.getresponse().status
    finally:
        conn.close()


@pytest.mark.timeout(300)
def test_a_hostile_pull_request_fails_its_own_preview_and_hostile_goals_on_main_are_invalid(
        make_group: Callable[..., LeadGroup],  # noqa: F811
        goals: GoalsRepo, tmp_path: Path) -> None:
    secret = tmp_path / "webhook-secret"
    secret.write_text(SECRET)
    with FakeForge(FakeForgeConfig({REPOSITORY: goals.bare}, tokens=(TOKEN,))) as fake:
        forge = client(fake, "github")
        goals.edit("qonnect.yaml", FORGE_LINE, FORGE_LINE + "    forge: {name: fake}\n", "previews on the forge")
        forges = forges_file(tmp_path / "forges.yaml", fake, "github")
        group = make_group(clusters=TEMPLATE_CLUSTERS, repo_url=goals.url,
                           extra_args=["--webhook-secret-file", str(secret), "--forges", str(forges)])
        fake.set_hooks((HookTarget(",".join(f"{lead.url}/v1/hooks/git" for lead in group.leads), SECRET, "github"),))
        leader = group.wait_leader()
        wait_for(lambda: (((group.status(leader) or {}).get("loop") or {}).get("review") or {}).get("forge")
                 and group.status(leader)["loop"]["review"]["forge"]["connected"], 30, "the forge connected", group)

        # Defect 4: alias-chained nesting in a pull request's head. Its preview fails with the
        # problem's position; the worker lives on and previews the next pull request.
        hostile = _push_branch(goals, "hostile", DETAILS, chained())
        forge.open_pull_request(PullRequestDraft("hostile", "main", "hostile", ""))
        failed = wait_for(lambda: latest_status(forge, hostile, "qonnect/validate"), 60, "the hostile preview", group)
        assert failed.state is CommitState.FAILURE and failed.description.startswith(f"{DETAILS}:2:99:"), failed
        ratings = "apps/bookinfo/manifests/ratings.yaml"
        text = (goals.work / ratings).read_text().replace("replicas: 1", "replicas: 2", 1)
        fine = _push_branch(goals, "fine", ratings, text.encode())
        forge.open_pull_request(PullRequestDraft("fine", "main", "fine", ""))
        valid = wait_for(lambda: latest_status(forge, fine, "qonnect/validate"), 60, "the next preview", group)
        assert valid.state is CommitState.SUCCESS, valid

        # Defect 12: a signature of any bytes is a wrong signature.
        for signature in (b"sha256=\xc3\xa9\xff\xfe", b"sha256=" + "€".encode() * 20, b"\xff" * 64, b"sha256=zz"):
            assert _signed_with_bytes(leader, signature) == 401

        # Defect 8: the same nesting pushed to main is an invalid goals commit: recorded with
        # its position, a failed qonnect/validate on it, and the leader stays ready.
        good = _goals_status(group, leader)["lastGood"]["commit"]
        (goals.work / DETAILS).write_bytes(chained())
        bad = goals.commit("alias-chained nesting on main")
        failed_goals = wait_for(lambda: (f := _goals_status(group, leader).get("lastFailed") or {}).get("commit") == bad
                                and f, 60, "the invalid goals recorded", group)
        assert any(e.startswith(f"{DETAILS}:2:99: the alias *a0 nests") for e in failed_goals["errors"]), failed_goals
        assert _goals_status(group, leader)["lastGood"]["commit"] == good
        status = wait_for(lambda: latest_status(forge, bad, "qonnect/validate"), 30, "qonnect/validate on main", group)
        assert status.state is CommitState.FAILURE and DETAILS in status.description
        code, _, _ = http("GET", leader.url + "/readyz")
        assert code == 200
        assert fake.violations == []


class _Listener(BaseHTTPRequestHandler):
    """A server of a goals author's choosing: records whatever reaches it."""

    seen: ClassVar[list[tuple[str, str]]] = []

    def _any(self) -> None:
        self.seen.append((self.path, self.headers.get("Authorization", "")))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"[]")

    do_GET = do_POST = do_PATCH = _any

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.timeout(180)
def test_goals_cannot_make_a_lead_read_a_file_nor_send_it_anywhere(
        make_group: Callable[..., LeadGroup],  # noqa: F811
        goals: GoalsRepo, tmp_path: Path) -> None:
    host_file = tmp_path / "host-secret"
    host_file.write_text("the-lead-host-s3cret\n")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Listener)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Listener.seen = []
    try:
        group = make_group(clusters=TEMPLATE_CLUSTERS, repo_url=goals.url,
                           env={"QONNECT_FORGE_TOKEN": "the-lead-env-s3cret"})
        leader = group.wait_leader()
        wait_for(lambda: _goals_status(group, leader).get("lastGood"), 60, "goals loaded", group)
        bad = goals.edit("qonnect.yaml", FORGE_LINE, FORGE_LINE + (
            f"    forge: {{type: github, url: 'http://127.0.0.1:{server.server_address[1]}', "
            f"repository: a/b, tokenFile: '{host_file}'}}\n"), "a forge of the author's choosing")
        failed = wait_for(lambda: (f := _goals_status(group, leader).get("lastFailed") or {}).get("commit") == bad
                          and f, 60, "the goals refused", group)
        assert any("qonnect.yaml:" in e and "spec.review.forge" in e and "no longer belong in goals" in e
                   for e in failed["errors"]), failed
        time.sleep(3)  # several more cycles
        assert _Listener.seen == []
    finally:
        server.shutdown()
