"""``qonnect plan DIR [--observed FILE] [--current FILE] [--format table|json|markdown]``:
show where the planner would place every component, and why."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from typing import Any

from qonnect_gitops.cli.table import format_table
from qonnect_gitops.model import GoalsError, Goals, load_goals, read_directory
from qonnect_gitops.model.errors import Problem
from qonnect_gitops.model.observed import Observed, empty_observation
from qonnect_gitops.model.plan import CurrentPlacement, Plan
from qonnect_gitops.model.yamlpos import parse_yaml, validate_document
from qonnect_gitops.placement import plan as make_plan


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
    parser.set_defaults(handler=run)


def load_observed(path: str, raw: bytes, goals: Goals) -> Observed:
    """Parse and check an observed snapshot; GoalsError names file, line and field."""
    doc = parse_yaml(path, raw)[0]
    if not isinstance(doc.data, dict):
        raise GoalsError([doc.problem((), "expected a mapping with now, clusters, latencies, traffic")])
    observed = validate_document(Observed, doc)
    regions = {c.spec.region for c in goals.clusters.values()} | set(goals.fleet.spec.regions)
    components = {c.key for c in goals.components()}
    problems: list[Problem] = []
    for name in observed.clusters:
        if name not in goals.clusters:
            problems.append(doc.problem(("clusters", name), f"unknown cluster '{name}'", key=True))
    for i, lat in enumerate(observed.latencies):
        for field, end in (("from", lat.from_), ("to", lat.to)):
            if end not in goals.clusters and end not in regions:
                problems.append(doc.problem(("latencies", i, field), f"unknown cluster or region '{end}'"))
    for i, t in enumerate(observed.traffic):
        if t.component not in components:
            problems.append(doc.problem(("traffic", i, "component"), f"unknown component '{t.component}'"))
        if t.region not in regions:
            problems.append(doc.problem(("traffic", i, "region"), f"unknown region '{t.region}'"))
    for i, key in enumerate(observed.completed_jobs):
        if key not in components:
            problems.append(doc.problem(("completedJobs", i), f"unknown component '{key}'"))
    if problems:
        raise GoalsError(problems)
    return observed


def load_current(path: str, raw: bytes, goals: Goals) -> CurrentPlacement:
    """Parse an earlier plan's ``placements`` (and ``lastMoved``); JSON is read as YAML so
    errors get positions. Other keys of a plan's JSON output are ignored."""
    doc = parse_yaml(path, raw)[0]
    if not isinstance(doc.data, dict):
        raise GoalsError([doc.problem((), "expected a mapping with placements and lastMoved")])
    data = {k: v for k, v in doc.data.items() if k in ("placements", "lastMoved")}
    current = validate_document(CurrentPlacement, type(doc)(doc.path, data, doc.node, doc.start_line))
    problems = [
        doc.problem(("placements", key, name), f"unknown cluster '{name}'", key=True)
        for key, where in current.placements.items()
        for name in where
        if name not in goals.clusters
    ]
    if problems:
        raise GoalsError(problems)
    return current


def plan_json(p: Plan) -> str:
    """The plan as sorted, indented JSON: byte-identical for the same plan."""
    data = {
        "reason": p.reason,
        "placements": p.placements(),
        "unplaced": [u.model_dump(mode="json") for u in p.unplaced],
        "moves": [m.model_dump(mode="json", by_alias=True) for m in p.moves],
        "components": {k: v.model_dump(mode="json") for k, v in p.components.items()},
        "lastMoved": {k: v.isoformat().replace("+00:00", "Z") for k, v in p.last_moved.items()},
    }
    return json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False)


def _rows(p: Plan) -> list[list[object]]:
    rows: list[list[object]] = []
    for key, cp in p.components.items():
        for a in cp.assignments:
            rows.append([key, a.cluster, a.replicas, a.reason])
        for d in cp.draining:
            rows.append([key, d.cluster, f"-{d.replicas} (draining)", d.reason])
    return rows


def plan_table(p: Plan) -> str:
    out = [f"decision: {p.reason}", format_table(("COMPONENT", "CLUSTER", "REPLICAS", "WHY"), _rows(p))]
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
    return "\n".join(out)


def _md(text: object) -> str:
    return "-" if text is None else str(text).replace("|", "\\|").replace("\n", " ")


def plan_markdown(p: Plan) -> str:
    """The table a pull request of proposed placements shows."""
    lines = [f"### Proposed placement ({p.reason})", "", "| Component | Cluster | Replicas | Why |", "|---|---|---:|---|"]
    for key, cp in p.components.items():
        for a in cp.assignments:
            lines.append(f"| `{key}` | {a.cluster} | {a.replicas} | {_md(a.reason)} |")
        for d in cp.draining:
            lines.append(f"| `{key}` | {d.cluster} | -{d.replicas} draining | {_md(d.reason)} |")
    if p.moves:
        lines += ["", "#### Moves", "", "| Component | From | To | Replicas | Reason | Detail |", "|---|---|---|---:|---|---|"]
        for m in p.moves:
            lines.append(f"| `{m.component}` | {_md(m.source)} | {_md(m.target)} | {m.replicas} | {m.reason} | {_md(m.detail)} |")
    if p.unplaced:
        lines += ["", "#### Unplaced", "", "| Component | Replicas | Per replica | Near | Why |", "|---|---:|---|---|---|"]
        for u in p.unplaced:
            lines.append(f"| `{u.component}` | {u.replicas} | {u.cpu} CPU, {u.memory}, {'/'.join(u.architectures)} | {_md(u.near)} | {_md(u.reason)} |")
    return "\n".join(lines)


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def run(args: argparse.Namespace) -> int:
    try:
        goals = load_goals(read_directory(args.dir))
        observed = (
            load_observed(args.observed, _read(args.observed), goals)
            if args.observed
            else empty_observation(datetime.now(timezone.utc))  # the shell owns the clock
        )
        current = load_current(args.current, _read(args.current), goals) if args.current else CurrentPlacement()
    except GoalsError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"qonnect plan: {exc}", file=sys.stderr)
        return 1
    p = make_plan(goals, observed, current)
    if args.format == "json":
        print(plan_json(p))
    elif args.format == "markdown":
        print(plan_markdown(p))
    else:
        print(plan_table(p))
    return 0
