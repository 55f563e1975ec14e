"""``qonnect lead``: run one member of the lead group."""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import Any

from qonnect_gitops.cli._forge import add_forges_argument, add_preview_arguments, forges, preview_limits
from qonnect_gitops.cli._gitrepo import add_signing_argument
from qonnect_gitops.cli._limits import add_goals_limit_arguments, goals_limits
from qonnect_gitops.lead.httpd import EVENT_LOOPS, HTTPLimits
from qonnect_gitops.logs import configure
from qonnect_gitops.model import GoalsError

# The Raft options default to RaftTiming's values, read when the command runs: lead.raft
# imports the Knowledge Base and its models, too much for `qonnect --help` to load.
_TIMING_OPTIONS = ("election_min", "election_max", "heartbeat", "compaction_entries")

_ADDR = re.compile(r"^[A-Za-z0-9.\-\[\]:]+:\d{1,5}$")
BIND_ENV = "QONNECT_RAFT_BIND"
SECRET_FILE_ENV = "QONNECT_RAFT_SECRET_FILE"  # lead.raft.secret's, without importing cryptography


def _addr(value: str) -> str:
    if not _ADDR.match(value):
        raise argparse.ArgumentTypeError(f"'{value}' is not host:port")
    return value


def _addrs(value: str) -> tuple[str, ...]:
    return tuple(_addr(v.strip()) for v in value.split(",") if v.strip())


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "lead",
        help="run a lead agent (one member of the Raft group)",
        description="Run one lead: a Raft member holding the replicated Knowledge Base, "
        "serving the HTTP API. Start three or five with the same --peers.",
    )
    parser.add_argument("--id", required=True, help="this lead's name, e.g. lead-1")
    parser.add_argument("--raft", required=True, type=_addr,
                        help="Raft address host:port the other leads dial; the Raft port listens "
                        "on this address only (unless --raft-bind)")
    parser.add_argument("--raft-bind", type=_addr, default=os.environ.get(BIND_ENV) or None,
                        help="host:port the Raft port listens on when --raft is not an address of "
                        f"this host (NAT; a container: its pod IP, or 0.0.0.0) [{BIND_ENV}]")
    parser.add_argument("--raft-secret-file", type=Path,
                        default=os.environ.get(SECRET_FILE_ENV) or None,
                        help="the group's shared secret, one per line: the first seals every Raft "
                        "frame this lead sends, every one is accepted; re-read when it changes "
                        f"(required) [{SECRET_FILE_ENV}]")
    parser.add_argument("--peers", type=_addrs, default=(),
                        help="comma-separated Raft addresses of the other leads")
    parser.add_argument("--http", required=True, type=_addr, help="HTTP API address host:port (bind)")
    parser.add_argument("--advertise-http", type=_addr,
                        help="host:port others reach this lead's API at (default: --http); "
                        "recorded for the other leads, agents and qonnect status")
    parser.add_argument("--tls-cert", type=Path, help="PEM certificate (chain) of the API: serve HTTPS")
    parser.add_argument("--tls-key", type=Path, help="PEM private key of --tls-cert")
    parser.add_argument("--tls-ca", type=Path,
                        help="CA bundle to verify the other leads when forwarding a webhook "
                        "(default: the system store and --tls-cert)")
    parser.add_argument("--repo", help="goals repository URL (its main branch is read)")
    parser.add_argument("--data-dir", required=True, type=Path, help="Raft journal and dump")
    parser.add_argument("--tokens-file", type=Path, help="hashed bearer tokens (reloaded)")
    parser.add_argument("--poll-seconds", type=float, default=10.0,
                        help="how often the leader fetches goals (default 10)")
    parser.add_argument("--reschedule-seconds", type=float, default=60.0,
                        help="periodic rescheduling pass (the stability rules decide moves)")
    parser.add_argument("--webhook-secret-file", type=Path,
                        help="shared secret of POST /v1/hooks/git (HMAC-SHA256 or GitLab token)")
    parser.add_argument("--report-rate", type=float, default=2.0,
                        help="reports per second allowed per cluster and lead (default 2)")
    parser.add_argument("--report-burst", type=float, default=10.0,
                        help="burst of reports allowed per cluster (default 10)")
    parser.add_argument("--max-body", type=int, default=HTTPLimits.max_body_bytes,
                        help="largest request body in bytes (default 262144)")
    parser.add_argument("--max-connections", type=int, default=HTTPLimits.max_connections,
                        help="open API connections at most; more get 503 (default 1000)")
    parser.add_argument("--http-workers", type=int, default=HTTPLimits.workers,
                        help="threads running API requests (default 64; idle connections use none)")
    parser.add_argument("--read-timeout", type=float, default=HTTPLimits.read_timeout,
                        help="seconds a request (or TLS handshake) may take to arrive (default 10)")
    parser.add_argument("--idle-timeout", type=float, default=HTTPLimits.idle_timeout,
                        help="seconds a keep-alive connection may stay idle (default 60)")
    parser.add_argument("--anonymous-connections", type=int, default=HTTPLimits.anonymous_connections,
                        help="open API connections without a valid token yet, at most; a new one past "
                        "it closes the oldest (default 250; the rest of --max-connections is kept "
                        "for connections that presented a token)")
    parser.add_argument("--anonymous-per-client", type=int, default=HTTPLimits.anonymous_per_client,
                        help="connections without a valid token from one source address (default 16)")
    parser.add_argument("--anonymous-timeout", type=float, default=HTTPLimits.anonymous_timeout,
                        help="seconds a connection without a valid token has to deliver each whole "
                        "request, TLS handshake included (default 5)")
    parser.add_argument("--anonymous-rate", type=float, default=HTTPLimits.anonymous_rate,
                        help="requests without a valid token per second per source address (default "
                        "50, bursts of --anonymous-burst, default 200); more get 429")
    parser.add_argument("--anonymous-burst", type=float, default=HTTPLimits.anonymous_burst,
                        help="burst of --anonymous-rate (default 200)")
    parser.add_argument("--event-loop", choices=EVENT_LOOPS, default="auto",
                        help="the API's event loop: uvloop where installed (auto, the default), "
                        "or the standard asyncio loop")
    parser.add_argument("--max-clock-skew", type=float, default=300.0,
                        help="seconds an agent's clock may differ from the lead's before its reports "
                        "are flagged; they count at the lead's receipt time anyway (default 300)")
    parser.add_argument("--election-min", type=float, default=None)
    parser.add_argument("--election-max", type=float, default=None)
    parser.add_argument("--heartbeat", type=float, default=None,
                        help="Raft append-entries period in seconds")
    parser.add_argument("--leader-fallback", type=float, default=None,
                        help="seconds an isolated leader keeps leading (default: "
                        "0.9 x --election-min)")
    parser.add_argument("--compaction-entries", type=int, default=None,
                        help="compact the Raft log into a full dump after this many entries")
    add_signing_argument(parser)
    add_goals_limit_arguments(parser)
    add_forges_argument(parser)
    add_preview_arguments(parser)
    parser.add_argument("--log-level", default="info")
    parser.set_defaults(handler=run)


