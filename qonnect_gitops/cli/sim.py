"""``qonnect sim``: run one simulated cluster per Cluster file until stopped."""

from __future__ import annotations

import argparse
import json
import re
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from qonnect_gitops.cli.table import format_table

if TYPE_CHECKING:
    from qonnect_gitops.sim.fleet import SimFleet

USER_NAME = re.compile(r"^(?!system:)[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "sim",
        help="run simulated clusters for a goals repository",
        description="Start one simulated Kubernetes cluster (API server, nodes, scheduler, fake kubelet, "
        "Prometheus query API, admin endpoint) per Cluster file, write a kubeconfig for each into "
        "--kubeconfig-dir once it listens, and run until Ctrl-C or SIGTERM.",
    )
    parser.add_argument("--clusters", required=True, metavar="DIR",
                        help="a goals repository, or its clusters/ folder")
    parser.add_argument("--kubeconfig-dir", required=True, metavar="OUT",
                        help="where <cluster>.yaml kubeconfigs are written")
    parser.add_argument("--startup-delay", type=float, default=1.0, metavar="S",
                        help="seconds from binding a Pod to reporting it Running (default: 1.0)")
    parser.add_argument("--user", action="append", default=[], metavar="NAME",
                        help="also write <cluster>.<NAME>.yaml: a kubeconfig of a restricted user whose requests "
                             "the cluster's RBAC authorises (repeatable)")
    parser.add_argument("--capi", action="store_true",
                        help="run emulated Cluster API controllers on the management clusters of the "
                             "goals' cluster pools (docs/cloud-bursting.md); new clusters' kubeconfigs "
                             "appear in --kubeconfig-dir")
    parser.add_argument("--capi-on", action="append", default=[], metavar="CLUSTER",
                        help="the management cluster(s) for --capi (default: those the pools name)")
    parser.add_argument("--capi-delay", type=float, default=10.0, metavar="S",
                        help="seconds from a Cluster object to a ready cluster (default: 10)")
    parser.add_argument("--capi-fail", type=int, default=0, metavar="N",
                        help="the first N clusters requested fail to provision (phase Failed)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Start the fleet, print where it listens, wait for a stop signal."""
    # Imported here, not with the module: `qonnect --help` builds this parser too.
    from qonnect_gitops.model import GoalsError
    from qonnect_gitops.sim.fleet import SimFleet

    if args.startup_delay < 0:
        print("qonnect sim: --startup-delay must not be negative", file=sys.stderr)
        return 2
    for user in args.user:
        if not USER_NAME.match(user):
            print(f"qonnect sim: --user {user!r}: expected a name of letters, digits, '-', '_' or '.' "
                  "(not starting with system:)", file=sys.stderr)
            return 2
    try:
        fleet = SimFleet.from_directory(args.clusters, startup_delay=args.startup_delay)
    except GoalsError as exc:
        print(f"qonnect sim: {args.clusters} is not a valid goals repository:\n{exc}", file=sys.stderr)
        return 1
    except (FileNotFoundError, ValueError) as exc:
        print(f"qonnect sim: {exc}", file=sys.stderr)
        return 1
    out = Path(args.kubeconfig_dir)
    cluster_api: list[Any] = []
    if args.capi:
        try:
            _capi_managers(fleet, args)
        except ValueError as exc:
            print(f"qonnect sim: {exc}", file=sys.stderr)
            return 2
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        fleet.start(kubeconfig_dir=out, users=args.user)
        if args.capi:
            # After the clusters listen: reading the CRDs takes seconds, agents need not wait.
            cluster_api = _enable_capi(fleet, args, out)
        print(format_table(("CLUSTER", "API", "PROMETHEUS", "ADMIN", "NODES"), fleet.rows()))
        print(f"\nkubeconfigs in {out}/ (kubectl --kubeconfig {out}/<cluster>.yaml get nodes); "
              "Ctrl-C stops all.", flush=True)
        if args.user:
            print(f"restricted users ({', '.join(args.user)}): {out}/<cluster>.<user>.yaml; grant them "
                  "Roles and RoleBindings with the admin kubeconfig.", flush=True)
        while not stop.wait(1.0):  # a timed wait keeps the main thread responsive to signals
            pass
    finally:
        for controller in cluster_api:
            controller.stop_all()
        fleet.stop()
        for s, handler in previous.items():
            signal.signal(s, handler)
    print("stopped", flush=True)
    return 0


def _capi_managers(fleet: SimFleet, args: argparse.Namespace) -> list[str]:
    """The management clusters for --capi (ValueError: what is wrong)."""
    from qonnect_gitops.sim.fleet import load_clusters

    if args.capi_delay < 0 or args.capi_fail < 0:
        raise ValueError("--capi-delay and --capi-fail must not be negative")
    _, goals = load_clusters(args.clusters)
    managers = sorted(set(args.capi_on) or (
        {p.spec.management_cluster for p in goals.pools.values()} if goals else set()))
    if not managers:
        raise ValueError("--capi needs --capi-on CLUSTER or a goals repository with clusterPools/ "
                         "(the management clusters come from there)")
    unknown = [name for name in managers if name not in fleet.clusters]
    if unknown:
        raise ValueError(f"--capi-on {', '.join(unknown)}: no such cluster")
    return managers


def _enable_capi(fleet: SimFleet, args: argparse.Namespace, out: Path) -> list[Any]:
    """Cluster API on the management clusters (``_capi_managers``)."""
    from qonnect_gitops.sim.control import capi
    from qonnect_gitops.sim.fleet import write_atomic

    managers = _capi_managers(fleet, args)

    def ready(name: str, sim: Any) -> None:
        # As a bootstrap would: the new cluster's kubeconfig appears for its agent.
        write_atomic(out / f"{name}.endpoints.json", json.dumps(
            {"name": name, "api": sim.url, "prometheus": sim.prometheus_url, "admin": sim.admin_url}) + "\n")
        write_atomic(out / f"{name}.yaml", sim.kubeconfig_yaml())
        print(f"cluster-api: {name} provisioned at {sim.url}", flush=True)

    def deleted(name: str, sim: Any) -> None:
        for suffix in (".yaml", ".endpoints.json"):
            (out / f"{name}{suffix}").unlink(missing_ok=True)
        print(f"cluster-api: {name} deleted", flush=True)

    return [capi.enable(fleet[name], args.capi_delay, args.capi_fail, ready, deleted) for name in managers]
