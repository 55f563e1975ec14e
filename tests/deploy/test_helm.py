"""deploy/helm/qonnect-gitops: its default rendering is the kustomize output of deploy/,
field for field (the Namespace aside, see namespace.create), its values render what the
kustomize components and overlays render, and every rendering is valid and runs the
product (its command lines parse with the real CLI).

The chart is rendered by Helm's own engine (tests/deploy/helm.py says why not the helm
command); the kustomize side by the real kubectl. Tests comparing the two start kubectl and
are marked slow; the others render in-process."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from qonnect_gitops.cli import build_parser
from qonnect_gitops.forge import load_forges
from tests.conftest import ROOT
from tests.deploy.helm import CHART, NAMESPACE, by_key, compare, render, sdk
from tests.deploy.workloads import K8S_VERSION, container, expand, one, resolved_env

DEPLOY = ROOT / "deploy"
DIGEST = "sha256:" + "5e" * 32


def kubectl_available() -> bool:
    from tests.deploy.kustomize import kubectl

    try:
        kubectl()
    except FileNotFoundError:  # pragma: no cover
        return False
    return True


needs_kubectl = pytest.mark.skipif(not kubectl_available(), reason="kubectl not installed")


# ---------------------------------------------------- the chart equals kustomize


@pytest.mark.slow
@needs_kubectl
def test_the_default_chart_is_the_kustomize_output_without_the_namespace() -> None:
    from tests.deploy.kustomize import kustomize

    kustomized = kustomize(DEPLOY)
    without_namespace = [o for o in kustomized if o["kind"] != "Namespace"]
    assert len(without_namespace) == len(kustomized) - 1
    assert compare(without_namespace, render()) == []


@pytest.mark.slow
@needs_kubectl
def test_namespace_create_adds_the_same_namespace() -> None:
    from tests.deploy.kustomize import kustomize

    assert compare(kustomize(DEPLOY), render({"namespace": {"create": True}})) == []


@pytest.mark.slow
@needs_kubectl
def test_preferred_anti_affinity_is_the_single_node_component(tmp_path: Path) -> None:
    from tests.deploy.kustomize import overlay

    single = overlay(tmp_path / "single-node", DEPLOY, ("components/single-node",))
    assert compare(single, render({"namespace": {"create": True}, "leads": {"antiAffinity": "preferred"}})) == []
    spec = one(single, "StatefulSet", "qonnect-lead")["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    assert list(spec) == ["preferredDuringSchedulingIgnoredDuringExecution"]


@pytest.mark.slow
@needs_kubectl
def test_the_agent_webhook_value_is_the_agent_webhook_component(tmp_path: Path) -> None:
    from tests.deploy.kustomize import overlay

    hooked = overlay(tmp_path / "webhook", DEPLOY, ("components/agent-webhook",))
    assert compare(hooked, render({"namespace": {"create": True}, "agent": {"webhook": {"enabled": True}}})) == []
    assert compare(hooked, overlay(tmp_path / "plain", DEPLOY)) != [], "the component changes something"


@pytest.mark.slow
@needs_kubectl
def test_an_image_digest_is_what_kustomize_images_makes(tmp_path: Path) -> None:
    """docs/deploy.md pins the image by digest either way: kustomize `images:` or image.digest."""
    from tests.deploy.kustomize import overlay

    pinned = overlay(tmp_path / "pinned", DEPLOY,
                     images=[{"name": "ghcr.io/qonnect/qonnect-gitops", "digest": DIGEST}])
    charted = render({"namespace": {"create": True}, "image": {"digest": DIGEST}})
    assert compare(pinned, charted) == []
    images = {container(o)["image"] for o in charted if o["kind"] in ("StatefulSet", "Deployment")}
    assert images == {f"ghcr.io/qonnect/qonnect-gitops@{DIGEST}"}


def test_the_secrets_opt_in_is_rbac_secrets_yaml() -> None:
    opt_in = list(yaml.safe_load_all((DEPLOY / "agent" / "rbac-secrets.yaml").read_text()))
    added = [o for o in render({"agent": {"secretsRBAC": True}}) if o["metadata"]["name"] == "qonnect-agent-secrets"]
    for obj in added:  # kustomize would add the part-of label and nothing else (cluster-scoped)
        assert obj["metadata"]["labels"] == {"app.kubernetes.io/part-of": "qonnect"}
        del obj["metadata"]["labels"]
    assert compare(opt_in, added) == []


# ------------------------------------------------------- the chart on its own


def test_chart_and_app_version_are_the_package_version() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["version"] == chart["appVersion"] == version
    images = {container(o)["image"] for o in render() if o["kind"] in ("StatefulSet", "Deployment")}
    assert images == {f"ghcr.io/qonnect/qonnect-gitops:{version}"}


def test_helm_lint_finds_nothing_to_fix() -> None:
    result = sdk().lint(str(CHART), strict=True)
    assert result["errors"] == []
    # severity 1 is INFO ("icon is recommended"); warnings (2) and errors (3) must not appear
    assert [m for m in result["messages"] if m["severity"] > 1] == []


CUSTOM: dict[str, Any] = {
    "image": {"repository": "registry.example.org/qonnect", "digest": DIGEST},
    "repo": "https://git.example.org/acme/fleet.git",
    "gitSecret": "fleet-git",
    "leads": {"replicas": 5, "pollSeconds": 3, "logLevel": "debug", "antiAffinity": "preferred",
              "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "2Gi"}},
              "storage": {"size": "5Gi", "storageClassName": "fast"},
              "forges": [{"name": "github", "type": "github", "repository": "acme/fleet",
                          "tokenFile": "/var/run/secrets/qonnect/forge/github"}],
              "secrets": {"tokens": "t", "raft": "r", "signingKey": "k", "webhook": "w", "forgeTokens": "f"}},
    "agent": {"cluster": "cloud-7", "lead": "https://leads.example.org", "reportInterval": 2.5,
              "interval": 15, "driftInterval": 120, "drift": "report", "logLevel": "warning",
              "prometheus": "http://prometheus.monitoring:9090",
              "trustedKeys": "qonnect@leads ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIF8 leads\n",
              "tokenSecret": "agent-token", "secretsRBAC": True, "webhook": {"enabled": True, "secret": "hook"}},
    "networkPolicy": {"git": {"to": [{"ipBlock": {"cidr": "192.0.2.0/24"}}], "ports": [443]}},
}


@pytest.mark.parametrize("values", [None, CUSTOM, {"namespace": {"create": True}, "networkPolicy": {"enabled": False}}],
                         ids=["default", "custom", "no-policies"])
def test_every_rendered_object_validates_strictly(values: dict[str, Any] | None) -> None:
    objects = render(values)
    assert objects
    for obj in objects:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_custom_values_run_the_product(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The values users change reach the command lines, mounts and objects they should."""
    objects = render(CUSTOM)
    sts = one(objects, "StatefulSet", "qonnect-lead")
    assert sts["spec"]["replicas"] == 5
    peers = set()
    for ordinal in range(5):
        env = resolved_env(objects, sts, f"qonnect-lead-{ordinal}")
        args = build_parser().parse_args([expand(a, env) for a in container(sts)["args"]])
        assert args.raft in args.peers and len(set(args.peers)) == 5
        assert (args.repo, args.poll_seconds) == (CUSTOM["repo"], 3.0)
        assert args.log_level == "debug"
        peers.add(args.raft)
    assert len(peers) == 5
    pod = sts["spec"]["template"]["spec"]
    assert {v["name"]: v.get("secret", {}).get("secretName") for v in pod["volumes"]} == {
        "tokens": "t", "raft-secret": "r", "signing-key": "k", "webhook-secret": "w", "forge-tokens": "f",
        "forges": None, "tmp": None}
    claim = sts["spec"]["volumeClaimTemplates"][0]["spec"]
    assert claim["storageClassName"] == "fast" and claim["resources"]["requests"]["storage"] == "5Gi"
    assert container(sts)["resources"] == CUSTOM["leads"]["resources"]
    forges_file = tmp_path / "forges.yaml"
    forges_file.write_text(one(objects, "ConfigMap", "qonnect-forges")["data"]["forges.yaml"])
    (forge,) = load_forges(forges_file)
    assert (forge.name, forge.repository, str(forge.token_file)) == ("github", "acme/fleet",
                                                                     "/var/run/secrets/qonnect/forge/github")

    dep = one(objects, "Deployment", "qonnect-agent")
    env = resolved_env(objects, dep, "qonnect-agent-x")
    from qonnect_gitops.cli.agent import _ENV

    for name in [*_ENV.values(), "KUBECONFIG"]:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    args = build_parser().parse_args(container(dep)["args"])
    assert (args.cluster, args.lead, args.report_interval, args.drift) == ("cloud-7", "https://leads.example.org",
                                                                          2.5, "report")
    assert args.prometheus == "http://prometheus.monitoring:9090"
    assert str(args.webhook_secret_file.parent) in {m["mountPath"] for m in container(dep)["volumeMounts"]}
    assert env["QONNECT_GIT_TOKEN"] == "<secret fleet-git/token>"
    keys = one(objects, "ConfigMap", "qonnect-agent-trusted-keys")["data"]["allowed_signers"]
    assert keys == CUSTOM["agent"]["trustedKeys"]
    assert any(o["metadata"]["name"] == "qonnect-agent-secrets" for o in objects)
    policy = one(objects, "NetworkPolicy", "qonnect-lead")
    assert policy["spec"]["egress"][-1] == {"to": [{"ipBlock": {"cidr": "192.0.2.0/24"}}],
                                            "ports": [{"port": 443, "protocol": "TCP"}]}


