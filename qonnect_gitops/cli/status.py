"""``qonnect status``: the fleet as the lead group sees it, as readable tables."""

from __future__ import annotations

import argparse
import json
import os
import ssl
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from qonnect_gitops.cli.table import format_table
from qonnect_gitops.logs import redact, redact_url

DEFAULT_LEAD = "http://127.0.0.1:8080"
TOKEN_FILE_ENV = "QONNECT_TOKEN_FILE"
CA_ENV = "QONNECT_LEAD_CA"


def add_lead_arguments(parser: argparse.ArgumentParser) -> None:
    """``--lead`` and ``--lead-ca``: which lead to ask and how to trust its certificate."""
    parser.add_argument("--lead", default=os.environ.get("QONNECT_LEAD", DEFAULT_LEAD),
                        help=f"a lead's API URL (default $QONNECT_LEAD or {DEFAULT_LEAD})")
    parser.add_argument("--lead-ca", type=Path, default=os.environ.get(CA_ENV) or None,
                        help=f"CA bundle to verify an https:// lead (default ${CA_ENV}, else the "
                        "system store)")


def lead_context(ca: Path | None) -> ssl.SSLContext | None:
    """The TLS context for a lead's https:// URL (None: urllib's default)."""
    return ssl.create_default_context(cafile=str(ca)) if ca else None


def read_token(path: Path | None) -> str | None:
    """A bearer token from its file (first line), None without a file."""
    if path is None:
        return None
    token = path.read_text(encoding="utf-8").strip().splitlines()
    return token[0].strip() if token else None


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "status",
        help="show leader, members, clusters and placements",
        description="Ask a lead (any member answers) for the fleet's state.",
    )
    add_lead_arguments(parser)
    parser.add_argument("--token-file", type=Path, default=os.environ.get(TOKEN_FILE_ENV) or None,
                        help="bearer token to read with (a read-only, admin or cluster token; needed "
                        f"when the leads use a tokens file) [{TOKEN_FILE_ENV}]")
    parser.add_argument("--json", action="store_true", help="print the raw /v1/status JSON")
    parser.add_argument("--timeout", type=float, default=5.0)
    parser.set_defaults(handler=run)


