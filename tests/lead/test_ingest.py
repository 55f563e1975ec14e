"""The report ingest path in one process: the fast parse refuses what the careful one
refuses (cached quantities included), tokens are created in bulk, the Raft tick gaps
are measured, a graph built with the collector off is frozen rather than walked, a
Raft entry larger than one append message reaches every lead, and packed report batches
leave every lead with the same Knowledge Base."""

from __future__ import annotations

import gc
import json
import pickle
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from qonnect_gitops.kb import KnowledgeBase, ReportEntry, ReportRecord
from qonnect_gitops.kb.records import encode_entry, pack_entries, unpack_entries
from qonnect_gitops.lead.http import parse_json, parse_report, report_record
from qonnect_gitops.lead.httpd import HTTPError
from qonnect_gitops.lead.raft.batcher import ReportBatcher
from qonnect_gitops.lead.raft.collector import FREEZE_YOUNG_ABOVE, GcPauses, young_objects
from qonnect_gitops.lead.raft.node import RaftNode
from qonnect_gitops.lead.raft.secret import RaftSecret
from qonnect_gitops.lead.raft.state import MAX_PROPOSED_BATCHES, ReplicatedKB
from qonnect_gitops.lead.raft.timing import TickGaps
from qonnect_gitops.lead.tokens import TokenStore, create_tokens
from qonnect_gitops.model.report import AgentReport, _quantity_units
from tests.lead.harness import report
from tests.ports import free_ports


def _careful(body: bytes) -> AgentReport | str:
    """What the careful path alone says: the report, or the refusal's message."""
    try:
        return AgentReport.model_validate(parse_json(body))
    except HTTPError as exc:
        return exc.message
    except ValueError:
        return "invalid"


def _answer(body: bytes) -> AgentReport | str:
    try:
        return parse_report(body)
    except HTTPError as exc:
        assert exc.status == 400
        return exc.message


def test_a_valid_report_parses_to_the_same_model() -> None:
    body = json.dumps(report("edge-1")).encode()
    assert parse_report(body) == AgentReport.model_validate(json.loads(body))


@pytest.mark.parametrize("edit", [
    lambda b: b.replace(b'"ms": 12.5', b'"ms": NaN'),
    lambda b: b.replace(b'"ms": 12.5', b'"ms": Infinity'),
    lambda b: b.replace(b'"ms": 12.5', b'"ms": 1e999'),
    lambda b: b.replace(b'"rps": 40.0', b'"rps": 123456789012345678901234567890'),
    lambda b: b.replace(b'"generation": 0', b'"generation": 1e999'),
    lambda b: b.replace(b'"all applied"', b'"\\ud800"'),
    lambda b: b.replace(b'"all applied"', b'"\xed\xa0\x80"'),  # a surrogate as raw bytes
    lambda b: b.replace(b'"cluster": "edge-1"', b'"cluster": "edge-1", "extra": 1'),
    lambda b: b[:-1],
    lambda b: b"\xef\xbb\xbf" + b,  # a byte-order mark
    lambda b: b.replace(b'"allocatableCpu": "4"', b'"allocatableCpu": "1e400"'),
])
def test_the_fast_parse_refuses_what_the_careful_one_refuses(edit: object) -> None:
    body = edit(json.dumps(report("edge-1")).encode())  # type: ignore[operator]
    careful = _careful(body)
    answer = _answer(body)
    if isinstance(careful, AgentReport):
        assert answer == careful
    else:
        assert isinstance(answer, str)
        if careful != "invalid":
            assert answer == careful  # worded as before: the careful path words it


@pytest.mark.parametrize(("cpu", "memory"), [
    ("4", "8Gi"), ("2500m", "6Gi"), ("0.5", "1500m"), ("1e3", "1e9"), (7, 123456789), ("1k", "1M"),
])
def test_cached_quantities_equal_a_fresh_parse(cpu: object, memory: object) -> None:
    """Quantities are cached by text (``model.report._quantity_units``): a report read
    through the cache holds what one read without it holds."""
    body = report("edge-1")
    body["nodes"][0].update(allocatableCpu=cpu, freeCpu=cpu, allocatableMemory=memory,
                            freeMemory=memory)
    raw = json.dumps(body).encode()
    _quantity_units.cache_clear()
    fresh = parse_report(raw)
    again = parse_report(raw)  # now from the cache
    assert again == fresh and again.nodes[0].allocatable_cpu == fresh.nodes[0].allocatable_cpu
    assert _quantity_units.cache_info().hits > 0


@pytest.mark.parametrize("value", ["10001", "1e400", "2Pi", "-1", "abc", "1" * 41])
def test_a_refused_quantity_is_refused_every_time(value: str) -> None:
    """Errors are not cached: the second report with the same bad value is refused alike."""
    body = report("edge-1")
    body["nodes"][0]["allocatableCpu"] = value
    raw = json.dumps(body).encode()
    first, second = _answer(raw), _answer(raw)
    assert isinstance(first, str) and first == second and "nodes.0.allocatableCpu" in first


