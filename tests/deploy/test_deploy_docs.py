"""docs/deploy.md's snippets do what the page says: each kustomize fragment renders in an
overlay of deploy/ (kubectl: slow), and every Helm value it names exists and renders."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT
from tests.deploy.helm import CHART, render
from tests.deploy.workloads import container, one

DOC = ROOT / "docs" / "deploy.md"
DEPLOY = ROOT / "deploy"
DIGEST = "sha256:" + "ab" * 32


def yaml_blocks() -> list[dict[str, Any]]:
    text = DOC.read_text()
    return [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", text, re.DOTALL)]


def block_with(key: str) -> dict[str, Any]:
    (found,) = [b for b in yaml_blocks() if isinstance(b, dict) and key in b]
    return found


@pytest.mark.slow
def test_the_digest_fragment_pins_every_workload(tmp_path: Path) -> None:
    from tests.deploy.kustomize import overlay

    images = block_with("images")["images"]
    for image in images:
        image["digest"] = image["digest"].replace("sha256:<digest>", DIGEST)
    objects = overlay(tmp_path / "o", DEPLOY, images=images)
    for obj in objects:
        if obj["kind"] in ("StatefulSet", "Deployment"):
            assert container(obj)["image"] == f"ghcr.io/qonnect/qonnect-gitops@{DIGEST}"


@pytest.mark.slow
def test_the_single_node_overlay_renders_preferred_anti_affinity(tmp_path: Path) -> None:
    from tests.deploy.kustomize import kustomize

    doc = block_with("components")
    base = "../qonnect-gitops/deploy"
    assert doc["resources"] == [base]
    # Lay the overlay out as the page does: beside a checkout called qonnect-gitops.
    (tmp_path / "qonnect-gitops").symlink_to(ROOT)
    (tmp_path / "my-overlay").mkdir()
    (tmp_path / "my-overlay" / "kustomization.yaml").write_text(yaml.safe_dump(doc))
    objects = kustomize(tmp_path / "my-overlay")
    anti = one(objects, "StatefulSet", "qonnect-lead")["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    assert list(anti) == ["preferredDuringSchedulingIgnoredDuringExecution"]


@pytest.mark.slow
def test_the_policy_patch_replaces_the_leads_git_rule(tmp_path: Path) -> None:
    from tests.deploy.kustomize import kustomize, overlay

    patched = one(overlay(tmp_path / "o", DEPLOY, patches=block_with("patches")["patches"]), "NetworkPolicy",
                  "qonnect-lead")
    plain = one(kustomize(DEPLOY), "NetworkPolicy", "qonnect-lead")
    assert plain["spec"]["egress"][2]["ports"][0]["port"] == 443, "the page's index 2 is the Git rule"
    assert patched["spec"]["egress"][2]["to"] == [{"ipBlock": {"cidr": "192.0.2.0/24"}}]
    patched["spec"]["egress"][2]["to"] = plain["spec"]["egress"][2]["to"]
    assert patched == plain, "nothing else changed"


def set_path(values: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    for p in parents:
        values = values.setdefault(p, {})
    values[leaf] = value


def test_every_helm_value_the_page_names_exists() -> None:
    text = DOC.read_text()
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    named = set(re.findall(r"--set(?:-file)? ([A-Za-z.]+)=", text))
    named |= {m for m in re.findall(r"`((?:image|leads|agent|networkPolicy|namespace)\.[A-Za-z.]+)`", text)}
    assert len(named) > 10
    for dotted in sorted(named):
        node: Any = defaults
        for part in dotted.rstrip(".").split("."):
            assert isinstance(node, dict) and part in node, f"docs/deploy.md names {dotted}, values.yaml has no {part}"
            node = node[part]
    values: dict[str, Any] = {}
    for key, value in re.findall(r"--set ([A-Za-z.]+)=([^\s`]+)", text):
        set_path(values, key, DIGEST if value == "sha256:<digest>" else yaml.safe_load(value))
    assert render(values), "the page's --set values render"
