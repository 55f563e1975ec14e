"""Hostile cluster branches: each case of issue 15 is refused with a stable reason, what runs
keeps running, and the agent never deletes (or takes over) what it did not create."""

from __future__ import annotations

import json
from typing import Any

import pygit2
import pytest
import yaml
from kubernetes import client

from qonnect_gitops.gitstore import trailers as tr
from qonnect_gitops.gitstore.tree import build_tree
from tests.agent.conftest import LABELS, Branch, configmap, configmap_names, namespace, path_of
from tests.model.test_bounded_yaml import chained
from tests.model.test_hostile_input import BOMB


def _commit(branch: Branch, files: dict[str, bytes], generation: int, extra: list[tuple[str, str]] | None = None,
            links: dict[str, bytes] | None = None) -> str:
    """A cluster commit of exactly ``files`` (plus symlink entries ``links``: name -> target)."""
    repo = branch.store.repo
    tree = build_tree(repo, files)
    if links:
        builder = repo.TreeBuilder(repo[tree])
        for name, target in links.items():
            builder.insert(name, repo.create_blob(target), pygit2.enums.FileMode.LINK)
        tree = builder.write()
    sig = pygit2.Signature("t", "t@example.org", 1_700_000_000 + generation, 0)
    msg = tr.format_message("test", "", [(tr.SOURCE, "0" * 40), (tr.TERM, "1"), (tr.GENERATION, str(generation)),
                                         (tr.REASON, "goals-changed"), *(extra or [])])
    oid = branch.write_commit(tree, msg, sig)  # signed as the leader signs: the content is what is hostile
    branch.generation = max(branch.generation, generation)
    return oid


def _files(objects: list[dict[str, Any]]) -> dict[str, bytes]:
    return {path_of(o): yaml.safe_dump(o, sort_keys=False).encode() for o in objects}


def _inventory(core: client.CoreV1Api) -> dict[str, Any]:
    return json.loads(core.read_namespaced_config_map("qonnect-inventory", "qonnect-system").data["inventory"])


def test_alias_bomb_in_a_branch_file_is_refused_and_what_runs_keeps_running(make_agent, branch: Branch, core):
    branch.publish([namespace("shop"), configmap("a")])
    agent = make_agent()
    assert agent.sync().state == "Ready"
    bomb = b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bomb, namespace: shop}\ndata:\n" + \
        b"".join(b"  " + line + b"\n" for line in BOMB.splitlines())
    files = _files([namespace("shop"), configmap("a")]) | {"shop/web/configmap-bomb.yaml": bomb}
    head = _commit(branch, files, generation=2)
    result = agent.sync()
    assert result.commit == head and result.reason == "BranchUnreadable" and result.exit_code == 1
    assert [r.reason for r in result.refusals] == ["BranchUnreadable"]
    assert "shop/web/configmap-bomb.yaml:10:" in result.refusals[0].message
    assert "expands this document past 1 MiB" in result.refusals[0].message
    assert configmap_names(core) == {"a"} and result.applied.generation == 1
    assert len(result.health) == 2  # what runs is still observed and reported


@pytest.mark.parametrize(("body", "where", "what"), [
    (b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: chain, namespace: shop}\ndata:\n"
     + b"".join(b"  " + line + b"\n" for line in chained().splitlines()), ":6:101:",
     "the alias *a0 nests this document deeper than 100 levels"),
    (b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: loop, namespace: shop}\ndata: &r {self: *r}\n",
     ":4:17:", "refers to a collection that contains it"),
    (b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: deep, namespace: shop}\ndata: {x: " + b"[" * 1_100
     + b"]" * 1_100 + b"}\n", ":4:", "nesting depth"),
], ids=["chained aliases", "recursive alias", "deep flow"])
def test_nesting_through_aliases_is_unreadable_and_what_runs_keeps_running(make_agent, branch: Branch, core,
                                                                            body: bytes, where: str, what: str):
    # Issue 30, defect 8: these crashed the agent's sync (RecursionError), or were applied as a
    # structure that refers to itself; now the commit is refused like any unreadable branch.
    branch.publish([namespace("shop"), configmap("a")])
    agent = make_agent()
    assert agent.sync().state == "Ready"
    head = _commit(branch, _files([namespace("shop"), configmap("a")]) | {"shop/web/configmap-x.yaml": body}, 2)
    result = agent.sync()
    assert result.commit == head and result.reason == "BranchUnreadable" and result.exit_code == 1
    assert f"shop/web/configmap-x.yaml{where}" in result.refusals[0].message and what in result.message
    assert configmap_names(core) == {"a"} and result.applied.generation == 1


