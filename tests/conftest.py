"""Fixtures shared by every test package, and the test tiers.

Two tiers (docs/contributing.md): ``pytest -m "not slow"`` is the inner loop; the whole
suite (``pytest``) is what CI runs. ``slow`` marks the tests that start processes or
servers: simulated clusters, agents, lead groups, git daemons, forges, the demo, and
the few tests that take seconds of CPU (property tests planning many fleets). ``fuzz``
marks the hypothesis fuzzers of hostile input; they are slow too. The lists below are the
one place that says which tests those are: whole directories where every test does it,
single files or tests elsewhere. A test that starts a process in a fast directory is
marked with ``@pytest.mark.slow`` where it is written.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "repo-template"
TESTS = Path(__file__).resolve().parent

# Every test under these directories runs processes or servers.
SLOW_DIRS = {
    "agent": "agents against running simulated clusters and served branches",
    "demo": "the demo stack: leads, agents, simulated clusters, git daemon",
    "forge": "the fake forge's server and lead groups reviewing through it",
    "lead": "lead groups (Raft over loopback), the HTTP API, kill and partition tests",
    "sim": "simulated clusters (HTTP servers and controllers on timers) and kubectl",
}
# Files in otherwise fast directories whose tests do.
SLOW_FILES = {
    "deploy/test_syncers.py": "the Flux and Argo CD CRDs served by a simulated cluster, applied with kubectl",
    "gitstore/test_concurrency.py": "concurrent writers over a git daemon",
    "gitstore/test_proposals.py": "review mode over a repository served by git daemon",
    "gitstore/test_quiet_fetch.py": "a lead's mirror polling a git daemon through a byte-counting relay",
    "gitstore/test_remote.py": "mirrors fetching from and pushing to git daemons",
    "gitstore/test_transports.py": "git daemon and smart HTTP transports",
    "model/test_validate_cli.py": "`qonnect validate` in real subprocesses",
    "placement/test_cli_regressions.py": "`qonnect plan` in real subprocesses",
    "provision/test_e2e.py": "cloud bursting: leads, agents, simulated Cluster API, git daemon",
    "provision/test_sim_capi.py": "a simulated management cluster starting simulated clusters",
    "reconcile/test_hostile_goals.py": "`qonnect reconcile --once` against a goals repo on git daemon",
    "reconcile/test_incremental.py": "reconcile cycles against a goals repo on git daemon",
    "reconcile/test_memo.py": "the leader's decision memo over reconcile cycles against git daemon",
    "reconcile/test_reconcile_once.py": "`qonnect reconcile --once` against a goals repo on git daemon",
    "reconcile/test_signed_goals.py": "`qonnect reconcile --once --signing-key` against a goals repo on git daemon",
}
# Single tests of fast files that take seconds of CPU each (hypothesis examples of whole
# fleets planned over many cycles, strict validation of every rendered object): the inner
# loop leaves them to the whole suite. A test over about 2 s of CPU belongs here or gets
# smaller inputs that test the same thing.
SLOW_TESTS = {
    "placement/test_carry.py::test_a_remembered_offload_plans_what_a_fresh_distribution_plans":
        "60 fleets of 8-16 clusters, each planned warm and from nothing over 10 cycles",
    "placement/test_carry.py::test_a_carried_cycle_plans_what_a_cycle_from_nothing_plans":
        "120 fleets, each planned carried and from nothing over up to 10 cycles",
    "placement/test_properties.py::test_every_cycle_meets_every_goal_or_says_which_not":
        "150 fleet histories, every cycle planned twice and checked",
    "model/test_quick_paths.py::test_the_quick_check_never_passes_what_jsonschema_refuses":
        "300 mutated objects, each validated by jsonschema",
    "render/test_placement_file.py::test_the_fast_writer_writes_what_yaml_reads_back":
        "400 hypothesis documents, each written and read back by both YAML loaders",
    "render/test_nodes.py::test_amd64_only_components_are_pinned_on_mixed_clusters_only":
        "strict Kubernetes validation of every object rendered for the template",
}
# Hypothesis fuzzers of hostile input (also slow): files, or single tests as FILE::NAME.
FUZZ = {
    "agent/test_fuzz_branches.py",
    "lead/test_fuzz.py",
    "model/test_fuzz_goals.py",
    "model/test_fuzz_yaml_shapes.py",
    "model/test_loader.py::test_arbitrary_yaml_only_ever_raises_goals_error",
}


# CI draws a fixed sequence of hypothesis examples: a red build then means the change
# broke something, not that a new random example found an old bug. Every local run draws
# new examples, which is where the property tests keep finding planner bugs (a failing
# example printed there goes to tests/placement/test_regressions.py).
settings.register_profile("ci", derandomize=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


def _exists(path: str) -> bool:
    """A listed directory or file exists, and a listed FILE::NAME defines that test."""
    file, _, name = path.partition("::")
    return (TESTS / file).exists() and (not name or f"def {name}(" in (TESTS / file).read_text(encoding="utf-8"))


def pytest_configure(config: pytest.Config) -> None:
    """Fail at once when a listed directory, file or test no longer exists (a rename would
    otherwise move its tests to the fast tier without anyone noticing)."""
    missing = [p for p in [*SLOW_DIRS, *SLOW_FILES, *SLOW_TESTS, *FUZZ] if not _exists(p)]
    if missing:
        raise pytest.UsageError(f"tests/conftest.py lists test paths that do not exist: {missing}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the slow and fuzz tiers from the lists above."""
    for item in items:
        try:
            rel = item.path.resolve().relative_to(TESTS).as_posix()
        except ValueError:
            continue
        name = getattr(item, "originalname", item.name)  # without its parameters
        if rel in FUZZ or f"{rel}::{name}" in FUZZ:
            item.add_marker(pytest.mark.fuzz)
        if (item.get_closest_marker("fuzz") is not None or rel.split("/", 1)[0] in SLOW_DIRS
                or rel in SLOW_FILES or f"{rel}::{name}" in SLOW_TESTS):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def template_files() -> dict[str, bytes]:
    """The files of repo-template as the loader takes them."""
    from qonnect_gitops.model import read_directory

    return read_directory(TEMPLATE)
