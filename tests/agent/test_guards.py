"""Prune guards: each refuses with a stable reason, and refusing means nothing is deleted."""

from __future__ import annotations

from kubernetes import client

from qonnect_gitops.agent.inventory import Inventory
from qonnect_gitops.agent.prune import Allowance, check_guards
from qonnect_gitops.gitstore.trailers import DecisionMeta
from tests.agent.conftest import Branch, configmap, configmap_names, namespace


def _cms(core: client.CoreV1Api) -> set[str]:
    return configmap_names(core)


def test_empty_branch_without_allow_empty_is_refused(make_agent, branch: Branch, core):
    branch.publish([namespace("shop"), configmap("a"), configmap("b")])
    agent = make_agent()
    agent.sync()
    empty = branch.raw_commit([], generation=branch.generation + 1)
    result = agent.sync()
    assert result.commit == empty
    assert [r.reason for r in result.refusals] == ["EmptyDesiredSet"]
    assert result.state == "Stalled" and result.reason == "EmptyDesiredSet" and result.exit_code == 1
    assert _cms(core) == {"a", "b"}
    report = agent.build_report(result)
    assert report.refusals[0].reason == "EmptyDesiredSet" and report.applied.generation == 1


def test_empty_branch_with_allow_empty_prunes_everything(make_agent, branch: Branch, core):
    branch.publish([namespace("shop"), configmap("a"), configmap("b")])
    agent = make_agent()
    agent.sync()
    # The leader drains the cluster: GitStore writes an empty tree with Qonnect-Allow-Empty: true.
    branch.store.write_decision({"placement.yaml": b"empty\n"}, summary="drain", body="", clusters=["edge-1"],
                                timestamp=1_800_000_000,
                                meta=DecisionMeta(source="0" * 40, term=1, generation=2, reason="rescheduling"))
    result = agent.sync()
    assert result.commit == branch.store.cluster_head("edge-1")
    assert sorted(k[4] for k in result.pruned.deleted) == ["a", "b"]
    assert _cms(core) == set()
    # The namespace is protected: it stays, and the refusal says why.
    assert core.read_namespace("shop").metadata.name == "shop"
    assert [r.reason for r in result.refusals] == ["ProtectedKind"]


def test_prune_limit_refuses_then_a_covering_trailer_allows(make_agent, branch: Branch, core):
    branch.publish([namespace("shop")] + [configmap(n) for n in "abcde"])
    agent = make_agent()
    agent.sync()
    branch.publish([namespace("shop"), configmap("a"), configmap("b")])  # removes 3 of 6 = 50%: allowed
    assert agent.sync().state == "Ready"
    assert _cms(core) == {"a", "b"}
    branch.publish([namespace("shop")])  # removes 2 of 3 objects: more than half
    result = agent.sync()
    assert [r.reason for r in result.refusals] == ["PruneLimitExceeded"]
    assert "removes 2 of 3" in result.refusals[0].message
    assert _cms(core) == {"a", "b"}
    assert result.applied.generation == 2
    # (GitStore writes a cluster commit only when its tree changes, so each step adds an object.)
    branch.publish([namespace("shop"), configmap("y")], prune_limit=1)  # a limit that does not cover it
    result = agent.sync()
    assert [r.reason for r in result.refusals] == ["PruneLimitExceeded"]
    assert "Qonnect-Prune-Limit: 1 does not cover it" in result.refusals[0].message
    branch.publish([namespace("shop"), configmap("z")], prune_limit=2)
    result = agent.sync()
    assert result.refusals == [] and result.state == "Ready"
    assert _cms(core) == {"z"}


def test_protected_kinds_need_prune_enabled(make_agent, branch: Branch, core):
    branch.publish([namespace("shop"), namespace("extra"), configmap("a"), configmap("b")])
    agent = make_agent()
    agent.sync()
    branch.publish([namespace("shop"), configmap("a"), configmap("b")])
    result = agent.sync()
    assert [r.reason for r in result.refusals] == ["ProtectedKind"]
    assert "Namespace/extra" in result.refusals[0].message
    assert core.read_namespace("extra").status.phase == "Active"
    # Still listed, so annotating it lets a later sync delete it.
    core.patch_namespace("extra", {"metadata": {"annotations": {"qonnect.io/prune": "enabled"}}})
    result = agent.sync(full=True)
    assert [k[4] for k in result.pruned.deleted] == ["extra"]
    assert "extra" not in {n.metadata.name for n in core.list_namespace().items
                           if n.status.phase != "Terminating"}


def test_guard_function_edges():
    def cms(names: str) -> set[tuple[str, str, str, str, str]]:
        return {("", "v1", "ConfigMap", "s", n) for n in names}

    none, three = Allowance(), Allowance(3)
    inv = Inventory(objects=cms("abcd"))
    assert check_guards(cms("ab"), inv, allow_empty=False, allowance=none, fraction=0.5) is None  # exactly half
    refused = check_guards(cms("a"), inv, allow_empty=False, allowance=none, fraction=0.5)
    assert refused.reason == "PruneLimitExceeded" and refused.removals == tuple(sorted(cms("bcd")))
    assert check_guards(cms("a"), inv, allow_empty=False, allowance=three, fraction=0.5) is None
    assert check_guards(cms("a"), inv, allow_empty=False, allowance=none, fraction=0.8) is None
    assert check_guards(set(), inv, allow_empty=False, allowance=Allowance(9), fraction=1.0).reason == "EmptyDesiredSet"
    assert check_guards(set(), Inventory(), allow_empty=False, allowance=none, fraction=0.5).reason == "EmptyDesiredSet"
    # The same object under another API version is not a removal.
    moved = {("", "v2", "ConfigMap", "s", n) for n in "abcd"}
    assert check_guards(moved, inv, allow_empty=False, allowance=none, fraction=0.1) is None
    # Allow-Empty says an empty tree is intended; it does not lift the fraction (issue 30, 11).
    assert check_guards(set(), inv, allow_empty=True, allowance=none, fraction=0.5).reason == "PruneLimitExceeded"
    assert check_guards(set(), inv, allow_empty=True, allowance=Allowance(4), fraction=0.5) is None
    assert check_guards(set(), Inventory(), allow_empty=True, allowance=none, fraction=0.5) is None
    # Only the applied commit's objects count: leftovers of earlier removals and of an
    # unfinished pass were decided already (issue 30, 3).
    journal = Inventory(objects=cms("abcdefgh"), leaving=cms("efg"), arriving=cms("h"))
    assert journal.settled == cms("abcd")
    assert check_guards(cms("abcx"), journal, allow_empty=False, allowance=none, fraction=0.3) is None
    refused = check_guards(cms("ax"), journal, allow_empty=False, allowance=none, fraction=0.5)
    assert "removes 3 of 4 objects" in refused.message
    # Spared objects (the agent would not delete them, or a person let them go) count
    # neither as removals nor in the total: 1 of 2 is half.
    assert check_guards(cms("ax"), journal, allow_empty=False, allowance=none, fraction=0.5,
                        spared=frozenset(cms("bc"))) is None
    # A branch that was empty before (its inventory holds only leftovers) needs no trailer to be filled.
    emptied = Inventory(objects=cms("ab"), leaving=cms("ab"))
    assert check_guards(cms("xyz"), emptied, allow_empty=False, allowance=none, fraction=0.5) is None