def test_another_namespace_is_used_everywhere() -> None:
    objects = render(namespace="fleet-ops")
    text = yaml.safe_dump_all(objects)
    assert NAMESPACE not in text, "a namespace left hard-coded"
    assert one(objects, "ConfigMap", "qonnect-agent")["data"]["lead"] == "http://qonnect-lead.fleet-ops.svc:8080"
    for obj in objects:
        if obj["kind"] in ("ClusterRoleBinding", "RoleBinding"):
            assert {s["namespace"] for s in obj["subjects"]} == {"fleet-ops"}
        if obj["kind"] not in ("ClusterRole", "ClusterRoleBinding"):
            assert obj["metadata"]["namespace"] == "fleet-ops"


def test_leads_or_agent_alone() -> None:
    leads_only = by_key(render({"agent": {"enabled": False}}))
    assert {k[3] for k in leads_only} == {"qonnect-lead", "qonnect-lead-raft", "qonnect-forges"}
    agent_only = render({"leads": {"enabled": False}, "agent": {"lead": "https://leads.example.org"}})
    assert not [o for o in agent_only if "lead" in o["metadata"]["name"]]
    assert one(agent_only, "ConfigMap", "qonnect-agent")["data"]["lead"] == "https://leads.example.org"


@pytest.mark.parametrize(("values", "where"), [
    ({"leads": {"antiAffinity": "sometimes"}}, "/leads/antiAffinity"),
    ({"leads": {"replica": 3}}, "'replica' not allowed"),
    ({"image": {"digest": "sha256:abc"}}, "/image/digest"),
    ({"agent": {"drift": "fix"}}, "/agent/drift"),
    ({"networkPolicy": {"git": {"to": [], "ports": []}}}, "/networkPolicy/git/ports"),
])
def test_bad_values_are_refused_with_the_field(values: dict[str, Any], where: str) -> None:
    helm = sdk()
    with pytest.raises(helm.HelmValuesError, match=re.escape(where)):
        render(values)