@pytest.mark.parametrize("field", ["nodes", "components", "latencies", "traffic"])
def test_duplicate_entries_in_a_list_are_refused(field: str) -> None:
    body = report("edge-1")
    body[field] = body[field][:1] * 2
    answer = _answer(json.dumps(body).encode())
    assert isinstance(answer, str) and f"{field}: duplicate entries" in answer
    body[field] = body[field][:1]  # one entry: accepted
    assert isinstance(_answer(json.dumps(body).encode()), AgentReport)


def test_tokens_created_in_bulk_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    names = [f"edge-{i}" for i in range(50)]
    tokens = create_tokens(path, names)
    assert len(set(tokens)) == 50
    store = TokenStore(path)
    assert [store.subject(t) for t in tokens] == names
    assert oct(path.stat().st_mode & 0o777) == "0o600"


def test_tick_gaps_measure_the_longest_and_recent_stall() -> None:
    now = [1000.0 * 60]
    gaps = TickGaps(warn_above=0.2, clock=lambda: now[0])
    for step in (0.05, 0.05, 1.5, 0.05):
        now[0] += step
        gaps.mark()
    # The first mark only starts the clock: gaps are 0.05, 1.5, 0.05.
    assert gaps.longest == pytest.approx(1.5)
    assert gaps.stalls == 1
    assert gaps.recent() == pytest.approx(1.5)
    for _ in range(2 * 60 * 20 + 20):  # two minutes of regular ticks later it is not recent
        now[0] += 0.05
        gaps.mark()
    assert gaps.recent() == pytest.approx(0.05)
    assert gaps.longest == pytest.approx(1.5)
    assert gaps.stalls == 1


@pytest.fixture
def gc_recorder() -> Iterator[None]:
    """Remove the process's ``GcPauses`` (and its thresholds) after the test: left
    installed, it logs into pytest's closed streams at exit."""
    thresholds = gc.get_threshold()
    yield
    installed = GcPauses._installed
    if installed is not None:
        gc.callbacks.remove(installed._on_gc)
        GcPauses._installed = None
    gc.set_threshold(*thresholds)


@pytest.mark.usefixtures("gc_recorder")
def test_a_graph_built_with_the_collector_off_is_frozen_not_walked() -> None:
    """The first collection after a ``gc.disable()`` region (a goals load, a plan) would
    walk everything built meanwhile with every thread stopped; ``GcPauses`` freezes it."""
    pauses = GcPauses.install()
    before, frozen_before = pauses.young_frozen, gc.get_freeze_count()
    gc.disable()
    try:
        graph = [[i] for i in range(FREEZE_YOUNG_ABOVE + 10_000)]
    finally:
        gc.enable()
    try:
        gc.collect(0)  # what the next allocation would set off
        assert pauses.young_frozen == before + 1
        assert gc.get_freeze_count() >= frozen_before + len(graph)
        # An ordinary young generation is collected as usual, not frozen.
        gc.collect(0)
        assert pauses.young_frozen == before + 1
    finally:
        del graph
        gc.unfreeze()


@pytest.mark.usefixtures("gc_recorder")
def test_a_graph_built_while_an_older_one_was_freed_is_frozen_too() -> None:
    """The collector's young count is allocations minus deallocations of any generation:
    a plan that frees the last cycle's plan as it builds its own leaves a large young
    generation behind a small count. ``GcPauses`` counts the generation itself, freezes
    it, and what it froze is freed by reference counting once dropped."""
    pauses = GcPauses.install()
    size = FREEZE_YOUNG_ABOVE + 10_000
    old = [[i] for i in range(size)]  # the last cycle's plan
    gc.collect()
    gc.disable()
    try:
        new = [[i] for i in range(size)]
        del old  # freed meanwhile: the count goes down by as much
    finally:
        gc.enable()
    before, frozen_before = pauses.young_frozen, gc.get_freeze_count()
    assert gc.get_count()[0] < pauses.freeze_young_above < young_objects(0)
    try:
        gc.collect(0)
        assert pauses.young_frozen == before + 1
        assert gc.get_freeze_count() >= frozen_before + size
        frozen = gc.get_freeze_count()
        del new
        assert gc.get_freeze_count() <= frozen - size  # freed without a collection
    finally:
        gc.unfreeze()


