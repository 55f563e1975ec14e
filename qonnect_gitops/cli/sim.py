"""``qonnect sim``: run one simulated cluster per Cluster file until stopped."""

from __future__ import annotations

import argparse
import re
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

from qonnect_gitops.cli.table import format_table
from qonnect_gitops.model import GoalsError
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
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Start the fleet, print where it listens, wait for a stop signal."""
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
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    out = Path(args.kubeconfig_dir)
    try:
        fleet.start(kubeconfig_dir=out, users=args.user)
        print(format_table(("CLUSTER", "API", "PROMETHEUS", "ADMIN", "NODES"), fleet.rows()))
        print(f"\nkubeconfigs in {out}/ (kubectl --kubeconfig {out}/<cluster>.yaml get nodes); "
              "Ctrl-C stops all.", flush=True)
        if args.user:
            print(f"restricted users ({', '.join(args.user)}): {out}/<cluster>.<user>.yaml; grant them "
                  "Roles and RoleBindings with the admin kubeconfig.", flush=True)
        while not stop.wait(1.0):  # a timed wait keeps the main thread responsive to signals
            pass
    finally:
        fleet.stop()
        for s, handler in previous.items():
            signal.signal(s, handler)
    print("stopped", flush=True)
    return 0
