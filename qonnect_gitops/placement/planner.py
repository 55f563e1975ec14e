"""``plan(goals, observed, current) -> Plan``: the placement decision of one cycle.

Pure and deterministic: it reads only its arguments (``observed.now`` is the clock),
iterates in sorted orders, and breaks ties by cluster name (index order). A cycle reads
as four stages, each in its own module:

1. evaluate (``cycle.py``, ``evaluate.py``): the fleet as seen now, every running replica
   charged to the ledger at today's size, filters and scores per component;
2. repair (``repair.py``): every running component checked against every hard goal;
   what breaks one is repaired now (cooldown and disruption budget do not apply);
3. optimise (``optimise.py``, ``stability.py``): new components placed and improved,
   then running ones moved only where the stability rules allow it;
4. explain (``explain.py``): the plan, every assignment scored and explained, every
   unmet goal listed with its reason.
"""

from __future__ import annotations

import gc

from qonnect_gitops.model.goals import Goals
from qonnect_gitops.model.observed import Observed
from qonnect_gitops.model.plan import CurrentPlacement, Plan
from qonnect_gitops.placement.cycle import Cycle
from qonnect_gitops.placement.explain import assemble
from qonnect_gitops.placement.optimise import biggest_first, place, place_fresh
from qonnect_gitops.placement.records import Work
from qonnect_gitops.placement.repair import (
    Verdict,
    assess,
    colocated,
    inspect,
    repair,
    verify,
)
from qonnect_gitops.placement.stability import hold, reschedule


def plan(goals: Goals, observed: Observed, current: CurrentPlacement) -> Plan:
    """Decide where every component runs this cycle, and explain why.

    Pure: the same arguments give the same ``Plan``; ``observed.now`` is the only clock.
    """
    # A plan allocates many small objects and no reference cycles worth collecting; the
    # cyclic collector would otherwise rescan the goals' large object graph repeatedly.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _run(Cycle(goals, observed, current))
    finally:
        if was_enabled:
            gc.enable()


def _run(cycle: Cycle) -> Plan:
    # 1. Evaluate: the Cycle charged and settled every running replica; classify every
    # component decided in this cycle (the others are carried from the last, carry.py).
    broken: list[Work] = []
    fresh: list[Work] = []
    candidates: list[Work] = []
    followers: list[Work] = []
    if not _classify_decided(cycle, broken, fresh, candidates, followers):
        _classify(cycle, broken, fresh, candidates, followers)
    # 2. Repair: whatever breaks a hard goal, biggest first (they are the hardest to fit),
    # once every one of them gave back what it gives up (room freed by a scale-down is
    # room for this cycle's repairs).
    assessed = {work.key: assess(cycle, work) for work in broken}
    for work in biggest_first(broken):
        repair(cycle, work, assessed=assessed[work.key])
    # 3. Optimise: new components, then running ones under the stability rules.
    place_fresh(cycle, biggest_first(fresh))
    for work in candidates:
        reschedule(cycle, work)
    # 3b. colocateWith: components go (or stay) where what they follow runs now.
    for work in _anchors_first(followers):
        follow(cycle, work)
    # 4. Explain.
    for work in cycle.decided_works():
        verify(cycle, work)
    result = assemble(cycle)
    cycle.remember(result.components)
    return result


def _classify(cycle: Cycle, broken: list[Work], fresh: list[Work], candidates: list[Work],
              followers: list[Work]) -> None:
    """Sort every component into its stage (in key order: a waiting component's repair
    reads the placement map as far as it was filled)."""
    decided = cycle.decided
    for key, work in cycle.works.items():
        if decided is not None and key not in decided:
            cycle.placement[key] = work.target  # carried as the last cycle kept it
            continue
        if work.component.colocate_with:
            followers.append(work)  # decided once what they follow is (step 3b)
            continue
        if work.fresh:
            fresh.append(work)
            continue
        verdict = inspect(cycle, work)
        if verdict == Verdict.REPAIR:
            broken.append(work)
        elif verdict == Verdict.WAITING:
            repair(cycle, work)  # keeps it where it is, and says which goal waits
        else:
            _keep(cycle, work, candidates)


def _classify_decided(cycle: Cycle, broken: list[Work], fresh: list[Work], candidates: list[Work],
                      followers: list[Work]) -> bool:
    """``_classify`` for a carried cycle, looking at the decided components only: the
    carried ones' placement is put in the map at once. Exactly ``_classify`` where no
    component waits: nothing else in it reads the map (``inspect`` and ``_keep`` do not),
    so when it is filled makes no difference. False (nothing done but ``inspect``, which
    changes nothing) where a component waits: ``_classify`` then does it in key order."""
    if cycle.decided is None:
        return False
    works = cycle.decided_works()
    verdicts: list[Verdict | None] = []
    for work in works:
        if work.component.colocate_with or work.fresh:
            verdicts.append(None)
            continue
        seen = inspect(cycle, work)
        if seen == Verdict.WAITING:
            return False
        verdicts.append(seen)
    cycle.placement.update(cycle.carried_placement())
    for work, verdict in zip(works, verdicts):
        if work.component.colocate_with:
            followers.append(work)
        elif work.fresh:
            fresh.append(work)
        elif verdict == Verdict.REPAIR:
            broken.append(work)
        else:
            _keep(cycle, work, candidates)
    return True


def _anchors_first(followers: list[Work]) -> list[Work]:
    """Followers after the followers they follow (the loader refuses cycles)."""
    by_key = {w.key: w for w in followers}
    done: set[str] = set()
    out: list[Work] = []
    for w in followers:
        _visit_anchors(w, by_key, done, out)
    return out


def _visit_anchors(w: Work, by_key: dict[str, Work], done: set[str], out: list[Work]) -> None:
    """Append ``w`` to ``out`` after the followers it follows. A function of the module, not
    a closure calling itself: that closure was a reference cycle holding every follower,
    and the lead freezes what a plan leaves (lead/raft.py ``GcPauses``), so each plan's
    cycle stayed for the life of the process."""
    if w.key in done:
        return
    done.add(w.key)
    for anchor in w.component.colocate_with:
        if anchor in by_key:
            _visit_anchors(by_key[anchor], by_key, done, out)
    out.append(w)


def follow(cycle: Cycle, work: Work) -> None:
    """Place, keep or repair a ``colocateWith`` component on the clusters where every
    component it follows runs; it is never rescheduled on its own (it moves with them)."""
    beside = colocated(cycle, work.component)
    if work.fresh:
        place(cycle, work, beside)
        return
    verdict = inspect(cycle, work)
    if verdict == Verdict.OK and all(beside[i] for i in work.current):
        work.target = work.current
        cycle.placement[work.key] = work.target
        return
    repair(cycle, work, beside)


def _keep(cycle: Cycle, work: Work, candidates: list[Work]) -> None:
    """A running component that meets every hard goal: kept as it is, or a candidate for
    rescheduling once its cooldown has passed."""
    work.target = work.current  # not changed in place: a move makes a new target
    cycle.placement[work.key] = work.target
    keep = hold(cycle, work)
    if keep is None:
        candidates.append(work)
    else:
        work.keep = keep
