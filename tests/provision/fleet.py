"""A small goals tree for cloud bursting: one fixed cluster of two 2-CPU nodes, one
component of 500m replicas, and the ``burst`` pool (pool_example.yaml) on it."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import TEMPLATE

POOL = (Path(__file__).parent / "pool_example.yaml").read_bytes()

CLUSTER = b"""apiVersion: qonnect.io/v1alpha1
kind: Cluster
metadata: {name: cloud-1}
spec:
  tier: cloud
  region: eu-central
  nodes: [{count: NODES, cpu: "2", memory: 8Gi}]
  cost: {cpuHour: 0.04}
  energy: {wattsPerCpu: 11, carbonIntensity: 180}
"""

APP = b"""apiVersion: qonnect.io/v1alpha1
kind: QoSApp
metadata: {name: shop}
spec:
  namespace: shop
  components:
    - name: api
      manifests: [manifests/api.yaml]
      replicas: REPLICAS
"""

DEPLOYMENT = b"""apiVersion: apps/v1
kind: Deployment
metadata: {name: api}
spec:
  replicas: 1
  selector: {matchLabels: {app: api}}
  template:
    metadata: {labels: {app: api}}
    spec:
      containers:
        - name: api
          image: example.org/api:1
          resources: {requests: {cpu: 500m, memory: 512Mi}}
"""


def goals_files(replicas: int, pool: bytes | None = POOL, nodes: int = 2) -> dict[str, bytes]:
    """The goals tree: 4 replicas per node of cloud-1 (8 with two nodes); more burst."""
    files = {
        "qonnect.yaml": (TEMPLATE / "qonnect.yaml").read_bytes(),
        "clusters/cloud-1.yaml": CLUSTER.replace(b"NODES", str(nodes).encode()),
        "apps/shop/app.yaml": APP.replace(b"REPLICAS", str(replicas).encode()),
        "apps/shop/manifests/api.yaml": DEPLOYMENT,
    }
    if pool is not None:
        files["clusterPools/burst.yaml"] = pool
    return files
