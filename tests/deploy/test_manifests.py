"""deploy/: what `kubectl kustomize` renders is valid for Kubernetes 1.37 (strict), the
leads' and agent's command lines are ones `qonnect` accepts, every file they read is
mounted, the probes ask the right endpoints, and RBAC stays narrow. Every test renders with
the real kubectl (a process): the slow tier."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from qonnect_gitops.cli import build_parser
from qonnect_gitops.cli.agent import _ENV
from qonnect_gitops.forge import load_forges
from qonnect_gitops.gitstore.remote import credentials_from_env
from tests.conftest import ROOT
from tests.deploy.kustomize import kubectl, kustomize
from tests.deploy.workloads import K8S_VERSION, container, expand, one, resolved_env

DEPLOY = ROOT / "deploy"
KUSTOMIZATIONS = ["", "leads", "agent", "agent-tenant", "observer"]

pytestmark = pytest.mark.slow

try:
    kubectl()
except FileNotFoundError:  # pragma: no cover
    pytest.skip("kubectl not installed", allow_module_level=True)


@pytest.fixture(scope="module")
def objects() -> list[dict[str, Any]]:
    return kustomize(DEPLOY)


# ------------------------------------------------------------------ schemas


@pytest.mark.parametrize("path", KUSTOMIZATIONS)
def test_every_object_validates_strictly(path: str) -> None:
    objs = kustomize(DEPLOY / path)
    assert objs
    for obj in objs:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_opt_in_secrets_role_validates() -> None:
    for obj in yaml.safe_load_all((DEPLOY / "agent" / "rbac-secrets.yaml").read_text()):
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_everything_lives_in_one_namespace(objects: list[dict[str, Any]]) -> None:
    cluster_scoped = {"Namespace", "ClusterRole", "ClusterRoleBinding"}
    for obj in objects:
        if obj["kind"] not in cluster_scoped:
            assert obj["metadata"]["namespace"] == "qonnect-system", obj["metadata"]


# ------------------------------------------------------------------- leads


def test_lead_args_parse_with_the_real_cli(objects: list[dict[str, Any]]) -> None:
    sts = one(objects, "StatefulSet", "qonnect-lead")
    assert sts["spec"]["replicas"] == 3
    parser = build_parser()
    raft_addrs = []
    for ordinal in range(3):
        pod = f"qonnect-lead-{ordinal}"
        env = resolved_env(objects, sts, pod)
        args = parser.parse_args([expand(a, env) for a in container(sts)["args"]])
        assert args.command == "lead"
        assert args.id == pod
        assert args.raft.startswith(f"{pod}.{sts['spec']['serviceName']}.qonnect-system.svc:")
        assert args.raft in args.peers, "every lead lists the same three peers"
        assert len(set(args.peers)) == 3
        assert args.repo == one(objects, "ConfigMap", "qonnect-lead")["data"]["repo"]
        raft_addrs.append(args.raft)
        for value in vars(args).values():
            assert "$(" not in str(value), f"unexpanded variable in {value}"
    assert len(set(raft_addrs)) == 3


def test_lead_volumes_ports_and_probes(objects: list[dict[str, Any]]) -> None:
    sts = one(objects, "StatefulSet", "qonnect-lead")
    c = container(sts)
    env = resolved_env(objects, sts, "qonnect-lead-0")
    args = build_parser().parse_args([expand(a, env) for a in c["args"]])
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    claims = {t["metadata"]["name"] for t in sts["spec"]["volumeClaimTemplates"]}
    assert mounts[str(args.data_dir)]["name"] in claims, "--data-dir is on the PersistentVolumeClaim"
    tokens_mount = mounts[str(args.tokens_file.parent)]
    assert "subPath" not in tokens_mount, "a subPath mount never sees Secret updates (no token reload)"
    volumes = {v["name"]: v for v in sts["spec"]["template"]["spec"]["volumes"]}
    assert "secret" in volumes[tokens_mount["name"]]
    raft_mount = mounts[str(args.raft_secret_file.parent)]
    assert "subPath" not in raft_mount, "a subPath mount never sees Secret updates (no rotation)"
    assert volumes[raft_mount["name"]]["secret"]["secretName"] == "qonnect-raft"
    assert args.raft_bind == "10.42.0.7:7001", "the Raft port listens on the pod's IP"
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert int(args.http.rsplit(":", 1)[1]) == ports["http"]
    assert int(args.raft.rsplit(":", 1)[1]) == ports["raft"]
    # Alive while the Raft thread runs; in the Service only with a quorum and a leader.
    for probe in ("startupProbe", "livenessProbe"):
        assert c[probe]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert c["resources"]["requests"]["cpu"] and c["resources"]["requests"]["memory"]


def test_every_file_a_lead_reads_is_mounted(objects: list[dict[str, Any]], tmp_path: Path) -> None:
    """Each path option of the lead's command line lies in a volume of the pod, the Secrets
    and ConfigMaps without subPath (their updates reach the running leads)."""
    sts = one(objects, "StatefulSet", "qonnect-lead")
    c = container(sts)
    args = build_parser().parse_args([expand(a, resolved_env(objects, sts, "qonnect-lead-0")) for a in c["args"]])
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in sts["spec"]["template"]["spec"]["volumes"]}
    files = {"tokens_file": "qonnect-tokens", "raft_secret_file": "qonnect-raft", "signing_key": "qonnect-signing-key",
             "webhook_secret_file": "qonnect-webhook", "forges": "qonnect-forges"}
    for option, source in files.items():
        path = getattr(args, option)
        assert path is not None, f"--{option.replace('_', '-')} is not given"
        mount = mounts[str(path.parent)]
        assert "subPath" not in mount and mount["readOnly"] is True
        volume = volumes[mount["name"]]
        assert (volume.get("secret", {}).get("secretName") or volume["configMap"]["name"]) == source, option
    # Optional: a lead without a webhook secret or forge tokens starts all the same.
    assert volumes[mounts[str(args.webhook_secret_file.parent)]["name"]]["secret"]["optional"] is True
    assert volumes[mounts["/var/run/secrets/qonnect/forge"]["name"]]["secret"]["optional"] is True
    for required in ("tokens_file", "raft_secret_file", "signing_key"):
        assert "optional" not in volumes[mounts[str(getattr(args, required).parent)]["name"]]["secret"]
    # The forges file as shipped is one `qonnect lead --forges` accepts (no forges).
    forges = one(objects, "ConfigMap", "qonnect-forges")["data"]
    (tmp_path / args.forges.name).write_text(forges[args.forges.name])
    assert load_forges(tmp_path / args.forges.name) == ()


def test_leads_advertise_their_own_api_address(objects: list[dict[str, Any]]) -> None:
    """A follower forwards a webhook to the leader's recorded API address: the pod's stable
    name and the API port, never the bind address 0.0.0.0."""
    sts = one(objects, "StatefulSet", "qonnect-lead")
    ports = {p["name"]: p["containerPort"] for p in container(sts)["ports"]}
    for ordinal in range(sts["spec"]["replicas"]):
        pod = f"qonnect-lead-{ordinal}"
        args = build_parser().parse_args([expand(a, resolved_env(objects, sts, pod)) for a in container(sts)["args"]])
        host, port = args.advertise_http.rsplit(":", 1)
        assert host == args.raft.rsplit(":", 1)[0] == f"{pod}.{sts['spec']['serviceName']}.qonnect-system.svc"
        assert int(port) == ports["http"]


def test_one_lead_per_node_is_required(objects: list[dict[str, Any]]) -> None:
    pod = one(objects, "StatefulSet", "qonnect-lead")["spec"]["template"]
    anti = pod["spec"]["affinity"]["podAntiAffinity"]
    assert list(anti) == ["requiredDuringSchedulingIgnoredDuringExecution"]
    (term,) = anti["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()


@pytest.mark.parametrize(("path", "kind", "name"), [("agent", "Deployment", "qonnect-agent"),
                                                    ("observer", "Deployment", "qonnect-observer")])
def test_agent_and_observer_probes(path: str, kind: str, name: str) -> None:
    c = container(one(kustomize(DEPLOY / path), kind, name))
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    env = {e["name"]: e.get("value") for e in c["env"]}
    metrics = {p["name"]: p["containerPort"] for p in c["ports"]}["metrics"]
    assert env["QONNECT_METRICS_ADDR"] == f"0.0.0.0:{metrics}", "the probes ask the server --metrics-addr starts"


def test_lead_services_and_budget(objects: list[dict[str, Any]]) -> None:
    sts = one(objects, "StatefulSet", "qonnect-lead")
    labels = sts["spec"]["template"]["metadata"]["labels"]
    headless = one(objects, "Service", sts["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["publishNotReadyAddresses"] is True
    api = one(objects, "Service", "qonnect-lead")
    assert api["spec"]["type"] == "ClusterIP"
    for svc in (headless, api):
        assert svc["spec"]["selector"].items() <= labels.items()
    pdb = one(objects, "PodDisruptionBudget", "qonnect-lead")
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_git_credentials_are_the_variables_the_gitstore_reads(objects: list[dict[str, Any]]) -> None:
    for kind, name in (("StatefulSet", "qonnect-lead"), ("Deployment", "qonnect-agent")):
        env = {e["name"]: e for e in container(one(objects, kind, name))["env"]}
        git = {k: v for k, v in env.items() if k.startswith("QONNECT_GIT_")}
        assert set(git) == {"QONNECT_GIT_USERNAME", "QONNECT_GIT_TOKEN"}
        for e in git.values():
            assert e["valueFrom"]["secretKeyRef"]["optional"] is True
    creds = credentials_from_env({"QONNECT_GIT_USERNAME": "u", "QONNECT_GIT_TOKEN": "t"})
    assert creds is not None and creds.credential_tuple == ("u", "t")


# ------------------------------------------------------------------- agent


def test_agent_env_parses_with_the_real_cli(objects: list[dict[str, Any]],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    dep = one(objects, "Deployment", "qonnect-agent")
    assert dep["spec"]["replicas"] == 1 and dep["spec"]["strategy"]["type"] == "Recreate"
    c = container(dep)
    env = resolved_env(objects, dep, "qonnect-agent-x")
    unknown = {n for n in env if n not in _ENV.values() and not n.startswith("QONNECT_GIT_")} - {"HOME"}
    assert not unknown, f"the agent does not read {unknown}"
    for name in list(_ENV.values()) + ["KUBECONFIG"]:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    args = build_parser().parse_args(c["args"])  # defaults read the environment
    assert args.command == "agent"
    cm = one(objects, "ConfigMap", "qonnect-agent")["data"]
    assert args.cluster == cm["cluster"] and args.repo == cm["repo"] and args.lead == cm["lead"]
    assert args.namespace == "qonnect-system"
    assert args.kubeconfig is None, "in-cluster credentials"
    mounts = {m["mountPath"] for m in c["volumeMounts"]}
    assert str(args.token_file.parent) in mounts and str(args.cache_dir) in mounts
    metrics_port = int(args.metrics_addr.rsplit(":", 1)[1])
    assert {p["containerPort"] for p in c["ports"]} == {metrics_port}


def test_agent_lead_url_points_at_the_lead_service(objects: list[dict[str, Any]]) -> None:
    url = one(objects, "ConfigMap", "qonnect-agent")["data"]["lead"]
    port = one(objects, "Service", "qonnect-lead")["spec"]["ports"][0]["port"]
    assert url == f"http://qonnect-lead.qonnect-system.svc:{port}"


def test_observer_env_parses_with_the_real_cli_and_its_rbac_only_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    from qonnect_gitops.cli.observer import _OWN_ENV, settings

    objects = kustomize(DEPLOY / "observer")
    dep = one(objects, "Deployment", "qonnect-observer")
    env = resolved_env(objects, dep, "qonnect-observer-x")
    known = set(_ENV.values()) | set(_OWN_ENV.values())
    assert not {n for n in env if n not in known and not n.startswith("QONNECT_GIT_")} - {"HOME"}
    for name in [*known, "KUBECONFIG"]:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("QONNECT_TOKEN_FILE", __file__)  # the Secret's mount: any readable file
    args = build_parser().parse_args(container(dep)["args"])
    assert args.command == "observer"
    cm = one(objects, "ConfigMap", "qonnect-observer")["data"]
    assert (args.cluster, args.syncer, args.syncer_object) == (cm["cluster"], "flux", "flux-system/qonnect")
    cfg, ref = settings(args)
    assert ref.namespace == "flux-system" and cfg.leads == (cm["lead"],) and cfg.kubeconfig is None
    assert dep["spec"]["template"]["spec"]["serviceAccountName"] == "qonnect-observer"
    for _, rule in rules_of(objects, "ClusterRole"):
        assert set(rule["verbs"]) <= {"get", "list", "watch"}, rule
        assert "secrets" not in rule["resources"] and "*" not in rule["resources"]
    assert not [o for o in objects if o["kind"] in ("Role", "RoleBinding")]


# -------------------------------------------------------------------- RBAC


def rules_of(objects: list[dict[str, Any]], kind: str) -> list[tuple[str, dict[str, Any]]]:
    return [(o["metadata"]["name"], r) for o in objects if o["kind"] == kind for r in o.get("rules", [])]


def test_agent_cluster_roles_grant_no_secrets_and_no_wildcards(objects: list[dict[str, Any]]) -> None:
    for name, rule in rules_of(objects, "ClusterRole"):
        assert "*" not in rule.get("resources", []) and "*" not in rule.get("apiGroups", []), name
        assert "*" not in rule["verbs"], name
        assert "secrets" not in rule.get("resources", []), f"{name} grants Secrets cluster-wide"
        assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"]), name


def test_agent_capacity_role_is_read_only(objects: list[dict[str, Any]]) -> None:
    role = one(objects, "ClusterRole", "qonnect-agent-capacity")
    for rule in role["rules"]:
        assert set(rule["verbs"]) <= {"get", "list", "watch"}
    assert {"nodes", "pods"} <= {r for rule in role["rules"] for r in rule["resources"]}


def test_agent_can_write_its_inventory(objects: list[dict[str, Any]]) -> None:
    role = one(objects, "Role", "qonnect-agent-inventory")
    named = [r for r in role["rules"] if r.get("resourceNames")]
    assert named and named[0]["resourceNames"] == ["qonnect-inventory"]
    assert {"get", "patch"} <= set(named[0]["verbs"])


def test_secrets_opt_in_is_documented_and_not_applied_by_default(objects: list[dict[str, Any]]) -> None:
    assert all(o["metadata"]["name"] != "qonnect-agent-secrets" for o in objects)
    assert "rbac-secrets.yaml" in (ROOT / "docs" / "deploy.md").read_text()


def test_leads_have_no_rbac_and_no_api_token(objects: list[dict[str, Any]]) -> None:
    sts = one(objects, "StatefulSet", "qonnect-lead")
    sa = sts["spec"]["template"]["spec"]["serviceAccountName"]
    assert one(objects, "ServiceAccount", sa)["automountServiceAccountToken"] is False
    assert sts["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
    for binding in (o for o in objects if o["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        for subject in binding["subjects"]:
            assert subject["name"] != sa, f"{binding['metadata']['name']} binds the leads"


# ---------------------------------------------------------------- security


@pytest.mark.parametrize("path", KUSTOMIZATIONS)
def test_containers_run_restricted(path: str) -> None:
    for obj in kustomize(DEPLOY / path):
        if obj["kind"] not in ("StatefulSet", "Deployment"):
            continue
        pod = obj["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for c in pod["containers"]:
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True
            assert sc["allowPrivilegeEscalation"] is False
            assert sc["capabilities"] == {"drop": ["ALL"]}
            assert c["resources"]["requests"]


def test_image_tag_matches_the_package_and_the_dockerfile_user(objects: list[dict[str, Any]]) -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    dockerfile = (ROOT / "Dockerfile").read_text()
    user = re.search(r"^USER (\d+)", dockerfile, re.MULTILINE)
    assert user, "the Dockerfile runs as a numeric user"
    for obj in objects:
        if obj["kind"] in ("StatefulSet", "Deployment"):
            pod = obj["spec"]["template"]["spec"]
            assert container(obj)["image"] == f"ghcr.io/qonnect/qonnect-gitops:{version}"
            assert str(pod["securityContext"]["runAsUser"]) == user.group(1)


def test_agent_reports_within_the_fleet_heartbeat(objects: list[dict[str, Any]]) -> None:
    """The agent does not read spec.heartbeat from the goals: the deployment must set
    a report interval the default fleet settings accept (several reports per grace)."""
    from qonnect_gitops.model.fleet import Heartbeat

    interval = float(one(objects, "ConfigMap", "qonnect-agent")["data"]["report-interval"])
    hb = Heartbeat()
    assert interval <= hb.interval_seconds
    assert interval * 3 <= hb.grace_seconds
