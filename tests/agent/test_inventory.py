"""The inventory's JSON: the journal round-trips, an older agent's inventory still reads,
and anything the agent did not write is refused (``InventoryUnreadable``), never guessed at."""

from __future__ import annotations

import json

import pytest

from qonnect_gitops.agent.inventory import Inventory, PassPhase, PassRecord

A, B = "a" * 40, "b" * 40


def _keys(*names: str) -> set[tuple[str, str, str, str, str]]:
    return {("", "v1", "ConfigMap", "shop", n) for n in names}


def test_the_journal_round_trips_and_marks_positions_in_the_one_object_list() -> None:
    inv = Inventory(A, 3, 2, _keys("a", "b", "c", "d"), leaving=_keys("b"), arriving=_keys("d"),
                    pending=PassRecord(B, 4, 2, PassPhase.APPLY))
    doc = json.loads(inv.to_json())
    assert [k[4] for k in doc["objects"]] == ["a", "b", "c", "d"]  # an older agent reads every object
    assert doc["leaving"] == [1] and doc["arriving"] == [3]
    assert doc["pass"] == {"commit": B, "generation": 4, "term": 2, "phase": "apply"}
    again = Inventory.from_json(inv.to_json())
    assert again == inv and again.settled == _keys("a", "c") and again.floor == 4


def test_an_inventory_without_a_journal_reads_as_settled() -> None:
    text = json.dumps({"commit": A, "generation": 1, "term": 1, "objects": [list(k) for k in sorted(_keys("a"))]})
    inv = Inventory.from_json(text)
    assert inv.settled == _keys("a") and inv.pending is None and inv.floor == 1
    assert Inventory.from_json(inv.to_json()) == inv


@pytest.mark.parametrize("doc", [
    [], {"objects": [[1, 2, 3, 4, 5]]}, {"objects": [["", "v1", "ConfigMap", "shop"]]},
    {"commit": "HEAD"}, {"generation": 2**60}, {"generation": -1}, {"term": "3"}, {"generation": True},
    {"objects": [["", "v1", "ConfigMap", "s", "a"]], "leaving": [1]},
    {"objects": [["", "v1", "ConfigMap", "s", "a"]], "leaving": [0], "arriving": [0]},
    {"pass": {"commit": A, "phase": "later"}}, {"pass": {"commit": "x", "phase": "apply"}},
    {"pass": {"commit": A, "phase": "prune", "generation": 2**54}},
])
def test_what_the_agent_did_not_write_is_refused(doc: object) -> None:
    with pytest.raises(ValueError):
        Inventory.from_json(json.dumps(doc))