def test_oversized_file_and_non_string_fields_are_unreadable_not_a_crash(make_agent, branch: Branch, core):
    branch.publish([namespace("shop"), configmap("a")])
    agent = make_agent()
    agent.sync()
    huge = b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: huge, namespace: shop}\ndata: {x: '" + \
        b"y" * (5 * 1024 * 1024) + b"'}\n"
    _commit(branch, _files([namespace("shop"), configmap("a")]) | {"shop/web/configmap-huge.yaml": huge}, 2)
    result = agent.sync()
    assert result.reason == "BranchUnreadable" and "is larger than 4 MiB" in result.message
    _commit(branch, _files([namespace("shop")]) | {"shop/web/x.yaml": b"apiVersion: 5\nkind: [ConfigMap]\n"
                                                   b"metadata: {name: x}\n"}, 3)
    result = agent.sync()
    assert result.reason == "BranchUnreadable" and "all strings" in result.message
    assert configmap_names(core) == {"a"}


def test_symlinks_in_a_branch_are_never_followed(make_agent, branch: Branch, core):
    head = _commit(branch, _files([namespace("shop"), configmap("a")]), 1,
                   links={"passwd.yaml": b"/etc/passwd", "up.yaml": b"../../secrets.yaml"})
    agent = make_agent()
    result = agent.sync()
    assert result.commit == head and result.state == "Ready", result.message
    assert sorted(r.key[4] for r in result.objects) == ["a", "shop"]
    assert agent.revision is not None and agent.revision.ignored == ("passwd.yaml", "up.yaml")


def test_objects_in_reserved_namespaces_are_refused_whatever_the_branch_says(make_agent, branch: Branch, core):
    # kube-system/coredns exists and the agent never created it.
    core.create_namespaced_config_map("kube-system", client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="coredns"), data={"Corefile": ".:53"}))
    branch.publish([namespace("shop"), configmap("a")])
    agent = make_agent()
    agent.sync()
    system = namespace("kube-system", annotations={"qonnect.io/prune": "enabled"})
    coredns = configmap("coredns", ns="kube-system", data={"Corefile": "hijacked"})
    branch.publish([namespace("shop"), configmap("a"), system, coredns])
    result = agent.sync()
    assert result.state == "Stalled" and result.reason == "ProtectedNamespace" and result.objects == []
    assert sorted(r.message.split(":")[0] for r in result.refusals) == [
        "ConfigMap/kube-system/coredns", "Namespace/kube-system"]
    assert all(r.reason == "ProtectedNamespace" for r in result.refusals)
    live = core.read_namespaced_config_map("coredns", "kube-system")
    assert live.data == {"Corefile": ".:53"} and not (live.metadata.labels or {})
    assert all(k[3] != "kube-system" and k[4] != "kube-system" for k in map(tuple, _inventory(core)["objects"]))


def test_an_inventory_listing_a_reserved_namespace_never_prunes_it(make_agent, branch: Branch, core):
    """An inventory written by an older agent that adopted kube-system objects: when they
    leave the branch they are refused, never deleted, and leave the inventory."""
    core.create_namespaced_config_map("kube-system", client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="coredns", labels=LABELS), data={"Corefile": ".:53"}))
    branch.publish([namespace("shop"), configmap("a"), configmap("b")])
    agent = make_agent()
    agent.sync()
    inv = _inventory(core)
    inv["objects"] += [["", "v1", "ConfigMap", "kube-system", "coredns"], ["", "v1", "Namespace", "", "kube-system"]]
    core.patch_namespaced_config_map("qonnect-inventory", "qonnect-system", {"data": {"inventory": json.dumps(inv)}})
    branch.publish([namespace("shop"), configmap("a"), configmap("b"), configmap("c")], prune_limit=2)
    result = agent.sync()
    assert result.pruned.deleted == []
    assert sorted((k[4], why) for k, why in result.pruned.refused) == [
        ("coredns", "ProtectedNamespace"), ("kube-system", "ProtectedNamespace")]
    assert core.read_namespaced_config_map("coredns", "kube-system").data == {"Corefile": ".:53"}
    assert core.read_namespace("kube-system").status.phase == "Active"
    assert ["", "v1", "ConfigMap", "kube-system", "coredns"] not in _inventory(core)["objects"]


