"""Part 2: nodes, scheduler, fake kubelet and workload controllers, through the official client and kubectl."""

from __future__ import annotations

import ipaddress
import time
from pathlib import Path

from kubernetes import client

from qonnect_gitops.model import load_goals, read_directory
from qonnect_gitops.sim import SimCluster
from tests.sim.conftest import Kubectl
from tests.sim.kubelet_helpers import (
    clients,
    deployment,
    make_sim,
    pods_of,
    ready,
    shape,
    taint,
    wait_for,
)

REPO = Path(__file__).resolve().parents[2]


def test_nodes_from_cluster_file() -> None:
    goals = load_goals(read_directory(REPO / "repo-template"))
    cluster = goals.clusters["edge-1"]
    with SimCluster.from_cluster(cluster, startup_delay=0.05) as sim:
        core, *_ = clients(sim)
        nodes = core.list_node().items
        assert [n.metadata.name for n in nodes] == ["edge-1-node-1", "edge-1-node-2"]
        n = nodes[0]
        assert n.metadata.labels["kubernetes.io/arch"] == "arm64"
        assert n.metadata.labels["kubernetes.io/os"] == "linux"
        assert n.metadata.labels["kubernetes.io/hostname"] == "edge-1-node-1"
        assert n.metadata.labels["topology.kubernetes.io/region"] == "eu-central"
        assert n.metadata.labels["topology.kubernetes.io/zone"] == "eu-central-a"
        assert n.metadata.labels["node.kubernetes.io/instance-type"]
        assert n.status.allocatable == {"cpu": "3500m", "memory": f"{7 * 1024 * 1024}Ki", "pods": "110",
                                        "ephemeral-storage": "100Gi"}
        assert n.status.capacity["cpu"] == "3500m"
        assert n.status.node_info.architecture == "arm64"
        assert {c.type: c.status for c in n.status.conditions}["Ready"] == "True"


