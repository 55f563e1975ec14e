"""``KnowledgeBase.apply_branch_heads``: the cluster branch heads every lead answers reports
with, recorded by the leader after its push or fetch."""

from __future__ import annotations

import pickle

from qonnect_gitops.kb import KnowledgeBase
from qonnect_gitops.lead.loop import heads_changes, heads_chunks
from tests.kb.transitions import T0

A, B, C = "a" * 40, "b" * 40, "c" * 64


def test_heads_are_recorded_moved_and_withdrawn() -> None:
    kb = KnowledgeBase()
    kb.apply_leader("lead-1", 3, T0)
    assert kb.apply_branch_heads({"edge-1": A, "edge-2": B}, 3)
    assert kb.branch_heads == {"edge-1": A, "edge-2": B}
    assert not kb.apply_branch_heads({"edge-1": A}, 3)  # nothing changed
    assert kb.apply_branch_heads({"edge-1": C, "edge-2": None, "edge-9": None}, 3)
    assert kb.branch_heads == {"edge-1": C}
    assert kb.branch_heads_term == 3


def test_a_deposed_leaders_late_entry_is_refused() -> None:
    kb = KnowledgeBase()
    kb.apply_leader("lead-1", 3, T0)
    kb.apply_branch_heads({"edge-1": A}, 3)
    kb.apply_leader("lead-2", 4, T0 + 1)
    assert not kb.apply_branch_heads({"edge-1": B}, 3)  # older than the newest leader
    assert kb.apply_branch_heads({"edge-1": C}, 4)
    assert kb.branch_heads == {"edge-1": C}
    # A record from a newer term stands against an older one even before the log saw
    # that leader's entry.
    assert kb.apply_branch_heads({"edge-1": A}, 6)
    assert not kb.apply_branch_heads({"edge-1": B}, 5)
    assert kb.branch_heads == {"edge-1": A}


def test_what_is_no_object_id_is_skipped() -> None:
    kb = KnowledgeBase()
    assert not kb.apply_branch_heads({"edge-1": "main", "edge-2": A.upper(), "edge-3": "a" * 39}, 1)
    assert kb.branch_heads == {}


def test_heads_survive_the_dump_and_a_dump_without_them_reads() -> None:
    kb = KnowledgeBase()
    kb.apply_branch_heads({"edge-1": A, "edge-2": C}, 2)
    data = pickle.loads(pickle.dumps(kb.capture().to_dict()))
    back = KnowledgeBase.from_dict(data)
    assert back.branch_heads == {"edge-1": A, "edge-2": C} and back.branch_heads_term == 2
    old = dict(data)
    del old["branchHeads"], old["branchHeadsTerm"]  # a dump written before the heads
    assert KnowledgeBase.from_dict(old).branch_heads == {}


def test_a_capture_does_not_move_with_later_heads() -> None:
    kb = KnowledgeBase()
    kb.apply_branch_heads({"edge-1": A}, 1)
    view = kb.capture()
    kb.apply_branch_heads({"edge-1": B, "edge-2": A}, 1)
    assert view.to_dict()["branchHeads"] == {"edge-1": A}


def test_changes_make_the_record_equal_what_is_published() -> None:
    recorded = {"edge-1": A, "edge-2": A, "edge-3": A}
    published = {"edge-1": A, "edge-2": B, "edge-4": C}
    changes = heads_changes(recorded, published)
    assert changes == {"edge-2": B, "edge-3": None, "edge-4": C}
    kb = KnowledgeBase()
    kb.apply_branch_heads(recorded, 1)
    for chunk in heads_chunks(changes, max_bytes=60):
        kb.apply_branch_heads(chunk, 1)
    assert kb.branch_heads == published
    assert heads_changes(published, published) == {}


def test_chunks_stay_within_their_size_and_keep_every_change() -> None:
    changes: dict[str, str | None] = {f"shop-{i:05d}": (A if i % 7 else None) for i in range(10_000)}
    chunks = heads_chunks(changes, max_bytes=45 * 1024)
    assert len(chunks) > 1
    assert {k: v for chunk in chunks for k, v in chunk.items()} == changes
    for chunk in chunks:
        assert len(pickle.dumps(chunk, protocol=2)) < 60 * 1024  # below pysyncobj's 64 KiB append
    assert heads_chunks({"x" * 100: A}, max_bytes=10) == [{"x" * 100: A}]  # one alone when larger
