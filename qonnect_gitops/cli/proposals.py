"""``qonnect proposals``: list the open (and recently closed) placement proposals of a repository."""

from __future__ import annotations

import argparse
from typing import Any

from qonnect_gitops.cli._gitrepo import add_repo_arguments, open_mirror
from qonnect_gitops.cli.table import format_table
from qonnect_gitops.gitstore.errors import GitStoreError


def register(subparsers: Any) -> None:
    """Add the ``proposals`` subcommand."""
    parser = subparsers.add_parser(
        "proposals",
        help="list placement proposals waiting for review",
        description="List the open proposals (branches qonnect/proposals/<id>) of a goals repository.",
    )
    add_repo_arguments(parser)
    parser.add_argument("--closed", action="store_true", help="also list approved and superseded proposals")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Print the proposals as a table; exit 1 if the repository cannot be read."""
    try:
        with open_mirror(args) as mirror:
            store = mirror.store
            proposals = store.list_proposals()
            closed = store.list_closed() if args.closed else []
            plan = store.plan_head()
    except GitStoreError as exc:
        print(f"error: {exc}")
        return 1
    print(f"plan branch {args.plan_branch} at {plan[:12] if plan else '(none)'}")
    if not proposals:
        print("no open proposals")
    else:
        rows = [
            (p.id, p.meta.generation, p.meta.reason, p.commit[:12], (p.base or "")[:12] or None,
             "stale" if p.stale else "ready", p.summary)
            for p in proposals
        ]
        print(format_table(("ID", "GEN", "REASON", "COMMIT", "BASE", "STATE", "SUMMARY"), rows))
    if args.closed:
        print()
        rows2 = [(c.id, c.commit[:12], c.note) for c in closed]
        print(format_table(("CLOSED", "COMMIT", "NOTE"), rows2) if rows2 else "no closed proposals")
    return 0
