"""``qonnect proposals``: the placement proposals of a repository, with their pull requests."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from qonnect_gitops.cli._forge import add_forges_argument, forges
from qonnect_gitops.cli._gitrepo import add_repo_arguments, open_mirror
from qonnect_gitops.cli.table import format_table

if TYPE_CHECKING:
    from qonnect_gitops.forge import ForgeSettings, PullRequest
    from qonnect_gitops.gitstore.remote import Mirror


def register(subparsers: Any) -> None:
    """Add the ``proposals`` subcommand."""
    parser = subparsers.add_parser(
        "proposals",
        help="list placement proposals waiting for review",
        description="List the open proposals (branches qonnect/proposals/<id>) of a goals repository and, "
        "where spec.review.forge selects one of the forges of --forges (and its token is at hand), the "
        "state and URL of each one's pull request.",
    )
    add_repo_arguments(parser)
    parser.add_argument("--closed", action="store_true", help="also list approved, merged, rejected and "
                        "superseded proposals")
    parser.add_argument("--no-forge", action="store_true", help="do not ask the forge for pull requests")
    add_forges_argument(parser)
    parser.set_defaults(handler=run)


def pull_requests(mirror: Mirror, configured: tuple[ForgeSettings, ...]) -> tuple[dict[str, PullRequest], str | None]:
    """Proposal id -> its newest pull request, from the forge of ``configured`` the goals at
    main select; and why there are none (no forge, no token, forge unreachable), or None."""
    from qonnect_gitops.forge import ForgeError, connect, find_forge, read_token, unknown_forge
    from qonnect_gitops.gitstore.errors import GitStoreError
    from qonnect_gitops.model import GoalsError, load_goals

    try:
        goals = load_goals(mirror.read_goals())
    except (GoalsError, GitStoreError):
        return {}, "the goals at main do not validate: forge settings unknown"
    chosen = goals.fleet.spec.review.forge
    if chosen is None:
        return {}, None
    settings = find_forge(configured, chosen.name)
    if settings is None:
        return {}, f"pull requests unknown: {unknown_forge(configured, chosen.name)}"
    try:
        forge = connect(settings, read_token(settings))
        pulls = forge.find_pull_requests(only_open=False)
    except (ForgeError, ValueError) as exc:
        return {}, f"pull requests unknown: {exc}"
    prefix = goals.fleet.spec.branches.proposal_prefix
    out: dict[str, PullRequest] = {}
    for pull in pulls:  # newest first: keep the newest per proposal
        if pull.head_branch.startswith(prefix):
            out.setdefault(pull.head_branch[len(prefix):], pull)
    return out, None


def _pull_cell(pull: PullRequest | None) -> str | None:
    return None if pull is None else f"{pull.state.value} {pull.url}"


def run(args: argparse.Namespace) -> int:
    """Print the proposals as a table; exit 1 if the repository cannot be read."""
    # Imported here, not with the module: `qonnect --help` builds this parser too.
    from qonnect_gitops.gitstore.errors import GitStoreError
    from qonnect_gitops.model import GoalsError

    try:
        with open_mirror(args) as mirror:
            store = mirror.store
            proposals = store.list_proposals()
            closed = store.list_closed() if args.closed else []
            plan = store.plan_head()
            pulls, note = ({}, None) if args.no_forge else pull_requests(mirror, forges(args))
    except (GitStoreError, GoalsError) as exc:
        print(f"error: {exc}")
        return 1
    print(f"plan branch {args.plan_branch} at {plan[:12] if plan else '(none)'}")
    if not proposals:
        print("no open proposals")
    else:
        rows = [
            (p.id, p.meta.generation, p.meta.reason, p.commit[:12], (p.base or "")[:12] or None,
             "stale" if p.stale else "ready", _pull_cell(pulls.get(p.id)), p.summary)
            for p in proposals
        ]
        print(format_table(("ID", "GEN", "REASON", "COMMIT", "BASE", "STATE", "PULL REQUEST", "SUMMARY"), rows))
    if args.closed:
        print()
        rows2 = [(c.id, c.commit[:12], _pull_cell(pulls.get(c.id)), c.note) for c in closed]
        print(format_table(("CLOSED", "COMMIT", "PULL REQUEST", "NOTE"), rows2) if rows2 else "no closed proposals")
    if note:
        print(f"note: {note}")
    return 0
