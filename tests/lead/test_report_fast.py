"""The fast report decoder (``lead.report_fast``, msgspec) against the careful one
(``lead.http.parse_report``, pydantic): over generated and mutated bodies, the lead
accepts exactly what the careful way accepts, stores the same record (byte for byte
as the Raft log carries it), and refuses the rest with the careful way's answer."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qonnect_gitops.kb.records import (
    ReportEntry,
    ReportRecord,
    encode_entry,
    pack_entries,
    unpack_entries,
)
from qonnect_gitops.lead import report_fast
from qonnect_gitops.lead.http import _redacted, parse_report, report_record
from qonnect_gitops.lead.httpd import HTTPError
from tests.lead.harness import report


def _careful(body: bytes) -> ReportRecord:
    return ReportRecord.from_report(_redacted(parse_report(body)))


def _outcome(decode: Any, body: bytes) -> tuple[Any, ...]:
    """What the lead makes of a body: the record as the Raft log carries it, or the
    refusal's status and message."""
    try:
        record = decode(body)
    except HTTPError as exc:
        return ("refused", exc.status, exc.message)
    return ("stored", encode_entry(ReportEntry(record.cluster, 0.0, record)))


def _base(variant: int) -> dict[str, Any]:
    """A valid report with every kind of list entry the fast way takes."""
    body = report("edge-1", agent_time=1_764_590_400.25 + variant, nodes=variant % 3)
    if variant % 2:
        body["refusals"] = [{"reason": "PruneLimitExceeded", "message": "too many", "commit": "c" * 40},
                            {"reason": "EmptyDesiredSet"}]
        body["attempted"] = "b" * 7
        body["components"].append({"component": "shop/db", "healthy": False, "readyReplicas": 0,
                                   "desiredReplicas": 1, "completed": False,
                                   "message": "pods pending", "reason": "Unschedulable"})
        body["latencies"].append({"to": "edge-2", "ms": 3})
        body["traffic"].append({"component": "shop/db", "region": "eu-west", "rps": 0})
    if variant % 3 == 2:
        body["applied"] = None
        body["clusterApi"] = []
    return body


# Values at and past every limit, of every JSON type, for each kind of field.
_NAMES = ["edge-1", "", "a" * 63, "a" * 64, "A", "-a", "a-", "a\n", "é", "a_b", 1, None, ["a"]]
_TIMES = ["2026-03-01T12:00:00Z", "2026-03-01T12:00:00.5Z", "2026-03-01T12:00:00.123456Z",
          "2026-03-01T12:00:00.1234567Z", "2026-03-01T12:00:00+05:30", "2026-03-01T12:00:00-00:00",
          "2026-03-01T12:00:00+24:00", "2026-03-01T12:00:00", "2026-03-01 12:00:00Z",
          "2026-02-30T00:00:00Z", "2026-03-01T12:00:60Z", "2026-03-01t12:00:00z", 1_700_000_000,
          "0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00", "2026-03-01T24:00:00Z",
          "2026-03-01T12:00Z", "+2026-03-01T12:00:00Z", "\uff12\uff10\uff12\uff16-03-01T12:00:00Z", None]
_BOOLS = [True, False, "true", 1, 0, None, "yes"]
_INTS = [0, 1, 1_000_000, 1_000_001, -1, 2.0, 2.5, "2", True, 10**30, 2**53, 2**53 + 1, None]
_FLOATS = [0, -0.0, 12.5, 600_000, 600_000.0001, -1e-9, 1e-320, 1e308, 0.1 + 0.2, "12", True,
           None, 10**25, 1e9, 1e9 + 1]
_QUANTITIES = ["4", "3500m", "8Gi", "1e3", "0.5", 2.5, 4, "", " 4 ", "4 ", "-1", "1Ei", "10001",
               "1e400", "a", True, None, "9" * 41, 1e300, "1.5Gi", "0", "1k", "0.1m", "4.0"]
_MESSAGES = ["", "x" * 512, "x" * 513, "x" * 1024, "x" * 1025, "fetch https://user:tok@git/x failed",
             "token=abc", "é\u2028", "\ud800", "\x00", 5, None]
