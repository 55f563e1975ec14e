"""The prune guard counts only what the leader's decisions have not ordered yet and what the
agent would really delete (issue 31, 3; issue 30, 11), and an operator can clear a stalled
guard the way docs/agent.md says ("Clearing a stalled prune guard")."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client

from qonnect_gitops.gitstore import trailers as tr
from qonnect_gitops.gitstore.trailers import DecisionMeta
from tests.agent.conftest import CLUSTER, Branch, configmap, configmap_names, namespace


def _inventory(core: client.CoreV1Api) -> dict[str, Any]:
    return json.loads(core.read_namespaced_config_map("qonnect-inventory", "qonnect-system").data["inventory"])


def _namespaces(core: client.CoreV1Api) -> set[str]:
    return {n.metadata.name for n in core.list_namespace().items if n.status.phase != "Terminating"}


def _empty_cluster(branch: Branch) -> str:
    """The leader's decision that moves everything off the cluster (GitStore writes the empty
    tree, Qonnect-Allow-Empty, and how many files it removes)."""
    branch.generation += 1
    branch.store.write_decision({"placement.yaml": f"generation: {branch.generation}\n".encode()},
                                summary="drain", body="", clusters=[CLUSTER], timestamp=next(branch.clock),
                                meta=DecisionMeta(source="0" * 40, term=1, generation=branch.generation,
                                                  reason="failover"))
    head = branch.store.cluster_head(CLUSTER)
    assert head is not None
    return head


def test_allow_empty_without_a_prune_limit_deletes_nothing(make_agent, branch: Branch, core):
    """Issue 30, 11: an empty tree with Qonnect-Allow-Empty and no Qonnect-Prune-Limit
    deleted everything; Allow-Empty says the emptiness is intended, it does not lift the guard."""
    branch.publish([namespace("shop")] + [configmap(n) for n in "abcd"])
    agent = make_agent()
    agent.sync()
    empty = branch.raw_commit([], generation=branch.generation + 1, extra=[(tr.ALLOW_EMPTY, "true")])
    result = agent.sync()
    assert result.commit == empty and result.reason == "PruneLimitExceeded", result.message
    assert "removes 4 of 4 objects" in result.message and "no Qonnect-Prune-Limit trailer" in result.message
    assert result.pruned.deleted == [] and configmap_names(core) == set("abcd")
    # With a limit that covers it, the same emptiness goes through.
    branch.raw_commit([], generation=branch.generation + 2, extra=[(tr.ALLOW_EMPTY, "true"), (tr.PRUNE_LIMIT, "5")])
    result = agent.sync()
    assert result.state == "Ready", result.message
    assert configmap_names(core) == set()


@pytest.mark.parametrize("written_by", ["this agent", "an older agent"])
def test_a_cluster_emptied_before_is_filled_again_without_a_trailer(make_agent, branch: Branch, core, written_by):
    """Issue 31, 3: the inventory held only the protected Namespace of an earlier commit (the
    cluster had been emptied: the Namespace stays, it is a protected kind); the next decision
    filled the cluster and carried no Qonnect-Prune-Limit (the branch was empty before), and
    the agent refused it forever: "removes 1 of 1 objects". The Namespace is a removal the
    emptying commit ordered already, and one the agent will never carry out anyway."""
    branch.publish([namespace("shop"), configmap("a"), configmap("b")])
    agent = make_agent()
    agent.sync()
    _empty_cluster(branch)
    drained = agent.sync()
    assert drained.state == "Ready", drained.message
    assert configmap_names(core) == set() and "shop" in _namespaces(core)
    inv = _inventory(core)
    assert [k[4] for k in inv["objects"]] == ["shop"]
    if written_by == "an older agent":
        # An inventory from before the journal: the Namespace is not marked as leaving.
        core.patch_namespaced_config_map("qonnect-inventory", "qonnect-system", {"data": {"inventory": json.dumps(
            {k: inv[k] for k in ("commit", "generation", "term", "objects")})}})
    head = branch.publish([namespace("bank"), configmap("ledger", ns="bank"), configmap("web", ns="bank")])
    assert tr.PRUNE_LIMIT not in branch.store.repo[head].message  # the leader removed nothing from an empty branch
    result = agent.sync()
    assert result.state == "Ready" and result.refusals[0].reason == "ProtectedKind", result.message
    assert configmap_names(core, "bank") == {"ledger", "web"}
    assert "shop" in _namespaces(core)  # still protected: only a person lets it go


def test_commits_the_agent_missed_add_their_prune_limits(make_agent, branch: Branch, core):
    """The agent was away while the leader emptied its cluster (a failover: Allow-Empty and a
    limit of 6) and then filled it with other objects (no limit: the branch was empty). The
    head's own trailers order nothing; the decisions since the applied commit ordered all of it."""
    branch.publish([namespace("shop")] + [configmap(n) for n in "abcde"])
    agent = make_agent()
    agent.sync()
    _empty_cluster(branch)
    branch.publish([namespace("shop"), configmap("x"), configmap("y")])
    result = agent.sync()
    assert result.state == "Ready", result.message
    assert configmap_names(core) == {"x", "y"}
    assert sorted(k[4] for k in result.pruned.deleted) == list("abcde")


