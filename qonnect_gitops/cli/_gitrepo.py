"""Shared plumbing of the commands that talk to a goals repository: a mirror to work in."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from qonnect_gitops.gitstore.remote import Mirror
    from qonnect_gitops.gitstore.signing import KeyFile

SIGNING_KEY_ENV = "QONNECT_SIGNING_KEY"


def add_repo_arguments(parser: argparse.ArgumentParser) -> None:
    """``--repo URL`` and the optional ``--cache``/``--plan-branch``/``--cluster-prefix``."""
    parser.add_argument("--repo", required=True, metavar="URL",
                        help="goals repository (file://, git://, http(s)://, ssh:// or a path); "
                             "credentials come from QONNECT_GIT_TOKEN / QONNECT_GIT_SSH_KEY")
    parser.add_argument("--cache", metavar="DIR",
                        help="bare mirror to reuse between runs (default: a temporary one)")
    parser.add_argument("--plan-branch", default="qonnect/plan", help="default: %(default)s")
    parser.add_argument("--cluster-prefix", default="cluster/", help="default: %(default)s")


def add_signing_argument(parser: argparse.ArgumentParser) -> None:
    """``--signing-key FILE`` [QONNECT_SIGNING_KEY]: the key every written commit is signed with."""
    parser.add_argument("--signing-key", type=Path, default=os.environ.get(SIGNING_KEY_ENV) or None, metavar="FILE",
                        help="SSH private key (Ed25519, or RSA of 2048 bits or more; unencrypted) every plan and "
                             "cluster-branch commit is signed with, as git commit -S with gpg.format=ssh; re-read "
                             f"when the file changes. Without it commits are unsigned [{SIGNING_KEY_ENV}]")


def signer_from(args: argparse.Namespace, command: str) -> KeyFile | None:
    """The ``--signing-key`` of ``args`` loaded, or None; an unusable key exits with status 2."""
    if args.signing_key is None:
        print(f"qonnect {command}: no --signing-key: the commits written are unsigned, and agents that "
              "verify signatures refuse them", file=sys.stderr)
        return None
    from qonnect_gitops.gitstore.signing import KeyFile, SigningError  # cryptography: not for `--help`

    try:
        return KeyFile(args.signing_key)
    except SigningError as exc:
        print(f"qonnect {command}: --signing-key {exc}", file=sys.stderr)
        raise SystemExit(2) from None


@contextlib.contextmanager
def open_mirror(args: argparse.Namespace, signer: KeyFile | None = None) -> Iterator[Mirror]:
    """A fetched mirror of ``args.repo`` in ``args.cache`` or a temporary directory, signing
    what it writes with ``signer``."""
    from qonnect_gitops.gitstore.remote import Mirror, credentials_from_env  # pygit2: not for `--help`

    with contextlib.ExitStack() as stack:
        path = args.cache or stack.enter_context(tempfile.TemporaryDirectory(prefix="qonnect-mirror-"))
        mirror = Mirror(path, args.repo, credentials_from_env(),
                        plan_branch=args.plan_branch, cluster_prefix=args.cluster_prefix, signer=signer)
        mirror.fetch()
        yield mirror