_COMMITS = ["a" * 7, "a" * 6, "a" * 64, "a" * 65, "A" * 7, "g" * 7, "a" * 7 + "\n", None, 7]
_STATES = ["Ready", "Stalled", "Reconciling", "ready", "X", 1, None]
_REASONS = ["ApplySucceeded", "a", "", "A" * 64, "A" * 65, "A-b", None]
_REFUSALS = ["EmptyDesiredSet", "ProtectedKind", "Nope", None]
_HEALTH = ["Unschedulable", "CallerOnly", "Nope", "", None]
_ARCHES = ["amd64", "arm64", "x86", None]
_COMPONENTS = ["shop/web", "shop/db", "shop", "Shop/web", "shop/web/x", "shop/web\n", "/web", ""]
_ANY = [None, {}, [], "", 0, [{}], {"a": 1}]

# (where, values): ``where`` is a path into the report; "+" appends a copy of the
# list's first entry (a duplicate key), "*N" makes the list N copies long, "-" deletes.
_EDITS: list[tuple[tuple[Any, ...], list[Any]]] = [
    (("cluster",), _NAMES), (("agentTime",), _TIMES), (("sync", "state"), _STATES),
    (("sync", "reason"), _REASONS), (("sync", "message"), _MESSAGES), (("sync",), _ANY),
    (("applied",), [*_ANY, {"commit": "a" * 7}]), (("applied", "commit"), _COMMITS),
    (("applied", "generation"), _INTS), (("attempted",), _COMMITS),
    (("nodes", 0, "name"), [*_NAMES, "n" * 253, "n" * 254]), (("nodes", 0, "arch"), _ARCHES),
    (("nodes", 0, "ready"), _BOOLS), (("nodes", 0, "allocatableCpu"), _QUANTITIES),
    (("nodes", 0, "freeCpu"), _QUANTITIES), (("nodes", 0, "allocatableMemory"), _QUANTITIES),
    (("nodes", 0, "freeMemory"), _QUANTITIES), (("nodes",), ["+", "*500", "*501", *_ANY]),
    (("components", 0, "component"), _COMPONENTS), (("components", 0, "healthy"), _BOOLS),
    (("components", 0, "readyReplicas"), _INTS), (("components", 0, "desiredReplicas"), _INTS),
    (("components", 0, "completed"), _BOOLS), (("components", 0, "message"), _MESSAGES),
    (("components", 0, "reason"), _HEALTH), (("components",), ["+", *_ANY]),
    (("latencies", 0, "to"), _NAMES), (("latencies", 0, "ms"), _FLOATS),
    (("latencies",), ["+", "*256", "*257", *_ANY]),
    (("traffic", 0, "component"), _COMPONENTS), (("traffic", 0, "region"), _NAMES),
    (("traffic", 0, "rps"), _FLOATS), (("traffic",), ["+", *_ANY]),
    (("refusals",), [[{"reason": "EmptyDesiredSet"}] * 33, [{"reason": "EmptyDesiredSet"}] * 32, *_ANY]),
    (("clusterApi",), [[{"name": "pool-1", "namespace": "capi"}], *_ANY]),
    (("extra",), [1, None]), (("agent_time",), ["2026-03-01T12:00:00Z"]),
    (("cluster",), ["-"]), (("sync",), ["-"]), (("agentTime",), ["-"]),
    (("nodes", 0, "arch"), ["-"]), (("components", 0, "healthy"), ["-"]),
]

# Whole-text edits: what no JSON serialiser writes but a hostile agent may send.
_TEXT_EDITS = [
    lambda t: t,
    lambda t: '{"cluster": "edge-2", ' + t[1:],  # a duplicate key: the later one counts
    lambda t: t[:-1] + ', "cluster": "edge-2"}',
    lambda t: "\ufeff" + t,
    lambda t: t + " \n",
    lambda t: t + "x",
    lambda t: t[:-1],
    lambda t: t.replace('"ms": 12.5', '"ms": NaN'),
    lambda t: t.replace('"ms": 12.5', '"ms": Infinity'),
    lambda t: t.replace('"ms": 12.5', '"ms": 1e999'),
    lambda t: t.replace('"ms": 12.5', '"ms": 012'),
    lambda t: t.replace('"generation": 0', '"generation": ' + "9" * 25),
    lambda t: t.replace('"rps": 40.0', '"rps": [[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]'),
    lambda t: t.replace('"all applied"', '"all \\u00e9"'),
    lambda t: t.replace('"all applied"', '"\\ud800"'),
    lambda t: t.replace('"all applied"', '"\\ud83d\\ude00"'),
]


