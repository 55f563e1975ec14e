"""The KB keeps the plan's unmet goals with the placement in force, through snapshots."""

from __future__ import annotations

from qonnect_gitops.kb.state import MAX_UNMET, KnowledgeBase

UNMET = [{"component": "shop/web", "goal": "latency", "message": "3 of 3 replica(s) fit nowhere"}]


def test_unmet_is_recorded_with_the_decision_even_when_the_placement_is_unchanged() -> None:
    kb = KnowledgeBase()
    assert kb.apply_plan({"shop/web": {"a": 1}}, {}, "goals-changed", "c1", 1, 10.0, UNMET) == 1
    assert kb.unmet == UNMET
    # Same placement, the goal now met: no new generation, but the unmet list follows.
    assert kb.apply_plan({"shop/web": {"a": 1}}, {}, "goals-changed", "c2", 1, 11.0) == 1
    assert kb.unmet == []
    kb.apply_plan({"shop/web": {"a": 1}}, {}, "goals-changed", "c3", 1, 12.0, UNMET * (MAX_UNMET + 5))
    assert len(kb.unmet) == MAX_UNMET
    again = KnowledgeBase.from_dict(kb.to_dict())
    assert again.unmet == kb.unmet
    old = kb.to_dict()
    del old["unmet"]  # a dump from before unmet was recorded
    assert KnowledgeBase.from_dict(old).unmet == []


def test_a_stale_term_changes_nothing() -> None:
    kb = KnowledgeBase()
    kb.apply_leader("lead-1", 5, 1.0)
    assert kb.apply_plan({"shop/web": {"a": 1}}, {}, "goals-changed", "c1", 4, 2.0, UNMET) == -1
    assert kb.unmet == []
