"""``qonnect preview --repo URL --base REV --head REV [--observed FILE] [--format markdown|json]``:
what a goals change would do to the placement, before it is merged."""

from __future__ import annotations

import argparse
import sys
import tempfile
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from qonnect_gitops.cli._limits import add_goals_limit_arguments, goals_limits

if TYPE_CHECKING:
    from qonnect_gitops.model import Goals, Observed
    from qonnect_gitops.model.limits import TreeLimits


def register(sub: Any) -> None:
    """Add the ``preview`` subcommand."""
    parser = sub.add_parser(
        "preview",
        help="show what a goals change would do to the placement",
        description="Validate the goals at HEAD, plan BASE and HEAD on the same observed state with "
        "the plan in force as the current placement, and print what changes. REV is a branch, tag, "
        "commit or ref (refs/pull/7/head). Exit 0 when the head is valid, 1 when it is not, 2 when "
        "the repository or a revision cannot be read.",
    )
    parser.add_argument("--repo", required=True, metavar="URL", help="goals repository (URL or path)")
    parser.add_argument("--base", required=True, metavar="REV", help="the revision the change starts from")
    parser.add_argument("--head", required=True, metavar="REV", help="the revision with the change")
    parser.add_argument("--observed", metavar="FILE", help="YAML snapshot of the live fleet (default: as declared)")
    parser.add_argument("--format", choices=("markdown", "json"), default="markdown")
    add_goals_limit_arguments(parser)
    parser.set_defaults(handler=run)


def _plan_branch(goals: list[Goals | None]) -> str:
    from qonnect_gitops.gitstore.store import DEFAULT_PLAN_BRANCH

    for g in goals:
        if g is not None:
            return g.fleet.spec.branches.plan
    return DEFAULT_PLAN_BRANCH


def _valid(files: dict[str, bytes], limits: TreeLimits) -> Goals | None:
    from qonnect_gitops.model import GoalsError, load_goals

    try:
        return load_goals(files, limits=limits)
    except GoalsError:
        return None


def run(args: argparse.Namespace) -> int:
    """Print the preview; the exit code says whether the head validates."""
    # Imported here, not with the module: `qonnect --help` builds this parser too.
    from qonnect_gitops.forge.preview import current_from_plan_file, preview, preview_json, preview_markdown
    from qonnect_gitops.gitstore import GitStoreError, read_tree_files, resolve_commit
    from qonnect_gitops.gitstore.remote import credentials_from_env, fetch_for_review
    from qonnect_gitops.lead.reconcile import placement_document
    from qonnect_gitops.model import GoalsError
    from qonnect_gitops.model.observed import empty_observation, load_observed

    extra = [r for r in (args.base, args.head) if r.startswith("refs/") and not r.startswith("refs/heads/")]
    observed_raw: bytes | None = None
    try:
        if args.observed:
            with open(args.observed, "rb") as fh:
                observed_raw = fh.read()
        with tempfile.TemporaryDirectory(prefix="qonnect-preview-") as cache:
            repo = fetch_for_review(cache, args.repo, extra, credentials_from_env())
            commits = {}
            for name, rev in (("base", args.base), ("head", args.head)):
                wanted = f"refs/qonnect-review/{rev[len('refs/'):]}" if rev in extra else rev
                commits[name] = str(resolve_commit(repo, wanted).id)
            base_files = read_tree_files(repo, commits["base"])
            head_files = read_tree_files(repo, commits["head"])
            limits = goals_limits(args)
            branch = _plan_branch([_valid(head_files, limits), _valid(base_files, limits)])
            try:
                plan_commit = str(resolve_commit(repo, branch).id)
            except GitStoreError:
                plan_commit = None  # no plan branch yet: nothing is in force
            current = current_from_plan_file(placement_document(repo, plan_commit) if plan_commit else None)
    except (OSError, GitStoreError, ValueError) as exc:
        print(f"qonnect preview: {exc}", file=sys.stderr)
        return 2
    now = datetime.now(tz=UTC)

    def observe(goals: Goals) -> Observed:
        if observed_raw is None:
            return empty_observation(now)
        return load_observed(args.observed, observed_raw, goals)

    try:
        result = preview(base_files, head_files, current, observe, limits)
    except GoalsError as exc:  # the observed file does not fit the goals
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        return 2
    if args.format == "json":
        print(preview_json(result))
    else:
        print(preview_markdown(result, commits["base"], commits["head"]))
    return 0 if result.valid else 1
