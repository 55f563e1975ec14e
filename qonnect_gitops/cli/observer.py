"""``qonnect observer``: report a cluster that Flux or Argo CD syncs, never writing to it.

The leads plan such a cluster as one with an agent: the observer reports the commit the
syncer applied (Flux's ``Kustomization.status.lastAppliedRevision``, Argo CD's
``Application.status.sync.revision``) and its generation, component health, nodes,
latency and traffic. Options also read ``QONNECT_*`` variables, as the agent's do;
``--once`` observes once, prints the report and exits 0 (Ready), 1 (Stalled) or 2.

Why a command of its own and not ``qonnect agent --report-only``: most of the agent's
options (prune limits, protected kinds, drift, adoption) mean nothing here, the RBAC is a
different, read-only one (deploy/observer/), and ``--drift report`` already names a
report-only mode of the agent that does apply the first commit.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

from qonnect_gitops.cli.agent import _ENV, add_signal_arguments, signal_settings
from qonnect_gitops.logs import configure, redact

_OWN_ENV = {"syncer": "QONNECT_SYNCER", "syncer_object": "QONNECT_SYNCER_OBJECT",
            "syncer_kubeconfig": "QONNECT_SYNCER_KUBECONFIG"}


def register(sub: Any) -> None:
    p = sub.add_parser("observer", help="report a cluster that Flux or Argo CD syncs (read-only)",
                       description="Read what Flux or Argo CD applied of cluster/<NAME> and report it, with "
                       "health, nodes, latency and traffic, to the leads. Never writes to the cluster.")
    e = os.environ.get
    p.add_argument("--cluster", default=e(_ENV["cluster"]), help="cluster name [QONNECT_CLUSTER]")
    p.add_argument("--repo", default=e(_ENV["repo"]), help="Git URL of the goals repository [QONNECT_REPO]")
    p.add_argument("--branch", default=e(_ENV["branch"], ""), help="the branch the syncer follows (default "
                   "cluster/NAME) [QONNECT_BRANCH]")
    p.add_argument("--syncer", default=e(_OWN_ENV["syncer"]), choices=("flux", "argocd"),
                   help="what applies the branch [QONNECT_SYNCER]")
    p.add_argument("--syncer-object", default=e(_OWN_ENV["syncer_object"]), metavar="NAMESPACE/NAME",
                   help="the Flux Kustomization or Argo CD Application (default flux-system/qonnect, "
                        "argocd/qonnect-NAME) [QONNECT_SYNCER_OBJECT]")
    p.add_argument("--syncer-kubeconfig", default=e(_OWN_ENV["syncer_kubeconfig"]),
                   help="kubeconfig of the cluster holding that object (a central Argo CD); default: "
                        "this cluster [QONNECT_SYNCER_KUBECONFIG]")
    p.add_argument("--kubeconfig", default=e(_ENV["kubeconfig"]) or e("KUBECONFIG"),
                   help="kubeconfig file; in-cluster credentials when absent [QONNECT_KUBECONFIG, KUBECONFIG]")
    p.add_argument("--lead", default=e(_ENV["lead"], ""), help="lead URLs, comma-separated [QONNECT_LEAD]")
    p.add_argument("--token-file", default=e(_ENV["token_file"]), type=Path,
                   help="bearer token for reports; re-read when it changes [QONNECT_TOKEN_FILE]")
    p.add_argument("--lead-ca", default=e(_ENV["lead_ca"]), type=Path,
                   help="CA bundle to verify https:// leads [QONNECT_LEAD_CA]")
    add_signal_arguments(p)
    p.add_argument("--cache-dir", default=e(_ENV["cache_dir"]), type=Path,
                   help="local bare Git cache [QONNECT_CACHE_DIR]")
    p.add_argument("--interval", type=float, default=float(e(_ENV["interval"], "30")),
                   help="seconds between observations (default 30) [QONNECT_INTERVAL]")
    p.add_argument("--report-interval", type=float, default=float(e(_ENV["report_interval"], "15")),
                   help="heartbeat seconds until a lead answers with the fleet's (default 15)")
    p.add_argument("--unschedulable-grace", type=float, default=float(e(_ENV["unschedulable_grace"], "120")),
                   help="seconds a pod may stay unschedulable before its workload is Degraded (default 120)")
    p.add_argument("--metrics-addr", default=e(_ENV["metrics_addr"]),
                   help="host:port for /metrics [QONNECT_METRICS_ADDR]")
    p.add_argument("--log-level", default=e(_ENV["log_level"], "info"))
    p.add_argument("--once", action="store_true", default=e(_ENV["once"], "") in ("1", "true"),
                   help="observe once, print the report, exit 0 Ready / 1 Stalled / 2 otherwise")
    p.set_defaults(handler=run)


def build(args: argparse.Namespace) -> Any:
    """The observer the options describe (SystemExit naming what is wrong)."""
    from qonnect_gitops.agent.observer import Observer

    return Observer(*settings(args))


def settings(args: argparse.Namespace) -> tuple[Any, Any]:
    """``(AgentConfig, SyncerRef)`` of the options (SystemExit naming what is wrong)."""
    from qonnect_gitops.agent.config import AgentConfig
    from qonnect_gitops.agent.observer import SyncerKind, SyncerRef
    from qonnect_gitops.gitstore.remote import credentials_from_env

    missing = [f"--{n.replace('_', '-')}" for n in ("cluster", "repo", "syncer") if not getattr(args, n)]
    if missing:
        raise SystemExit(f"qonnect observer: missing {', '.join(missing)}")
    for flag, path in (("--token-file", args.token_file), ("--lead-ca", args.lead_ca)):
        if path and not path.is_file():
            raise SystemExit(f"qonnect observer: {flag} {path} is not a readable file")
    kind = SyncerKind(args.syncer)
    ref = SyncerRef.default(kind, args.cluster)
    if args.syncer_object:
        ns, sep, name = args.syncer_object.partition("/")
        if not sep or not ns or not name or "/" in name:
            raise SystemExit(f"qonnect observer: --syncer-object {args.syncer_object!r}: expected NAMESPACE/NAME")
        ref = SyncerRef(kind, ns, name)
    ref = SyncerRef(ref.kind, ref.namespace, ref.name, args.syncer_kubeconfig)
    cfg = AgentConfig(
        cluster=args.cluster, repo=args.repo, branch=args.branch, kubeconfig=args.kubeconfig,
        cache_dir=args.cache_dir or Path(tempfile.gettempdir()) / "qonnect-observer",
        leads=tuple(u.strip() for u in (args.lead or "").split(",") if u.strip()), token_file=args.token_file,
        lead_ca=args.lead_ca, **signal_settings(args, "observer"), interval=args.interval,
        report_interval=args.report_interval, unschedulable_grace=args.unschedulable_grace,
        metrics_addr=args.metrics_addr, git_credentials=credentials_from_env(),
        # The observer applies nothing: verifying what is applied is the syncer's job
        # (Flux's spec.verify; docs/agent.md, "Using Flux or Argo CD instead of the agent").
        allow_unsigned=True)
    return cfg, ref


def run(args: argparse.Namespace) -> int:
    from qonnect_gitops.model.status import SyncState

    configure(args.log_level)
    observer = build(args)
    if args.once:
        result = observer.sync(full=True)
        report = observer.build_report(result)
        print(json.dumps(report.model_dump(mode="json", by_alias=True, exclude_none=True), indent=2))
        if observer.reporter is not None:
            observer.reporter.start()
            observer.reporter.flush(10.0)
            if observer.reporter.sent == 0:
                print(f"report not delivered: {redact(observer.reporter.last_error)}", file=sys.stderr)
            observer.reporter.stop()
        return {SyncState.READY: 0, SyncState.STALLED: 1}.get(result.state, 2)
    signal.signal(signal.SIGTERM, lambda *_: observer.stop())
    try:
        observer.run()
    except KeyboardInterrupt:
        observer.stop()
    return 0
