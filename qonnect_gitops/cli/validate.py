"""``qonnect validate [DIR]``: check a goals repository and report every problem."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from qonnect_gitops.model import GoalsError, Goals, load_goals, read_directory


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "validate",
        help="check a goals repository",
        description="Validate every file of a goals repository. Exit 0 with a one-line "
        "summary when valid; exit 1 listing every problem as file:line:column: field: message.",
    )
    parser.add_argument("dir", nargs="?", default=".", help="the goals tree (default: .)")
    parser.set_defaults(handler=run)


def summary(goals: Goals) -> str:
    """One line that says what a valid goals tree declares."""
    components = list(goals.components())
    objects = sum(len(m.objects) for c in components for m in c.manifests)
    return (
        f"{len(goals.clusters)} clusters, {len(goals.fleet.spec.regions)} regions, "
        f"{len(goals.apps)} apps, {len(components)} components, {objects} manifest objects"
    )


def run(args: argparse.Namespace) -> int:
    try:
        files = read_directory(args.dir)
    except FileNotFoundError as exc:
        print(f"qonnect validate: {exc}", file=sys.stderr)
        return 1
    try:
        goals = load_goals(files)
    except GoalsError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        count = len(exc.problems)
        print(f"{args.dir}: invalid: {count} problem{'s' if count != 1 else ''}", file=sys.stderr)
        return 1
    print(f"{args.dir}: valid: {summary(goals)}")
    return 0
