"""Run the demo: start the stack, run the scenarios in order, report, stop everything."""

from __future__ import annotations

import json
import shutil
import signal
import sys
import time
import traceback
from pathlib import Path
from types import FrameType
from typing import Any

from qonnect_gitops.demo import logdigest
from qonnect_gitops.demo.scenarios import SCENARIOS, Demo, Result
from qonnect_gitops.demo.stack import Settings, Stack, temp_root
from qonnect_gitops.demo.view import View

ORDER = [name for name in SCENARIOS if name != "cloud-burst"]  # cloud-burst runs when named
# what each scenario needs to have happened first
NEEDS = {"initial": [], "goals-change": ["initial"], "resize": ["initial"], "regions": ["initial"],
         "failover": ["initial"], "api-down": ["initial"], "stalled": ["initial"], "burst": ["initial"],
         "leader-kill": ["initial"], "review": ["initial"],
         "cloud-burst": ["initial"]}
# The simulated Cluster API provider on cloud-1 (the cloud-burst pool's management cluster).
CAPI_SIM_ARGS = ["--capi", "--capi-on", "cloud-1", "--capi-delay", "10"]


def plan_order(only: str | None) -> list[str]:
    if only is None:
        return ORDER
    return [*NEEDS[only], only]


def run(only: str | None = None, report: Path | None = None, keep: bool = False, root: Path | None = None,
        settings: Settings | None = None, live: bool | None = None) -> int:
    view = View(live=live)
    stack = Stack(root or temp_root(), settings or Settings())
    if "cloud-burst" in plan_order(only):
        stack.sim_args = list(CAPI_SIM_ARGS)
    results: list[Result] = []
    started = time.monotonic()

    def on_term(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term)
    demo: Demo | None = None
    interrupted = False
    try:
        view.event(f"starting in {stack.root}")
        stack.start(on_step=view.event)
        demo = Demo(stack, view.event)
        view.attach(demo)
        for name in plan_order(only):
            view.scenario = name
            view.event(f"== scenario {name}")
            logs_at = logdigest.mark(stack.logs)
            try:
                result = SCENARIOS[name](demo)
            except Exception as exc:  # noqa: BLE001 - a failed scenario is reported, the run goes on
                result = Result(name, passed=False, observed={"error": f"{type(exc).__name__}: {exc}"})
                result.notes.append(traceback.format_exc(limit=3))
            results.append(result)
            took = "" if result.seconds is None else f" in {result.seconds:.2f}s"
            view.event(f"== {name}: {'PASSED' if result.passed else 'FAILED'}{took}"
                       + ("" if result.passed else f" {result.observed.get('problems') or result.observed.get('error')}"))
            if not result.passed:
                # Why is in the processes' logs; a run on another machine leaves only its output.
                logged = logdigest.render(logdigest.digest(stack.logs, logs_at))
                result.extra["logged"] = logged
                for line in logged:
                    view.event(f"   logged: {line}")
        view.scenario = "done"
    except KeyboardInterrupt:
        interrupted = True
        view.event("interrupted; stopping every process")
    except Exception as exc:  # noqa: BLE001 - the stack failed to start
        view.event(f"the demo could not run: {exc}")
        results.append(Result("startup", passed=False, observed={"error": str(exc)}))
    finally:
        view.stop()
        passed = bool(results) and all(r.passed for r in results) and not interrupted
        doc: dict[str, Any] = {"passed": passed, "scenarios": [r.as_json() for r in results],
                               "seconds": round(time.monotonic() - started, 3), "root": str(stack.root),
                               "signals": stack.signals}
        if report is not None:
            report.write_text(json.dumps(doc, indent=2) + "\n")
        summary(results, sys.stdout)
        if keep and not interrupted and stack.leads:
            print(keep_text(stack), flush=True)
            try:
                signal.signal(signal.SIGINT, signal.default_int_handler)
                while True:
                    time.sleep(3600)
            except KeyboardInterrupt:
                pass
        if demo is not None:
            demo.observer.close()
        stack.stop()
        signal.signal(signal.SIGTERM, previous)
        if root is None and not keep and passed:
            shutil.rmtree(stack.root, ignore_errors=True)
        elif not passed:
            print(f"logs kept in {stack.root}/logs", flush=True)
    return 0 if passed else (130 if interrupted else 1)


def summary(results: list[Result], out: Any) -> None:
    print("\nSCENARIO      RESULT  SECONDS", file=out)
    for r in results:
        secs = "-" if r.seconds is None else f"{r.seconds:.2f}"
        print(f"{r.name:12}  {'pass' if r.passed else 'FAIL':6}  {secs}", file=out)
    out.flush()


def keep_text(stack: Stack) -> str:
    leads = ",".join(lead.url for lead in stack.leads)
    return "\n".join([
        "",
        "Everything keeps running (Ctrl-C stops it all). Try:",
        f"  qonnect status --lead {stack.leads[0].url}        (leads: {leads})",
        f"  kubectl --kubeconfig {stack.kube}/edge-1.yaml get deployments -A",
        f"  git clone --branch cluster/edge-1 {stack.repo_url}",
        f"  cd {stack.work} && edit goals && git commit -am ... && git push   (the hook tells the leads)",
        f"  logs: {stack.logs}/",
        *([f"  Prometheus: {stack.prometheus_url}/graph   (the agents' latency and traffic)"]
          if stack.prometheus_url else []),
    ])
