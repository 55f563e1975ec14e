"""A lead's answer naming the branch head (``commit``) lets an idle agent skip its Git polls
up to ``git_poll_max_interval``; a different commit makes it ask Git at once; a malformed or
lying answer never makes it apply anything it did not fetch, and costs at most one early
poll per report interval. Git is a real ``git daemon`` behind a byte-counting relay; the
lead is a loopback HTTP stand-in answering what the test sets."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from qonnect_gitops.agent.agent import Agent
from tests.agent.conftest import Branch, Recorder, configmap, configmap_names, namespace, wait_for
from tests.gitstore.helpers import CountingProxy

IDLE_POLL_BYTES = 2048  # one ls-refs of one ref through git daemon (tests/agent/test_poll.py)


@pytest.fixture
def relay(branch: Branch) -> Iterator[CountingProxy]:
    with CountingProxy(branch.daemon.port) as proxy:
        yield proxy


def _metric(agent: Agent, name: str) -> float:
    return sum(v for (n, _), v in agent.metrics._values.items() if n == name)


def _polls(agent: Agent) -> float:
    return _metric(agent, "qonnect_agent_git_polls_total")


def _passes(agent: Agent) -> float:
    return _metric(agent, "qonnect_agent_syncs_total")


def _running(agent: Agent) -> threading.Thread:
    thread = threading.Thread(target=agent.run, daemon=True)
    thread.start()
    return thread


def _stop(agent: Agent, thread: threading.Thread) -> None:
    agent.stop()
    thread.join(10)


def test_an_idle_agent_told_its_commit_asks_git_only_at_the_max_interval(
        make_agent: Any, branch: Branch, recorder: Recorder, relay: CountingProxy) -> None:
    head = branch.publish([namespace("shop"), configmap("a")])
    recorder.response = {"accepted": True, "generation": 1, "commit": head}
    agent = make_agent(leads=(recorder.url,), repo=f"git://127.0.0.1:{relay.port}/goals.git",
                       interval=0.1, report_interval=0.1, drift_interval=0.5, git_poll_max_interval=2.0)
    thread = _running(agent)
    try:
        wait_for(lambda: _metric(agent, "qonnect_agent_git_polls_skipped_total") >= 3, what="polls skipped")
        polls, passes, sent = _polls(agent), _passes(agent), relay.total()
        time.sleep(3.0)
        polls, passes, sent = _polls(agent) - polls, _passes(agent) - passes, relay.total() - sent
    finally:
        _stop(agent, thread)
    # About 30 passes (every 0.1 s, drift passes included) in 3 s, and Git was asked at most
    # at each 2 s max interval: without the hint every pass polls (the next test's control).
    assert passes >= 10, passes
    assert 1 <= polls <= 2, polls
    assert 0 < sent <= polls * IDLE_POLL_BYTES, sent  # nothing else reached the Git server
    assert agent.last is not None and agent.last.applied is not None and agent.last.applied.commit == head


def test_without_the_hint_every_pass_polls_git(make_agent: Any, branch: Branch, recorder: Recorder) -> None:
    branch.publish([namespace("shop"), configmap("a")])
    recorder.response = {"accepted": True, "generation": 1}  # a follower's answer: no commit
    agent = make_agent(leads=(recorder.url,), interval=0.1, report_interval=0.1, git_poll_max_interval=2.0)
    thread = _running(agent)
    try:
        wait_for(lambda: _passes(agent) >= 8, what="passes")
    finally:
        _stop(agent, thread)
    assert _metric(agent, "qonnect_agent_git_polls_skipped_total") == 0
    assert _polls(agent) >= _passes(agent) - 1


def test_a_moved_commit_in_the_answer_is_fetched_before_the_next_poll(
        make_agent: Any, branch: Branch, recorder: Recorder, core: Any) -> None:
    head = branch.publish([namespace("shop"), configmap("a")])
    recorder.response = {"accepted": True, "generation": 1, "commit": head}
    # Neither the poll interval nor the max interval comes within the test: only the answer can.
    agent = make_agent(leads=(recorder.url,), interval=60.0, drift_interval=60.0, report_interval=0.1,
                       git_poll_max_interval=60.0)
    thread = _running(agent)
    try:
        wait_for(lambda: configmap_names(core) == {"a"}, what="first sync")
        moved = branch.publish([namespace("shop"), configmap("b")])
        polls = _polls(agent)
        # The same generation: only the commit says that the branch moved.
        recorder.response = {"accepted": True, "generation": 1, "commit": moved}
        wait_for(lambda: agent.last is not None and agent.last.applied is not None
                 and agent.last.applied.commit == moved, timeout=10, what="sync on the answer's commit")
        assert configmap_names(core) == {"b"}
        assert _polls(agent) == polls + 1
    finally:
        _stop(agent, thread)


@pytest.mark.parametrize("hostile", [
    "A" * 40, "a" * 39, "a" * 63, "../../etc/passwd", "a" * 100_000, ["a" * 40], None, "HEAD",
])
def test_a_malformed_commit_is_ignored_with_a_warning(make_agent: Any, branch: Branch, recorder: Recorder,
                                                     caplog: pytest.LogCaptureFixture, hostile: Any) -> None:
    head = branch.publish([namespace("shop"), configmap("a")])
    recorder.response = {"accepted": True, "generation": 1, "commit": hostile}
    agent = make_agent(leads=(recorder.url,), interval=0.1, report_interval=0.1, git_poll_max_interval=60.0)
    with caplog.at_level(logging.WARNING):
        thread = _running(agent)
        try:
            wait_for(lambda: len(recorder.reports) >= 5 and _passes(agent) >= 5, what="answers and passes")
        finally:
            _stop(agent, thread)
    # Ignored: no skipped poll (every pass asked Git), nothing applied but the branch head,
    # and one warning however many answers carried it.
    assert _metric(agent, "qonnect_agent_git_polls_skipped_total") == 0
    assert agent.last is not None and agent.last.applied is not None and agent.last.applied.commit == head
    warned = [r for r in caplog.records if "lead_commit_ignored" in r.getMessage()]
    assert len(warned) == 1, [r.getMessage() for r in caplog.records]
    assert len(warned[0].getMessage()) < 1000


def test_a_lying_lead_costs_at_most_one_early_poll_per_report_interval(
        make_agent: Any, branch: Branch, recorder: Recorder, core: Any) -> None:
    head = branch.publish([namespace("shop"), configmap("a")])
    # A commit that exists nowhere: one early poll looks for it, then the scheduled polls
    # (none within this test) go on; the same lie again costs nothing.
    recorder.response = {"accepted": True, "generation": 1, "commit": "b" * 40}
    agent = make_agent(leads=(recorder.url,), interval=60.0, drift_interval=60.0, report_interval=0.1,
                       git_poll_max_interval=60.0)
    thread = _running(agent)
    try:
        wait_for(lambda: agent.last is not None and agent.last.applied is not None, what="first sync")
        wait_for(lambda: len(recorder.reports) >= 10, what="answers")
        assert _polls(agent) <= 2, _polls(agent)  # the first poll, one for the lie
        # A new lie in every answer: one early poll per report interval at most.
        counter = iter(range(10**6))
        recorder.response = {"accepted": True, "generation": 1, "commit": "c" * 40}
        start, polls, reports = time.monotonic(), _polls(agent), len(recorder.reports)
        while time.monotonic() - start < 1.5:
            recorder.response = {"accepted": True, "generation": 1, "commit": f"{next(counter):040x}"}
            time.sleep(0.02)
        elapsed, early = time.monotonic() - start, _polls(agent) - polls
        answered = len(recorder.reports) - reports
    finally:
        _stop(agent, thread)
    assert answered >= 3 and 1 <= early <= elapsed / 0.1 + 1, (early, answered)
    assert early < answered  # not one poll per answer
    # Never applied anything but what Git holds.
    assert agent.last is not None and agent.last.applied is not None and agent.last.applied.commit == head
    assert configmap_names(core) == {"a"}


def test_an_announced_generation_still_polls_while_skipping(
        make_agent: Any, branch: Branch, recorder: Recorder, core: Any) -> None:
    head = branch.publish([namespace("shop"), configmap("a")])
    recorder.response = {"accepted": True, "generation": 1, "commit": head}
    agent = make_agent(leads=(recorder.url,), interval=0.1, drift_interval=60.0, report_interval=0.1,
                       git_poll_max_interval=60.0)
    thread = _running(agent)
    try:
        wait_for(lambda: _metric(agent, "qonnect_agent_git_polls_skipped_total") >= 2, what="skipping")
        branch.publish([namespace("shop"), configmap("b")])
        # A stale hint (a lead that has not seen the move) with a newer generation: the
        # generation, replicated through Raft to every lead, wins.
        recorder.response = {"accepted": True, "generation": 2, "commit": head}
        wait_for(lambda: configmap_names(core) == {"b"}, timeout=10, what="sync on the generation")
    finally:
        _stop(agent, thread)
