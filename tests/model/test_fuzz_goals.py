"""A fuzzer over goals trees and directories: random YAML, random objects, names and kinds,
random numbers, symlinks, special files and sizes.

Whatever it draws, loading ends quickly with either valid goals or a ``GoalsError`` whose
every problem names a file (or the tree) and says what is wrong; memory stays bounded; and
when the goals are valid, every file rendered for a cluster branch passes the same checks
(parsing limits, the 1.37 API, reserved namespaces), so nothing reaches a branch that
``qonnect validate`` would refuse.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from pathlib import Path

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from qonnect_gitops.model import Goals, GoalsError, load_goals
from qonnect_gitops.model.kubeschema import KindCatalog, custom_kinds, split_api_version
from qonnect_gitops.model.limits import RESERVED_NAMESPACES
from qonnect_gitops.model.parsing import load_documents
from qonnect_gitops.model.plan import Assignment, ComponentPlan, Plan
from qonnect_gitops.model.source import scan_directory
from qonnect_gitops.render import RenderError, render
from qonnect_gitops.render.render import KUSTOMIZATION_FILE
from tests.conftest import TEMPLATE
from tests.fuzz import NAMESPACES, max_rss_mib, plausible_files, yaml_files

MEMORY_LIMIT_MIB = 1500
CPU_SECONDS = 60  # processor time, not wall-clock: a shared machine may stall the run
NUMBERS = [b".inf", b"-.inf", b".nan", b"1e309", b"100000000", b"-1", b"0", b"'12'", b"\"1e999999999\"", b"[]"]
SETTINGS = settings(max_examples=40, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                           HealthCheck.data_too_large, HealthCheck.large_base_example])


def _wire(files: dict[str, bytes], names: list[str]) -> None:
    app = "apps/bookinfo/app.yaml"
    listed = ", ".join(["manifests/details.yaml", *(f"manifests/{n}" for n in names)])
    files[app] = files[app].replace(b"manifests: [manifests/details.yaml]", f"manifests: [{listed}]".encode())


def _load(files: dict[str, bytes]) -> Goals | None:
    """Load within the CPU and memory bounds; None when refused (with clear problems)."""
    start = time.process_time()
    try:
        goals = load_goals(files)
    except GoalsError as exc:
        assert exc.problems
        for problem in exc.problems:
            assert problem.message.strip()
            assert problem.path == "" or problem.path in files, problem
            assert problem.line is None or problem.line >= 1
        goals = None
    assert time.process_time() - start < CPU_SECONDS
    assert max_rss_mib() < MEMORY_LIMIT_MIB
    return goals


def _branch_acceptable(goals: Goals) -> None:
    """Render every component onto one cluster; every file must pass what validate checks."""
    plan = Plan(reason="goals-changed", components={
        c.key: ComponentPlan(component=c.key, kind=c.kind,
                             assignments=(Assignment(cluster="cloud-1", replicas=max(1, c.replicas), reason="fuzz"),))
        for c in goals.components()})
    try:
        rendered = render(goals, plan)
    except RenderError as exc:  # pragma: no cover - validate refuses what render would
        raise AssertionError(f"valid goals failed to render: {exc}") from exc
    files = rendered.cluster_files("cloud-1")
    objects = [(p, d) for p, body in files.items()
               if not p.rsplit("/", 1)[-1].startswith("sops-") and p != KUSTOMIZATION_FILE
               for d in load_documents(p, body)]
    catalog = KindCatalog(custom_kinds(d for _, d in objects))
    for path, obj in objects:
        errors = [f.message for f in catalog.check(obj) if not f.warning]
        assert errors == [], (path, errors)
        meta = obj["metadata"]
        assert meta.get("namespace") not in RESERVED_NAMESPACES, path
        if (split_api_version(obj["apiVersion"])[0], obj["kind"]) == ("", "Namespace"):
            assert meta["name"] not in RESERVED_NAMESPACES, path


@SETTINGS
@given(data=st.data())
def test_random_goals_are_refused_clearly_or_render_only_valid_objects(template_files, data) -> None:
    files = dict(template_files)
    namespaces = st.one_of(st.sampled_from(["bookinfo"] * 6 + ["kube-system", "default"]), NAMESPACES)
    hostile = data.draw(st.booleans())
    bodies = data.draw(st.lists(yaml_files(namespaces) if hostile else plausible_files(namespaces),
                                min_size=1, max_size=3))
    names = [f"fuzz-{i}.yaml" for i in range(len(bodies))]
    for name, body in zip(names, bodies, strict=True):
        files[f"apps/bookinfo/manifests/{name}"] = body
    _wire(files, names)
    if hostile and data.draw(st.booleans()):
        path = data.draw(st.sampled_from(sorted(p for p in files if p.startswith("clusters/")
                                                or p.endswith("app.yaml") or p == "qonnect.yaml")))
        numbers = list(re.finditer(rb"(?<=: )[0-9][0-9.]*", files[path]))
        if numbers:
            hit = numbers[data.draw(st.integers(0, len(numbers) - 1))]
            files[path] = files[path][:hit.start()] + data.draw(st.sampled_from(NUMBERS)) + files[path][hit.end():]
    goals = _load(files)
    event("valid goals" if goals is not None else "refused")
    if goals is not None:
        _branch_acceptable(goals)


@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(entries=st.lists(st.tuples(st.sampled_from(["symlink-out", "symlink-dev", "symlink-loop", "fifo", "file",
                                                    "sparse", "binary"]),
                                  st.sampled_from(["apps/bookinfo/manifests", "clusters", "", "apps"])),
                        min_size=1, max_size=5))
def test_random_directories_never_hang_nor_leave_the_tree(entries: list[tuple[str, str]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "goals"
        shutil.copytree(TEMPLATE, root)
        outside = Path(tmp) / "outside.yaml"
        outside.write_text("secret: from-outside\n")
        for i, (kind, folder) in enumerate(entries):
            target = root / folder / f"fuzz-{i}.yaml"
            if kind == "symlink-out":
                target.symlink_to(outside)
            elif kind == "symlink-dev":
                target.symlink_to("/dev/zero")
            elif kind == "symlink-loop":
                (root / folder / f"loop-{i}").symlink_to(root)
            elif kind == "fifo":
                os.mkfifo(target)
            elif kind == "sparse":
                with open(target, "wb") as fh:
                    fh.truncate(64 * 1024 * 1024)
            elif kind == "binary":
                target.write_bytes(bytes(range(256)) * 4)
            else:
                target.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: extra}\n")
        start = time.process_time()
        scanned = scan_directory(root)  # a FIFO read would block: the test's timeout catches that
        assert time.process_time() - start < 10
        assert not any(b"from-outside" in body for body in scanned.files.values())
        assert all(not p.startswith("loop-") and "/loop-" not in p for p in scanned.files)
        _load(scanned.files)
