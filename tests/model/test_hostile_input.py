"""Hostile goals: limits on files, trees and YAML, directories read as Git stores them,
Kubernetes objects checked against the 1.37 API, and the scope table kept honest."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from qonnect_gitops.cli import main
from qonnect_gitops.model import GoalsError, load_goals
from qonnect_gitops.model.limits import MAX_FILE_BYTES, MAX_TREE_FILES, TreeLimits
from qonnect_gitops.model.parsing import check_structure, load_documents
from qonnect_gitops.model.quantity import to_bytes, to_millicores
from qonnect_gitops.model.source import scan_directory
from tests.conftest import ROOT, TEMPLATE
from tests.model.kube_api import official_scopes

BOMB = (b"a: &a [x,x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
        b"d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\n"
        b"f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]\ng: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f,*f]\n"
        b"h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g,*g]\ni: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h,*h]\n")


def _validate(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "qonnect_gitops", "validate", str(path)],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)


def _with_manifest(files: dict[str, bytes], body: bytes, name: str = "extra.yaml") -> dict[str, bytes]:
    out = dict(files)
    out[f"apps/bookinfo/manifests/{name}"] = body
    app = "apps/bookinfo/app.yaml"
    out[app] = out[app].replace(b"manifests: [manifests/details.yaml]",
                                f"manifests: [manifests/details.yaml, manifests/{name}]".encode())
    return out


# -- parsing limits ----------------------------------------------------------------------------


def test_alias_bomb_is_refused_at_the_alias_quickly() -> None:
    start = time.perf_counter()
    with pytest.raises(GoalsError) as caught:
        load_documents("branch/x.yaml", BOMB)
    assert time.perf_counter() - start < 5  # linear in the text, never the expansion
    (problem,) = caught.value.problems
    assert (problem.path, problem.line) == ("branch/x.yaml", 6)
    assert "the alias *e expands this document past 1 MiB" in problem.message


def test_many_small_documents_cannot_add_up_to_a_bomb() -> None:
    doc = b"---\na: &a [" + b",".join([b"xxxxxxxxxxxxxxxxxxxx"] * 50) + b"]\nb: [" + b",".join([b"*a"] * 400) + b"]\n"
    with pytest.raises(GoalsError, match="expands this file past 4 MiB"):
        check_structure("x.yaml", (doc * 20).decode())


def test_aliases_that_stay_small_are_fine() -> None:
    docs = load_documents("x.yaml", b"labels: &l {app: web}\nselector: {matchLabels: *l}\n")
    assert docs == [{"labels": {"app": "web"}, "selector": {"matchLabels": {"app": "web"}}}]


def test_a_file_over_the_limit_is_refused_before_parsing(template_files: dict[str, bytes]) -> None:
    big = b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: big}\ndata:\n  x: '" + b"y" * MAX_FILE_BYTES + b"'\n"
    start = time.perf_counter()
    with pytest.raises(GoalsError) as caught:
        load_goals(_with_manifest(template_files, big))
    assert time.perf_counter() - start < 10
    assert [str(p) for p in caught.value.problems] == [
        (f"apps/bookinfo/manifests/extra.yaml: is larger than 4 MiB (at least {len(big):,} bytes); split it, "
         "or keep large data out of the repository")]


def test_an_object_over_the_limit_is_refused(template_files: dict[str, bytes]) -> None:
    big = b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: big}\ndata:\n  x: '" + b"y" * (1024 * 1024) + b"'\n"
    with pytest.raises(GoalsError) as caught:
        load_goals(_with_manifest(template_files, big))
    (problem,) = caught.value.problems
    assert problem.line == 5 and "this YAML document is larger than 1 MiB" in problem.message


def test_a_tree_with_too_many_files_is_refused_without_parsing(template_files: dict[str, bytes]) -> None:
    files = dict(template_files)
    files.update({f"docs/note-{i}.md": b"x" for i in range(MAX_TREE_FILES)})
    with pytest.raises(GoalsError, match=r"the goals tree holds more than 20,000 files .*--goals-max-files raises it"):
        load_goals(files)


def test_raised_tree_limits_accept_a_larger_goals_tree_and_lowered_ones_refuse_it(
        template_files: dict[str, bytes]) -> None:
    files = dict(template_files)
    files.update({f"docs/note-{i}.md": b"x" for i in range(MAX_TREE_FILES)})
    goals = load_goals(files, limits=TreeLimits(files=len(files)))
    assert set(goals.clusters) == set(load_goals(template_files).clusters)
    total = sum(len(b) for b in template_files.values())
    with pytest.raises(GoalsError) as err:
        load_goals(template_files, limits=TreeLimits(files=len(template_files) - 1, bytes=total - 1))
    assert sorted(p.message for p in err.value.problems) == sorted([
        f"the goals tree holds more than {len(template_files) - 1:,} files ({len(template_files):,} read); "
        "the limit keeps validation bounded; --goals-max-files raises it",
        f"the goals tree holds more than {total - 1:,} bytes of files ({total:,} bytes read); "
        "--goals-max-bytes raises it",
    ])


def test_validate_takes_raised_limits_and_refuses_bad_ones(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    tree = tmp_path / "goals"
    shutil.copytree(TEMPLATE, tree)
    assert main(["validate", str(tree), "--goals-max-files", "3"]) == 1
    err = capsys.readouterr().err
    assert "the goals tree holds more than 3 files" in err and "--goals-max-files raises it" in err
    docs = tree / "docs"
    docs.mkdir()
    for i in range(MAX_TREE_FILES):
        (docs / f"note-{i}.md").write_bytes(b"x")
    assert main(["validate", str(tree)]) == 1  # over the default
    assert "holds more than 20,000 files" in capsys.readouterr().err
    assert main(["validate", str(tree), "--goals-max-files", "30000", "--goals-max-bytes", "128Mi"]) == 0
    assert ": valid:" in capsys.readouterr().out
    for bad in (["--goals-max-files", "0"], ["--goals-max-files", "many"], ["--goals-max-bytes", "lots"],
                ["--goals-max-bytes", "1.5"]):
        with pytest.raises(SystemExit) as exit_:
            main(["validate", str(tree), *bad])
        assert exit_.value.code == 2 and f"argument {bad[0]}" in capsys.readouterr().err, bad


# -- directories are read as Git stores them ------------------------------------------------------


@pytest.mark.timeout(60)
def test_validate_dir_never_follows_symlinks_nor_reads_special_files(tmp_path: Path) -> None:
    tree = tmp_path / "goals"
    shutil.copytree(TEMPLATE, tree)
    secret = tmp_path / "outside.yaml"
    secret.write_text("password: from-outside-the-tree\n")
    manifests = tree / "apps" / "bookinfo" / "manifests"
    (manifests / "outside.yaml").symlink_to(secret)
    (manifests / "zero.yaml").symlink_to("/dev/zero")
    (tree / "linked-apps").symlink_to(tree / "apps", target_is_directory=True)
    os.mkfifo(manifests / "pipe.yaml")
    scanned = scan_directory(tree)
    assert {p.path: p.message.split(" (")[0] for p in scanned.skipped} == {
        "apps/bookinfo/manifests/outside.yaml": "skipped: a symlink",
        "apps/bookinfo/manifests/zero.yaml": "skipped: a symlink",
        "apps/bookinfo/manifests/pipe.yaml": "skipped: not a regular file",
        "linked-apps": "skipped: a symlink to a directory",
    }
    assert not any(b"from-outside" in body for body in scanned.files.values())
    result = _validate(tree)
    assert result.returncode == 0, result.stderr
    assert "warning: apps/bookinfo/manifests/pipe.yaml: skipped: not a regular file" in result.stderr
    # A manifest that is a symlink is missing as far as the goals go, as it is in Git.
    app = tree / "apps" / "bookinfo" / "app.yaml"
    app.write_text(app.read_text().replace("manifests: [manifests/details.yaml]",
                                           "manifests: [manifests/details.yaml, manifests/zero.yaml]"))
    result = _validate(tree)
    assert result.returncode == 1
    assert "manifest file 'manifests/zero.yaml' not found" in result.stderr


def test_an_oversized_file_in_a_directory_is_read_only_up_to_the_limit(tmp_path: Path) -> None:
    tree = tmp_path / "goals"
    shutil.copytree(TEMPLATE, tree)
    with open(tree / "apps" / "bookinfo" / "manifests" / "huge.yaml", "wb") as fh:
        fh.truncate(50 * 1024 * 1024)  # sparse: 50 MB on paper, nothing on disk
    scanned = scan_directory(tree)
    assert len(scanned.files["apps/bookinfo/manifests/huge.yaml"]) == MAX_FILE_BYTES + 1


# -- Kubernetes objects -----------------------------------------------------------------------------


def test_custom_resources_pass_with_a_warning_and_crds_in_the_goals_give_scope_and_schema(
        template_files: dict[str, bytes], tmp_path: Path) -> None:
    unknown = b"apiVersion: example.org/v1\nkind: Gadget\nmetadata: {name: g1}\nspec: {anything: [1, 2]}\n"
    goals = load_goals(_with_manifest(template_files, unknown))
    assert [str(w) for w in goals.warnings] == [
        ("apps/bookinfo/manifests/extra.yaml:1:13: apiVersion: custom resource Gadget of example.org/v1: its "
         "CustomResourceDefinition is not in the goals, so only its name and labels were checked")]
    crd = (b"apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n"
           b"metadata: {name: widgets.example.org}\nspec:\n  group: example.org\n  scope: Cluster\n"
           b"  names: {plural: widgets, singular: widget, kind: Widget}\n"
           b"  versions:\n    - name: v1\n      served: true\n      storage: true\n      schema:\n"
           b"        openAPIV3Schema:\n          type: object\n          properties:\n            spec:\n"
           b"              type: object\n              properties:\n                size: {type: integer}\n")
    good = b"---\napiVersion: example.org/v1\nkind: Widget\nmetadata: {name: w1}\nspec: {size: 3}\n"
    goals = load_goals(_with_manifest(template_files, crd + good))
    assert goals.warnings == ()
    details = goals.component("bookinfo/details")
    manifest = next(m for m in details.manifests if m.path.endswith("extra.yaml"))
    assert manifest.namespaced == (False, False)  # the CRD and its cluster-scoped Widget
    bad = b"---\napiVersion: example.org/v1\nkind: Widget\nmetadata: {name: w2}\nspec: {size: big, colour: red}\n"
    with pytest.raises(GoalsError) as caught:
        load_goals(_with_manifest(template_files, crd + good + bad))
    assert [p.message for p in caught.value.problems] == [
        "got 'big'; expected an integer", "unknown field 'colour'; expected one of: size"]


def test_validate_prints_warnings_and_still_passes(tmp_path: Path) -> None:
    tree = tmp_path / "goals"
    shutil.copytree(TEMPLATE, tree)
    (tree / "apps" / "bookinfo" / "manifests" / "gadget.yaml").write_text(
        "apiVersion: example.org/v1\nkind: Gadget\nmetadata: {name: g1}\n")
    app = tree / "apps" / "bookinfo" / "app.yaml"
    app.write_text(app.read_text().replace("manifests: [manifests/details.yaml]",
                                           "manifests: [manifests/details.yaml, manifests/gadget.yaml]"))
    result = _validate(tree)
    assert result.returncode == 0, result.stderr
    assert result.stderr.startswith("warning: apps/bookinfo/manifests/gadget.yaml:1:13: apiVersion: custom "
                                    "resource Gadget")


def test_scope_table_matches_the_official_1_37_api() -> None:
    from qonnect_gitops.model.kube_scopes import CLUSTER_SCOPED, NOT_STORED

    cluster, virtual = official_scopes()
    assert cluster == CLUSTER_SCOPED
    assert virtual == NOT_STORED


def test_real_sops_files_are_recognised_fake_ones_are_not() -> None:
    from qonnect_gitops.model.secrets import is_sops_encrypted, plain_secrets

    enc = "ENC[AES256_GCM,data:Zm9v,iv:YmFy,tag:YmF6,type:str]"
    real = {"kind": "Secret", "data": {"password": enc}, "sops": {"mac": enc, "version": "3.9.0"}}
    assert is_sops_encrypted(real) and plain_secrets(real) == []
    assert not is_sops_encrypted({**real, "sops": {}})
    assert not is_sops_encrypted({**real, "sops": {"mac": "ENC[fake]", "version": "3.9.0"}})
    assert not is_sops_encrypted({**real, "data": {"password": "hunter2"}})  # nothing encrypted at all
    partly = {**real, "data": {"password": enc, "user": "admin"}}
    assert is_sops_encrypted(partly) and plain_secrets(partly) == [()]  # encrypted file, plain value
    nested = {"kind": "Template", "objects": [{"kind": "ConfigMap"}, {"kind": "Secret", "stringData": {"a": "b"}}]}
    assert plain_secrets(nested) == [("objects", 1)]


def test_quantities_are_bounded_before_any_arithmetic() -> None:
    for text in ("1e999999999", "9" * 60, "1E40", "99999999999999999999Ei"):
        with pytest.raises(ValueError, match="out of range"):
            to_bytes(text)
    assert to_millicores("4096") == 4_096_000 and to_bytes("64Ti") == 64 * 1024**4
