"""What a goals change would do, before it is merged (pure: files and observations in).

``preview(base_files, head_files, current, observe)`` validates the head, plans base and
head on the same observed state with the plan in force as the current placement, and
lists the components whose placement differs and the goals the head cannot meet. The
JSON and markdown renderings are what ``qonnect preview`` prints and what the leader
comments on a goals pull request.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from qonnect_gitops.model import (
    CurrentPlacement,
    Goals,
    GoalsError,
    Observed,
    Plan,
    load_goals,
)
from qonnect_gitops.model.limits import DEFAULT_TREE_LIMITS, TreeLimits
from qonnect_gitops.placement import plan as make_plan
from qonnect_gitops.render.describe import md_code, plan_markdown

MARKER = "<!-- qonnect-preview -->"
MAX_ERRORS = 50
MAX_ROWS = 200


@dataclass(frozen=True)
class Change:
    """A component whose replicas per cluster differ between base and head."""

    component: str
    before: dict[str, int]
    after: dict[str, int]


@dataclass(frozen=True)
class Preview:
    """What a goals change would do; ``stopped`` says why there is no answer (the preview
    ran out of its limits in the leader's sandbox: ``forge.sandbox``)."""

    valid: bool
    errors: tuple[str, ...] = ()
    changes: tuple[Change, ...] = ()
    unmet: tuple[dict[str, Any], ...] = ()
    base_valid: bool = True
    head_plan: Plan | None = field(default=None, compare=False)
    stopped: str | None = None


def preview(base_files: Mapping[str, bytes], head_files: Mapping[str, bytes], current: CurrentPlacement,
            observe: Callable[[Goals], Observed], limits: TreeLimits = DEFAULT_TREE_LIMITS) -> Preview:
    """Validate the head; plan base and head on ``observe(goals)`` with ``current`` in force.

    An invalid base (the change repairs it) is compared against the placement in force."""
    try:
        head = load_goals(dict(head_files), limits=limits)
    except GoalsError as exc:
        return Preview(valid=False, errors=tuple(str(p) for p in exc.problems))
    head_plan = make_plan(head, observe(head), current)
    try:
        base = load_goals(dict(base_files), limits=limits)
    except GoalsError:
        before, base_valid = dict(current.placements), False
    else:
        before, base_valid = make_plan(base, observe(base), current).placements(), True
    after = head_plan.placements()
    changes = tuple(
        Change(key, dict(before.get(key, {})), dict(after.get(key, {})))
        for key in sorted(set(before) | set(after))
        if {c: n for c, n in before.get(key, {}).items() if n} != {c: n for c, n in after.get(key, {}).items() if n}
    )
    return Preview(valid=True, changes=changes, unmet=unmet_items(head_plan), base_valid=base_valid,
                   head_plan=head_plan)


def unmet_items(p: Plan) -> tuple[dict[str, Any], ...]:
    """The goals a plan cannot meet: its ``unmet`` entries where the model has them, and
    replicas that fit nowhere."""
    items: list[dict[str, Any]] = []
    for entry in getattr(p, "unmet", ()) or ():
        dump = getattr(entry, "model_dump", None)
        items.append(dump(mode="json", by_alias=True) if dump else dict(entry))
    for u in p.unplaced:
        items.append({"component": u.component, "goal": "replicas", "replicas": u.replicas, "reason": u.reason})
    return tuple(items)


def current_from_plan_file(document: Mapping[str, Any] | None) -> CurrentPlacement:
    """The placement in force from a plan commit's decision document (``placement.yaml``
    and its shards as ``lead.reconcile.placement_document`` reads them; empty when absent).
    Raises ``ValueError`` for one that cannot be read: guessing "nothing runs" is wrong."""
    if document is None:
        return CurrentPlacement()
    try:
        previous = Plan.model_validate(document)
    except ValidationError as exc:
        raise ValueError(f"the plan in force is unreadable: {exc}") from exc
    return CurrentPlacement.model_validate({"placements": previous.placements(), "lastMoved": previous.last_moved})


def preview_json(p: Preview) -> str:
    """``{"valid", "errors", "changes", "unmet"}`` (and ``"stopped"`` for a preview that was)
    as sorted, indented JSON."""
    data: dict[str, Any] = {
        "valid": p.valid,
        "errors": list(p.errors),
        "changes": [{"component": c.component, "before": c.before, "after": c.after} for c in p.changes],
        "unmet": list(p.unmet),
    }
    if p.stopped is not None:
        data["stopped"] = p.stopped
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False)


def _where(placement: Mapping[str, int]) -> str:
    return ", ".join(f"{c}={n}" for c, n in sorted(placement.items()) if n) or "-"


def unmet_line(item: Mapping[str, Any]) -> str:
    """One unmet goal as a markdown list item, every part of it in a code span."""
    detail = item.get("reason") or item.get("detail") or item.get("message") or ""
    parts = [md_code(item.get("component", "?")), md_code(item.get("goal", "")) + ":", md_code(detail)]
    return "- " + " ".join(parts)


def preview_markdown(p: Preview, base: str | None = None, head: str | None = None) -> str:
    """The comment a goals pull request gets (one comment, updated in place: ``MARKER`` finds it).

    Everything that comes from the goals (problems, names, reasons) is in a code span
    (``render.describe.md_code``): no backtick, link, @mention or HTML in a pull request
    renders, or is posted live under the bot's name."""
    title = "stopped" if p.stopped is not None else "valid" if p.valid else "invalid"
    lines = [MARKER, f"### qonnect preview: {title}"]
    if base or head:
        lines += ["", f"Base {md_code((base or '?')[:12])}, head {md_code((head or '?')[:12])}."]
    if p.stopped is not None:
        lines += ["", md_code(p.stopped), "", "Nothing else was judged; the plan in force is unaffected."]
        return "\n".join(lines)
    if not p.valid:
        lines += ["", (f"The head does not validate ({len(p.errors)} problem{'s' if len(p.errors) != 1 else ''}); "
                       "merging it would leave the plan in force unchanged and report these:"), ""]
        lines += [f"- {md_code(e)}" for e in p.errors[:MAX_ERRORS]]
        if len(p.errors) > MAX_ERRORS:
            lines.append(f"- ... and {len(p.errors) - MAX_ERRORS} more")
        return "\n".join(lines)
    if not p.base_valid:
        lines += ["", "The base does not validate; the change is compared with the placement in force."]
    lines.append("")
    if p.changes:
        lines += [f"{len(p.changes)} component{'s' if len(p.changes) != 1 else ''} would change placement:", "",
                  "| Component | Before | After |", "|---|---|---|"]
        lines += [f"| {md_code(c.component, cell=True)} | {md_code(_where(c.before), cell=True)} | "
                  f"{md_code(_where(c.after), cell=True)} |" for c in p.changes[:MAX_ROWS]]
        if len(p.changes) > MAX_ROWS:
            lines.append(f"| ... | {len(p.changes) - MAX_ROWS} more | |")
    else:
        lines.append("No placement changes.")
    if p.unmet:
        lines += ["", "#### Goals the head cannot meet", ""]
        lines += [unmet_line(item) for item in p.unmet[:MAX_ROWS]]
    if p.head_plan is not None:
        lines += ["", "<details><summary>Placement at the head</summary>", "", plan_markdown(p.head_plan), "",
                  "</details>"]
    return "\n".join(lines)
