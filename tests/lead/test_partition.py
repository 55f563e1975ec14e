"""A partition isolating the leader, made with a network namespace and veth links.

One lead runs in its own namespace with two links to the host: one carries Raft and
HTTP, the other reaches the Git server. Cutting the first isolates the lead from its
peers while it can still push, which is the dangerous case: the test stalls it after
its decision was recorded and committed locally, cuts the link, lets the majority
elect and move on, then releases it past its last leadership check (the instant a
real leader can be deposed in). The Git server must refuse that push; every ref only
fast-forwards and the generation only grows.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from qonnect_gitops.gitstore.daemon import GitDaemon
from tests.goals_repo import GoalsRepo
from tests.lead.fleet import (
    TEMPLATE_CLUSTERS,
    check_consistent,
    consistent_at,
    generation,
    plan_history,
    wait_for,
)
from tests.lead.harness import Lead, LeadGroup, free_ports
from tests.lead.test_crash import assert_fast_forward_only


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@dataclass
class Net:
    ns: str
    raft_host: str  # host end of the Raft/HTTP link
    raft_ns: str  # namespace end
    git_host: str  # host end of the Git link (the git daemon listens here)
    raft_if_ns: str


def _netns_works() -> str | None:
    if os.geteuid() != 0:
        return "network namespaces need root"
    name = f"qprobe{uuid.uuid4().hex[:6]}"
    try:
        _ip("netns", "add", name)
    except (subprocess.CalledProcessError, FileNotFoundError) as exc:
        return f"cannot create a network namespace here: {exc}"
    _ip("netns", "del", name)
    return None


@pytest.fixture
def net() -> Iterator[Net]:
    reason = _netns_works()
    if reason:
        pytest.skip(reason)
    tag = uuid.uuid4().hex[:5]
    ns = f"qpart{tag}"
    octet = 100 + int(tag[:2], 16) % 100  # distinct subnets for concurrent runs
    raft_h, raft_n, git_h, git_n = f"qr{tag}h", f"qr{tag}n", f"qg{tag}h", f"qg{tag}n"
    _ip("netns", "add", ns)
    try:
        for host_if, ns_if, subnet in ((raft_h, raft_n, 1), (git_h, git_n, 2)):
            _ip("link", "add", host_if, "type", "veth", "peer", "name", ns_if)
            _ip("link", "set", ns_if, "netns", ns)
            _ip("addr", "add", f"10.{octet}.{subnet}.1/24", "dev", host_if)
            _ip("link", "set", host_if, "up")
            _ip("-n", ns, "addr", "add", f"10.{octet}.{subnet}.2/24", "dev", ns_if)
            _ip("-n", ns, "link", "set", ns_if, "up")
        _ip("-n", ns, "link", "set", "lo", "up")
        yield Net(ns, f"10.{octet}.1.1", f"10.{octet}.1.2", f"10.{octet}.2.1", raft_n)
    finally:
        # Deleting the namespace deletes its veth ends and with them the host ends.
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        for host_if in (raft_h, git_h):
            subprocess.run(["ip", "link", "del", host_if], capture_output=True)


@pytest.fixture
def goals(tmp_path: Path, net: Net) -> Iterator[GoalsRepo]:
    (tmp_path / "srv").mkdir()
    with GitDaemon(tmp_path / "srv", host=net.git_host) as daemon:
        repo = GoalsRepo(tmp_path, daemon)
        repo.seed()
        for key, value in (("core.logAllRefUpdates", "always"),
                           ("receive.denyNonFastForwards", "true")):
            subprocess.run(["git", "-C", str(repo.bare), "config", key, value], check=True)
        yield repo


def test_isolated_leader_stops_and_its_late_push_is_refused(
        goals: GoalsRepo, net: Net, tmp_path: Path) -> None:
    fault, release = tmp_path / "fault", tmp_path / "release"
    # Built by hand (not make_group): the addresses change before the processes start.
    group = LeadGroup(tmp_path / "group", clusters=TEMPLATE_CLUSTERS, repo_url=goals.url,
                      extra_args=["--poll-seconds", "0.3", "--reschedule-seconds", "600"])
    try:
        _place(group, net, fault)
        group.start_all()
        isolated = group.leads[0]
        wait_for(lambda: _leader_is(group, isolated), 60, "the namespaced lead leads", group)
        wait_for(lambda: consistent_at(goals, TEMPLATE_CLUSTERS, goals.rev("main")), 20,
                 "first decision", group)
        before = generation(goals)

        # Stall the leader inside its next write, decided and recorded but not pushed.
        fault.write_text(f"before-publish wait {release} unfenced")
        change_a = goals.edit("apps/bookinfo/manifests/details.yaml", "details-v1:1.20.2",
                              "details-v1:1.20.3", "change A")
        wait_for((tmp_path / "fault.hit").exists, 15, "isolated leader stalled", group)
        stalled_plan = goals.rev("qonnect/plan")

        # Cut the Raft link: the two host leads elect one of themselves and decide A, then B.
        _ip("-n", net.ns, "link", "set", net.raft_if_ns, "down")
        majority = group.leads[1:]
        new_leader = group.wait_leader(timeout=15, among=majority)
        assert new_leader is not isolated
        wait_for(lambda: consistent_at(goals, TEMPLATE_CLUSTERS, change_a), 15,
                 "majority decides A", group)
        change_b = goals.edit("apps/bookinfo/manifests/details.yaml", "details-v1:1.20.3",
                              "details-v1:1.20.4", "change B")
        wait_for(lambda: consistent_at(goals, TEMPLATE_CLUSTERS, change_b), 15,
                 "majority decides B", group)
        assert goals.rev("qonnect/plan") != stalled_plan
        heads = {ref: goals.rev(ref) for ref in _refs()}

        # Release the deposed leader past its last check: its push must be refused.
        release.write_text("go")
        log = isolated.log_path
        wait_for(lambda: "cycle_lost_race" in log.read_text() or "cycle_git_error" in
                 log.read_text(), 15, "the deposed leader's push refused", group)
        time.sleep(1.0)  # let it try whatever else it would
        assert {ref: goals.rev(ref) for ref in _refs()} == heads, "the deposed leader wrote"
        # The stale decision is still in its mirror: even forced, the server refuses it.
        mirror = isolated.data_dir / "goals-mirror.git"
        stale = subprocess.run(["git", "-C", str(mirror), "rev-parse", "refs/heads/qonnect/plan"],
                               capture_output=True, text=True, check=True).stdout.strip()
        assert stale != heads["qonnect/plan"]
        forced = subprocess.run(["git", "-C", str(mirror), "push", "--force", goals.url,
                                 f"{stale}:refs/heads/qonnect/plan"], capture_output=True, text=True)
        assert forced.returncode != 0 and "non-fast-forward" in forced.stderr, forced.stderr
        assert goals.rev("qonnect/plan") == heads["qonnect/plan"]
        text = log.read_text()
        assert "loop_paused" in text  # it stopped its loop when it lost the quorum
        assert "mirror_published" not in text.split("fault_point_released")[1]

        # Heal: it rejoins as a follower and writes nothing; the fleet is consistent.
        _ip("-n", net.ns, "link", "set", net.raft_if_ns, "up")
        wait_for(lambda: (st := group.status(isolated)) and st["self"]["state"] == "follower"
                 and st["leader"] and st["leader"]["raft"] == new_leader.raft, 20,
                 "isolated lead rejoined", group)
        assert {ref: goals.rev(ref) for ref in _refs()} == heads
        check_consistent(goals, TEMPLATE_CLUSTERS)
        generations = [generation(goals, c) for c in plan_history(goals)]
        assert generations[-1] >= before + 2
        for ref in _refs():
            assert_fast_forward_only(goals, "refs/heads/" + ref)
    finally:
        group.stop()


def _refs() -> list[str]:
    return ["qonnect/plan"] + [f"cluster/{c}" for c in TEMPLATE_CLUSTERS]


def _place(group: LeadGroup, net: Net, fault: Path) -> None:
    """Lead 1 in the namespace, leads 2 and 3 on the host end of the Raft link. Lead 1
    times out first in elections, so it usually wins the first one."""
    first, *others = group.leads
    for lead in group.leads:
        host = net.raft_ns if lead is first else net.raft_host
        raft_port, http_port = free_ports(2)
        lead.raft, lead.http = f"{host}:{raft_port}", f"{host}:{http_port}"
    first.prefix = ["ip", "netns", "exec", net.ns]
    first.env = {"QONNECT_FAULT_FILE": str(fault)}
    first.args = ["--election-min", "0.2", "--election-max", "0.25"]
    for lead in others:
        lead.args = ["--election-min", "0.6", "--election-max", "1.0"]


def _leader_is(group: LeadGroup, lead: Lead) -> bool:
    """True once ``lead`` leads with everyone agreeing; otherwise nudge the election by
    pausing the current (host) leader past the election timeout."""
    try:
        leader = group.wait_leader(timeout=5)
    except AssertionError:
        return False
    if leader is lead:
        return True
    assert leader.proc is not None
    os.kill(leader.proc.pid, signal.SIGSTOP)
    time.sleep(1.2)
    os.kill(leader.proc.pid, signal.SIGCONT)
    return False