def _check_tls(args: argparse.Namespace) -> str | None:
    """Why the TLS options are unusable, or None."""
    if (args.tls_cert is None) != (args.tls_key is None):
        return "--tls-cert and --tls-key go together"
    if args.tls_cert is not None:
        import ssl

        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(str(args.tls_cert), str(args.tls_key))
        except (OSError, ssl.SSLError) as exc:
            return f"cannot load --tls-cert {args.tls_cert} / --tls-key {args.tls_key}: {exc}"
    if args.tls_ca is not None and not args.tls_ca.is_file():
        return f"--tls-ca {args.tls_ca} is not a file"
    return None


def _check_raft(args: argparse.Namespace) -> str | None:
    """Why the Raft port cannot start (no secret, an address not of this host), or None."""
    from qonnect_gitops.lead.raft.secret import RaftSecret, RaftSecretError
    from qonnect_gitops.lead.raft.transport import bind_address

    if args.raft_secret_file is None:
        return (f"--raft-secret-file (or {SECRET_FILE_ENV}) is required: the leads seal every Raft "
                "message with it. Make one for the group with: python3 -c 'import secrets; "
                "print(secrets.token_urlsafe(48))' > raft-secret (see docs/operations-leads.md)")
    try:
        RaftSecret.load(args.raft_secret_file)
        bind_address(args.raft, args.raft_bind)
    except (RaftSecretError, ValueError) as exc:
        return str(exc)
    return None


