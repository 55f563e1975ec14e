"""Shared plumbing of the commands that talk to a goals repository: a mirror to work in."""

from __future__ import annotations

import argparse
import contextlib
import tempfile
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from qonnect_gitops.gitstore.remote import Mirror


def add_repo_arguments(parser: argparse.ArgumentParser) -> None:
    """``--repo URL`` and the optional ``--cache``/``--plan-branch``/``--cluster-prefix``."""
    parser.add_argument("--repo", required=True, metavar="URL",
                        help="goals repository (file://, git://, http(s)://, ssh:// or a path); "
                             "credentials come from QONNECT_GIT_TOKEN / QONNECT_GIT_SSH_KEY")
    parser.add_argument("--cache", metavar="DIR",
                        help="bare mirror to reuse between runs (default: a temporary one)")
    parser.add_argument("--plan-branch", default="qonnect/plan", help="default: %(default)s")
    parser.add_argument("--cluster-prefix", default="cluster/", help="default: %(default)s")


@contextlib.contextmanager
def open_mirror(args: argparse.Namespace) -> Iterator[Mirror]:
    """A fetched mirror of ``args.repo`` in ``args.cache`` or a temporary directory."""
    from qonnect_gitops.gitstore.remote import Mirror, credentials_from_env  # pygit2: not for `--help`

    with contextlib.ExitStack() as stack:
        path = args.cache or stack.enter_context(tempfile.TemporaryDirectory(prefix="qonnect-mirror-"))
        mirror = Mirror(path, args.repo, credentials_from_env(),
                        plan_branch=args.plan_branch, cluster_prefix=args.cluster_prefix)
        mirror.fetch()
        yield mirror
