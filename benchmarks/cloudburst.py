"""Benchmark cloud bursting: seconds from a burst to a cluster provisioned through the
simulated Cluster API, to the overflow running there, and from the end of the burst to
the cluster removed.

    PYTHONPATH=. python benchmarks/cloudburst.py [--trials 3] [--capi-delay 10] [--json]

Each trial starts the small fleet of tests/provision (git daemon, three leads, cloud-1
running Cluster API, its agent; pool ``burst`` with a 2 s scale-up delay and a 5 s
linger), pushes 4 -> 12 replicas of shop/api (8 fit on cloud-1) and back, and reports
the phases ``demo.cloudburst`` measures (provisionedSeconds, runningSeconds,
removedSeconds). Figures depend on the machine's load: they are wall-clock times.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from qonnect_gitops.demo import cloudburst
from qonnect_gitops.demo.stack import Settings, Stack
from tests.provision.test_e2e import LINGER, template


def trial(capi_delay: float) -> dict[str, float | None]:
    with tempfile.TemporaryDirectory(prefix="qonnect-cloudburst-") as tmp:
        root = Path(tmp) / "run"
        root.mkdir()
        stack = Stack(root, Settings(startup_delay=0.5, agent_interval=3.0), template=template(Path(tmp)),
                      sim_args=["--capi", "--capi-delay", str(capi_delay)])
        try:
            stack.start(on_step=lambda _: None)
            out = cloudburst.run(stack, cloudburst.Burst(
                path="apps/shop/app.yaml", small="replicas: 4", large="replicas: 12",
                component="shop/api", linger=LINGER), event=lambda _: None)
        finally:
            stack.stop()
        if out.problems:
            raise RuntimeError("; ".join(out.problems))
        return out.phases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--capi-delay", type=float, default=10.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    runs = [trial(args.capi_delay) for _ in range(args.trials)]
    keys = ("provisionedSeconds", "runningSeconds", "removedSeconds")
    summary = {k: statistics.median(float(r[k] or 0) for r in runs) for k in keys}
    summary.update(lingerSeconds=LINGER, capiDelaySeconds=args.capi_delay, trials=args.trials)
    if args.json:
        print(json.dumps({"median": summary, "runs": runs}, indent=2))
    else:
        for key, value in summary.items():
            print(f"{key:20} {value}")


if __name__ == "__main__":
    main()
