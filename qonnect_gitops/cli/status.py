"""``qonnect status``: the fleet as the lead group sees it, as readable tables."""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.request
from typing import Any

from qonnect_gitops.cli.table import format_table

DEFAULT_LEAD = "http://127.0.0.1:8080"


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "status",
        help="show leader, members, clusters and placements",
        description="Ask a lead (any member answers) for the fleet's state.",
    )
    parser.add_argument("--lead", default=os.environ.get("QONNECT_LEAD", DEFAULT_LEAD),
                        help=f"a lead's HTTP URL (default $QONNECT_LEAD or {DEFAULT_LEAD})")
    parser.add_argument("--json", action="store_true", help="print the raw /v1/status JSON")
    parser.add_argument("--timeout", type=float, default=5.0)
    parser.set_defaults(handler=run)


def fetch_status(lead: str, timeout: float = 5.0) -> dict[str, Any]:
    """GET ``/v1/status`` from a lead."""
    with urllib.request.urlopen(lead.rstrip("/") + "/v1/status", timeout=timeout) as resp:
        return json.loads(resp.read())


def render(status: dict[str, Any]) -> str:
    """The status document as text: a summary, then members, clusters, placements, errors."""
    leader = status.get("leader")
    me = status["self"]
    lines = [
        f"leader:      {_leader(leader)}   term {status['term']}",
        (f"answered by: {me['id']} ({me['state']}, commit {me['commitIndex']}, "
         f"applied {me['lastApplied']}, quorum {'yes' if me['hasQuorum'] else 'no'})"),
        f"generation:  {status['generation']}",
        (f"pending:     {status['pending']['reportsQueued']} report(s) queued, "
         f"{status['pending']['reportBatchesInFlight']} batch(es) awaiting commit"),
    ]
    good = status["goals"]["lastGood"]
    lines.append(f"goals:       {good['commit'][:12] + ' at ' + good['at'] if good else 'none yet'}")
    lines += ["", "MEMBERS", format_table(
        ("ID", "RAFT", "HTTP", "CONNECTED", "ROLE"),
        [
            (m.get("id"), m["raft"], m.get("http"), "yes" if m["connected"] else "no",
             ("leader" if leader and m["raft"] == leader["raft"] else "follower")
             + (" (answering)" if m["self"] else ""))
            for m in status["members"]
        ],
    )]
    lines += ["", "CLUSTERS", format_table(
        ("NAME", "TIER", "REGION", "HEALTH", "HEARTBEAT", "SYNC", "APPLIED", "GEN APPLIED/WANTED",
         "NODES",
         "REFUSALS"),
        [
            (
                c["name"], c["tier"], c["region"],
                ("healthy" if c["healthy"] else "FAILED") if c["declared"] else "undeclared",
                _age(c["heartbeatAgeSeconds"], c["reported"]),
                _sync(c["sync"]),
                (c["applied"] or {}).get("commit", "")[:12] or None,
                # What the agent applied against what the plan wants of it.
                f"{c['applied']['generation']}/{c['generation']}" if c["applied"]
                else f"-/{c['generation']}",
                f"{c['nodesReady']}/{c['nodes']}" if c["reported"] else c["nodes"],
                ", ".join(r["reason"] for r in c["refusals"]) or None,
            )
            for c in status["clusters"]
        ],
    )]
    placements = status["placements"]
    lines += ["", "PLACEMENTS"]
    if placements:
        lines.append(format_table(
            ("COMPONENT", "WHERE", "LAST MOVED", "WHY"),
            [
                (comp, ", ".join(f"{cl}x{n}" for cl, n in where.items()),
                 status["lastMoved"].get(comp, {}).get("at"),
                 status["lastMoved"].get(comp, {}).get("reason"))
                for comp, where in placements.items()
            ],
        ))
    else:
        lines.append("(no placement in force yet)")
    unmet = status.get("unmet") or []
    if unmet:
        lines += ["", "UNMET GOALS", format_table(
            ("COMPONENT", "GOAL", "WHY"), [(u["component"], u["goal"], u["message"]) for u in unmet]
        )]
    failed = status["goals"]["lastFailed"]
    errors = []
    if failed and (not good or failed["at"] >= good["at"]):
        errors.append(f"goals {failed['commit'][:12]} rejected at {failed['at']} "
                      f"({failed['total']} problem(s)); last good stays in force:")
        errors += [f"  {e}" for e in failed["errors"][:20]]
    if status["goalsSource"]["lastFetchError"]:
        errors.append(f"goals fetch: {status['goalsSource']['lastFetchError']}")
    if status["tokens"]["fileError"]:
        errors.append(f"tokens file: {status['tokens']['fileError']}")
    if errors:
        lines += ["", "ERRORS", *errors]
    return "\n".join(lines)


def _leader(leader: dict[str, Any] | None) -> str:
    if not leader:
        return "none (election in progress or no quorum)"
    return f"{leader.get('id') or '?'} raft {leader['raft']} http {leader.get('http') or '?'}"


def _age(age: float | None, reported: bool) -> str:
    if age is None:
        return "-"
    return f"{age:.1f}s" + ("" if reported else " (never)")


def _sync(sync: dict[str, Any] | None) -> str | None:
    if not sync:
        return None
    return f"{sync['state']}/{sync['reason']}"


def run(args: argparse.Namespace) -> int:
    try:
        status = fetch_status(args.lead, args.timeout)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        print(f"qonnect status: cannot reach {args.lead}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(status, indent=2) if args.json else render(status))
    return 0
