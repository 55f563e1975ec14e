"""Latency and traffic through a real Prometheus (the Debian package) scraping the sim's
Istio-style metrics, queried by the agent with the documented PromQL (agent/prometheus.py):
what the agent reports matches what the sim generated, within the histogram's bucket, and
an empty range, a stale series and a Prometheus that is down each give the documented
report (docs/agent.md, "Latency and traffic from Prometheus")."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from qonnect_gitops.agent.prometheus import PRESETS, expand
from qonnect_gitops.sim.signals import DURATION_BUCKETS
from tests.agent.conftest import CLUSTER, deployment, namespace, wait_for
from tests.prometheus import instant, require, running, scrapes

WINDOW = "4s"  # rate() over four one-second scrapes


def bucket_of(ms: float) -> tuple[float, float]:
    """The bounds of the histogram bucket holding ``ms``."""
    upper = next(b for b in DURATION_BUCKETS if ms <= b)
    lower = max([0.0, *(b for b in DURATION_BUCKETS if b < ms)])
    return lower, upper


@pytest.fixture
def istio(sim, branch, make_agent, tmp_path: Path) -> Any:
    """edge-1 runs shop/web; its mesh calls fog-1 (12 ms) and probes eu-central (7 ms); web
    serves 30 requests/s to eu-central and 4.5 to eu-west; a real Prometheus scrapes it."""
    require()
    sim.signals.peers = frozenset({"fog-1"})
    branch.publish([namespace("shop"), deployment("web", component="web")])
    for target, ms in (("fog-1", 12.0), ("eu-central", 7.0)):
        sim.signals.set_latency(target, ms)
    sim.signals.set_traffic("shop", "web", "eu-central", 30.0)
    sim.signals.set_traffic("shop", "web", "eu-west", 4.5)
    with running(tmp_path / "prometheus", {CLUSTER: sim.prometheus_url}) as url:
        agent = make_agent(prometheus=url, latency_query=PRESETS["istio"].latency,
                           traffic_query=PRESETS["istio"].traffic, prometheus_window=WINDOW)
        agent.sync()  # applies the Deployment: the mesh now sees requests to it
        yield agent, url


def _covered(url: str, since: int) -> None:
    """Wait until the server holds ``since`` + 6 scrapes (the window covered, with room)."""
    wait_for(lambda: scrapes(url, CLUSTER) >= since + 6, timeout=30, what="six more scrapes")


def _signals(agent: Any) -> tuple[dict[str, float], dict[tuple[str, str], float]]:
    report = agent.build_report(agent.last)
    return ({lat.to: lat.ms for lat in report.latencies},
            {(t.component, t.region): t.rps for t in report.traffic})


def test_reported_latency_and_traffic_match_what_the_sim_generated(istio, sim) -> None:
    agent, url = istio
    _covered(url, 0)
    low, high = bucket_of(12.0)
    seen = []
    for _ in range(2):  # two readings, more than two scrape intervals apart
        latency, traffic = _signals(agent)
        assert set(latency) == {"fog-1", "eu-central"}
        assert low <= latency["fog-1"] <= high  # histogram_quantile interpolates within the bucket
        assert latency["eu-central"] == 7.0  # the probe: a gauge, exact
        assert traffic.keys() == {("shop/web", "eu-central"), ("shop/web", "eu-west")}
        assert traffic[("shop/web", "eu-central")] == pytest.approx(30.0, rel=0.02)
        assert traffic[("shop/web", "eu-west")] == pytest.approx(4.5, rel=0.02)
        seen.append(scrapes(url, CLUSTER))
        time.sleep(2.5)
    assert seen[1] >= seen[0] + 2
    # A change in the sim shows once the window holds only new samples.
    sim.signals.set_latency("fog-1", 70.0)
    sim.signals.set_traffic("shop", "web", "eu-central", 60.0)
    _covered(url, scrapes(url, CLUSTER))
    latency, traffic = _signals(agent)
    low, high = bucket_of(70.0)
    assert low <= latency["fog-1"] <= high
    assert traffic[("shop/web", "eu-central")] == pytest.approx(60.0, rel=0.02)


def test_an_empty_range_reports_the_probes_and_no_traffic(istio) -> None:
    """A window shorter than the scrape interval holds at most one sample: rate() is empty,
    histogram_quantile has nothing; the probes (gauges) still answer."""
    agent, url = istio
    _covered(url, 0)
    agent.cfg.prometheus_window = "500ms"
    latency, traffic = _signals(agent)
    assert latency == {"fog-1": 12.0, "eu-central": 7.0}  # from the probes, exact
    assert traffic == {}


def test_a_stale_series_leaves_the_report_once_its_window_passed(istio, sim) -> None:
    agent, url = istio
    _covered(url, 0)
    sim.signals.remove_latency("fog-1")
    sim.signals.remove_traffic("shop", "web", "eu-west")
    _covered(url, scrapes(url, CLUSTER))  # the staleness markers, then a whole window
    assert instant(url, 'qonnect_network_latency_ms{target="fog-1"}') == []
    latency, traffic = _signals(agent)
    assert latency == {"eu-central": 7.0}
    assert traffic.keys() == {("shop/web", "eu-central")}


def test_a_prometheus_that_goes_down_leaves_the_last_reading_in_the_reports(sim, branch, make_agent, tmp_path) -> None:
    """As every part of a report that cannot be read: the last values read stay (none for
    an agent that never read any), the failure is logged and counted."""
    require()
    sim.signals.peers = frozenset({"fog-1"})
    branch.publish([namespace("shop"), deployment("web", component="web")])
    sim.signals.set_latency("fog-1", 12.0)
    sim.signals.set_traffic("shop", "web", "eu-central", 30.0)
    with running(tmp_path / "prometheus", {CLUSTER: sim.prometheus_url}) as url:
        settings = dict(prometheus=url, latency_query=PRESETS["istio"].latency, traffic_query=PRESETS["istio"].traffic,
                        prometheus_window=WINDOW)
        agent, never = make_agent(**settings), make_agent(**settings)
        agent.sync()
        _covered(url, 0)
        before = _signals(agent)
        assert before[0].keys() == {"fog-1"} and before[1].keys() == {("shop/web", "eu-central")}
    report = agent.build_report(agent.sync())  # the server has stopped: connection refused
    assert ({lat.to: lat.ms for lat in report.latencies}, {(t.component, t.region): t.rps for t in report.traffic}) \
        == before
    assert [c.component for c in report.components] == ["shop/web"]
    assert 'qonnect_agent_errors_total{kind="prometheus"}' in agent.metrics.render()
    fresh = never.build_report(never.sync())
    assert fresh.latencies == () and fresh.traffic == () and fresh.components


def test_every_preset_is_promql_a_real_prometheus_accepts(tmp_path) -> None:
    with running(tmp_path / "prometheus", {}) as url:
        for name, queries in PRESETS.items():
            for template in (queries.latency, queries.traffic):
                assert instant(url, expand(template, CLUSTER, "1m")) == [], name