def test_a_trailer_on_a_commit_that_removes_nothing_lends_nothing(make_agent, branch: Branch, core):
    """A skipped commit's Qonnect-Prune-Limit counts at most the files it really removed."""
    branch.publish([namespace("shop")] + [configmap(n) for n in "abcde"])
    agent = make_agent()
    agent.sync()
    objects = [namespace("shop")] + [configmap(n) for n in "abcde"] + [configmap("f")]
    branch.raw_commit(objects, generation=2, extra=[(tr.PRUNE_LIMIT, "1000")])  # adds one, removes none
    branch.raw_commit([namespace("shop"), configmap("f")], generation=3)  # removes 5 of 6, no trailer
    result = agent.sync()
    assert result.reason == "PruneLimitExceeded", result.message
    assert "removes 5 of 6 objects" in result.message and "no Qonnect-Prune-Limit trailer" in result.message
    assert configmap_names(core) == set("abcde")


@pytest.mark.parametrize("how", ["annotate enabled", "annotate disabled", "delete"])
def test_an_operator_clears_a_stalled_prune_guard_as_the_docs_say(make_agent, branch: Branch, core, how):
    """docs/agent.md, "Clearing a stalled prune guard": annotate the objects the refusal
    counts ``qonnect.io/prune=enabled`` (they are deleted) or ``=disabled`` (they stay, and
    the agent forgets them), or delete them; the next pass counts again and goes on."""
    branch.publish([namespace("shop")] + [configmap(n) for n in "abcde"])
    agent = make_agent()
    agent.sync()
    branch.raw_commit([namespace("shop"), configmap("a"), configmap("z")], generation=2)  # removes 4 of 6
    stalled = agent.sync()
    assert stalled.reason == "PruneLimitExceeded", stalled.message
    assert "removes 4 of 6 objects" in stalled.message
    assert "ConfigMap/shop/b, ConfigMap/shop/c, ConfigMap/shop/d, ..." in stalled.message
    assert agent.sync().reason == "PruneLimitExceeded"  # stalled for good, until someone acts
    for name in "bcde":
        if how == "delete":
            core.delete_namespaced_config_map(name, "shop")
        else:
            value = how.split()[1]
            core.patch_namespaced_config_map(name, "shop", {"metadata": {"annotations": {"qonnect.io/prune": value}}})
    result = agent.sync()
    assert result.state == "Ready", result.message
    assert configmap_names(core) == ({"a", "z"} if how != "annotate disabled" else set("abcdez"))
    assert sorted(k[4] for k in _inventory(core)["objects"]) == ["a", "shop", "z"]


def test_the_namespace_of_issue_31_annotated_by_a_person_goes_uncounted(make_agent, branch: Branch, core):
    """Issue 31: annotating the stalled Namespace ``qonnect.io/prune=enabled`` did not help
    (its deletion was counted against the fraction). A person's annotation lets it go: it is
    deleted with the next commit and not counted as a removal the leader ordered."""
    branch.publish([namespace("shop"), configmap("a")])
    agent = make_agent()
    agent.sync()
    _empty_cluster(branch)
    agent.sync()
    core.patch_namespace("shop", {"metadata": {"annotations": {"qonnect.io/prune": "enabled"}}})
    branch.publish([namespace("bank"), configmap("ledger", ns="bank")])
    result = agent.sync()
    assert result.state == "Ready" and result.refusals == [], result.message
    assert [k[4] for k in result.pruned.deleted] == ["shop"] and result.pruned.consented == result.pruned.deleted
    assert "shop" not in _namespaces(core) and configmap_names(core, "bank") == {"ledger"}
