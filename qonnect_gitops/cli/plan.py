"""``qonnect plan DIR [--observed FILE] [--current FILE] [--format table|json|markdown]``:
show where the planner would place every component, and why."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from qonnect_gitops.cli._limits import add_goals_limit_arguments, goals_limits
from qonnect_gitops.cli.table import format_table

if TYPE_CHECKING:
    from qonnect_gitops.model.plan import Plan


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "plan",
        help="show the placement the planner would choose",
        description="Plan a goals repository: every component's clusters and replicas with "
        "the reason, what moves, and what fits nowhere. Exit 1 on invalid input.",
    )
    parser.add_argument("dir", help="the goals tree")
    parser.add_argument("--observed", metavar="FILE", help="YAML snapshot of the live fleet")
    parser.add_argument("--current", metavar="FILE", help="JSON placements of an earlier plan plus lastMoved")
    parser.add_argument("--format", choices=("table", "json", "markdown"), default="table")
    add_goals_limit_arguments(parser)
    parser.set_defaults(handler=run)


def _rows(p: Plan) -> list[list[object]]:
    from qonnect_gitops.render.describe import score_text

    rows: list[list[object]] = []
    for key, cp in p.components.items():
        for a in cp.assignments:
            rows.append([key, a.cluster, a.replicas, score_text(a.score), a.reason])
        for d in cp.draining:
            rows.append([key, d.cluster, f"-{d.replicas} (draining)", "-", d.reason])
    return rows


def plan_table(p: Plan) -> str:
    """The plan for a terminal: assignments, moves, unplaced replicas, unmet goals."""
    head = f"decision: {p.reason}" + (f" ({len(p.unmet)} goal(s) not met, see UNMET)" if p.unmet else "")
    out = [head, format_table(("COMPONENT", "CLUSTER", "REPLICAS", "SCORE", "WHY"), _rows(p))]
    if p.moves:
        out += ["", format_table(
            ("COMPONENT", "FROM", "TO", "REPLICAS", "REASON", "DETAIL"),
            [[m.component, m.source, m.target, m.replicas, m.reason, m.detail] for m in p.moves],
        )]
    if p.unplaced:
        out += ["", format_table(
            ("UNPLACED", "REPLICAS", "CPU", "MEMORY", "ARCH", "NEAR", "WHY"),
            [[u.component, u.replicas, u.cpu, u.memory, ",".join(u.architectures), u.near, u.reason] for u in p.unplaced],
        )]
    if p.unmet:
        out += ["", format_table(("UNMET", "GOAL", "WHY"), [[u.component, u.goal, u.message] for u in p.unmet])]
    return "\n".join(out)


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def run(args: argparse.Namespace) -> int:
    # Imported here, not with the module: `qonnect --help` builds this parser too.
    from qonnect_gitops.model import GoalsError, load_goals, read_directory
    from qonnect_gitops.model.observed import empty_observation, load_observed
    from qonnect_gitops.model.plan import CurrentPlacement, load_current
    from qonnect_gitops.placement import plan as make_plan
    from qonnect_gitops.render.describe import plan_json, plan_markdown

    try:
        limits = goals_limits(args)
        goals = load_goals(read_directory(args.dir, limits), limits=limits)
        observed = (
            load_observed(args.observed, _read(args.observed), goals)
            if args.observed
            else empty_observation(datetime.now(UTC))  # the shell owns the clock
        )
        current = load_current(args.current, _read(args.current), goals) if args.current else CurrentPlacement()
    except GoalsError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"qonnect plan: {exc}", file=sys.stderr)
        return 1
    for problem in goals.warnings:
        print(f"warning: {problem}", file=sys.stderr)
    p = make_plan(goals, observed, current)
    if args.format == "json":
        print(plan_json(p))
    elif args.format == "markdown":
        print(plan_markdown(p))
    else:
        print(plan_table(p))
    return 0
