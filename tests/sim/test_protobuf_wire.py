"""Protobuf bodies (kubectl's imperative commands), and wire details: error bodies, watches, limits, tokens."""

from __future__ import annotations

import http.client
import json
import struct
import urllib.request
from urllib.parse import urlsplit

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from qonnect_gitops.sim import SimCluster, wire
from tests.sim.conftest import Kubectl


def _raw(sim: SimCluster, method: str, path: str, body: bytes | None = None,
         headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(sim.url + path, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def test_kubectl_imperative_commands_send_protobuf_and_store_what_json_would(kubectl: Kubectl,
                                                                             api: client.ApiClient) -> None:
    kubectl("create", "namespace", "shop")
    kubectl("create", "configmap", "settings", "-n", "shop", "--from-literal=color=blue")
    kubectl("create", "secret", "generic", "creds", "-n", "shop", "--from-literal=password=s3cret")
    kubectl("create", "deployment", "web", "-n", "shop", "--image=nginx:1.27", "--replicas=0", "--port=80")
    kubectl("create", "service", "clusterip", "web", "-n", "shop", "--tcp=80:8080")
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    assert core.read_namespaced_config_map("settings", "shop").data == {"color": "blue"}
    assert core.read_namespaced_secret("creds", "shop").data == {"password": "czNjcmV0"}
    web = apps.read_namespaced_deployment("web", "shop")
    # A zero the client set survives the protobuf decoding (Go writes every field; the sim keeps zeros).
    assert web.spec.replicas == 0
    container = web.spec.template.spec.containers[0]
    assert (container.image, container.ports[0].container_port, container.ports[0].protocol) == ("nginx:1.27", 80,
                                                                                                 "TCP")
    # Zero values Go's JSON encoding omits do not appear, as on a real server.
    raw = json.loads(kubectl("get", "deploy", "web", "-n", "shop", "-o", "json").stdout)
    assert "minReadySeconds" not in raw["spec"] and "creationTimestamp" not in raw["spec"]["template"]["metadata"]
    assert "stdin" not in raw["spec"]["template"]["spec"]["containers"][0]
    svc = core.read_namespaced_service("web", "shop")
    assert (svc.spec.ports[0].port, svc.spec.ports[0].target_port) == (80, 8080)
    # kubectl describe reads through the typed client: protobuf responses.
    described = kubectl("describe", "deployment", "web", "-n", "shop").stdout
    assert "Replicas:" in described and "nginx:1.27" in described
    kubectl("delete", "namespace", "shop")


def test_protobuf_codec_round_trips_stored_objects(sim: SimCluster, api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_pod("default", {"metadata": {"name": "p", "labels": {"a": "b"}}, "spec": {
        "containers": [{"name": "c", "image": "busybox", "ports": [{"containerPort": 8080, "name": "http"}],
                        "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}},
                        "livenessProbe": {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 5},
                        "env": [{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]}],
        "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}],
        "volumes": [{"name": "data", "emptyDir": {"sizeLimit": "1Gi"}}]}})
    stored = sim.core.get(sim.core.registry.find("", "v1", "pods"), "default", "p")
    envelope = wire.encode(stored)
    assert envelope is not None and envelope.startswith(b"k8s\x00")
    back = wire.decode(envelope)
    assert back == json.loads(json.dumps(stored))  # every field, managedFields and timestamps included
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": {"k": "AAEC/w=="}}
    assert wire.decode(wire.encode(secret) or b"") == secret  # bytes stay base64 in JSON


def test_protobuf_responses_lists_and_watch_frames(sim: SimCluster, api: client.ApiClient) -> None:
    client.CoreV1Api(api).create_namespaced_config_map("default", {"metadata": {"name": "one"}, "data": {"a": "b"}})
    accept = {"Accept": f"{wire.PROTOBUF},application/json"}
    code, headers, body = _raw(sim, "GET", "/api/v1/namespaces/default/configmaps", headers=accept)
    assert code == 200 and headers["Content-Type"] == wire.PROTOBUF
    listing = wire.decode(body)
    assert listing["kind"] == "ConfigMapList" and "one" in [i["metadata"]["name"] for i in listing["items"]]
    # Kinds without an upstream message (custom resources, metrics) fall back to JSON, which the client accepts.
    code, headers, body = _raw(sim, "GET", "/apis/metrics.k8s.io/v1beta1/nodes", headers=accept)
    assert code == 200 and headers["Content-Type"] == "application/json"
    url = urlsplit(sim.url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
    conn.request("GET", "/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=1&fieldSelector="
                        "metadata.name%3Done", headers=accept)
    resp = conn.getresponse()
    assert resp.getheader("Content-Type") == wire.PROTOBUF_STREAM
    data = resp.read()
    length = struct.unpack(">I", data[:4])[0]
    event = wire.decode(data[4:4 + length])
    assert event["kind"] == "WatchEvent" and event["type"] == "ADDED"
    assert event["object"]["metadata"]["name"] == "one" and event["object"]["data"] == {"a": "b"}


def test_bad_protobuf_is_a_400_and_cbor_a_415(sim: SimCluster) -> None:
    ns = {"Content-Type": wire.PROTOBUF}
    code, _, body = _raw(sim, "POST", "/api/v1/namespaces", b"not protobuf", ns)
    assert code == 400 and "protobuf" in json.loads(body)["message"]
    code, _, body = _raw(sim, "POST", "/api/v1/namespaces", b"k8s\x00\xff\xff", ns)
    assert code == 400
    code, _, _ = _raw(sim, "POST", "/api/v1/namespaces", b"\xa0", {"Content-Type": "application/cbor"})
    assert code == 415


def test_error_bodies_end_with_a_newline_like_the_api_servers(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_config_map("default", {"metadata": {"name": "dup"}})
    with pytest.raises(ApiException) as err:
        core.create_namespaced_config_map("default", {"metadata": {"name": "dup"}})
    assert err.value.body == ('{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":'
                              '"configmaps \\"dup\\" already exists","reason":"AlreadyExists","details":{"name":'
                              '"dup","kind":"configmaps"},"code":409}\n')
    with pytest.raises(ApiException) as err:
        core.read_namespaced_config_map("nope", "default")
    assert err.value.body.endswith("}\n")


def test_a_connection_is_reused_after_a_watch_times_out(sim: SimCluster) -> None:
    url = urlsplit(sim.url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
    conn.request("GET", "/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=1")
    resp = conn.getresponse()
    assert resp.getheader("Connection") is None and resp.getheader("Transfer-Encoding") == "chunked"
    resp.read()  # the stream ends with the terminating chunk after a second
    conn.request("GET", "/version")  # the same connection serves the next request, as a Go server's does
    again = conn.getresponse()
    assert again.status == 200 and json.loads(again.read())["minor"] == "37"


def test_request_bodies_are_bounded_and_tokens_checked(sim: SimCluster) -> None:
    big = json.dumps({"metadata": {"name": "big"}, "data": {"x": "y" * (4 * 1024 * 1024)}}).encode()
    code, _, body = _raw(sim, "POST", "/api/v1/namespaces/default/configmaps", big,
                         {"Content-Type": "application/json"})
    assert code == 413 and json.loads(body)["reason"] == "RequestEntityTooLarge"
    code, _, body = _raw(sim, "GET", "/api/v1/namespaces", headers={"Authorization": "Bearer forged"})
    assert code == 401 and json.loads(body)["reason"] == "Unauthorized"
    code, _, _ = _raw(sim, "GET", "/api/v1/namespaces", headers={"Authorization": f"Bearer sim-{sim.name}"})
    assert code == 200

