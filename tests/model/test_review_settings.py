"""``qonnect.yaml``'s review and branch settings (issue 30): goals select a forge by name and
name no host file or server (an old goals file is told what to do instead), and branch names
follow Git's own ref-name rules, checked against ``git check-ref-format``."""

from __future__ import annotations

import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qonnect_gitops.model import GoalsError, load_goals
from qonnect_gitops.model.fleet import Fleet, branch_name_problem, ref_name_problem

FORGE_AT = "    failover: auto        # failover may bypass review\n"


def _with_forge(files: dict[str, bytes], forge: str) -> dict[str, bytes]:
    out = dict(files)
    text = out["qonnect.yaml"].decode()
    assert text.count(FORGE_AT) == 1
    out["qonnect.yaml"] = text.replace(FORGE_AT, FORGE_AT + f"    forge: {forge}\n").encode()
    return out


def _line_of(files: dict[str, bytes], needle: str) -> int:
    return next(i for i, line in enumerate(files["qonnect.yaml"].decode().splitlines(), 1) if needle in line)


@pytest.mark.parametrize("forge", [
    "{type: github, url: 'http://127.0.0.1:9/', repository: a/b, tokenFile: /etc/shadow}",
    "{type: gitea, url: 'https://gitea.example.org', repository: a/b}",
    "{name: github, tokenFile: /root/.ssh/id_ed25519}",
    "{name: github, url: 'https://attacker.example'}",
])
def test_goals_that_name_a_token_file_or_a_forge_url_are_told_where_those_belong(
        template_files: dict[str, bytes], forge: str) -> None:
    files = _with_forge(template_files, forge)
    with pytest.raises(GoalsError) as caught:
        load_goals(files)
    (problem,) = caught.value.problems
    assert (problem.path, problem.line, problem.field) == ("qonnect.yaml", _line_of(files, "forge:"),
                                                           "spec.review.forge")
    assert "no longer belong in goals" in problem.message
    assert "qonnect lead --forges FILE" in problem.message and "forge: {name: <name>}" in problem.message
    for moved in ("tokenFile", "url"):
        assert (moved in forge) == (moved in problem.message.split(" no longer")[0])


def test_goals_select_a_forge_by_name(template_files: dict[str, bytes]) -> None:
    goals = load_goals(_with_forge(template_files, "{name: github, statusUrl: 'https://qonnect.example.org'}"))
    chosen = goals.fleet.spec.review.forge
    assert chosen is not None and (chosen.name, chosen.status_url) == ("github", "https://qonnect.example.org")
    with pytest.raises(GoalsError, match="is not a valid name"):
        load_goals(_with_forge(template_files, "{name: 'Not/A Name'}"))


def _fleet(**branches: str) -> Fleet:
    return Fleet.model_validate({"apiVersion": "qonnect.io/v1alpha1", "kind": "Fleet", "metadata": {"name": "f"},
                                 "spec": {"branches": branches}})


@pytest.mark.parametrize("prefix", ["clu\x7fster/", "a\x01/", "a b/", "x..y/", "a@{b/", "a.lock/", "a/.b/",
                                    "~a/", "a^/", "a:/", "a?/", "a*/", "a[/", "a\\b/", "//", "/a/", "-a/", ""])
def test_a_prefix_git_refuses_is_refused(prefix: str) -> None:
    with pytest.raises(ValueError, match="cannot start a Git branch name"):
        _fleet(clusterPrefix=prefix)
    with pytest.raises(ValueError, match="cannot start a Git branch name"):
        _fleet(proposalPrefix=prefix)


@pytest.mark.parametrize("plan", ["plan\x7f", "plan.", "plan/", "plan.lock", "HEAD", "-plan", "a//b", "qonnect/.plan"])
def test_a_plan_branch_git_refuses_is_refused(plan: str) -> None:
    with pytest.raises(ValueError, match="cannot be a Git branch name"):
        _fleet(plan=plan)


def test_a_cluster_whose_branch_git_refuses_is_refused_in_its_own_file() -> None:
    branches = _fleet(clusterPrefix="fleet.").spec.branches
    assert branches.cluster_branch_conflict("edge-1") is None
    why = branches.cluster_branch_conflict("lock")
    assert why is not None and "'fleet.lock'" in why and "Git refuses" in why and "ends with '.lock'" in why


def _git_accepts(*args: str) -> bool:
    return subprocess.run(["git", "check-ref-format", *args], capture_output=True, check=False).returncode == 0


PIECES = st.sampled_from(["a", "b", "/", ".", "..", "lock", ".lock", "@", "{", "@{", "~", "^", ":", "?", "*",
                          "[", "\\", " ", "\x7f", "\x01", "\x1f", "-", "_", "é", "//", "}", "!", "#", "HEAD"])


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(PIECES, min_size=1, max_size=8).map("".join))
def test_ref_and_branch_names_are_judged_as_git_judges_them(branch: str) -> None:
    ref = f"refs/heads/{branch}"
    assert (ref_name_problem(ref) is None) == _git_accepts(ref), (ref, ref_name_problem(ref))
    assert (branch_name_problem(branch) is None) == _git_accepts("--branch", branch), (branch,
                                                                                     branch_name_problem(branch))
