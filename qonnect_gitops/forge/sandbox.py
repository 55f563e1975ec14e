"""Previews of untrusted goals in a child process with CPU, memory and time limits.

A goals pull request may come from anyone who can open one (forks too). The leader runs each
preview in ``python -m qonnect_gitops.forge.sandbox``: the child sets its own limits
(``RLIMIT_CPU``, ``RLIMIT_AS``) before it reads anything of the request, reads the base and
head trees from the review cache itself (a huge blob costs the child's memory, not the
leader's), runs ``preview.preview`` and writes the result as JSON; the parent kills it past
the wall-clock limit. Whatever a head makes the preview do (spin on a shape the loader has no
bound for yet, grow without end, hang), the child dies and the parent turns the way it died
into a stopped preview of that head alone: a failed ``qonnect/validate`` with the reason, and
the next pull request is previewed as usual.

The child's environment carries no secret: no forge token, no Git credentials (it reads a
local repository). The request and the answer are JSON, never pickles: what the parent reads
back is validated like any input.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from qonnect_gitops.forge.limits import SandboxLimits
from qonnect_gitops.forge.preview import Change, Preview, preview
from qonnect_gitops.gitstore.tree import open_repo, read_tree_files
from qonnect_gitops.logs import get_logger
from qonnect_gitops.model import CurrentPlacement, Observed, Plan
from qonnect_gitops.model.limits import TreeLimits

log = get_logger(__name__)

MiB = 1024 * 1024
EXIT_MEMORY = 3
"""The child's exit status when an allocation failed (its memory limit)."""
_CHILD_ENV = ("PATH", "PYTHONPATH", "LANG", "LC_ALL", "TZ")
"""What the child inherits of the lead's environment: nothing that could hold a secret."""




class Stopped(StrEnum):
    """How a sandboxed preview ended without a result."""

    CPU = "cpu"
    MEMORY = "memory"
    TIME = "time"
    FAILED = "failed"


def stopped_text(how: Stopped, limits: SandboxLimits, detail: str = "") -> str:
    """What a stopped preview says (its comment and its commit status)."""
    if how is Stopped.CPU:
        return (f"the preview of this head used more than {limits.cpu_seconds} s of CPU and was stopped "
                "(the leads' limit: qonnect lead --preview-cpu-seconds)")
    if how is Stopped.MEMORY:
        return (f"the preview of this head needed more than {limits.memory_mib} MiB of memory and was "
                "stopped (the leads' limit: qonnect lead --preview-memory-mib)")
    if how is Stopped.TIME:
        return (f"the preview of this head took longer than {limits.timeout_seconds:g} s and was stopped "
                "(the leads' limit: qonnect lead --preview-timeout-seconds)")
    return f"the preview of this head failed ({detail}); the leader's log has the details"


def preview_sandboxed(repo: Path, base: str, head: str, current: CurrentPlacement, observed: Observed,
                      goals_limits: TreeLimits, limits: SandboxLimits) -> Preview:
    """``preview.preview`` of commits ``base`` and ``head`` of the repository at ``repo``, in a
    child process under ``limits``; never raises for what the head does (a stopped preview)."""
    request = json.dumps({
        "repo": str(repo), "base": base, "head": head,
        "current": current.model_dump(mode="json", by_alias=True),
        "observed": observed.model_dump(mode="json", by_alias=True),
        "goalsLimits": {"files": goals_limits.files, "bytes": goals_limits.bytes},
    }).encode()
    env = {key: os.environ[key] for key in _CHILD_ENV if key in os.environ}
    command = [sys.executable, "-m", __name__, str(limits.cpu_seconds), str(limits.memory_mib)]
    try:
        child = subprocess.run(command, input=request, capture_output=True, env=env, check=False,
                               timeout=limits.timeout_seconds)
    except subprocess.TimeoutExpired:  # run() killed it
        return _stopped(Stopped.TIME, limits, head)
    if child.returncode == -signal.SIGXCPU:
        return _stopped(Stopped.CPU, limits, head)
    if child.returncode == EXIT_MEMORY:
        return _stopped(Stopped.MEMORY, limits, head)
    if child.returncode != 0:
        why = (f"killed by {signal.Signals(-child.returncode).name}" if child.returncode < 0
               else f"exit status {child.returncode}")
        return _stopped(Stopped.FAILED, limits, head, why, child.stderr)
    try:
        return _preview_from(json.loads(child.stdout))
    except (ValueError, KeyError, TypeError, ValidationError) as exc:
        return _stopped(Stopped.FAILED, limits, head, "its answer was unreadable", str(exc).encode())


def _stopped(how: Stopped, limits: SandboxLimits, head: str, detail: str = "", stderr: bytes = b"") -> Preview:
    log.warning("preview_stopped", head=head[:12], how=how.value, detail=detail,
                stderr=stderr[-2000:].decode("utf-8", "replace").strip().replace("\n", " | "))
    return Preview(valid=False, stopped=stopped_text(how, limits, detail))


def _preview_json(p: Preview) -> dict[str, Any]:
    """Everything of a ``Preview`` as JSON (the head plan included), for the parent."""
    return {"valid": p.valid, "errors": list(p.errors), "baseValid": p.base_valid,
            "changes": [{"component": c.component, "before": c.before, "after": c.after} for c in p.changes],
            "unmet": list(p.unmet),
            "headPlan": None if p.head_plan is None else p.head_plan.model_dump(mode="json", by_alias=True)}


def _preview_from(data: dict[str, Any]) -> Preview:
    plan = data["headPlan"]
    return Preview(valid=bool(data["valid"]), errors=tuple(str(e) for e in data["errors"]),
                   changes=tuple(Change(str(c["component"]), dict(c["before"]), dict(c["after"]))
                                 for c in data["changes"]),
                   unmet=tuple(dict(u) for u in data["unmet"]), base_valid=bool(data["baseValid"]),
                   head_plan=None if plan is None else Plan.model_validate(plan))


def _limit(kind: int, soft: int, grace: int = 0) -> None:
    """Lower a resource limit of this process to ``soft`` (hard: ``grace`` more), never above the
    hard limit it was started with."""
    _, hard = resource.getrlimit(kind)
    if hard != resource.RLIM_INFINITY:
        soft, hard = min(soft, hard), min(soft + grace, hard)
    else:
        hard = soft + grace
    resource.setrlimit(kind, (soft, hard))


def main(argv: list[str]) -> int:
    """The child: ``CPU_SECONDS MEMORY_MIB``, the request on stdin, the preview on stdout."""
    # CPU: SIGXCPU at the soft limit (Python leaves it its default action: the process ends),
    # SIGKILL a second later at the hard one should anything catch it.
    _limit(resource.RLIMIT_CPU, int(argv[0]), grace=1)
    _limit(resource.RLIMIT_AS, int(argv[1]) * MiB)
    try:
        request = json.loads(sys.stdin.buffer.read())
        repo = open_repo(request["repo"])
        observed = Observed.model_validate(request["observed"])
        result = preview(read_tree_files(repo, request["base"]), read_tree_files(repo, request["head"]),
                         CurrentPlacement.model_validate(request["current"]), lambda goals: observed,
                         TreeLimits(**request["goalsLimits"]))
        sys.stdout.write(json.dumps(_preview_json(result)))
        sys.stdout.flush()
    except MemoryError:
        os._exit(EXIT_MEMORY)  # at once: anything more may need memory there is none of
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
