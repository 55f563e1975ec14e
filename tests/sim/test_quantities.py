"""Quantities are stored as the API stores them: strings, whatever the manifest wrote."""

from __future__ import annotations

from kubernetes import client, dynamic


def test_numeric_quantities_read_back_as_strings(api: client.ApiClient, dyn: dynamic.DynamicClient) -> None:
    """`cpu: 2` in a manifest is stored as the quantity "2", as the real API does, so the
    typed client can read the object (and a list of them) back."""
    apps = client.AppsV1Api(api)
    body = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "numbers", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "n"}},
                 "template": {"metadata": {"labels": {"app": "n"}},
                              "spec": {"containers": [{"name": "c", "image": "x:1",
                                                       "resources": {"requests": {"cpu": 2, "memory": 0.5}}}]}}},
    }
    # Written as an agent writes a manifest (untyped), read back through the typed client.
    dyn.resources.get(api_version="apps/v1", kind="Deployment").create(body=body, namespace="default")
    read = apps.read_namespaced_deployment("numbers", "default")
    assert read.spec.template.spec.containers[0].resources.requests == {"cpu": "2", "memory": "500m"}
    assert [d.metadata.name for d in apps.list_namespaced_deployment("default").items] == ["numbers"]