def _edited(doc: dict[str, Any], where: tuple[Any, ...], value: Any) -> None:
    *parents, last = where
    target: Any = doc
    for key in parents:
        if isinstance(target, dict) and key in target:
            target = target[key]
        elif isinstance(target, list) and isinstance(key, int) and key < len(target):
            target = target[key]
        else:
            return
    if value == "-":
        if isinstance(target, dict):
            target.pop(last, None)
    elif value == "+" or (isinstance(value, str) and value.startswith("*")):
        items = target.get(last) if isinstance(target, dict) else None
        if isinstance(items, list) and items:
            target[last] = items + [items[0]] if value == "+" else [items[0]] * int(value[1:])
    elif isinstance(target, dict):
        target[last] = value
    elif isinstance(target, list) and isinstance(last, int) and last < len(target):
        target[last] = value


@st.composite
def _bodies(draw: st.DrawFn) -> bytes:
    doc = _base(draw(st.integers(0, 5)))
    for _ in range(draw(st.integers(0, 2))):
        where, values = draw(st.sampled_from(_EDITS))
        _edited(doc, where, draw(st.sampled_from(values)))
    text = json.dumps(doc, ensure_ascii=draw(st.booleans()))
    text = draw(st.sampled_from(_TEXT_EDITS))(text)
    return text.encode("utf-8", "surrogatepass")


def _same_as_careful(body: bytes) -> bool:
    """Asserts the fast way agrees with the careful one on ``body``; whether it took it."""
    fast = report_fast.record_of(body)
    careful = _outcome(_careful, body)
    if fast is not None:
        assert careful == ("stored", encode_entry(ReportEntry(fast.cluster, 0.0, fast)))
        _decodes_to_itself(fast)
    assert _outcome(report_record, body) == careful
    if careful[0] == "stored":
        _decodes_to_itself(_careful(body))
    return fast is not None


def _decodes_to_itself(record: ReportRecord) -> None:
    """The lead that proposed a batch applies the entries it encoded, the others decode
    the bytes (``ReplicatedKB.proposing``): both must be the same, to the type of every
    number (encoded again, an int and a float differ)."""
    entry = ReportEntry(record.cluster, 1_764_590_400.123456, record, -0.25)
    decoded = unpack_entries(pack_entries([encode_entry(entry)]))
    assert decoded == [entry]
    assert encode_entry(decoded[0]) == encode_entry(entry)


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_bodies())
def test_the_fast_way_accepts_and_refuses_what_the_careful_way_does(body: bytes) -> None:
    _same_as_careful(body)


def test_every_single_edit_agrees_with_the_careful_way() -> None:
    """Each value of each field alone (every limit, both sides), on every base report and
    with every text edit: exhaustive where the property test above samples."""
    taken = 0
    for variant in range(6):
        for where, values in _EDITS:
            for value in values:
                doc = _base(variant)
                _edited(doc, where, value)
                taken += _same_as_careful(json.dumps(doc).encode("utf-8", "surrogatepass"))
        for edit in _TEXT_EDITS:
            taken += _same_as_careful(edit(json.dumps(_base(variant))).encode("utf-8", "surrogatepass"))
    assert taken > 500  # the limits' accepted sides take the fast way, not only refusals


@pytest.mark.parametrize("variant", range(6))
def test_the_reports_agents_send_take_the_fast_way(variant: int) -> None:
    """Not a fast path that never runs: every shape of everyday report takes it."""
    for ensure_ascii in (True, False):
        body = json.dumps(_base(variant), ensure_ascii=ensure_ascii).encode()
        assert report_fast.record_of(body) is not None
