"""What a report costs a lead's HTTP thread, stage by stage, in one process.

    PYTHONPATH=. python benchmarks/report_path.py [--clusters 10000] [--reports 2000] [--json]

A ``LeadService`` as ``qonnect lead`` builds it (a one-member Raft group, tokens for N
clusters, goals declaring them, no goals repository) and a ``LeadAPI`` on it; each
stage of a report's way through ``LeadAPI.inline`` is timed over ``--reports`` report
requests like an agent's (CPU time of this thread, best of five), in microseconds per
report: decoding the body, the token, the rate limit, the KB's admission, the checks
whole, the answer built from a verdict and its bytes. Nothing is committed: the
answer is built from a made-up verdict, so what Raft, the event loop and the sockets
cost is not here (``benchmarks/lead.py`` measures a lead whole; the HTTP server alone,
with a handler that answers at once, was 35 us a request at 1,000 connections).

Read it against ``benchmarks/lead.py``'s per-thread figures: a stage's share here is
its share of the handler's Python; what the lead's HTTP thread spends beyond the sum is
the event loop, the sockets, the completions and contention with the other threads.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from qonnect_gitops.kb import ReportVerdict
from qonnect_gitops.kb.records import encode_entry
from qonnect_gitops.lead.http import LeadAPI
from qonnect_gitops.lead.httpd import Headers, Request, _encode
from qonnect_gitops.lead.raft.secret import new_secret
from qonnect_gitops.lead.report_fast import record_of
from qonnect_gitops.lead.service import LeadConfig, LeadService
from qonnect_gitops.lead.tokens import create_tokens
from tests.lead.harness import report
from tests.ports import free_ports

HEARTBEAT = {"intervalSeconds": 10.0, "graceSeconds": 40.0, "latencyWindowSeconds": 30.0}


def _requests(names: list[str], tokens: list[str]) -> list[Request]:
    """One report request per cluster, as an agent sends it."""
    out = []
    for name, token in zip(names, tokens):
        body = json.dumps(report(name, agent_time=time.time())).encode()
        headers = Headers([("Host", "lead"), ("Authorization", f"Bearer {token}"),
                           ("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
        out.append(Request("POST", f"/v1/clusters/{name}/report", "", "HTTP/1.1", headers, body,
                           "127.0.0.1:40000"))
    return out


def _per_report(work: Callable[[], Any], count: int) -> float:
    """Microseconds of this thread's CPU per report, best of five passes."""
    best = float("inf")
    for _ in range(5):
        start = time.thread_time()
        work()
        best = min(best, time.thread_time() - start)
    return round(best / count * 1e6, 2)


def measure(clusters: int, reports: int, workdir: Path) -> dict[str, Any]:
    """The stages' microseconds per report at ``clusters`` clusters."""
    names = [f"edge-{i}" for i in range(clusters)]
    tokens = create_tokens(workdir / "tokens", names)
    (workdir / "raft-secret").write_text(new_secret())
    config = LeadConfig(node_id="lead-1", raft=f"127.0.0.1:{free_ports(1)[0]}", peers=(),
                        http="127.0.0.1:0", data_dir=workdir / "data", tokens_file=workdir / "tokens",
                        raft_secret_file=workdir / "raft-secret", report_rate=1e9, report_burst=1e9)
    service = LeadService(config)
    try:
        deadline = time.monotonic() + 20
        while not service.node.is_leader():
            if time.monotonic() > deadline:
                raise RuntimeError("the one-member group elected no leader")
            time.sleep(0.05)
        inventory = {name: {"tier": "edge", "region": "eu-central", "distribution": "k3s", "nodes": 2,
                            "cpuMillis": 8000, "memoryBytes": 16 << 30} for name in names}
        # Straight into this lead's replica: what the leader's goals entry would apply.
        service.node.state.kb.apply_goals("c" * 40, inventory, HEARTBEAT, {}, time.time())
        api = LeadAPI(service)
        requests = _requests(names[:reports], tokens[:reports])
        count = len(requests)
        clusters_of = [r.path.split("/")[3] for r in requests]
        pending = [api._report(r, c) for r, c in zip(requests, clusters_of)]
        answer = pending[0].answer((ReportVerdict(True, 3), None))
        stages = {
            "decode_body": lambda: [record_of(r.body) for r in requests],
            "token": lambda: [api._principal(r) for r in requests],
            "rate_limit": lambda: [service.limiter.acquire(c) for c in clusters_of],
            "kb_admission": lambda: [service.kb.admission(c) for c in clusters_of],
            "leader_known": lambda: [service.node.leader_addr() for _ in requests],
            "checks_whole": lambda: [api._report(r, c) for r, c in zip(requests, clusters_of)],
            "entry_encoded": lambda: [encode_entry(p.entry) for p in pending],
            "answer_built": lambda: [p.answer((ReportVerdict(True, 3), None)) for p in pending],
            "answer_bytes": lambda: [_encode(answer, False, True) for _ in requests],
            "inline_whole": lambda: [api.inline(r) for r in requests],
        }
        out: dict[str, Any] = {name: _per_report(work, count) for name, work in stages.items()}
        out["report_body_bytes"] = len(requests[0].body)
        out["answer_body_bytes"] = len(answer.body)
        return out
    finally:
        service.node.destroy()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clusters", type=int, default=10000)
    parser.add_argument("--reports", type=int, default=2000, help="requests timed per stage")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="qonnect-report-path-") as tmp:
        result = measure(args.clusters, min(args.reports, args.clusters), Path(tmp))
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"a report's way through LeadAPI.inline at {args.clusters} clusters, us of CPU per report "
          "(one process, best of five)")
    for name, value in result.items():
        print(f"  {name:20} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