def test_no_adoption_of_live_objects_the_agent_did_not_create(make_agent, branch: Branch, core):
    branch.publish([namespace("shop"), configmap("a")])
    agent = make_agent()
    agent.sync()
    # Someone else's objects: one unlabelled, one with a forged ownership label.
    core.create_namespaced_config_map("shop", client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="theirs", labels={"team": "other"}), data={"k": "theirs"}))
    core.create_namespaced_config_map("shop", client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="lookalike", labels=LABELS), data={"k": "lookalike"}))
    branch.publish([namespace("shop"), configmap("a"), configmap("theirs"), configmap("lookalike")])
    result = agent.sync()
    assert result.reason == "ApplyFailed"
    assert sorted((r.reason, r.message.split(":")[0]) for r in result.refusals) == [
        ("OwnershipConflict", "ConfigMap/shop/lookalike"), ("OwnershipConflict", "ConfigMap/shop/theirs")]
    assert core.read_namespaced_config_map("theirs", "shop").data == {"k": "theirs"}
    assert core.read_namespaced_config_map("lookalike", "shop").data == {"k": "lookalike"}
    # They leave the branch again: the agent deletes neither (it never created them).
    branch.publish([namespace("shop"), configmap("a"), configmap("b")], prune_limit=2)
    result = agent.sync()
    assert result.state == "Ready", result.message
    assert result.pruned.deleted == []
    assert {"theirs", "lookalike"} <= configmap_names(core)


def test_the_branch_cannot_switch_prune_protection_off(make_agent, branch: Branch, core):
    branch.publish([namespace("shop"), configmap("a")])
    agent = make_agent()
    agent.sync()
    extra = namespace("extra", annotations={"qonnect.io/prune": "enabled"})
    branch.publish([namespace("shop"), configmap("a"), extra, configmap("x", ns="extra")])
    assert agent.sync().state == "Ready"
    assert "qonnect.io/prune" not in (core.read_namespace("extra").metadata.annotations or {})
    branch.publish([namespace("shop"), configmap("a"), configmap("b")], prune_limit=2)
    result = agent.sync()
    assert [(r.reason, r.message.split(" ")[0]) for r in result.refusals] == [("ProtectedKind", "Namespace/extra")]
    assert core.read_namespace("extra").status.phase == "Active"


def test_allow_empty_on_a_non_empty_commit_does_not_lift_the_prune_fraction(make_agent, branch: Branch, core):
    names = [f"c{i}" for i in range(12)]
    branch.publish([namespace("shop")] + [configmap(n) for n in names])
    agent = make_agent()
    agent.sync()
    keep = [namespace("shop"), configmap("c0"), configmap("c1")]
    _commit(branch, _files(keep), generation=2, extra=[(tr.ALLOW_EMPTY, "true")])
    result = agent.sync()
    assert [r.reason for r in result.refusals] == ["PruneLimitExceeded"]
    assert "removes 10 of 13" in result.refusals[0].message
    assert configmap_names(core) == set(names)


def test_the_same_object_in_two_files_is_refused(make_agent, branch: Branch, core):
    branch.publish([namespace("shop"), configmap("a")])
    agent = make_agent()
    agent.sync()
    files = _files([namespace("shop"), configmap("a", data={"k": "one"})])
    files["shop/other/configmap-a.yaml"] = yaml.safe_dump(configmap("a", data={"k": "two"})).encode()
    _commit(branch, files, generation=2)
    result = agent.sync()
    assert result.reason == "DuplicateObject" and result.objects == []
    assert [r.message for r in result.refusals] == [
        "ConfigMap/shop/a is defined in shop/other/configmap-a.yaml and again in shop/web/configmap-a.yaml"]
    assert core.read_namespaced_config_map("a", "shop").data == {"k": "a"}


def test_a_custom_resource_whose_kind_arrives_with_it_cannot_land_in_default(make_agent, branch: Branch, api):
    """Its scope is unknown until its CRD is applied in the same pass, so the guard sees no
    namespace; the per-object check after the CRD is served still refuses ``default``."""
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "widgets.example.org", "labels": dict(LABELS)},
           "spec": {"group": "example.org", "scope": "Namespaced",
                    "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                    "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                        "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}}
    widget = {"apiVersion": "example.org/v1", "kind": "Widget", "metadata": {"name": "w1", "labels": dict(LABELS)}}
    files = _files([namespace("shop"), configmap("a"), crd]) | {"shop/web/widget-w1.yaml": yaml.safe_dump(widget).encode()}
    _commit(branch, files, generation=1)
    result = make_agent().sync()
    assert {r.key[2]: (r.action, r.reason) for r in result.objects}["Widget"] == ("failed", "ProtectedNamespace")
    assert result.reason == "ApplyFailed"
    assert [r.reason for r in result.refusals] == ["ProtectedNamespace"]
    widgets = client.CustomObjectsApi(api).list_namespaced_custom_object("example.org", "v1", "default", "widgets")
    assert widgets["items"] == []
