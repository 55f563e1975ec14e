"""The real kubectl binary against the sim: discovery, OpenAPI-backed validation, verbs."""

from __future__ import annotations

from typing import Any

DEPLOY = """
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
  namespace: {ns}
  labels: {{app: {name}, tier: {tier}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      containers:
      - name: app
        image: nginx:1.25
        ports: [{{containerPort: 80}}]
"""

NAMESPACE = "apiVersion: v1\nkind: Namespace\nmetadata: {name: %s}\n"


def deploy(name: str, ns: str = "default", tier: str = "edge", replicas: int = 1) -> str:
    return DEPLOY.format(name=name, ns=ns, tier=tier, replicas=replicas)


def names(listing: dict[str, Any]) -> list[tuple[str, str]]:
    return sorted((i["metadata"]["namespace"], i["metadata"]["name"]) for i in listing["items"])


def test_server_side_apply_get_with_selectors_in_one_and_all_namespaces(kubectl: Any) -> None:
    out = kubectl("apply", "--server-side", "-f", "-", stdin=NAMESPACE % "shop" + "---" +
                  deploy("web") + "---" + deploy("db", tier="cloud") + "---" + deploy("cart", "shop"))
    assert "deployment.apps/web serverside-applied" in out.stdout
    assert names(kubectl.json("get", "deploy", "-l", "tier=edge")) == [("default", "web")]
    assert names(kubectl.json("get", "deploy", "-l", "tier=edge", "-A")) == [("default", "web"), ("shop", "cart")]
    assert names(kubectl.json("get", "deploy", "-l", "tier in (cloud,fog)", "-A")) == [("default", "db")]
    assert names(kubectl.json("get", "deploy", "-l", "tier!=edge", "-n", "shop")) == []
    web = kubectl.json("get", "deploy", "web")
    assert web["spec"]["template"]["spec"]["containers"][0]["ports"] == [{"containerPort": 80, "protocol": "TCP"}]


def test_default_validation_rejects_unknown_fields(kubectl: Any) -> None:
    # kubectl's default --validate=strict relies on the server (the OpenAPI says it supports fieldValidation).
    bad = deploy("web").replace("replicas: 1", "replicas: 1\n  replicaz: 2")
    ssa = kubectl("apply", "--server-side", "-f", "-", stdin=bad, check=False)
    assert ssa.returncode != 0
    assert ".spec.replicaz: field not declared in schema" in ssa.stderr
    csa = kubectl("apply", "-f", "-", stdin=bad, check=False)
    assert csa.returncode != 0
    assert 'strict decoding error: unknown field "spec.replicaz"' in csa.stderr
    assert kubectl("get", "deploy", "-o", "name").stdout == ""


def test_scale_and_delete(kubectl: Any) -> None:
    kubectl("apply", "--server-side", "-f", "-", stdin=deploy("web"))
    assert "deployment.apps/web scaled" in kubectl("scale", "deploy", "web", "--replicas=4").stdout
    assert kubectl.json("get", "deploy", "web")["spec"]["replicas"] == 4
    out = kubectl("delete", "deploy", "web")
    assert 'deployment.apps "web" deleted' in out.stdout
    missing = kubectl("get", "deploy", "web", check=False)
    assert missing.returncode != 0
    assert 'deployments.apps "web" not found' in missing.stderr


def test_server_dry_run_changes_nothing(kubectl: Any) -> None:
    out = kubectl("apply", "--server-side", "--dry-run=server", "-f", "-", stdin=deploy("web"))
    assert "(server dry run)" in out.stdout
    assert kubectl("get", "deploy", "-o", "name").stdout == ""
    kubectl("apply", "--server-side", "-f", "-", stdin=deploy("web", replicas=2))
    before = kubectl.json("get", "deploy", "web")
    kubectl("apply", "--server-side", "--dry-run=server", "-f", "-", stdin=deploy("web", replicas=5))
    kubectl("apply", "--dry-run=server", "-f", "-", stdin=deploy("web", replicas=6))
    after = kubectl.json("get", "deploy", "web")
    assert after["spec"]["replicas"] == 2
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


def test_explain_reads_the_openapi_v3_documents(kubectl: Any) -> None:
    out = kubectl("explain", "deployment.spec.replicas")
    assert "FIELD: replicas <integer>" in out.stdout
    assert "Number of desired pods" in out.stdout


def test_crd_kinds_are_served_to_kubectl(kubectl: Any) -> None:
    crd = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, shortNames: [wg]}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}, scale: {specReplicasPath: .spec.replicas, statusReplicasPath: .status.replicas}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {replicas: {type: integer}}}
          status: {type: object, properties: {replicas: {type: integer}}}
"""
    kubectl("apply", "--server-side", "-f", "-", stdin=crd)
    kubectl("apply", "--server-side", "-f", "-",
            stdin="apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w1, labels: {a: b}}\nspec: {replicas: 1}\n")
    kubectl("scale", "wg", "w1", "--replicas=3")
    assert kubectl.json("get", "widgets", "-l", "a=b")["items"][0]["spec"]["replicas"] == 3
    kubectl("delete", "crd", "widgets.example.com")
    assert kubectl("get", "widgets", check=False).returncode != 0


def test_client_side_apply_patches_merge_by_schema(kubectl: Any) -> None:
    # Client-side apply sends three-way strategic merge patches ($setElementOrder, deletions by merge key).
    two = deploy("web").replace("      - name: app\n", "      - name: log\n        image: fluentbit:3\n      - name: app\n")
    kubectl("apply", "-f", "-", stdin=two)
    obj = kubectl.json("get", "deploy", "web")
    assert [c["name"] for c in obj["spec"]["template"]["spec"]["containers"]] == ["log", "app"]
    kubectl("apply", "-f", "-", stdin=deploy("web").replace("nginx:1.25", "nginx:1.27"))
    containers = kubectl.json("get", "deploy", "web")["spec"]["template"]["spec"]["containers"]
    assert [(c["name"], c["image"]) for c in containers] == [("app", "nginx:1.27")]
    assert containers[0]["ports"] == [{"containerPort": 80, "protocol": "TCP"}]
    assert kubectl.json("get", "deploy", "web")["metadata"]["generation"] == 2


def test_get_watch_prints_new_objects(kubectl: Any) -> None:
    import time

    watcher = kubectl.popen("get", "cm", "-w", "--request-timeout=3s")
    time.sleep(1.0)  # let it list and start watching
    kubectl("apply", "--server-side", "-f", "-", stdin="apiVersion: v1\nkind: ConfigMap\nmetadata: {name: late}\n")
    out, _ = watcher.communicate(timeout=15)
    lines = out.splitlines()
    assert lines[0].split() == ["NAME", "DATA", "AGE"]
    name, data, age = lines[-1].split()
    assert name == "late" and data == "0" and age.endswith("s")
