"""``qonnect agent``: run the resource agent of one cluster.

Every option can also come from the environment (``--cluster`` ↔ ``QONNECT_CLUSTER``,
``--lead`` ↔ ``QONNECT_LEAD``...), so the Deployment in ``deploy/`` needs no args.
``--once`` syncs once, prints a table of objects and actions, and exits 0 (synced
and healthy), 1 (failed or refused) or 2 (synced but not healthy).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

from qonnect_gitops.cli.table import format_table
from qonnect_gitops.logs import configure, get_logger, redact

log = get_logger(__name__)

# option dest -> (env var, help)
_ENV = {
    "cluster": "QONNECT_CLUSTER", "repo": "QONNECT_REPO", "branch": "QONNECT_BRANCH",
    "kubeconfig": "QONNECT_KUBECONFIG", "lead": "QONNECT_LEAD", "token_file": "QONNECT_TOKEN_FILE",
    "prometheus": "QONNECT_PROMETHEUS", "namespace": "QONNECT_NAMESPACE", "cache_dir": "QONNECT_CACHE_DIR",
    "interval": "QONNECT_INTERVAL", "drift_interval": "QONNECT_DRIFT_INTERVAL", "drift": "QONNECT_DRIFT",
    "report_interval": "QONNECT_REPORT_INTERVAL", "prune_fraction": "QONNECT_PRUNE_FRACTION",
    "wait_timeout": "QONNECT_WAIT_TIMEOUT", "unschedulable_grace": "QONNECT_UNSCHEDULABLE_GRACE",
    "metrics_addr": "QONNECT_METRICS_ADDR",
    "webhook_addr": "QONNECT_WEBHOOK_ADDR", "webhook_secret_file": "QONNECT_WEBHOOK_SECRET_FILE",
    "latency_metric": "QONNECT_LATENCY_METRIC", "traffic_metric": "QONNECT_TRAFFIC_METRIC",
    "log_level": "QONNECT_LOG_LEVEL", "once": "QONNECT_ONCE", "lead_ca": "QONNECT_LEAD_CA",
    "protect_namespace": "QONNECT_PROTECT_NAMESPACES", "protect_kind": "QONNECT_PROTECT_KINDS",
    "prune_workers": "QONNECT_PRUNE_WORKERS", "git_poll_max_interval": "QONNECT_GIT_POLL_MAX_INTERVAL",
    "allow_system_object": "QONNECT_ALLOW_SYSTEM_OBJECTS", "api_timeout": "QONNECT_API_TIMEOUT",
    "trusted_keys": "QONNECT_TRUSTED_KEYS", "allow_unsigned": "QONNECT_ALLOW_UNSIGNED",
    "signals": "QONNECT_SIGNALS", "latency_query": "QONNECT_LATENCY_QUERY", "traffic_query": "QONNECT_TRAFFIC_QUERY",
    "prometheus_window": "QONNECT_PROMETHEUS_WINDOW",
}


def register(sub: Any) -> None:
    p = sub.add_parser("agent", help="run the resource agent of one cluster",
                       description="Fetch cluster/<NAME>, server-side apply it, prune what left it, "
                       "report health to the leads. Options also read QONNECT_* environment variables.")
    e = os.environ.get
    p.add_argument("--cluster", default=e(_ENV["cluster"]), help="cluster name [QONNECT_CLUSTER]")
    p.add_argument("--repo", default=e(_ENV["repo"]), help="Git URL of the goals repository [QONNECT_REPO]")
    p.add_argument("--branch", default=e(_ENV["branch"], ""), help="branch to follow (default cluster/NAME) [QONNECT_BRANCH]")
    p.add_argument("--kubeconfig", default=e(_ENV["kubeconfig"]) or e("KUBECONFIG"),
                   help="kubeconfig file; in-cluster credentials when absent [QONNECT_KUBECONFIG, KUBECONFIG]")
    p.add_argument("--lead", default=e(_ENV["lead"], ""), help="lead URLs, comma-separated [QONNECT_LEAD]")
    p.add_argument("--token-file", default=e(_ENV["token_file"]), type=Path,
                   help="bearer token for reports; re-read when it changes [QONNECT_TOKEN_FILE]")
    p.add_argument("--lead-ca", default=e(_ENV["lead_ca"]), type=Path,
                   help="CA bundle to verify https:// leads (default: the system store) [QONNECT_LEAD_CA]")
    p.add_argument("--trusted-keys", default=e(_ENV["trusted_keys"]), type=Path, metavar="FILE",
                   help="apply only commits signed by a key in FILE: Git's allowed-signers format "
                        "(principal keytype base64) or public key lines; re-read when it changes "
                        "[QONNECT_TRUSTED_KEYS]")
    p.add_argument("--allow-unsigned", action="store_true", default=e(_ENV["allow_unsigned"], "") in ("1", "true"),
                   help="for trials only: apply commits whoever wrote them, without --trusted-keys "
                        "[QONNECT_ALLOW_UNSIGNED=true]")
    add_signal_arguments(p)
    p.add_argument("--namespace", default=e(_ENV["namespace"], "qonnect-system"), help="where the inventory lives [QONNECT_NAMESPACE]")
    p.add_argument("--cache-dir", default=e(_ENV["cache_dir"]), type=Path, help="local bare Git cache [QONNECT_CACHE_DIR]")
    p.add_argument("--interval", type=float, default=float(e(_ENV["interval"], "30")), help="poll seconds (default 30)")
    p.add_argument("--drift-interval", type=float, default=float(e(_ENV["drift_interval"], "300")),
                   help="seconds between full dry-run comparisons (default 300)")
    p.add_argument("--drift", choices=("heal", "report"), default=e(_ENV["drift"], "heal"),
                   help="heal: re-apply drifted objects; report: only report them [QONNECT_DRIFT]")
    p.add_argument("--report-interval", type=float, default=float(e(_ENV["report_interval"], "15")),
                   help="heartbeat seconds (default 15)")
    p.add_argument("--git-poll-max-interval", type=float,
                   default=float(e(_ENV["git_poll_max_interval"], "300")),
                   help="while the leads' answers name the commit the agent has, ask Git only this often "
                        "(default 300 s; 0: every --interval) [QONNECT_GIT_POLL_MAX_INTERVAL]")
    p.add_argument("--prune-fraction", type=float, default=float(e(_ENV["prune_fraction"], "0.5")),
                   help="largest share of the inventory one sync may delete without Qonnect-Prune-Limit (default 0.5)")
    p.add_argument("--protect-namespace", action="append", default=_csv(e(_ENV["protect_namespace"])),
                   metavar="NS", help="a namespace never applied to or pruned, besides kube-system, kube-public, "
                   "kube-node-lease, default and --namespace (repeatable) [QONNECT_PROTECT_NAMESPACES, comma-separated]")
    p.add_argument("--protect-kind", action="append", default=_csv(e(_ENV["protect_kind"])),
                   metavar="[GROUP/]KIND", help="a kind never pruned, besides Namespace, PersistentVolumeClaim, "
                   "PersistentVolume and CustomResourceDefinition (repeatable; apps/Deployment, ConfigMap) "
                   "[QONNECT_PROTECT_KINDS, comma-separated]")
    p.add_argument("--allow-system-object", action="append", default=_csv(e(_ENV["allow_system_object"])),
                   metavar="KIND/[NAMESPACE/]NAME", help="a system RBAC object (system:* names, cluster-admin, "
                   "the API server's bootstrap roles) the agent may adopt, change and prune, e.g. "
                   "ClusterRoleBinding/cluster-admin (repeatable; none by default) "
                   "[QONNECT_ALLOW_SYSTEM_OBJECTS, comma-separated]")
    p.add_argument("--api-timeout", type=float, default=float(e(_ENV["api_timeout"], "30")),
                   help="longest one call to the cluster's API server may take, retries included (default 30 s); "
                        "one that gets no answer marks the API server as not answering and ends the pass "
                        "ApiUnavailable [QONNECT_API_TIMEOUT]")
    p.add_argument("--prune-workers", type=int, default=int(e(_ENV["prune_workers"], "16")),
                   help="deletes in flight at once while pruning (default 16) [QONNECT_PRUNE_WORKERS]")
    p.add_argument("--wait-timeout", type=float, default=float(e(_ENV["wait_timeout"], "60")),
                   help="--once: seconds to wait for health (default 60; 0: do not wait)")
    p.add_argument("--unschedulable-grace", type=float, default=float(e(_ENV["unschedulable_grace"], "120")),
                   help="seconds a pod may stay unschedulable before its workload is reported "
                        "Degraded/Unschedulable (default 120) [QONNECT_UNSCHEDULABLE_GRACE]")
    p.add_argument("--metrics-addr", default=e(_ENV["metrics_addr"]), help="host:port for /metrics [QONNECT_METRICS_ADDR]")
    p.add_argument("--webhook-addr", default=e(_ENV["webhook_addr"]), help="host:port for POST /webhook (needs a secret)")
    p.add_argument("--webhook-secret-file", default=e(_ENV["webhook_secret_file"]), type=Path)
    p.add_argument("--log-level", default=e(_ENV["log_level"], "info"))
    p.add_argument("--once", action="store_true", default=e(_ENV["once"], "") in ("1", "true"),
                   help="sync once, print the result, exit 0 healthy / 1 failed / 2 not healthy")
    p.set_defaults(handler=run)


def add_signal_arguments(p: Any) -> None:
    """The options that say what to ask Prometheus (the agent's and the observer's)."""
    e = os.environ.get
    p.add_argument("--prometheus", default=e(_ENV["prometheus"]), help="Prometheus base URL [QONNECT_PROMETHEUS]")
    p.add_argument("--signals", default=e(_ENV["signals"], "qonnect"), choices=("qonnect", "istio", "linkerd", "cilium"),
                   help="the latency and traffic queries for a mesh (docs/agent.md; default qonnect: the "
                        "gauges of --latency-metric and --traffic-metric) [QONNECT_SIGNALS]")
    p.add_argument("--latency-query", default=e(_ENV["latency_query"]),
                   help="PromQL giving milliseconds by `target`; $cluster and $window are filled in "
                        "(overrides --signals) [QONNECT_LATENCY_QUERY]")
    p.add_argument("--traffic-query", default=e(_ENV["traffic_query"]),
                   help="PromQL giving requests/s by `region` and `app`+`component` or `namespace`+`workload` "
                        "(overrides --signals) [QONNECT_TRAFFIC_QUERY]")
    p.add_argument("--prometheus-window", default=e(_ENV["prometheus_window"], "1m"),
                   help="the range of rate() in the queries ($window; default 1m) [QONNECT_PROMETHEUS_WINDOW]")
    p.add_argument("--latency-metric", default=e(_ENV["latency_metric"], "qonnect_network_latency_ms"))
    p.add_argument("--traffic-metric", default=e(_ENV["traffic_metric"], "qonnect_component_requests_per_second"))


def signal_settings(args: argparse.Namespace, command: str) -> dict[str, Any]:
    """The ``AgentConfig`` fields of ``add_signal_arguments``."""
    from qonnect_gitops.agent.prometheus import PRESETS, check_window

    try:
        check_window(args.prometheus_window)
    except ValueError as exc:
        raise SystemExit(f"qonnect {command}: --prometheus-window: {exc}") from None
    preset = PRESETS[args.signals] if args.signals != "qonnect" else None
    return {"prometheus": args.prometheus, "latency_metric": args.latency_metric,
            "traffic_metric": args.traffic_metric, "prometheus_window": args.prometheus_window,
            "latency_query": args.latency_query or (preset.latency if preset else None),
            "traffic_query": args.traffic_query or (preset.traffic if preset else None)}


def _csv(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip()]


def _kind(text: str) -> tuple[str, str]:
    """``apps/Deployment`` -> ("apps", "Deployment"); a bare kind is of the core group."""
    group, _, kind = text.rpartition("/")
    if not kind or not kind[0].isupper() or not kind.isalnum():
        raise SystemExit(f"qonnect agent: --protect-kind {text!r}: expected [GROUP/]Kind, e.g. apps/Deployment")
    return group, kind


_CLUSTER_RBAC, _NAMESPACED_RBAC = ("ClusterRole", "ClusterRoleBinding"), ("Role", "RoleBinding")


def _system_object(text: str) -> tuple[str, str, str]:
    """``ClusterRoleBinding/cluster-admin`` -> (kind, "", name); ``RoleBinding/ns/name`` -> (kind, ns, name)."""
    parts = text.split("/")
    ok = (len(parts) == 2 and parts[0] in _CLUSTER_RBAC) or (len(parts) == 3 and parts[0] in _NAMESPACED_RBAC)
    if not ok or not all(parts):
        raise SystemExit(f"qonnect agent: --allow-system-object {text!r}: expected ClusterRole/NAME, "
                         "ClusterRoleBinding/NAME, Role/NAMESPACE/NAME or RoleBinding/NAMESPACE/NAME")
    return (parts[0], parts[1], parts[2]) if len(parts) == 3 else (parts[0], "", parts[1])


def build_config(args: argparse.Namespace) -> Any:
    from qonnect_gitops.agent.config import DEFAULT_PROTECTED_KINDS, AgentConfig
    from qonnect_gitops.gitstore.remote import credentials_from_env
    from qonnect_gitops.model.limits import RESERVED_NAMESPACES

    missing = [f"--{n} ({_ENV[n]})" for n in ("cluster", "repo") if not getattr(args, n)]
    if missing:
        raise SystemExit(f"qonnect agent: missing {', '.join(missing)}")
    if args.token_file and not args.token_file.is_file():
        raise SystemExit(f"qonnect agent: --token-file {args.token_file} is not a readable file")
    if args.lead_ca and not args.lead_ca.is_file():
        raise SystemExit(f"qonnect agent: --lead-ca {args.lead_ca} is not a readable file")
    leads = tuple(u.strip() for u in (args.lead or "").split(",") if u.strip())
    if args.webhook_addr and not args.webhook_secret_file:
        raise SystemExit("qonnect agent: --webhook-addr needs --webhook-secret-file")
    if not 1 <= args.prune_workers <= 256:
        raise SystemExit("qonnect agent: --prune-workers must be between 1 and 256")
    if not 0 <= args.git_poll_max_interval < float("inf"):
        raise SystemExit("qonnect agent: --git-poll-max-interval must be 0 (off) or a finite number of seconds")
    if not 0 < args.api_timeout < float("inf"):
        raise SystemExit(f"qonnect agent: --api-timeout {args.api_timeout:g}: expected a positive number of seconds")
    _check_trust(args)
    cache = args.cache_dir or Path(tempfile.gettempdir()) / "qonnect-agent"
    return AgentConfig(
        cluster=args.cluster, repo=args.repo, branch=args.branch, kubeconfig=args.kubeconfig,
        namespace=args.namespace, cache_dir=cache, leads=leads, token_file=args.token_file,
        lead_ca=args.lead_ca, **signal_settings(args, "agent"), interval=args.interval,
        drift_interval=args.drift_interval, drift=args.drift, report_interval=args.report_interval,
        git_poll_max_interval=args.git_poll_max_interval, prune_fraction=args.prune_fraction, wait_timeout=args.wait_timeout,
        unschedulable_grace=args.unschedulable_grace, metrics_addr=args.metrics_addr,
        webhook_addr=args.webhook_addr,
        webhook_secret=args.webhook_secret_file.read_bytes().strip() if args.webhook_secret_file else None,
        git_credentials=credentials_from_env(),
        protected_namespaces=RESERVED_NAMESPACES | frozenset(args.protect_namespace),
        protected_kinds=DEFAULT_PROTECTED_KINDS | frozenset(_kind(k) for k in args.protect_kind),
        system_objects=frozenset(_system_object(o) for o in args.allow_system_object),
        prune_workers=args.prune_workers, api_timeout=args.api_timeout, trusted_keys=args.trusted_keys,
        allow_unsigned=args.allow_unsigned)


def _check_trust(args: argparse.Namespace) -> None:
    """Exactly one of --trusted-keys (a usable file) and --allow-unsigned."""
    from qonnect_gitops.agent.verify import TrustedKeys
    from qonnect_gitops.model.signers import SignersError

    if args.trusted_keys is None and not args.allow_unsigned:
        raise SystemExit("qonnect agent: no trusted keys: give --trusted-keys FILE (QONNECT_TRUSTED_KEYS) with the "
                         "public keys the leads sign with; --allow-unsigned applies unsigned commits (trials only)")
    if args.trusted_keys is not None and args.allow_unsigned:
        raise SystemExit("qonnect agent: --trusted-keys and --allow-unsigned exclude each other")
    if args.trusted_keys is not None:
        try:
            keys = TrustedKeys(args.trusted_keys).signers()
        except SignersError as exc:
            raise SystemExit(f"qonnect agent: --trusted-keys {exc}") from None
        log.info("trusted_keys", path=str(args.trusted_keys), keys=len(keys),
                 fingerprints=",".join(k.key.fingerprint for k in keys))
    else:
        log.warning("unsigned_commits_allowed", why="--allow-unsigned: any commit on the branch is applied, "
                    "whoever wrote it; for trials only")


def run(args: argparse.Namespace) -> int:
    from qonnect_gitops.agent.agent import Agent

    configure(args.log_level)
    cfg = build_config(args)
    agent = Agent(cfg)
    if args.once:
        result = agent.sync(full=True, wait=cfg.wait_timeout)
        print(render_result(result))
        if agent.reporter is not None:
            agent.reporter.start()
            agent.reporter.flush(10.0)
            if agent.reporter.sent == 0:
                print(f"report not delivered: {redact(agent.reporter.last_error)}", file=sys.stderr)
            agent.reporter.stop()
        return result.exit_code
    signal.signal(signal.SIGTERM, lambda *_: agent.stop())
    try:
        agent.run()
    except KeyboardInterrupt:
        agent.stop()
    return 0


def render_result(result: Any) -> str:
    """The readable outcome of one sync: objects and actions, prunes, refusals, status."""
    from qonnect_gitops.agent.inventory import describe, key_of

    health = {key_of(o): h for o, h in result.health}
    rows = []
    for r in result.objects:
        h = health.get(r.key, ("-", ""))
        note = r.message if r.action not in ("unchanged", "created") else h[1]
        if r.took_over:
            note = f"took fields from {', '.join(r.took_over)}; {note}"
        rows.append((r.name, r.action, h[0], note[:100]))
    if not result.objects:
        rows = [(describe(key_of(o)), "-", h[0], h[1][:100]) for o, h in result.health]
    for k in result.pruned.deleted:
        rows.append((describe(k), "pruned", "-", ""))
    for k, why in result.pruned.kept:
        rows.append((describe(k), "kept", "-", why))
    lines = [format_table(("OBJECT", "ACTION", "HEALTH", "MESSAGE"), rows)] if rows else []
    for ref in result.refusals:
        lines.append(f"REFUSED {ref.reason}: {ref.message}")
    applied = f"{result.applied.commit[:12]} (generation {result.applied.generation})" if result.applied else "nothing"
    lines.append(f"commit {(result.commit or '?')[:12]} generation {result.generation} term {result.term}; "
                 f"running {applied}")
    lines.append(f"{result.state} {result.reason}: {result.message}")
    return "\n".join(lines)