@pytest.mark.usefixtures("gc_recorder")
def test_an_entry_larger_than_one_append_message_reaches_every_lead(tmp_path: Path) -> None:
    """A Raft entry of hundreds of KiB (a big report batch; at fleet size the goals and
    plan entries are megabytes) is applied by every follower at once. pysyncobj sends an
    entry over 64 KiB in chunks and marks one "finish" too early (it measures the command,
    not the pickled entry, which is larger: protocol 2 doubles every byte over 0x7f): the
    follower logs ``failed _onTick ... pickle data was truncated`` for each early
    "finish" and unpickles the entry at the last chunk. Noisy but harmless; this holds
    that the entry still arrives without waiting for a full dump."""
    with _three_leads(tmp_path) as (nodes, leader):
        bodies = [report(f"edge-{i}") for i in range(300)]
        for body in bodies:  # text beyond ASCII: pysyncobj's pickled entry outgrows it most
            body["components"][0]["message"] = "é" * 400
        entries = [ReportEntry(body["cluster"], 1e9 + i, ReportRecord.from_report(
            parse_report(json.dumps(body).encode())), 0.0) for i, body in enumerate(bodies)]
        assert len(pickle.dumps(entries)) > 2**16 * 4
        leader.propose(10, leader.state.reports, entries)  # the list form: no Commands method sends it
        _wait_all_hold(nodes, 300)  # within far less than a compaction would take


def test_packed_batches_leave_every_lead_with_the_same_kb(tmp_path: Path) -> None:
    """Reports through the batcher (MessagePack batches, split by encoded bytes) are
    committed, and every lead, applying the same bytes, holds the same Knowledge Base,
    which its full dump carries whole: a follower may take over at any moment."""
    with _three_leads(tmp_path) as (nodes, leader):
        batcher = ReportBatcher(leader, max_bytes=4096)
        try:
            bodies = [report(f"edge-{i}", agent_time=1e9 + i, nodes=i % 4) for i in range(120)]
            for i, body in enumerate(bodies[::3]):
                body["sync"]["message"] = f"fetch https://agent:secret{i}@git.example/x failed"
                body["refusals"] = [{"reason": "EmptyDesiredSet", "message": "é" * i}]
            waiters = [batcher.submit(ReportEntry(body["cluster"], 2e9 + i,
                                                  report_record(json.dumps(body).encode()), 0.5))
                       for i, body in enumerate(bodies)]
            for waiter in waiters:
                assert waiter.wait(10) and waiter.verdict is not None and waiter.verdict.stored
            assert batcher.batches_sent >= 120 * 280 // 4096  # split by bytes, not only by count
            _wait_all_hold(nodes, 120)
            dumps = [n.state.reader().read(lambda kb: kb.to_dict()) for n in nodes]
            assert dumps[0] == dumps[1] == dumps[2]
            assert "secret" not in json.dumps(dumps[0])  # redacted before it entered the log
            restored = KnowledgeBase.from_dict(dumps[1])
            assert restored.to_dict() == dumps[1]
            assert restored.reports == nodes[1].state.kb.reports
            # The leader applied its own entries, the followers decoded the bytes: the same.
            assert nodes[0].state.kb.reports == nodes[1].state.kb.reports == nodes[2].state.kb.reports
            assert not leader.state._proposed  # every proposed batch was answered and forgotten
        finally:
            batcher.stop()


def _entries(count: int, offset: int = 0) -> list[ReportEntry]:
    return [ReportEntry(f"edge-{i}", 2e9 + i, report_record(json.dumps(report(f"edge-{i}", 1e9 + i)).encode()),
                        0.5) for i in range(offset, offset + count)]


def test_a_lead_applies_a_batch_it_proposed_from_the_entries_it_encoded() -> None:
    """The proposing lead does not decode its own batch again, and ends with the Knowledge
    Base of a lead that decoded it; bytes it did not propose (or proposed and already
    applied) are decoded."""
    own, other = ReplicatedKB(), ReplicatedKB()
    heard: list[list[ReportEntry]] = []
    own.report_listener = lambda entries, verdicts: heard.append(entries)
    entries = _entries(5)
    packed = pack_entries([encode_entry(e) for e in entries])
    own.proposing(packed, entries)
    own.reports(packed, _doApply=True)
    other.reports(packed, _doApply=True)
    assert heard[0] is entries  # applied as encoded, not decoded
    assert own.kb.to_dict() == other.kb.to_dict()
    assert own.kb.reports == other.kb.reports
    later = _entries(5, offset=5)
    again = pack_entries([encode_entry(e) for e in later])
    own.reports(again, _doApply=True)  # never proposed here: decoded
    assert heard[1] == later and heard[1] is not later
    own.reports(packed, _doApply=True)  # the same bytes once more: remembered only once
    assert heard[2] == entries and heard[2] is not entries


