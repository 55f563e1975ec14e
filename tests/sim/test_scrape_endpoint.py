"""The sim's scrape endpoint: Istio-style counters and histograms computed from the signals set."""

from __future__ import annotations

import urllib.request

from qonnect_gitops.sim import SimCluster
from qonnect_gitops.sim.signals import DURATION_BUCKETS, MESH_CALL_RPS, Signals, format_value


def samples(text: str) -> dict[str, float]:
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line and not line.startswith("#")}


def test_counters_grow_at_the_rate_set_and_keep_their_value_when_it_changes() -> None:
    now = [1000.0]
    signals = Signals("edge-1", peers=frozenset({"fog-1"}), clock=lambda: now[0])
    signals.set_traffic("shop", "web", "eu-central", 30.0)
    signals.set_latency("fog-1", 12.0)
    signals.set_latency("eu-central", 7.0)  # a region: probed, no mesh calls
    now[0] += 10
    served = ('istio_requests_total{destination_cluster="edge-1",destination_workload="web",'
              'destination_workload_namespace="shop",reporter="destination",user_region="eu-central"}')
    calls = 'reporter="source",source_cluster="edge-1",destination_cluster="fog-1"'
    first = samples(signals.exposition())
    assert first[served] == 300.0
    assert first[f"istio_requests_total{{{calls}}}"] == 10 * MESH_CALL_RPS
    assert first[f"istio_request_duration_milliseconds_sum{{{calls}}}"] == 10 * MESH_CALL_RPS * 12.0
    for le in DURATION_BUCKETS:
        bucket = first[f'istio_request_duration_milliseconds_bucket{{{calls},le="{format_value(le)}"}}']
        assert bucket == (10 * MESH_CALL_RPS if le >= 12.0 else 0.0), le
    assert not any("eu-central" in k and "duration" in k for k in first)
    assert first['qonnect_network_latency_ms{source="edge-1",target="eu-central"}'] == 7.0
    signals.set_traffic("shop", "web", "eu-central", 60.0)
    now[0] += 5
    assert samples(signals.exposition())[served] == 300.0 + 5 * 60.0
    signals.remove_traffic("shop", "web", "eu-central")
    signals.remove_latency("fog-1")
    left = samples(signals.exposition())
    assert not any("destination_workload" in k or "fog-1" in k for k in left)  # gone: Prometheus marks them stale


def test_served_requests_name_the_workload_running_the_component_and_only_while_it_runs() -> None:
    signals = Signals("edge-1", workload_of=lambda app, comp: ("bookinfo", "productpage-v1")
                      if (app, comp) == ("bookinfo", "productpage") else None)
    signals.set_traffic("bookinfo", "productpage", "eu-west", 5.0)
    signals.set_traffic("bookinfo", "ratings", "eu-west", 5.0)
    text = signals.exposition()
    assert 'destination_workload="productpage-v1",destination_workload_namespace="bookinfo"' in text
    assert "ratings" not in text.split("# TYPE istio_requests_total counter")[1]


def test_label_values_are_escaped() -> None:
    signals = Signals('a"b\\c')
    signals.set_latency("x\ny", 1.0)
    assert 'qonnect_network_latency_ms{source="a\\"b\\\\c",target="x\\ny"} 1' in signals.exposition()


def test_the_scrape_endpoint_serves_the_text_format() -> None:
    with SimCluster(name="edge-1") as sim:
        sim.signals.set_latency("fog-1", 3.0)
        with urllib.request.urlopen(sim.prometheus_url + "/metrics", timeout=5) as resp:
            assert resp.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
            body = resp.read().decode()
    assert 'qonnect_network_latency_ms{source="edge-1",target="fog-1"} 3' in body
