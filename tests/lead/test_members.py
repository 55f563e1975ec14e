"""Membership changes of a running group: add a fourth lead, then remove one."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable

from tests.lead.harness import ROOT, LeadGroup, http, report


def members_cli(group: LeadGroup, lead_url: str, action: str, raft: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "QONNECT_ADMIN_TOKEN": group.admin_token}
    return subprocess.run([sys.executable, "-m", "qonnect_gitops", "members", action, raft,
                           "--lead", lead_url], capture_output=True, text=True, env=env,
                          timeout=30, check=False)


def test_add_then_remove_a_lead_without_stopping_the_group(
        make_group: Callable[..., LeadGroup]) -> None:
    group = make_group()
    leader = group.wait_leader()
    group.wait_until(lambda: (group.status(leader) or {}).get("goals", {}).get("lastGood"),
                     what="goals loaded")
    code, _, _ = http("POST", leader.url + "/v1/clusters/edge-1/report", report("edge-1"),
                      token=group.tokens["edge-1"])
    assert code == 200

    # A new lead starts knowing every current member, then is added through a follower.
    fourth = group.new_lead("lead-4")
    group.leads.append(fourth)
    group.start(fourth)
    follower = next(m for m in group.leads[:3] if m is not leader)
    out = members_cli(group, follower.url, "add", fourth.raft)
    assert out.returncode == 0, out.stderr + group.log_tails()
    assert fourth.raft in out.stdout

    def fourth_caught_up() -> bool:
        st = group.status(fourth)
        return bool(st and st["leader"] and st["leader"]["raft"] == leader.raft
                    and any(c["name"] == "edge-1" and c["reported"] for c in st["clusters"])
                    and len(st["members"]) == 4)

    group.wait_until(fourth_caught_up, timeout=15, what="lead-4 catching up")
    leader_view = group.status(leader) or {}
    assert sorted(m["raft"] for m in leader_view["members"]) == sorted(m.raft for m in group.leads)

    # Remove a follower (not the one we ask), then stop it; the group keeps working.
    victim = next(m for m in group.leads[:3] if m is not leader and m is not follower)
    out = members_cli(group, fourth.url, "remove", victim.raft)
    assert out.returncode == 0, out.stderr + group.log_tails()
    group.kill(victim)
    group.wait_until(lambda: len((group.status(leader) or {}).get("members", [])) == 3,
                     what="three members left")
    survivors = [m for m in group.leads if m is not victim]
    assert group.wait_leader(among=survivors) is leader
    code, _, body = http("POST", fourth.url + "/v1/clusters/edge-2/report", report("edge-2"),
                         token=group.tokens["edge-2"])
    assert code == 200, body
    st = group.status(fourth) or {}
    assert victim.node_id not in {m["id"] for m in st["members"]}
    # A membership change without an admin token is refused.
    code, _, _ = http("POST", leader.url + "/v1/members", {"action": "add", "raft": "127.0.0.1:1"},
                      token=group.tokens["edge-1"])
    assert code == 403
