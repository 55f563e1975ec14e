"""``qonnect demo``: the whole system on one machine, run through its scenarios."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

SCENARIO_NAMES = ("initial", "goals-change", "resize", "regions", "failover", "api-down", "stalled", "burst",
                  "leader-kill", "review")
EXTRA_SCENARIOS = ("cloud-burst",)  # only with --scenario: the default run keeps its length


def register(sub: Any) -> None:
    p = sub.add_parser(
        "demo", help="run Git, three leads, nine simulated clusters and their agents through the demo scenarios",
        description="Start a goals repository served by git daemon (with a post-receive hook that sends the push "
        "webhook), three lead agents, nine simulated clusters and their agents (all separate processes), push "
        "Bookinfo and the sensor pipeline, and run the scenarios: " + ", ".join(SCENARIO_NAMES) + ". "
        "Exit 0 only if every scenario passed.")
    p.add_argument("--scenario", choices=SCENARIO_NAMES + EXTRA_SCENARIOS,
                   help="run only this one (and what it needs first); cloud-burst runs only when named")
    p.add_argument("--report", type=Path, metavar="FILE", help="write the JSON report here")
    p.add_argument("--keep", action="store_true", help="leave everything running afterwards, until Ctrl-C")
    p.add_argument("--dir", type=Path, metavar="DIR", help="work directory (default: a new temporary one)")
    p.add_argument("--startup-delay", type=float, default=1.0, metavar="S",
                   help="sim: seconds from binding a Pod to Running (default 1.0)")
    p.add_argument("--events", action="store_true", help="print event lines even on a terminal")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from qonnect_gitops.demo.runner import run as run_demo
    from qonnect_gitops.demo.stack import Settings

    if args.dir is not None:
        args.dir.mkdir(parents=True, exist_ok=True)
        if any(args.dir.iterdir()):
            print(f"qonnect demo: {args.dir} is not empty")
            return 2
    return run_demo(only=args.scenario, report=args.report, keep=args.keep, root=args.dir,
                    settings=Settings(startup_delay=args.startup_delay), live=False if args.events else None)
