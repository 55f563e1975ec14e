"""The pure rules behind the scheduler and the Prometheus selector subset."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from qonnect_gitops.sim import scheduling
from qonnect_gitops.sim.signals import QueryError, format_value, parse_selector


def _node(name: str = "n1", cpu: str = "2", memory: str = "4Gi", pods: str = "110",
          labels: dict[str, str] | None = None, taints: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels or {"kubernetes.io/arch": "amd64"}},
            "spec": {"taints": taints} if taints else {},
            "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": pods}}}


def _pod(cpu: str | None = None, memory: str | None = None, **spec: Any) -> dict[str, Any]:
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v}
    return {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "resources": {"requests": requests}}],
                                                **spec}}


def test_pod_requests_sum_containers_and_respect_init_containers_and_limits() -> None:
    pod = {"spec": {"containers": [{"resources": {"requests": {"cpu": "250m", "memory": "64Mi"}}},
                                   {"resources": {"limits": {"cpu": "0.5", "memory": "1Gi"}}}],
                    "initContainers": [{"resources": {"requests": {"cpu": "2"}}}]}}
    req = scheduling.pod_requests(pod)
    assert req.cpu == 2000  # the init container needs more than the sum
    assert req.memory == 64 * 2**20 + 2**30  # limits stand in for missing requests
    assert scheduling.pod_requests({"spec": {"containers": [{"name": "c"}]}}) == scheduling.Requests(0, 0)


@pytest.mark.parametrize(("toleration", "taint", "ok"), [
    ({"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule"}, {"key": "k", "value": "v",
                                                                              "effect": "NoSchedule"}, True),
    ({"key": "k", "value": "other"}, {"key": "k", "value": "v", "effect": "NoSchedule"}, False),
    ({"key": "k", "operator": "Exists"}, {"key": "k", "value": "v", "effect": "NoExecute"}, True),
    ({"operator": "Exists"}, {"key": "any", "effect": "NoSchedule"}, True),
    ({"key": "k", "operator": "Exists", "effect": "NoExecute"}, {"key": "k", "effect": "NoSchedule"}, False),
    ({"key": "k"}, {"key": "k", "effect": "NoSchedule"}, True),  # Equal with empty value
])
def test_tolerations(toleration: dict[str, Any], taint: dict[str, Any], ok: bool) -> None:
    assert scheduling.tolerates([toleration], taint) is ok


def test_prefer_no_schedule_taints_do_not_filter() -> None:
    node = _node(taints=[{"key": "soft", "effect": "PreferNoSchedule"}])
    assert scheduling.untolerated_taint(_pod(), node) is None


@pytest.mark.parametrize(("expr", "ok"), [
    ({"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64", "arm64"]}, True),
    ({"key": "kubernetes.io/arch", "operator": "NotIn", "values": ["amd64"]}, False),
    ({"key": "gpu", "operator": "DoesNotExist"}, True),
    ({"key": "gpu", "operator": "Exists"}, False),
    ({"key": "cores", "operator": "Gt", "values": ["4"]}, True),
    ({"key": "cores", "operator": "Lt", "values": ["4"]}, False),
])
def test_required_node_affinity_operators(expr: dict[str, Any], ok: bool) -> None:
    node = _node(labels={"kubernetes.io/arch": "amd64", "cores": "8"})
    pod = _pod(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [expr]}]}}})
    assert scheduling.matches_affinity(pod, node) is ok


def test_affinity_terms_are_ored_and_match_fields_names_a_node() -> None:
    node = _node(name="n7", labels={"kubernetes.io/arch": "arm64"})
    terms = [{"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]},
             {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n7"]}]}]
    pod = _pod(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": terms}}})
    assert scheduling.matches_affinity(pod, node)
    assert not scheduling.matches_affinity(_pod(nodeSelector={"kubernetes.io/arch": "amd64"}), node)


def test_node_reasons_in_filter_order_and_resource_accounting() -> None:
    room = scheduling.NodeRoom.of(_node(cpu="1", memory="1Gi", pods="2"))
    assert (room.cpu, room.memory, room.pods) == (1000, 2**30, 2)
    pod = _pod(cpu="600m", memory="600Mi")
    req = scheduling.pod_requests(pod)
    assert scheduling.node_reasons(pod, req, room) == []
    room.add(req)
    assert scheduling.node_reasons(pod, req, room) == ["Insufficient cpu", "Insufficient memory"]
    room.add(scheduling.Requests())
    assert scheduling.node_reasons(_pod(), scheduling.Requests(), room) == ["Too many pods"]
    tainted = scheduling.NodeRoom.of(_node(taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}]))
    # Taints are checked before affinity and resources: one reason per node, the first failing filter.
    assert scheduling.node_reasons(_pod(cpu="64", nodeSelector={"x": "y"}), scheduling.Requests(64000, 0), tainted) \
        == ["node(s) had untolerated taint {k: v}"]
    cordoned = scheduling.NodeRoom.of({**_node(), "spec": {"unschedulable": True}})
    assert scheduling.node_reasons(_pod(), scheduling.Requests(), cordoned) == ["node(s) were unschedulable"]


def test_unschedulable_message_like_the_scheduler() -> None:
    reasons = Counter({"Insufficient cpu": 2, "node(s) didn't match Pod's node affinity/selector": 1,
                       "Insufficient memory": 2})
    assert scheduling.unschedulable_message(3, reasons) == (
        "0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 2 Insufficient cpu, "
        "2 Insufficient memory.")
    assert scheduling.unschedulable_message(0, Counter()) == "no nodes available to schedule pods"


def test_selector_subset() -> None:
    series = {"__name__": "m", "a": "x1", "b": "y"}
    assert parse_selector("m")(series)
    assert parse_selector(' m { a = "x1" , b!="z" } ')(series)
    assert parse_selector('m{a=~"x[0-9]"}')(series)
    assert not parse_selector('m{a=~"x"}')(series)  # anchored, as in Prometheus
    assert parse_selector('m{a!~"y.*"}')(series)
    assert parse_selector('{__name__="m"}')(series)
    assert not parse_selector('other{a="x1"}')(series)
    assert parse_selector('m{c=""}')(series)  # an absent label equals the empty string
    assert parse_selector('m{a="x1",}')(series)  # trailing comma allowed
    for bad in ("", "{}", "sum(m)", "m[5m]", "m + 1", 'm{a="x"', 'm{a=x}', 'm{a=~"("}'):
        with pytest.raises(QueryError):
            parse_selector(bad)


def test_values_formatted_like_prometheus() -> None:
    assert [format_value(v) for v in (3.0, 12.5, 0.1, float("nan"), float("inf"), -2.0)] == \
        ["3", "12.5", "0.1", "NaN", "+Inf", "-2"]
