"""A fuzzer over report bodies against a real lead group: every answer is 2xx or 4xx,
every lead stays up, and the leader's loop keeps cycling."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.lead.harness import LeadGroup, http, report

CLUSTERS = ["edge-1", "edge-2", "edge-3"]

_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=40),
    st.sampled_from(["4", "2500m", "8Gi", "1e999999", "-1", "9" * 45, "0.0001m", "1Ei", ""]),
)
_json = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)),
    max_leaves=12)
_paths = st.sampled_from([
    ("agentTime",), ("cluster",), ("sync",), ("sync", "state"), ("sync", "message"),
    ("applied",), ("applied", "generation"), ("nodes",), ("nodes", 0), ("nodes", 0, "freeCpu"),
    ("nodes", 0, "allocatableMemory"), ("nodes", 0, "ready"), ("components",),
    ("components", 0, "component"), ("components", 0, "completed"),
    ("components", 0, "readyReplicas"), ("latencies", 0, "ms"), ("latencies", 0, "to"),
    ("traffic", 0, "rps"), ("traffic", 0, "component"), ("refusals",), ("extra",),
])
_literals = st.sampled_from(["NaN", "Infinity", "-Infinity", "1e999", "-1e999", "1" * 4400,
                             "1.7e308", "[[[[[[[[[[]]]]]]]]]]", '"\\ud800"', "{}", "null"])


def mutated(base: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    doc = json.loads(json.dumps(base))
    target: Any = doc
    for key in path[:-1]:
        if isinstance(target, dict) and key in target:
            target = target[key]
        elif isinstance(target, list) and isinstance(key, int) and key < len(target):
            target = target[key]
        else:
            return doc
    if isinstance(target, dict):
        target[path[-1]] = value
    elif isinstance(target, list) and isinstance(path[-1], int) and path[-1] < len(target):
        target[path[-1]] = value
    return doc


@st.composite
def bodies(draw: st.DrawFn) -> tuple[str, bytes]:
    cluster = draw(st.sampled_from(CLUSTERS))
    kind = draw(st.sampled_from(["mutate", "literal", "bytes", "json"]))
    base = report(cluster)
    if kind == "mutate":
        doc = base
        for _ in range(draw(st.integers(1, 3))):
            doc = mutated(doc, draw(_paths), draw(_json))
        return cluster, json.dumps(doc, allow_nan=True).encode()
    if kind == "literal":
        text = json.dumps(mutated(base, draw(_paths), "@@X@@"))
        return cluster, text.replace('"@@X@@"', draw(_literals)).encode()
    if kind == "bytes":
        return cluster, draw(st.binary(max_size=300))
    return cluster, json.dumps(draw(_json)).encode()


@pytest.fixture(scope="module")
def fuzz_group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LeadGroup]:
    group = LeadGroup(tmp_path_factory.mktemp("fuzz"), clusters=CLUSTERS,
                      extra_args=["--report-rate", "100000", "--report-burst", "100000",
                                  "--max-body", "65536"])
    group.start_all()
    try:
        leader = group.wait_leader()
        group.wait_until(lambda: (group.status(leader) or {}).get("goals", {}).get("lastGood"),
                         what="goals loaded")
        # A placement, so claims about components have something to be checked against.
        code, _, _ = http("POST", leader.url + "/v1/plan",
                          {"placements": {"shop/web": {"edge-1": 1}, "shop/migrate": {"edge-2": 1}}},
                          token=group.admin_token)
        assert code == 200
        yield group
    finally:
        group.stop()


answers: list[int] = []


@settings(max_examples=250, deadline=None, suppress_health_check=list(HealthCheck))
@given(bodies())
def test_report_bodies_are_answered_2xx_or_4xx(fuzz_group: LeadGroup, case: tuple[str, bytes]) -> None:
    cluster, raw = case
    lead = fuzz_group.leads[len(answers) % len(fuzz_group.leads)]
    code, _, body = http("POST", f"{lead.url}/v1/clusters/{cluster}/report", raw=raw,
                         token=fuzz_group.tokens[cluster], timeout=10)
    answers.append(code)
    assert 200 <= code < 300 or 400 <= code < 500, (code, body, raw[:300])
    if code >= 400:
        assert isinstance(body, dict) and body["message"], body


def test_after_the_fuzzing_every_lead_is_up_and_the_loop_cycles(fuzz_group: LeadGroup) -> None:
    assert len(answers) >= 100 and any(400 <= c < 500 for c in answers)
    leader = fuzz_group.wait_leader()
    status = fuzz_group.status(leader) or {}
    cycles = status["loop"]["cycles"]
    fuzz_group.wait_until(lambda: (fuzz_group.status(leader) or {})["loop"]["cycles"] >= cycles + 2,
                          what="the loop cycling")
    status = fuzz_group.status(leader) or {}
    assert status["loop"]["lastError"] is None and status["loop"]["healthy"], status["loop"]
    for lead in fuzz_group.leads:
        assert lead.alive()
        assert http("GET", lead.url + "/healthz")[0] == 200
        text = lead.log_path.read_text()
        assert "http_handler_failed" not in text and "Traceback" not in text
    # Nothing non-finite reached the KB: the planner's snapshot is finite.
    _, _, view = fuzz_group.get(leader, "/v1/observed")
    for item in view["observed"].get("traffic", []):
        assert math.isfinite(item["rps"])
    for item in view["observed"].get("latencies", []):
        assert math.isfinite(item["ms"])
