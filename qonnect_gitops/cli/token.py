"""``qonnect token create CLUSTER | --admin | NAME --read-only``: a new bearer token,
shown once, stored hashed."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "token",
        help="manage bearer tokens of agents and operators",
        description="Tokens are printed once and stored only as SHA-256 hashes in the "
        "tokens file every lead reads (and reloads when it changes).",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    create = actions.add_parser("create", help="create a token for a cluster's agent, an operator "
                                "or a reader")
    create.add_argument("cluster", nargs="?", metavar="NAME",
                        help="the cluster whose agent will use it (with --read-only: a label "
                        "naming the reader, e.g. grafana)")
    create.add_argument("--admin", action="store_true",
                        help="an operator token (membership changes, plan writes; reads too)")
    create.add_argument("--read-only", action="store_true",
                        help="a token that may only read /v1/status, /v1/plan, /v1/observed")
    create.add_argument("--tokens-file", required=True, type=Path)
    create.set_defaults(handler=run_create)


def run_create(args: argparse.Namespace) -> int:
    # Imported here, not with the module: `qonnect --help` builds this parser too.
    from qonnect_gitops.lead.tokens import ADMIN, create_token, read_only_subject

    if args.admin and args.read_only:
        print("qonnect token create: --admin and --read-only exclude each other", file=sys.stderr)
        return 2
    if args.admin == bool(args.cluster):
        print("qonnect token create: give a CLUSTER, NAME --read-only, or --admin", file=sys.stderr)
        return 2
    if args.cluster and not _NAME.match(args.cluster):
        what = "name" if args.read_only else "cluster name"
        print(f"qonnect token create: '{args.cluster}' is not a valid {what} (lowercase letters, "
              "digits and '-', at most 63)", file=sys.stderr)
        return 2
    if args.admin:
        subject = ADMIN
    elif args.read_only:
        subject = read_only_subject(args.cluster)
    else:
        subject = args.cluster
    token = create_token(args.tokens_file, subject)
    print(token)
    print(f"stored its SHA-256 in {args.tokens_file}; this is the only time the token "
          "is shown", file=sys.stderr)
    return 0
