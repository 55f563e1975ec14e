"""``qonnect approve ID``: make a proposal the plan and fan it out to the cluster branches."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from typing import Any

from qonnect_gitops.cli._gitrepo import add_repo_arguments, add_signing_argument, open_mirror, signer_from
from qonnect_gitops.cli.table import format_table


def register(subparsers: Any) -> None:
    """Add the ``approve`` subcommand."""
    parser = subparsers.add_parser(
        "approve",
        help="approve a placement proposal",
        description="Fast-forward the plan branch to proposal ID, update the cluster branches and push.",
    )
    parser.add_argument("id", help="proposal id (see `qonnect proposals`)")
    add_repo_arguments(parser)
    add_signing_argument(parser)
    parser.add_argument("--no-validate", action="store_true",
                        help="skip re-validating the goals the proposal was computed from")
    parser.set_defaults(handler=run)


def goals_validator() -> Callable[[dict[str, bytes]], object] | None:
    """``qonnect_gitops.model.load_goals`` when the model package is installed, else None."""
    try:
        model = importlib.import_module("qonnect_gitops.model")
    except ImportError:
        return None
    return getattr(model, "load_goals", None)


def run(args: argparse.Namespace) -> int:
    """Approve and push; exit 1 when the proposal is missing, stale or its goals are invalid."""
    # Imported here, not with the module: `qonnect --help` builds this parser too.
    from qonnect_gitops.gitstore.errors import GitStoreError, StaleProposal, StaleRef

    validate = None
    if not args.no_validate:
        validate = goals_validator()
        if validate is None:
            print("error: goals validation is unavailable (qonnect_gitops.model not installed); "
                  "pass --no-validate to approve without it")
            return 2
    signer = signer_from(args, "approve")
    try:
        with open_mirror(args, signer) as mirror:
            try:
                result = mirror.store.approve(args.id, validate=validate)
            except StaleProposal as exc:
                print(f"refused: {exc}")
                return 1
            except GitStoreError:
                raise
            except Exception as exc:  # noqa: BLE001 - the validation hook raises its own error types
                print(f"refused: the goals of proposal {args.id} do not validate: {exc}")
                return 1
            mirror.publish()
    except StaleRef as exc:
        print(f"refused: someone else updated the repository meanwhile ({exc}); run again")
        return 1
    except GitStoreError as exc:
        print(f"error: {exc}")
        return 1
    print(f"approved {args.id}: {args.plan_branch} is now {result.plan_head}")
    rows = [(c.ref.removeprefix("refs/heads/"), (c.old or "")[:12] or None, (c.new or "")[:12] or None)
            for c in result.clusters]
    if rows:
        print(format_table(("BRANCH", "OLD", "NEW"), rows))
    else:
        print("no cluster branch changed")
    if result.closed_proposals:
        print(f"closed: {', '.join(result.closed_proposals)}")
    return 0
