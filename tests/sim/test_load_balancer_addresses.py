"""Each simulated cluster gives LoadBalancer Services addresses of its own."""

from __future__ import annotations

from typing import Any

from tests.sim.kubelet_helpers import clients, make_sim, shape, wait_for

SERVICE = {"metadata": {"name": "web"},
           "spec": {"type": "LoadBalancer", "selector": {"app": "web"}, "ports": [{"port": 80}]}}


def _first_address(name: str) -> str:
    with make_sim(shape(1, "2"), name=name) as sim:
        core, *_ = clients(sim)
        core.create_namespaced_service("default", SERVICE)
        def ingress() -> list[Any] | None:
            balancer = core.read_namespaced_service("web", "default").status.load_balancer
            return balancer.ingress if balancer is not None else None

        addresses = wait_for(ingress, what=f"a load balancer address on {name}")
        return str(addresses[0].ip)


def test_two_clusters_give_their_first_load_balancers_different_addresses() -> None:
    addresses = {_first_address(name) for name in ("fog-1", "fog-2", "cloud-2")}
    assert len(addresses) == 3
    assert _first_address("fog-1") in addresses  # the same cluster name, the same address
