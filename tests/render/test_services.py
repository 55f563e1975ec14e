"""Where Services are rendered: ClusterIP app-wide and for declared callers, LoadBalancer and
NodePort only beside their backends."""

from __future__ import annotations

from qonnect_gitops.model import load_goals
from qonnect_gitops.render import render
from tests.render.test_render import PLACEMENT, make_plan, objects

EXTERNAL = b"""---
apiVersion: v1
kind: Service
metadata:
  name: productpage-external
spec:
  type: LoadBalancer
  selector:
    app: productpage
  ports:
    - name: http
      port: 80
      targetPort: 9080
"""


def _services(rendered, cluster: str) -> set[str]:
    return {o["metadata"]["name"] for o in objects(rendered, cluster).values() if o["kind"] == "Service"}


def _goals(template_files, kind: str = "LoadBalancer"):
    files = dict(template_files)
    path = "apps/bookinfo/manifests/productpage.yaml"
    files[path] += EXTERNAL.replace(b"LoadBalancer", kind.encode())
    return load_goals(files)


def test_a_load_balancer_goes_only_where_its_backends_run(template_files) -> None:
    for kind in ("LoadBalancer", "NodePort"):
        goals = _goals(template_files, kind)
        rendered = render(goals, make_plan(goals))
        where = {c for c in goals.clusters if "productpage-external" in _services(rendered, c)}
        assert where == set(PLACEMENT["bookinfo/productpage"]) == {"edge-1", "edge-2"}, kind


def test_a_cluster_ip_service_resolves_wherever_its_app_runs(template_files) -> None:
    goals = _goals(template_files)
    rendered = render(goals, make_plan(goals))
    bookinfo = {c for key, where in PLACEMENT.items() if key.startswith("bookinfo/") for c in where}
    # Nothing on fog-1 or cloud-1 calls productpage; its name resolves there all the same.
    assert {c for c in goals.clusters if "productpage" in _services(rendered, c)} == bookinfo
    for cluster in bookinfo - {"edge-1", "edge-2"}:
        service = next(o for o in objects(rendered, cluster).values()
                       if o["kind"] == "Service" and o["metadata"]["name"] == "productpage")
        assert service["metadata"]["annotations"]["service.cilium.io/shared"] == "false"
    # fog-3 runs only the sensor pipeline: no Bookinfo Service there.
    assert _services(rendered, "fog-3") == {"ingest", "store"}


def test_a_caller_from_another_app_gets_the_service(template_files) -> None:
    files = dict(template_files)
    files["apps/sensor-pipeline/app.yaml"] = files["apps/sensor-pipeline/app.yaml"].replace(
        b"calls: [ingest, store]", b"calls: [ingest, store, bookinfo/details]")
    goals = load_goals(files)
    rendered = render(goals, make_plan(goals))
    # The aggregator runs on fog-3 and now calls Bookinfo's details.
    assert _services(rendered, "fog-3") == {"ingest", "store", "details"}
