"""``qonnect token create CLUSTER``: a new bearer token, shown once, stored hashed."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

from qonnect_gitops.lead.tokens import ADMIN, create_token

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "token",
        help="manage bearer tokens of agents and operators",
        description="Tokens are printed once and stored only as SHA-256 hashes in the "
        "tokens file every lead reads (and reloads when it changes).",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    create = actions.add_parser("create", help="create a token for a cluster's agent")
    create.add_argument("cluster", nargs="?", help="the cluster whose agent will use it")
    create.add_argument("--admin", action="store_true",
                        help="an operator token (membership changes, plan writes)")
    create.add_argument("--tokens-file", required=True, type=Path)
    create.set_defaults(handler=run_create)


def run_create(args: argparse.Namespace) -> int:
    if args.admin == bool(args.cluster):
        print("qonnect token create: give a CLUSTER or --admin (not both)", file=sys.stderr)
        return 2
    if args.cluster and not _NAME.match(args.cluster):
        print(f"qonnect token create: '{args.cluster}' is not a valid cluster name",
              file=sys.stderr)
        return 2
    token = create_token(args.tokens_file, ADMIN if args.admin else args.cluster)
    print(token)
    print(f"stored its SHA-256 in {args.tokens_file}; this is the only time the token "
          "is shown", file=sys.stderr)
    return 0
