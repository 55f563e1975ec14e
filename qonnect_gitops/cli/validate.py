"""``qonnect validate [DIR]``: check a goals repository and report every problem."""

from __future__ import annotations

import argparse
import sys
import tempfile
from typing import TYPE_CHECKING, Any

from qonnect_gitops.cli._limits import add_goals_limit_arguments, goals_limits

if TYPE_CHECKING:
    from qonnect_gitops.model import Goals, Problem


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "validate",
        help="check a goals repository",
        description="Validate every file of a goals repository, including every Kubernetes "
        "object against the 1.37 API. Exit 0 with a one-line summary when valid; exit 1 listing "
        "every problem as file:line:column: field: message. Warnings (files skipped, custom "
        "resources that could not be checked) are printed as 'warning: ...' either way.",
    )
    parser.add_argument("dir", nargs="?", default=".", help="the goals tree (default: .)")
    parser.add_argument("--repo", metavar="URL",
                        help="validate a goals repository at a revision instead of a directory")
    parser.add_argument("--rev", default=None,
                        help="with --repo: the revision to validate (default: main)")
    add_goals_limit_arguments(parser)
    parser.set_defaults(handler=run)


def summary(goals: Goals) -> str:
    """One line that says what a valid goals tree declares."""
    components = list(goals.components())
    objects = sum(len(m.objects) for c in components for m in c.manifests)
    counts = ((len(goals.clusters), "cluster"), (len(goals.fleet.spec.regions), "region"),
              (len(goals.apps), "app"), (len(components), "component"), (objects, "manifest object"))
    return ", ".join(f"{n} {word}{'' if n == 1 else 's'}" for n, word in counts)


def _read(args: argparse.Namespace) -> tuple[str, dict[str, bytes], list[Problem]]:
    """The goals files, how to name where they came from, and what was skipped reading them."""
    from qonnect_gitops.gitstore import RemoteError, read_tree_files, resolve_commit
    from qonnect_gitops.gitstore.remote import Mirror, credentials_from_env
    from qonnect_gitops.model import Problem
    from qonnect_gitops.model.source import scan_directory

    if args.repo is None:
        tree = scan_directory(args.dir, goals_limits(args))
        return args.dir, tree.files, tree.skipped
    with tempfile.TemporaryDirectory(prefix="qonnect-validate-") as cache:
        mirror = Mirror(cache, args.repo, credentials_from_env())
        mirror.fetch()
        rev = args.rev or mirror.main_commit()
        if rev is None:
            raise RemoteError(f"{mirror.display_url} has no main branch")
        commit = resolve_commit(mirror.repo, rev)
        # Git trees keep symlinks and submodules as entries; they are never read as goals.
        ignored: list[str] = []
        files = read_tree_files(mirror.repo, str(commit.id), skipped=ignored)
        skipped = [Problem(path, None, None, "", "skipped: a symlink or submodule (never followed)")
                   for path in ignored]
        return f"{mirror.display_url}@{str(commit.id)[:12]}", files, skipped


def run(args: argparse.Namespace) -> int:
    # Imported here, not with the module: `qonnect --help` builds this parser too.
    from qonnect_gitops.gitstore import GitStoreError
    from qonnect_gitops.model import GoalsError, load_goals

    try:
        where, files, skipped = _read(args)
    except (FileNotFoundError, GitStoreError) as exc:
        print(f"qonnect validate: {exc}", file=sys.stderr)
        return 1
    for problem in skipped:
        print(f"warning: {problem}", file=sys.stderr)
    try:
        goals = load_goals(files, limits=goals_limits(args))
    except GoalsError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        count = len(exc.problems)
        print(f"{where}: invalid: {count} problem{'s' if count != 1 else ''}", file=sys.stderr)
        return 1
    for problem in goals.warnings:
        print(f"warning: {problem}", file=sys.stderr)
    print(f"{where}: valid: {summary(goals)}")
    return 0
