"""kill -9 of the leader in the middle of a write, twenty times over.

Each round arms a fault point (``QONNECT_FAULT_FILE``): the leader stops there and the
test SIGKILLs it, alternately after the decision was committed locally and recorded in
the KB but before any push, and after the plan branch was pushed but before the
cluster branches. The survivors must finish the decision; the killed lead restarts.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.goals_repo import GoalsRepo, served_goals
from tests.lead.fleet import (
    TEMPLATE_CLUSTERS,
    check_consistent,
    consistent_at,
    generation,
    plan_history,
    wait_for,
)
from tests.lead.harness import LeadGroup

ROUNDS = 20
POINTS = ("before-publish", "between-pushes")


@pytest.fixture
def goals(tmp_path: Path) -> Iterator[GoalsRepo]:
    with served_goals(tmp_path / "goals") as repo:
        # The server keeps a reflog of every ref, so the test can prove that each
        # update was a fast-forward (a bare repo accepts non-fast-forward pushes).
        subprocess.run(["git", "-C", str(repo.bare), "config", "core.logAllRefUpdates", "always"],
                       check=True)
        yield repo


@pytest.mark.timeout(900)  # twenty rounds of kill, election and catch-up: long on a loaded machine
def test_kill_9_during_writes_loses_no_decision(make_group: Callable[..., LeadGroup],
                                                goals: GoalsRepo, tmp_path: Path) -> None:
    fault = tmp_path / "fault"
    hit = tmp_path / "fault.hit"
    group = make_group(clusters=TEMPLATE_CLUSTERS, repo_url=goals.url,
                       env={"QONNECT_FAULT_FILE": str(fault)},
                       extra_args=["--poll-seconds", "0.2", "--reschedule-seconds", "600",
                                   "--election-min", "0.2", "--election-max", "0.35"])
    group.wait_leader()
    wait_for(lambda: consistent_at(goals, TEMPLATE_CLUSTERS, goals.rev("main")), 20,
             "first decision", group)
    last_generation = generation(goals)
    decided: list[str] = []
    tag = 2
    for round_no in range(ROUNDS):
        point = POINTS[round_no % 2]
        fault.write_text(point)
        source = goals.edit("apps/bookinfo/manifests/details.yaml", f"details-v1:1.20.{tag}",
                            f"details-v1:1.20.{tag + 1}", f"round {round_no}")
        tag += 1
        wait_for(hit.exists, 15, f"round {round_no}: {point} reached", group)
        # The lead claims the fault by renaming the armed file (still holding just the
        # point's name) and then writes its pid into it: wait for the pid.
        words = wait_for(lambda: len(hit.read_text().split()) == 2 and hit.read_text().split(), 5, "fault pid")
        pid = int(words[1])
        victim = next(m for m in group.leads if m.proc is not None and m.proc.pid == pid)
        group.kill(victim, signal.SIGKILL)
        hit.unlink()
        if point == "between-pushes":
            # The decision is out, its fan-out is not: the plan names the new source.
            assert goals.trailers("qonnect/plan")["Qonnect-Source"] == [source]
        else:
            assert goals.trailers("qonnect/plan")["Qonnect-Source"] != [source]
        group.start(victim)  # back as a follower, so the next round keeps a majority
        wait_for(lambda source=source: consistent_at(goals, TEMPLATE_CLUSTERS, source), 20,
                 f"round {round_no}: survivors finish the decision", group)
        now_generation = generation(goals)
        assert now_generation == last_generation + 1, (round_no, point, now_generation)
        last_generation = now_generation
        decided.append(source)

    check_consistent(goals, TEMPLATE_CLUSTERS)
    # No decision lost: every round's goals commit has exactly one plan commit.
    sources = [goals_source_of(goals, c) for c in plan_history(goals)]
    assert all(sources.count(s) == 1 for s in decided), sources
    # Every ref on the server only ever moved forward.
    for ref in ["refs/heads/qonnect/plan"] + [f"refs/heads/cluster/{c}" for c in TEMPLATE_CLUSTERS]:
        assert_fast_forward_only(goals, ref)


def goals_source_of(goals: GoalsRepo, commit: str) -> str:
    return goals.trailers(commit)["Qonnect-Source"][0]


def assert_fast_forward_only(goals: GoalsRepo, ref: str) -> None:
    """Each reflog entry of ``ref`` on the server moved it to a descendant."""
    log = (Path(goals.bare) / "logs" / ref).read_text().splitlines()
    assert log, ref
    for line in log:
        old, new = line.split()[:2]
        if set(old) == {"0"}:
            continue
        ancestor = subprocess.run(["git", "-C", str(goals.bare), "merge-base", "--is-ancestor",
                                   old, new], check=False)
        assert ancestor.returncode == 0, f"{ref}: {old[:12]} -> {new[:12]} is not a fast-forward"