def test_cluster_taints_on_nodes_and_tolerations() -> None:
    with make_sim(shape(2, "2"), taints=(taint("qonnect.io/gpu", "true"),)) as sim:
        core, apps, *_ = clients(sim)
        assert all(n.spec.taints[0].key == "qonnect.io/gpu" for n in core.list_node().items)
        apps.create_namespaced_deployment("default", deployment("plain", 1))
        pod = wait_for(lambda: [p for p in pods_of(core, "plain") if p.status.conditions], what="a condition")[0]
        cond = pod.status.conditions[0]
        assert (cond.type, cond.status, cond.reason) == ("PodScheduled", "False", "Unschedulable")
        assert cond.message == "0/2 nodes are available: 2 node(s) had untolerated taint {qonnect.io/gpu: true}."
        apps.create_namespaced_deployment("default", deployment("tolerant", 2, pod_spec={"tolerations": [
            {"key": "qonnect.io/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}]}))
        wait_for(lambda: len([p for p in pods_of(core, "tolerant") if ready(p)]) == 2, what="tolerant pods ready")
        assert pods_of(core, "plain")[0].status.phase == "Pending"


def test_over_capacity_deployment_then_freed_capacity() -> None:
    # One node of 2 CPUs: a hog takes 1 CPU, so only two of three 400m web replicas fit.
    with make_sim(shape(1, "2")) as sim:
        core, apps, *_ = clients(sim)
        apps.create_namespaced_deployment("default", deployment("hog", 1, cpu="1"))
        wait_for(lambda: (apps.read_namespaced_deployment("hog", "default").status.ready_replicas or 0) == 1,
                 what="hog ready")
        apps.create_namespaced_deployment("default", deployment("web", 3, cpu="400m"))
        wait_for(lambda: (apps.read_namespaced_deployment("web", "default").status.ready_replicas or 0) == 2,
                 what="two web replicas ready")
        time.sleep(0.3)  # well past the start-up delay: the third must still be pending
        status = apps.read_namespaced_deployment("web", "default").status
        assert status.replicas == 3 and status.ready_replicas == 2 and status.unavailable_replicas == 1
        pending = [p for p in pods_of(core, "web") if p.status.phase == "Pending"]
        assert len(pending) == 1 and pending[0].spec.node_name is None
        assert pending[0].status.conditions[0].message == "0/1 nodes are available: 1 Insufficient cpu."
        # Free the hog's CPU: the pending replica binds and becomes Ready.
        apps.patch_namespaced_deployment_scale("hog", "default", {"spec": {"replicas": 0}})
        wait_for(lambda: (apps.read_namespaced_deployment("web", "default").status.ready_replicas or 0) == 3,
                 what="all web replicas ready")
        conds = {c.type: c for c in apps.read_namespaced_deployment("web", "default").status.conditions}
        assert conds["Available"].status == "True" and conds["Available"].reason == "MinimumReplicasAvailable"
        assert conds["Progressing"].reason == "NewReplicaSetAvailable"
        assert not pods_of(core, "hog")


def test_pod_larger_than_any_node_stays_pending() -> None:
    # Three nodes of 1 CPU: 3 CPUs in total, yet a 1500m Pod fits on none of them.
    with make_sim(shape(3, "1")) as sim:
        core, *_ = clients(sim)
        core.create_namespaced_pod("default", {"metadata": {"name": "big", "labels": {"app": "big"}}, "spec": {
            "containers": [{"name": "c", "image": "busybox:1", "resources": {"requests": {"cpu": "1500m"}}}]}})
        pod = wait_for(lambda: [p for p in pods_of(core, "big") if p.status.conditions], what="a condition")[0]
        assert pod.status.conditions[0].message == "0/3 nodes are available: 3 Insufficient cpu."
        time.sleep(0.3)
        pod = core.read_namespaced_pod("big", "default")
        assert pod.spec.node_name is None and pod.status.phase == "Pending"
        assert pod.status.conditions[0].reason == "Unschedulable"
        # Memory is checked the same way.
        core.create_namespaced_pod("default", {"metadata": {"name": "fat", "labels": {"app": "fat"}}, "spec": {
            "containers": [{"name": "c", "image": "busybox:1", "resources": {"requests": {"memory": "9Gi"}}}]}})
        pod = wait_for(lambda: [p for p in pods_of(core, "fat") if p.status.conditions], what="a condition")[0]
        assert pod.status.conditions[0].message == "0/3 nodes are available: 3 Insufficient memory."


def test_amd64_only_pods_never_bind_to_arm64() -> None:
    # One small amd64 node, two large arm64 nodes.
    with make_sim(shape(1, "1", arch="amd64"), shape(2, "8", arch="arm64")) as sim:
        core, apps, *_ = clients(sim)
        amd64 = "t-node-1"
        selector = {"nodeSelector": {"kubernetes.io/arch": "amd64"}}
        affinity = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}]}}}}
        apps.create_namespaced_deployment("default", deployment("by-selector", 3, cpu="300m", pod_spec=selector))
        apps.create_namespaced_deployment("default", deployment("by-affinity", 2, cpu="300m", pod_spec=affinity))
        apps.create_namespaced_deployment("default", deployment("anywhere", 4, cpu="300m"))
        wait_for(lambda: len([p for p in pods_of(core, "anywhere") if ready(p)]) == 4, what="free pods ready")
        time.sleep(0.3)
        constrained = pods_of(core, "by-selector") + pods_of(core, "by-affinity")
        bound = [p for p in constrained if p.spec.node_name]
        # 1 CPU holds three 300m Pods: the other two wait rather than go to arm64.
        assert len(bound) == 3 and {p.spec.node_name for p in bound} == {amd64}
        waiting = [p for p in constrained if not p.spec.node_name]
        assert len(waiting) == 2
        assert waiting[0].status.conditions[0].message == (
            "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) didn't match Pod's node affinity/selector.")
        nodes = {n.metadata.name: n.metadata.labels["kubernetes.io/arch"] for n in core.list_node().items}
        assert all(nodes[p.spec.node_name] == "amd64" for p in bound)


