"""Benchmark the agent's pod-level health checks (unschedulable pods, Service endpoints).

One namespace with N Deployments, one Service each, and P pods spread over them: the
time of one health pass's pod verdicts (what ``Agent._pod_verdicts`` does after listing
the namespace's pods once), with the label index and with a scan of every pod per object.

    python benchmarks/pod_health.py                 # 100 workloads, 2000 pods
    python benchmarks/pod_health.py --workloads 500 --pods 10000
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from qonnect_gitops.agent import health


def fleet(workloads: int, pods: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """Deployments (still progressing), their Services and their pods (Running and Ready)."""
    deps = [{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": f"a{i}", "namespace": "shop"},
             "spec": {"selector": {"matchLabels": {"app": f"a{i}"}},
                      "template": {"metadata": {"labels": {"app": f"a{i}"}}}}, "status": {"replicas": 1}}
            for i in range(workloads)]
    svcs = [{"apiVersion": "v1", "kind": "Service", "metadata": {"name": f"a{i}", "namespace": "shop"},
             "spec": {"selector": {"app": f"a{i}"}}} for i in range(workloads)]
    running = [{"metadata": {"name": f"p{i}", "namespace": "shop", "labels": {"app": f"a{i % workloads}",
                                                                           "pod-template-hash": "x"}},
                "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
               for i in range(pods)]
    return deps, svcs, running


def one_pass(deps: list[dict[str, Any]], svcs: list[dict[str, Any]], pods: list[dict[str, Any]],
             indexed: bool) -> float:
    """Seconds for the verdicts of every Deployment and Service."""
    start = time.perf_counter()
    index = health.PodIndex(pods)
    for obj, verdict in [*((d, ("Progressing", "")) for d in deps), *((s, ("Healthy", "")) for s in svcs)]:
        here = index.candidates(obj) if indexed else pods
        health.pod_verdict(obj, verdict, deps, here, now=0.0, grace=120.0)  # type: ignore[arg-type]
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", type=int, default=100)
    parser.add_argument("--pods", type=int, default=2000)
    args = parser.parse_args()
    deps, svcs, pods = fleet(args.workloads, args.pods)
    for indexed in (True, False):
        best = min(one_pass(deps, svcs, pods, indexed) for _ in range(3))
        print(f"{args.workloads} Deployments + {args.workloads} Services over {args.pods} pods, "
              f"{'label index' if indexed else 'scan per object'}: {best * 1000:.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
