"""Generation trust: a branch that goes backwards is refused, also after an agent restart."""

from __future__ import annotations

import pytest

from qonnect_gitops.gitstore import trailers as tr
from tests.agent.conftest import Branch, configmap, configmap_names, namespace


def test_generation_regression_is_refused_and_survives_restart(make_agent, branch: Branch, core):
    branch.publish([namespace("shop"), configmap("a")])
    branch.publish([namespace("shop"), configmap("a"), configmap("b")])
    agent = make_agent()
    assert agent.sync().applied.generation == 2
    late = branch.raw_commit([namespace("shop"), configmap("old")], generation=1, term=1)
    result = agent.sync()
    assert result.commit == late
    assert [r.reason for r in result.refusals] == ["StaleGeneration"]
    assert result.refusals[0].commit == late
    assert result.reason == "StaleGeneration" and result.exit_code == 1
    assert result.applied.generation == 2
    names = configmap_names(core)
    assert names == {"a", "b"}
    report = agent.build_report(result)
    assert report.refusals[0].reason == "StaleGeneration" and report.attempted == late

    # A new agent process (fresh memory, fresh Git cache) still refuses: the inventory remembers.
    restarted = make_agent(cache_dir=agent.cfg.cache_dir.parent / "other-cache")
    again = restarted.sync()
    assert [r.reason for r in again.refusals] == ["StaleGeneration"]
    assert configmap_names(core) == {"a", "b"}

    # The rightful leader's next decision is applied.
    branch.generation = 2
    branch.publish([namespace("shop"), configmap("a"), configmap("c")])
    ok = restarted.sync()
    assert ok.refusals == [] and ok.applied.generation == 3
    assert configmap_names(core) == {"a", "c"}


def test_same_generation_is_accepted_and_term_recorded(make_agent, branch: Branch, core):
    branch.publish([namespace("shop"), configmap("a")], term=4)
    agent = make_agent()
    result = agent.sync()
    assert result.term == 4
    import json
    inv = json.loads(core.read_namespaced_config_map("qonnect-inventory", "qonnect-system").data["inventory"])
    assert inv["term"] == 4
    branch.raw_commit([namespace("shop"), configmap("a"), configmap("z")], generation=1, term=5)
    assert agent.sync().refusals == []


def test_commit_without_generation_after_one_was_applied_is_refused(make_agent, branch: Branch):
    branch.publish([namespace("shop"), configmap("a")])
    agent = make_agent()
    agent.sync()
    branch.raw_commit([namespace("shop")], generation=None)
    assert [r.reason for r in agent.sync().refusals] == ["StaleGeneration"]


@pytest.mark.parametrize(("trailer", "value"), [
    (tr.GENERATION, str(2**60)), (tr.GENERATION, str(2**53 + 1)), (tr.GENERATION, "-3"), (tr.GENERATION, "+3"),
    (tr.GENERATION, "3_0"), (tr.GENERATION, "\u0663"), (tr.TERM, str(2**60)), (tr.PRUNE_LIMIT, str(2**60)),
    (tr.PRUNE_LIMIT, "many"),
])
def test_a_trailer_number_beyond_what_a_report_carries_is_refused_before_apply(make_agent, branch: Branch, core,
                                                                              trailer, value):
    """A generation of 2^60 was applied, then no report could be built (the model caps at
    2^53) and the cluster went silent. Every numeric trailer is bounded before anything is
    applied, and the refusal names the trailer; the agent keeps reporting."""
    branch.publish([namespace("shop"), configmap("a")])
    agent = make_agent()
    agent.sync()
    objects = [namespace("shop"), configmap("a"), configmap("b")]
    if trailer == tr.TERM:
        head = branch.raw_commit(objects, generation=2, term=int(value))
    elif trailer == tr.PRUNE_LIMIT:
        head = branch.raw_commit(objects, generation=2, extra=[(trailer, value)])
    else:
        head = branch.raw_commit(objects, generation=None, extra=[(trailer, value)])
    result = agent.sync()
    assert result.commit == head and result.reason == "BranchUnreadable", result.message
    assert [r.reason for r in result.refusals] == ["BranchUnreadable"]
    assert f"trailer {trailer}: {value!r} is not a whole number from 0 to {2**53}" in result.refusals[0].message
    assert configmap_names(core) == {"a"}
    report = agent.build_report(result)  # the report still builds: the cluster keeps reporting
    assert report.applied.generation == 1 and report.refusals[0].commit == head