def test_rolling_update_and_scale_down() -> None:
    with make_sim(shape(2, "4")) as sim:
        core, apps, *_ = clients(sim)
        apps.create_namespaced_deployment("default", deployment("web", 3))
        wait_for(lambda: (apps.read_namespaced_deployment("web", "default").status.ready_replicas or 0) == 3,
                 what="web ready")
        first_rs = apps.list_namespaced_replica_set("default").items
        assert len(first_rs) == 1
        rs = first_rs[0]
        assert rs.metadata.owner_references[0].kind == "Deployment"
        h = rs.metadata.labels["pod-template-hash"]
        assert rs.metadata.name == f"web-{h}"
        assert all(p.metadata.labels["pod-template-hash"] == h for p in pods_of(core, "web"))
        apps.patch_namespaced_deployment("web", "default", {"spec": {"template": {"spec": {"containers": [
            {"name": "app", "image": "nginx:1.28"}]}}}})

        def rolled() -> bool:
            d = apps.read_namespaced_deployment("web", "default")
            pods = pods_of(core, "web")
            return (d.status.observed_generation == 2 and d.status.updated_replicas == 3
                    and (d.status.ready_replicas or 0) == 3 and d.status.replicas == 3 and len(pods) == 3
                    and all(p.spec.containers[0].image == "nginx:1.28" for p in pods))

        wait_for(rolled, what="the rollout")
        sets = {r.metadata.name: r.spec.replicas for r in apps.list_namespaced_replica_set("default").items}
        assert len(sets) == 2 and sets[rs.metadata.name] == 0
        apps.patch_namespaced_deployment_scale("web", "default", {"spec": {"replicas": 1}})
        wait_for(lambda: len(pods_of(core, "web")) == 1, what="scale down deleting pods")
        wait_for(lambda: apps.read_namespaced_deployment("web", "default").status.replicas == 1, what="status")


def test_statefulset_daemonset_job_cronjob() -> None:
    with make_sim(shape(2, "4"), shape(1, "4", arch="arm64")) as sim:
        core, apps, batch, _ = clients(sim)
        template = {"metadata": {"labels": {"app": "db"}}, "spec": {"containers": [
            {"name": "db", "image": "postgres:16", "resources": {"requests": {"cpu": "100m"}}}]}}
        apps.create_namespaced_stateful_set("default", {"metadata": {"name": "db"}, "spec": {
            "replicas": 3, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}}, "template": template}})
        ds_template = {"metadata": {"labels": {"app": "agent"}}, "spec": {
            "nodeSelector": {"kubernetes.io/arch": "amd64"},
            "containers": [{"name": "a", "image": "agent:1"}]}}
        apps.create_namespaced_daemon_set("default", {"metadata": {"name": "agent"}, "spec": {
            "selector": {"matchLabels": {"app": "agent"}}, "template": ds_template}})
        batch.create_namespaced_job("default", {"metadata": {"name": "once"}, "spec": {"completions": 2, "template": {
            "spec": {"restartPolicy": "Never", "containers": [{"name": "j", "image": "busybox:1"}]}}}})
        batch.create_namespaced_cron_job("default", {"metadata": {"name": "nightly"}, "spec": {
            "schedule": "0 3 * * *", "jobTemplate": {"spec": {"template": {"spec": {
                "restartPolicy": "OnFailure", "containers": [{"name": "j", "image": "busybox:1"}]}}}}}})

        wait_for(lambda: (apps.read_namespaced_stateful_set("db", "default").status.ready_replicas or 0) == 3,
                 what="statefulset ready")
        sts = apps.read_namespaced_stateful_set("db", "default").status
        assert sts.replicas == 3 and sts.updated_replicas == 3 and sts.observed_generation == 1
        assert sorted(p.metadata.name for p in pods_of(core, "db")) == ["db-0", "db-1", "db-2"]

        ds = wait_for(lambda: (s := apps.read_namespaced_daemon_set("agent", "default").status).number_ready == 2
                      and s, what="daemonset ready")
        assert ds.desired_number_scheduled == 2 and ds.current_number_scheduled == 2
        arch = {n.metadata.name: n.metadata.labels["kubernetes.io/arch"] for n in core.list_node().items}
        assert sorted(arch[p.spec.node_name] for p in pods_of(core, "agent")) == ["amd64", "amd64"]

        job = wait_for(lambda: (j := batch.read_namespaced_job("once", "default")).status.succeeded == 2 and j,
                       what="job complete")
        conds = {c.type: c.status for c in job.status.conditions}
        assert conds["Complete"] == "True" and job.status.completion_time is not None
        job_pods = core.list_namespaced_pod("default", label_selector="job-name=once").items
        assert len(job_pods) == 2 and all(p.status.phase == "Succeeded" for p in job_pods)
        # CronJobs are not run by the sim: no Job appears for them.
        assert [j.metadata.name for j in batch.list_namespaced_job("default").items] == ["once"]

        apps.patch_namespaced_stateful_set_scale("db", "default", {"spec": {"replicas": 1}})
        wait_for(lambda: [p.metadata.name for p in pods_of(core, "db")] == ["db-0"], what="statefulset scaled down")