def test_proposed_batches_are_remembered_within_a_bound() -> None:
    """A batch whose answer never comes does not stay: the oldest go past the bound, and an
    answered one (applied or failed) is forgotten at once."""
    state = ReplicatedKB()
    entries = _entries(1)
    batches = [pack_entries([encode_entry(ReportEntry("edge-0", 2e9 + i, entries[0].record, 0.0))])
               for i in range(MAX_PROPOSED_BATCHES + 10)]
    for packed in batches:
        state.proposing(packed, entries)
    assert len(state._proposed) == MAX_PROPOSED_BATCHES
    assert batches[0] not in state._proposed and batches[-1] in state._proposed
    state.settled(batches[-1])
    assert batches[-1] not in state._proposed


@contextmanager
def _three_leads(tmp_path: Path) -> Iterator[tuple[list[RaftNode], RaftNode]]:
    """Three in-process Raft nodes on loopback, once one of them leads: (all, leader)."""
    addrs = [f"127.0.0.1:{p}" for p in free_ports(3)]
    secret = RaftSecret.generate()  # the group's: every node seals and opens with it
    nodes = [RaftNode(addr, addrs, tmp_path / f"n{i}", secret=secret) for i, addr in enumerate(addrs)]
    try:
        deadline = time.monotonic() + 20
        while not any(n.is_leader() for n in nodes):
            assert time.monotonic() < deadline, "no leader"
            time.sleep(0.05)
        yield nodes, next(n for n in nodes if n.is_leader())
    finally:
        for n in nodes:
            n.destroy()


def _wait_all_hold(nodes: list[RaftNode], count: int) -> None:
    """Until every node's KB holds ``count`` reports (10 s at most)."""
    deadline = time.monotonic() + 10
    while not all(len(n.state.reader().read(lambda kb: kb.reports)) == count for n in nodes):
        assert time.monotonic() < deadline, [len(n.state.kb.reports) for n in nodes]
        time.sleep(0.05)


def test_raft_pickles_bytes_as_bytes_and_reads_what_older_leads_pickled() -> None:
    """pysyncobj pickles messages, commands and dumps at ``RAFT_PICKLE_PROTOCOL``, which
    writes a report batch's bytes as they are (protocol 2, pysyncobj's own, wrote two
    bytes for each over 0x7f, and a batch is pickled twice on its way), and still reads
    what a lead of an older version pickled at 2."""
    import pysyncobj.pickle as pysyncobj_pickle

    from qonnect_gitops.lead.raft.pickling import RAFT_PICKLE_PROTOCOL

    batch = pack_entries([encode_entry(e) for e in _entries(20)])
    command = pysyncobj_pickle.dumps((0, (batch,), {}))
    message = pysyncobj_pickle.dumps({"type": "append_entries", "entries": [(command, 7, 1)]})
    assert len(message) < len(batch) + 200  # the bytes once, not inflated
    assert len(pickle.dumps({"entries": [(pickle.dumps((0, (batch,), {}), protocol=2), 7, 1)]},
                            protocol=2)) > 1.3 * len(batch)  # what protocol 2 made of it
    assert RAFT_PICKLE_PROTOCOL > 2
    older = pickle.dumps({"type": "append_entries",
                          "entries": [(pickle.dumps((0, (batch,), {}), protocol=2), 7, 1)]}, protocol=2)
    read = pysyncobj_pickle.loads(older)
    assert pysyncobj_pickle.loads(read["entries"][0][0]) == (0, (batch,), {})
    assert unpack_entries(pysyncobj_pickle.loads(command)[1][0]) == _entries(20)


def test_a_follower_is_sent_each_entry_once_while_appends_are_in_flight(tmp_path: Path) -> None:
    """With many appends in flight (every lead proposing batches under load), the leader
    sends each entry to each follower once. pysyncobj moves a follower's next index back
    to whatever an acknowledgement names, so a late acknowledgement made the leader send
    the entries after it again; the follower then deleted them from its journal, appended
    them anew, and logged ``truncating already-applied log entries`` when it had applied
    them. Counted here as the follower's journal deletions, which only a resend causes."""
    with _three_leads(tmp_path) as (nodes, leader):
        deletions: dict[int, int] = {i: 0 for i in range(len(nodes))}
        for i, node in enumerate(nodes):
            delete = node.sync._SyncObj__deleteEntriesFrom  # pysyncobj 0.3's name

            def counted(index: int, _i: int = i, _delete: Any = delete) -> None:
                deletions[_i] += 1
                _delete(index)

            node.sync._SyncObj__deleteEntriesFrom = counted
        answered = threading.Semaphore(0)
        batches = 300
        for b in range(batches):
            entries = _entries(3, offset=3 * b)
            leader.state.reports(pack_entries([encode_entry(e) for e in entries]),
                                 callback=lambda result, err: answered.release())
        for _ in range(batches):
            assert answered.acquire(timeout=20)
        _wait_all_hold(nodes, 3 * batches)
        assert deletions == {i: 0 for i in range(len(nodes))}
        assert nodes[0].state.kb.reports == nodes[1].state.kb.reports == nodes[2].state.kb.reports
