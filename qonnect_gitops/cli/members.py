"""``qonnect members add|remove RAFT_ADDR``: change the lead group, one lead at a time."""

from __future__ import annotations

import argparse
import json
import os
import ssl
import sys
import urllib.error
import urllib.request
from typing import Any

from qonnect_gitops.cli.status import add_lead_arguments, lead_context
from qonnect_gitops.logs import redact, redact_url

TOKEN_ENV = "QONNECT_ADMIN_TOKEN"


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "members",
        help="add or remove a lead (Raft membership change)",
        description="Add a lead (start it first with --peers listing every current member) "
        "or remove one (stop it afterwards). Uses the admin token in $" + TOKEN_ENV + ".",
    )
    parser.add_argument("action", choices=("add", "remove"))
    parser.add_argument("raft", help="Raft address host:port of the lead to add or remove")
    add_lead_arguments(parser)
    parser.add_argument("--timeout", type=float, default=15.0)
    parser.set_defaults(handler=run)


def change_members(lead: str, token: str, action: str, raft: str, timeout: float = 15.0,
                   context: ssl.SSLContext | None = None) -> tuple[int, dict[str, Any]]:
    """POST ``/v1/members``; returns (HTTP status, JSON body)."""
    request = urllib.request.Request(
        lead.rstrip("/") + "/v1/members",
        data=json.dumps({"action": action, "raft": raft}).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def run(args: argparse.Namespace) -> int:
    token = os.environ.get(TOKEN_ENV)
    if not token:
        print(f"qonnect members: set ${TOKEN_ENV} to an admin token "
              "(qonnect token create --admin)", file=sys.stderr)
        return 2
    try:
        code, body = change_members(args.lead, token, args.action, args.raft, args.timeout,
                                    lead_context(args.lead_ca))
    except (urllib.error.URLError, OSError, ValueError) as exc:
        print(f"qonnect members: cannot reach {redact_url(args.lead)}: {redact(str(exc))}", file=sys.stderr)
        return 1
    if code != 200:
        print(f"qonnect members: {args.action} {args.raft} failed ({code}): "
              f"{body.get('message', body)}", file=sys.stderr)
        return 1
    print(f"{args.action} {args.raft}: done; members now: "
          + ", ".join(m["raft"] for m in body["members"]))
    return 0