def test_service_endpoints_and_slices() -> None:
    with make_sim(shape(2, "4")) as sim:
        core, apps, _, api = clients(sim)
        core.create_namespaced_service("default", {"metadata": {"name": "web", "labels": {"app": "web"}}, "spec": {
            "selector": {"app": "web"}, "ports": [{"name": "http", "port": 8080, "targetPort": 80}]}})
        apps.create_namespaced_deployment("default", deployment("web", 2))

        def two_addresses() -> bool:
            # As on a real server, the endpoints controller creates the object after the Service: 404 until then.
            try:
                ep = core.read_namespaced_endpoints("web", "default")
            except client.ApiException as err:
                if err.status == 404:
                    return False
                raise
            return bool(ep.subsets) and len(ep.subsets[0].addresses or []) == 2

        wait_for(two_addresses, what="endpoints")
        ep = core.read_namespaced_endpoints("web", "default")
        assert ep.subsets[0].ports[0].port == 80 and ep.subsets[0].ports[0].name == "http"
        ips = {p.status.pod_ip for p in pods_of(core, "web")}
        assert {a.ip for a in ep.subsets[0].addresses} == ips
        slices = client.DiscoveryV1Api(api).list_namespaced_endpoint_slice(
            "default", label_selector="kubernetes.io/service-name=web").items
        assert len(slices) == 1
        s = slices[0]
        assert s.address_type == "IPv4" and s.ports[0].port == 80
        assert {e.addresses[0] for e in s.endpoints} == ips and all(e.conditions.ready for e in s.endpoints)
        assert s.metadata.owner_references[0].kind == "Service"
        apps.patch_namespaced_deployment_scale("web", "default", {"spec": {"replicas": 0}})
        wait_for(lambda: not core.read_namespaced_endpoints("web", "default").subsets, what="endpoints emptied")
        core.delete_namespaced_service("web", "default")
        wait_for(lambda: [e.metadata.name for e in core.list_namespaced_endpoints("default").items] == ["kubernetes"],
                 what="endpoints removed")
        wait_for(lambda: not client.DiscoveryV1Api(api).list_namespaced_endpoint_slice("default").items,
                 what="slices collected")


def test_kubectl_wait_available(tmp_path: Path) -> None:
    with make_sim(shape(1, "2"), delay=0.2) as sim:
        path = tmp_path / "kubeconfig"
        path.write_text(sim.kubeconfig_yaml())
        kubectl = Kubectl(path, tmp_path / "cache")
        kubectl("apply", "-f", "-", stdin=_yaml(deployment("web", 2)))
        proc = kubectl("wait", "--for=condition=Available", "deployment/web", "--timeout=20s")
        assert "condition met" in proc.stdout
        out = kubectl("get", "pods", "-o", "jsonpath={.items[*].status.phase}").stdout
        assert out.split() == ["Running", "Running"]
        assert "successfully rolled out" in kubectl("rollout", "status", "deployment/web", "--timeout=10s").stdout
        # Tables carry the API printers' columns.
        lines = kubectl("get", "pods", "-o", "wide").stdout.splitlines()
        assert lines[0].split()[:6] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP"]
        assert all(line.split()[1:3] == ["1/1", "Running"] and line.split()[6] == "t-node-1" for line in lines[1:])
        lines = kubectl("get", "deployments").stdout.splitlines()
        assert lines[1].split()[:4] == ["web", "2/2", "2", "2"]
        sim.fail_node("t-node-1")
        lines = kubectl("get", "nodes").stdout.splitlines()
        assert lines[0].split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
        assert lines[1].split()[:2] == ["t-node-1", "NotReady"] and lines[1].split()[-1] == "v1.37.0"
        pending = kubectl("get", "pods", "--field-selector=status.phase=Pending").stdout.splitlines()[1:]
        assert len(pending) == 2 and all(line.split()[1:3] == ["0/1", "Pending"] for line in pending)