def fetch_status(lead: str, timeout: float = 5.0, token: str | None = None,
                 context: ssl.SSLContext | None = None) -> dict[str, Any]:
    """GET ``/v1/status`` from a lead."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(lead.rstrip("/") + "/v1/status", headers=headers)
    with urllib.request.urlopen(request, timeout=timeout, context=context) as resp:
        doc = json.loads(resp.read())
    if not isinstance(doc, dict):
        raise ValueError("the lead answered something other than a JSON object")  # noqa: TRY004
    return doc


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
        ("NAME", "TIER", "REGION", "STATE", "SCHEDULING", "HEARTBEAT", "SYNC", "APPLIED",
         "GEN APPLIED/WANTED", "NODES", "REFUSALS"),
        [
            (
                c["name"], c["tier"], c["region"],
                _state(c) if c["declared"] else "undeclared",
                c.get("scheduling") if c["declared"] else None,
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
    storms = status.get("storms") or []
    if storms:
        lines += ["", "EVICTIONS HELD (most clusters of a group silent at once: the likelier fault is the "
                  "leads' own view)", format_table(
                      ("GROUP", "SILENT", "SINCE", "EVICTIONS"),
                      [(s["group"], f"{s['silent']}/{s['members']}", s["since"],
                        "paused" if s["paused"] else "one per stormEvictionSeconds") for s in storms])]
    troubled = [c for c in status["clusters"] if c["declared"] and c.get("state") not in (None, "Ready")]
    if troubled:
        lines += ["", "CLUSTER TROUBLE", format_table(
            ("CLUSTER", "STATE", "REASON", "WHAT THE LEADS DO", "TO FIX"),
            [(c["name"], c["state"], c.get("reason"), _scheduling_text(c.get("scheduling")),
              fix_hint(c.get("reason"), c["name"])) for c in troubled],
        )]
    not_running = status.get("notRunning") or []
    if not_running:
        lines += ["", "PLACED BUT NOT RUNNING", format_table(
            ("COMPONENT", "CLUSTER", "STATE", "READY/PLACED", "REASON"),
            [(w["component"], w["cluster"], w["state"], f"{w['ready']}/{w['placed']}", w.get("reason"))
             for w in not_running],
        )]
    unhealthy = [(c["name"], u) for c in status["clusters"] for u in c.get("unhealthy") or ()]
    if unhealthy:
        lines += ["", "UNHEALTHY COMPONENTS", format_table(
            ("CLUSTER", "COMPONENT", "READY", "REASON", "MESSAGE"),
            [(name, u["component"], f"{u['ready']}/{u['desired']}", u["reason"], u["message"][:100])
             for name, u in unhealthy],
        )]
    dynamic = [c for c in status["clusters"] if c.get("dynamic")]
    if dynamic:
        lines += ["", "POOL CLUSTERS (cloud bursting)", format_table(
            ("NAME", "POOL", "PHASE", "NODES", "TIER", "REGION"),
            [(c["name"], c["dynamic"]["pool"], c["dynamic"]["phase"], c["dynamic"]["nodes"],
              c["dynamic"]["tier"], c["dynamic"]["region"]) for c in dynamic],
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
        errors.append(f"goals fetch: {redact(status['goalsSource']['lastFetchError'])}")
    loop = status.get("loop") or {}
    if loop.get("lastError"):
        errors.append(f"reconcile loop ({loop.get('failures', 0)} failed cycle(s) in a row): "
                      f"{redact(loop['lastError'])}")
    if loop.get("degraded"):
        errors.append(f"reconcile loop degraded: {redact(loop['degraded'])}")
    if status["tokens"]["fileError"]:
        errors.append(f"tokens file: {status['tokens']['fileError']}")
    if errors:
        lines += ["", "ERRORS", *errors]
    return "\n".join(lines)


# What an operator does about each reason a cluster is in trouble (kb.health reasons, the
# agent's sync and refusal reasons). Text lives here, at the edge; decisions use the reasons.
_FIXES: dict[str, str] = {
    "HeartbeatMissed": "check the agent: kubectl -n qonnect-system logs deploy/qonnect-agent",
    "ApiUnavailable": "check the cluster's API server: kubectl get --raw /readyz",
    "NodesNotReady": "check the nodes: kubectl get nodes",
    "EvictionsPaused": "check the leads' network and load: qonnect status on each lead",
    "EvictionsSlowed": "check the agents and network of the silent group",
    "PruneLimitExceeded": "see the refusal in the agent's log; docs/agent.md, 'A stalled prune guard'",
    "EmptyDesiredSet": "qonnect validate; the branch is empty: see docs/agent.md, 'Refusals'",
    "StaleGeneration": "the branch went back in time: see docs/git-layout.md, recovering a write",
    "BranchUnreadable": "qonnect validate --repo URL --rev cluster/{cluster}",
    "InvalidManifest": "qonnect validate; the API server refused an object",
    "ProtectedNamespace": "the branch names a reserved namespace: fix the goals (qonnect validate)",
    "DuplicateObject": "the branch holds an object twice: fix the goals (qonnect validate)",
    "OwnershipConflict": "a live object the agent did not create: annotate its manifest "
                         "qonnect.io/adopt: enabled, or rename it",
    "ApplyFailed": "see the agent's log: kubectl -n qonnect-system logs deploy/qonnect-agent",
    "PruneFailed": "see the agent's log: kubectl -n qonnect-system logs deploy/qonnect-agent",
    "InventoryUnreadable": "the agent's inventory ConfigMap is unreadable: see docs/agent.md, 'Inventory'",
    "SourceUnavailable": "the agent cannot fetch its branch: check its Git URL and credentials",
    "Recovering": "nothing: it takes new replicas once Ready for heartbeat.recoverySeconds",
    "UnsignedCommit": "the branch head is not signed: see docs/agent.md, signed commits",
    "UntrustedSigner": "add the leads' public key to the agent's --trusted-keys (docs/operations-leads.md)",
    "SystemObject": "the goals name the cluster's own RBAC: remove it (qonnect validate warns)",
}


def fix_hint(reason: str | None, cluster: str) -> str | None:
    """What to do about a cluster in trouble for ``reason``."""
    hint = _FIXES.get(reason or "")
    return hint.format(cluster=cluster) if hint else None


def _state(cluster: dict[str, Any]) -> str:
    state = cluster.get("state") or ("Ready" if cluster["healthy"] else "Silent")
    return f"{state} ({cluster['reason']})" if cluster.get("reason") else state


def _scheduling_text(scheduling: str | None) -> str | None:
    return {"failed-over": "its replicas fail over",
            "cordoned": "keeps what runs, no new replicas",
            "recovering": "keeps what runs, no new replicas until Ready long enough",
            "schedulable": "places as usual"}.get(scheduling or "")


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
    lead = redact_url(args.lead)
    try:
        token = read_token(args.token_file)
        context = lead_context(args.lead_ca)
    except (OSError, ssl.SSLError) as exc:
        print(f"qonnect status: {exc}", file=sys.stderr)
        return 2
    try:
        status = fetch_status(args.lead, args.timeout, token, context)
    except urllib.error.HTTPError as exc:
        hint = ""
        if exc.code == 401:
            hint = ("; the leads use a tokens file: pass --token-file with a read-only token "
                    "(qonnect token create NAME --read-only --tokens-file F)")
        print(f"qonnect status: {lead} answered {exc.code} {exc.reason}{hint}", file=sys.stderr)
        return 1
    except (urllib.error.URLError, OSError, ValueError) as exc:
        print(f"qonnect status: cannot reach {lead}: {redact(str(exc))}", file=sys.stderr)
        return 1
    print(json.dumps(status, indent=2) if args.json else render(status))
    return 0
