"""The Dockerfile builds the image the manifests expect, checked without a Docker engine
(none runs here): the user they run as, the entry point and subcommands they start, the
paths they write on a read-only root, git for the leads, the Python the package requires,
and a build context that holds what `pip install .` needs. The manifests are read from
deploy/'s files (test_manifests and test_helm check what kustomize and the chart render
from them)."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from qonnect_gitops.cli import build_parser
from tests.conftest import ROOT
from tests.deploy.dockerfile import Stage, parse
from tests.deploy.workloads import container, expand, resolved_env

DEPLOY = ROOT / "deploy"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
WORKLOADS = {"leads": ("leads/statefulset.yaml", "leads/config.yaml"),
             "agent": ("agent/deployment.yaml", "agent/config.yaml"),
             "observer": ("observer/deployment.yaml", "observer/config.yaml")}


def objects_of(name: str) -> list[dict[str, Any]]:
    """The workload and its ConfigMap, in the namespace kustomize puts them in."""
    out = []
    for file in WORKLOADS[name]:
        obj = yaml.safe_load((DEPLOY / file).read_text())
        obj["metadata"]["namespace"] = "qonnect-system"
        out.append(obj)
    return out


def stages() -> list[Stage]:
    return parse(ROOT / "Dockerfile")


def final() -> Stage:
    return stages()[-1]


def build_stage() -> Stage:
    """The stage the final one copies the installed package from."""
    (copy,) = [c for c in final().all("COPY") if c.args.startswith("--from=")]
    name = copy.args.split()[0].removeprefix("--from=")
    (stage,) = [s for s in stages() if s.name == name]
    return stage


def pip_prefix() -> str:
    (install,) = [c for c in build_stage().run_commands() if c[:2] == ["pip", "install"]]
    (prefix,) = [w.removeprefix("--prefix=") for w in install if w.startswith("--prefix=")]
    assert install[-1] == ".", "the build installs the project itself"
    return prefix


@pytest.mark.parametrize("name", WORKLOADS)
def test_the_image_runs_as_the_user_the_manifests_require(name: str) -> None:
    pod = objects_of(name)[0]["spec"]["template"]["spec"]["securityContext"]
    user = final().last("USER")
    assert user is not None and user.args == f"{pod['runAsUser']}:{pod['runAsGroup']}"
    assert pod["runAsNonRoot"] is True and pod["runAsUser"] != 0
    # The user exists in /etc/passwd (git and libgit2 look their user up) with HOME=/tmp.
    commands = final().run_commands()
    useradd = next(c for c in commands if c[0] == "useradd")
    groupadd = next(c for c in commands if c[0] == "groupadd")
    assert useradd[useradd.index("--uid") + 1] == str(pod["runAsUser"])
    assert useradd[useradd.index("--gid") + 1] == groupadd[groupadd.index("--gid") + 1] == str(pod["runAsGroup"])
    assert useradd[useradd.index("--home-dir") + 1] == final().env()["HOME"]


@pytest.mark.parametrize("name", WORKLOADS)
def test_the_entrypoint_is_qonnect_and_the_manifests_start_its_subcommands(name: str) -> None:
    entry = final().last("ENTRYPOINT")
    assert entry is not None and entry.exec_form() == ["qonnect"], "exec form: signals reach qonnect itself"
    assert PYPROJECT["project"]["scripts"]["qonnect"] == "qonnect_gitops.cli:main"
    # pip puts the script in <prefix>/bin; the final stage copies the prefix onto /usr/local.
    copy = next(c for c in final().all("COPY") if c.args.startswith("--from="))
    assert copy.args.split()[1:] == [pip_prefix(), "/usr/local"]
    objects = objects_of(name)
    workload = objects[0]
    args = container(workload)["args"]
    (subparsers,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    assert args[0] in subparsers.choices and args[0] == {"leads": "lead"}.get(name, name)
    assert "command" not in container(workload), "the image's entry point is used"


def test_the_python_is_the_one_the_package_requires() -> None:
    bases = {s.base for s in stages()}
    assert len(bases) == 1, f"build and final stage differ ({bases}): the installed package would not import"
    (base,) = bases
    image, _, tag = base.partition(":")
    assert image == "python" and tag.endswith("-slim"), base
    version = Version(tag.removesuffix("-slim"))
    assert version in SpecifierSet(PYPROJECT["project"]["requires-python"])


def test_git_is_installed_for_the_leads() -> None:
    """The leads push and keep their mirror with the git command line (gitstore/gitcli.py)."""
    def installs(stage: Stage) -> list[list[str]]:
        return [c[2:] for c in stage.run_commands() if c[:2] == ["apt-get", "install"]]

    assert any("git" in packages for packages in installs(final()))
    assert not any("git" in packages for s in stages()[:-1] for packages in installs(s)), \
        "installed in the build stage only, git would not reach the image"


@pytest.mark.parametrize("name", WORKLOADS)
def test_every_path_written_is_a_mounted_volume_on_a_read_only_root(name: str,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    objects = objects_of(name)
    workload = objects[0]
    c = container(workload)
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    volumes = {v["name"]: v for v in workload["spec"]["template"]["spec"]["volumes"]}
    claims = {t["metadata"]["name"] for t in workload["spec"].get("volumeClaimTemplates", [])}
    writable = {m["mountPath"] for m in c["volumeMounts"]
                if not m.get("readOnly") and (m["name"] in claims or "emptyDir" in volumes.get(m["name"], {}))}
    env = resolved_env(objects, workload, "qonnect-x-0")
    image_env = final().env()
    # HOME (git's config, caches), the working directory and Python's tempfile dir.
    assert env["HOME"] == image_env["HOME"] == final().last("WORKDIR").args == "/tmp"  # type: ignore[union-attr]
    assert "TMPDIR" not in env and "TMPDIR" not in image_env
    assert image_env.get("PYTHONDONTWRITEBYTECODE") == "1", "no __pycache__ writes on a read-only root"
    written = {"/tmp"}
    if name == "leads":
        args = build_parser().parse_args([expand(a, env) for a in c["args"]])
        written.add(str(args.data_dir))
        assert next(m["name"] for m in c["volumeMounts"] if m["mountPath"] == str(args.data_dir)) in claims
    else:
        written.add(env["QONNECT_CACHE_DIR"])
    assert written <= writable, f"written but not on a writable volume: {written - writable}"


def test_the_image_is_tagged_with_the_package_version_and_docs_pin_it_by_digest() -> None:
    version = PYPROJECT["project"]["version"]
    for name in WORKLOADS:
        assert container(objects_of(name)[0])["image"] == f"ghcr.io/qonnect/qonnect-gitops:{version}"
    docs = (ROOT / "docs" / "deploy.md").read_text()
    assert "ghcr.io/qonnect/qonnect-gitops@sha256:" in docs
    assert "image.digest" in docs and "digest: sha256:" in docs, "both the chart and kustomize ways"
    assert "docker buildx imagetools inspect" in docs, "how to find the digest"


@pytest.mark.slow
def test_the_build_context_holds_what_the_build_needs(tmp_path: Path) -> None:
    """The build stage as the Dockerfile runs it, here: only the files it COPYs, `pip install
    --prefix` of them, and the installed entry point answering --help from that prefix."""
    context = tmp_path / "context"
    context.mkdir()
    for copy in build_stage().all("COPY"):
        *sources, _ = copy.args.split()
        for source in sources:
            src = ROOT / source
            if src.is_dir():
                shutil.copytree(src, context / source, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(src, context / source)
    prefix = tmp_path / pip_prefix().lstrip("/")
    # As in the image: build isolation (pip brings pyproject's build requirements), no deps
    # (the venv has them; the image's pip resolves them from the same pyproject).
    built = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", f"--prefix={prefix}",
                            str(context)], timeout=600, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-3000:]
    script = prefix / "bin" / "qonnect"
    assert script.is_file()
    (site,) = prefix.glob("lib/python*/site-packages")
    assert (site / "qonnect_gitops" / "py.typed").is_file()
    env = {**os.environ, "PYTHONPATH": str(site)}
    out = subprocess.run([str(script), "--help"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60,
                         check=True)
    assert "lead" in out.stdout and "agent" in out.stdout
    imported = subprocess.run([sys.executable, "-c", "import qonnect_gitops; print(qonnect_gitops.__file__)"],
                              env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=True).stdout
    assert imported.startswith(str(site)), "the copy in the prefix, not the worktree's"