def test_idle_cluster_does_no_work() -> None:
    with make_sim(shape(2, "4")) as sim:
        core, apps, batch, _ = clients(sim)
        apps.create_namespaced_deployment("default", deployment("web", 3))
        apps.create_namespaced_deployment("default", deployment("huge", 1, cpu="64"))  # stays Pending
        core.create_namespaced_service("default", {"metadata": {"name": "web"}, "spec": {
            "type": "LoadBalancer", "selector": {"app": "web"}, "ports": [{"port": 80}]}})
        template = {"metadata": {"labels": {"app": "s"}}, "spec": {"containers": [{"name": "c", "image": "x:1"}]}}
        apps.create_namespaced_stateful_set("default", {"metadata": {"name": "s"}, "spec": {
            "replicas": 2, "serviceName": "s", "selector": {"matchLabels": {"app": "s"}}, "template": template}})
        apps.create_namespaced_daemon_set("default", {"metadata": {"name": "d"}, "spec": {
            "selector": {"matchLabels": {"app": "d"}}, "template": {**template, "metadata": {"labels": {"app": "d"}}}}})
        batch.create_namespaced_job("default", {"metadata": {"name": "j"}, "spec": {"template": {"spec": {
            "restartPolicy": "Never", "containers": [{"name": "c", "image": "x:1"}]}}}})
        wait_for(lambda: (apps.read_namespaced_deployment("web", "default").status.ready_replicas or 0) == 3
                 and (apps.read_namespaced_stateful_set("s", "default").status.ready_replicas or 0) == 2
                 and apps.read_namespaced_daemon_set("d", "default").status.number_ready == 2
                 and batch.read_namespaced_job("j", "default").status.succeeded == 1, what="everything settled")
        ingress = wait_for(lambda: (core.read_namespaced_service("web", "default").status.load_balancer.ingress),
                           what="a load balancer address")
        assert ipaddress.ip_address(ingress[0].ip) in ipaddress.ip_network("172.16.0.0/12")
        time.sleep(0.2)
        assert sim.controllers is not None
        rounds, rv = sim.controllers.rounds, sim.core.store.resource_version
        time.sleep(1.0)
        # Nothing changed, so the control loop neither woke nor wrote.
        assert (sim.controllers.rounds, sim.core.store.resource_version) == (rounds, rv)


def _yaml(obj: object) -> str:
    import yaml

    return yaml.safe_dump(obj)


def test_rolling_update_on_a_full_cluster_uses_max_unavailable() -> None:
    # Four 250m replicas fill the one 1-CPU node: the surge Pod cannot bind, so the rollout
    # proceeds only because maxUnavailable (25% of 4 = 1) lets an old Pod go first.
    with make_sim(shape(1, "1")) as sim:
        core, apps, *_ = clients(sim)
        apps.create_namespaced_deployment("default", deployment("web", 4, cpu="250m"))
        wait_for(lambda: (apps.read_namespaced_deployment("web", "default").status.ready_replicas or 0) == 4,
                 what="web ready")
        apps.patch_namespaced_deployment("web", "default", {"spec": {"template": {"metadata": {
            "annotations": {"rev": "2"}}}}})
        most_pods, least_ready = 0, 4
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            pods = pods_of(core, "web")
            most_pods = max(most_pods, len(pods))
            least_ready = min(least_ready, sum(1 for p in pods if ready(p)))
            d = apps.read_namespaced_deployment("web", "default")
            if d.status.observed_generation == 2 and d.status.updated_replicas == 4 and d.status.replicas == 4 \
                    and (d.status.available_replicas or 0) == 4:
                break
            time.sleep(0.02)
        else:
            raise AssertionError("the rollout did not finish")
        assert all(p.metadata.annotations == {"rev": "2"} for p in pods_of(core, "web"))
        assert most_pods <= 5  # desired + maxSurge (1)
        assert least_ready >= 3  # desired - maxUnavailable (1)


def test_stop_and_start_keep_ports_objects_and_controllers() -> None:
    sim = make_sim(shape(1, "2"))
    sim.start()
    try:
        _, apps, *_ = clients(sim)
        apps.create_namespaced_deployment("default", deployment("web", 1))
        wait_for(lambda: (apps.read_namespaced_deployment("web", "default").status.ready_replicas or 0) == 1,
                 what="web ready")
        ports = (sim.port, sim.prometheus_port, sim.admin_port)
        sim.stop()
        sim.start()
        assert (sim.port, sim.prometheus_port, sim.admin_port) == ports
        apps.patch_namespaced_deployment_scale("web", "default", {"spec": {"replicas": 2}})
        wait_for(lambda: (apps.read_namespaced_deployment("web", "default").status.ready_replicas or 0) == 2,
                 what="the controllers running again")
    finally:
        sim.stop()
