"""Reading the branch: one object per file, encrypted files skipped, broken files refused."""

from __future__ import annotations

import pygit2

from qonnect_gitops.gitstore import trailers as tr
from qonnect_gitops.gitstore.tree import build_tree
from tests.agent.conftest import Branch, configmap, configmap_names, namespace


def _commit(branch: Branch, files: dict[str, bytes], generation: int) -> str:
    sig = pygit2.Signature("t", "t@example.org", 1_700_000_000 + generation, 0)
    msg = tr.format_message("test", "", [(tr.SOURCE, "0" * 40), (tr.TERM, "1"), (tr.GENERATION, str(generation)),
                                         (tr.REASON, "goals-changed")])
    return branch.write_commit(build_tree(branch.store.repo, files), msg, sig)


def test_sops_files_are_skipped_and_non_yaml_ignored(make_agent, branch: Branch, core):
    _commit(branch, {
        "_cluster/namespace-shop.yaml": b"apiVersion: v1\nkind: Namespace\nmetadata:\n  name: shop\n"
                                        b"  labels: {app.kubernetes.io/managed-by: qonnect}\n",
        "shop/web/configmap-a.yaml": b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: shop}\n",
        "shop/web/sops-secret-db.yaml": b"sops:\n  mac: ENC[AES256_GCM,data:abc]\n",
        "README.md": b"not a manifest\n",
    }, generation=1)
    agent = make_agent()
    result = agent.sync()
    assert result.state == "Ready", result.message
    assert sorted(r.key[2] for r in result.objects) == ["ConfigMap", "Namespace"]
    assert agent.revision is not None and agent.revision.skipped == ("shop/web/sops-secret-db.yaml",)


def test_broken_manifest_refuses_the_commit_and_keeps_what_runs(make_agent, branch: Branch, core):
    branch.publish([namespace("shop"), configmap("a"), configmap("b")])
    agent = make_agent()
    agent.sync()
    _commit(branch, {"shop/web/configmap-a.yaml": b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: [\n"},
            generation=2)
    result = agent.sync()
    assert [r.reason for r in result.refusals] == ["BranchUnreadable"]
    assert "configmap-a.yaml" in result.refusals[0].message
    assert configmap_names(core) == {"a", "b"}
    _commit(branch, {"shop/web/x.yaml": b"kind: ConfigMap\nmetadata: {name: x}\n"}, generation=3)
    assert "needs apiVersion" in agent.sync().refusals[0].message
