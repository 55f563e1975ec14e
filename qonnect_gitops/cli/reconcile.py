"""``qonnect reconcile --repo URL --once``: one full cycle without a lead group."""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qonnect_gitops.cli._gitrepo import add_signing_argument, signer_from
from qonnect_gitops.cli._limits import add_goals_limit_arguments, goals_limits
from qonnect_gitops.cli.plan import plan_table
from qonnect_gitops.cli.table import format_table
from qonnect_gitops.logs import redact

if TYPE_CHECKING:
    from qonnect_gitops.lead.reconcile import CycleResult
    from qonnect_gitops.model import Goals, Observed

ATTEMPTS = 3  # a lost compare-and-swap race is retried from a fresh fetch


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "reconcile",
        help="run one reconcile cycle against a goals repository",
        description="Fetch main, validate, plan, render, and write the plan branch and the "
        "cluster branches (or a proposal in review mode), then push. A second run with "
        "nothing new writes nothing. Invalid goals: exit 1, nothing written.",
    )
    parser.add_argument("--repo", required=True, metavar="URL",
                        help="goals repository (file://, git://, http(s)://, ssh:// or a path)")
    parser.add_argument("--observed", metavar="FILE",
                        help="observed snapshot (YAML, see docs/placement.md); default: every "
                        "cluster healthy as declared")
    parser.add_argument("--cache", metavar="DIR", help="bare mirror to reuse between runs")
    parser.add_argument("--once", action="store_true", required=True,
                        help="run a single cycle and exit (the continuous loop is `qonnect lead`)")
    add_signing_argument(parser)
    add_goals_limit_arguments(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    # Imported here, not with the module: `qonnect --help` builds this parser too.
    from qonnect_gitops.gitstore import GitStoreError
    from qonnect_gitops.model import GoalsError

    now = datetime.now(UTC)  # the shell owns the clock; plan() never reads it
    with contextlib.ExitStack() as stack:
        cache = args.cache or stack.enter_context(tempfile.TemporaryDirectory(prefix="qonnect-"))
        try:
            result = _cycle(args, Path(cache), now)
        except GoalsError as exc:
            for problem in exc.problems:
                print(problem, file=sys.stderr)
            print(f"qonnect reconcile: goals at main are invalid ({len(exc.problems)} problems); "
                  "nothing written, the plan in force stays", file=sys.stderr)
            return 1
        except (GitStoreError, OSError, RuntimeError) as exc:
            print(f"qonnect reconcile: {redact(str(exc))}", file=sys.stderr)
            return 1
    _print(result)
    return 0


def _cycle(args: argparse.Namespace, cache: Path, now: datetime) -> CycleResult:
    from qonnect_gitops.gitstore import StaleRef
    from qonnect_gitops.gitstore.remote import credentials_from_env
    from qonnect_gitops.lead.reconcile import open_mirror_for_goals, reconcile_once
    from qonnect_gitops.model.observed import empty_observation, load_observed

    raw = Path(args.observed).read_bytes() if args.observed else None

    def observe(goals: Goals) -> Observed:
        if raw is None:
            return empty_observation(now)
        return load_observed(args.observed, raw, goals)

    limits = goals_limits(args)
    signer = signer_from(args, "reconcile")
    for attempt in range(1, ATTEMPTS + 1):
        mirror = open_mirror_for_goals(cache, args.repo, credentials_from_env(), limits, signer=signer)
        try:
            return reconcile_once(mirror, observe, now=now, goals_limits=limits)
        except StaleRef:
            if attempt == ATTEMPTS:
                raise
            print(f"another writer moved the branches; re-reading (attempt {attempt + 1})",
                  file=sys.stderr)
    raise AssertionError("unreachable")


def _print(result: CycleResult) -> None:
    print(f"goals {result.goals_commit[:12]}: {result.plan.reason}, generation {result.generation}")
    if result.proposal is not None:
        print(f"proposal {result.proposal.id} waits for review: qonnect approve "
              f"{result.proposal.id} --repo URL")
    if not result.changed:
        print("nothing changed: no branch written")
        return
    print()
    print(format_table(
        ["REF", "FROM", "TO"],
        [[c.ref, (c.old or "-")[:12], (c.new or "deleted")[:12]] for c in result.refs],
    ))
    print()
    print(plan_table(result.plan))