def _timing_defaults(args: argparse.Namespace) -> None:
    """Give the Raft options left out RaftTiming's values."""
    from qonnect_gitops.lead.raft.timing import RaftTiming

    for name in _TIMING_OPTIONS:
        if getattr(args, name) is None:
            setattr(args, name, getattr(RaftTiming, name))


def run(args: argparse.Namespace) -> int:
    # Imported here, not with the module: `qonnect --help` builds this parser too.
    from qonnect_gitops.gitstore.signing import SigningError, SigningKey
    from qonnect_gitops.lead.raft.timing import RaftTiming
    from qonnect_gitops.lead.review import ReviewConfig
    from qonnect_gitops.lead.service import LeadConfig

    _timing_defaults(args)
    configure(args.log_level)
    problem = _check_raft(args) or _check_tls(args)
    if problem is None and min(args.max_connections, args.http_workers, args.max_body,
                               args.anonymous_connections, args.anonymous_per_client) < 1:
        problem = ("--max-connections, --http-workers, --max-body, --anonymous-connections and "
                   "--anonymous-per-client must be at least 1")
    if problem is None and min(args.read_timeout, args.idle_timeout, args.max_clock_skew,
                               args.anonymous_timeout, args.anonymous_rate) <= 0:
        problem = ("--read-timeout, --idle-timeout, --max-clock-skew, --anonymous-timeout and "
                   "--anonymous-rate must be positive")
    if problem is None and args.anonymous_burst < 1:
        problem = "--anonymous-burst must be at least 1"
    if problem is not None:
        print(f"qonnect lead: {problem}", file=sys.stderr)
        return 2
    if not args.election_min < args.election_max:
        print("qonnect lead: --election-min must be below --election-max", file=sys.stderr)
        return 2
    if args.signing_key is not None:
        try:
            SigningKey.load(args.signing_key)  # refuse to start with a key that cannot sign
        except SigningError as exc:
            print(f"qonnect lead: --signing-key {exc}", file=sys.stderr)
            return 2
    fallback = args.leader_fallback or round(args.election_min * 0.9, 3)
    if fallback >= args.election_min:
        print("qonnect lead: --leader-fallback must be below --election-min, or an isolated "
              "leader could overlap its successor", file=sys.stderr)
        return 2
    try:
        review = ReviewConfig(forges=forges(args), previews=preview_limits(args))
    except GoalsError as exc:
        print("\n".join(f"qonnect lead: --forges: {p}" for p in exc.problems), file=sys.stderr)
        return 2
    timing = RaftTiming(election_min=args.election_min, election_max=args.election_max,
                        heartbeat=args.heartbeat, leader_fallback=fallback,
                        compaction_entries=args.compaction_entries)
    config = LeadConfig(
        node_id=args.id,
        raft=args.raft,
        peers=args.peers,
        http=args.http,
        data_dir=args.data_dir,
        raft_secret_file=args.raft_secret_file,
        raft_bind=args.raft_bind,
        repo=args.repo,
        tokens_file=args.tokens_file,
        poll_seconds=args.poll_seconds,
        reschedule_seconds=args.reschedule_seconds,
        webhook_secret_file=args.webhook_secret_file,
        report_rate=args.report_rate,
        report_burst=args.report_burst,
        timing=timing,
        advertise_http=args.advertise_http,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        tls_ca=args.tls_ca,
        max_clock_skew=args.max_clock_skew,
        event_loop=args.event_loop,
        http_limits=HTTPLimits(max_connections=args.max_connections, workers=args.http_workers,
                               read_timeout=args.read_timeout, idle_timeout=args.idle_timeout,
                               max_body_bytes=args.max_body,
                               anonymous_connections=args.anonymous_connections,
                               anonymous_per_client=args.anonymous_per_client,
                               anonymous_timeout=args.anonymous_timeout,
                               anonymous_rate=args.anonymous_rate, anonymous_burst=args.anonymous_burst),
        goals_limits=goals_limits(args),
        review=review,
        signing_key=args.signing_key,
    )
    from qonnect_gitops.lead.process import run_lead

    return run_lead(config)
