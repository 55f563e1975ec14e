"""The lead's own forge configuration (``--forges FILE``) and webhook signatures of any bytes
(issue 30, defects 6 and 12)."""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qonnect_gitops.forge import ForgeError, find_forge, load_forges, read_token, unknown_forge
from qonnect_gitops.forge.config import parse_forges
from qonnect_gitops.lead.webhook import WebhookRejected, verify
from qonnect_gitops.model import GoalsError

SECRET = b"hook-s3cret"


def test_a_forges_file_lists_forges_by_name_with_their_tokens(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("t0ken\n")
    path = tmp_path / "forges.yaml"
    path.write_text(f"forges:\n  - name: github\n    type: github\n    repository: fleet/goals\n"
                    f"    tokenFile: {token}\n  - name: lab\n    type: gitlab\n    url: https://gitlab.example.org\n"
                    f"    repository: '1234'\n")
    forges = load_forges(path)
    github, lab = find_forge(forges, "github"), find_forge(forges, "lab")
    assert github is not None and lab is not None and find_forge(forges, "nope") is None
    assert read_token(github) == "t0ken"
    assert read_token(lab, env={"QONNECT_FORGE_TOKEN": "from-env"}) == "from-env"
    with pytest.raises(ForgeError, match="no token for forge 'lab'"):
        read_token(lab, env={})
    assert "github, lab" in unknown_forge(forges, "nope") and "'nope'" in unknown_forge(forges, "nope")


@pytest.mark.parametrize(("body", "where", "what"), [
    (b"forges:\n  - name: a\n    type: gitea\n    repository: o/r\n", (2, 5), "a gitea forge needs its url"),
    (b"forges:\n  - {name: a, type: github, repository: o/r}\n  - {name: a, type: gitlab, repository: o/r}\n",
     (1, 1), "forge 'a' is listed twice"),
    (b"forges:\n  - {name: a, type: github, repository: o/r, token: xyz}\n", (2, 46), "unknown field 'token'"),
    (b"forges:\n  - {name: a, type: github, repository: o/r, url: 'ftp://x'}\n", (2, 51), "forges[0].url"),
    (b"forges: &f [*f]\n", (1, 13), "recursive"),
])
def test_a_bad_forges_file_is_refused_with_file_line_column(body: bytes, where: tuple[int, int], what: str) -> None:
    with pytest.raises(GoalsError) as caught:
        parse_forges("forges.yaml", body)
    (problem,) = caught.value.problems
    assert (problem.path, problem.line, problem.column) == ("forges.yaml", *where), problem
    assert what in str(problem)


def _signed(body: bytes) -> str:
    return hmac.new(SECRET, body, hashlib.sha256).hexdigest()


def test_good_signatures_pass() -> None:
    body = b'{"ref": "refs/heads/main"}'
    assert verify({"X-Hub-Signature-256": f"sha256={_signed(body)}"}, body, SECRET) == "github"
    assert verify({"x-gitea-signature": _signed(body).upper()}, body, SECRET) == "gitea"
    assert verify({"X-Gitlab-Token": SECRET.decode()}, body, SECRET) == "gitlab"


# What a server decoding header bytes as ISO-8859-1 can hand over: any character up to U+00FF,
# and what a client library might let through beyond it.
HEADER_VALUES = st.one_of(st.text(alphabet=st.characters(max_codepoint=0xFF), max_size=80),
                          st.text(max_size=80), st.sampled_from(["sha256=é", "sha256=" + "0" * 63 + "€", "sha256=",
                                                                 "sha256=zz", "=", "ü" * 64, "sha256=" + "g" * 64]))


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["X-Hub-Signature-256", "X-Gitea-Signature", "X-Gitlab-Token"]), HEADER_VALUES)
def test_a_signature_of_any_bytes_is_refused_never_an_error(header: str, value: str) -> None:
    with pytest.raises(WebhookRejected):
        verify({header: value}, b"{}", SECRET)
