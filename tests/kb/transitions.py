"""A Knowledge Base holding something in every part of its state, and one entry of every
kind to apply to it: what the dump tests use to show that a state captured for a dump
does not move when the live state does."""

from __future__ import annotations

from typing import Any

from qonnect_gitops.kb import (
    KnowledgeBase,
    ReportEntry,
    ReportRecord,
    heartbeat_from_goals,
    inventory_from_goals,
    workloads_from_goals,
)
from qonnect_gitops.model import load_goals
from qonnect_gitops.model.report import AgentReport
from tests.lead.harness import goals_files, report

T0 = 1_800_000_000.0
CLUSTERS = ["edge-1", "edge-2", "edge-3"]


def _entry(cluster: str, at: float, latency_ms: float | None = 20.0,
           completed: str | None = None, claim: str | None = None) -> ReportEntry:
    body = report(cluster, agent_time=at)
    body["latencies"] = [] if latency_ms is None else [{"to": "eu-central", "ms": latency_ms},
                                                       {"to": "edge-9", "ms": latency_ms * 2}]
    if completed:
        body["components"].append({"component": completed, "healthy": True, "readyReplicas": 0,
                                   "desiredReplicas": 0, "completed": True})
    if claim:  # about a component not placed on this cluster: ignored and counted
        body["traffic"].append({"component": claim, "region": "eu-central", "rps": 1.0})
    return report_entry(cluster, at, body)


def report_entry(cluster: str, received_at: float, body: dict[str, Any]) -> ReportEntry:
    """The log entry of the agent report ``body`` received at ``received_at`` (the lead's
    clock): validated and typed as it travels through the log."""
    return ReportEntry(cluster, received_at, ReportRecord.from_report(AgentReport.model_validate(body)))


def apply_goals(kb: KnowledgeBase, commit: str, files: dict[str, bytes], now: float) -> bool:
    """Record the goals ``files`` as ``commit``, as a lead's goals entry does."""
    goals = load_goals(files)
    return kb.apply_goals(commit, inventory_from_goals(goals), heartbeat_from_goals(goals),
                          workloads_from_goals(goals), now)


def _goals(kb: KnowledgeBase, commit: str, clusters: list[str], now: float, job_tag: str = "1",
           grace: float = 100.0) -> None:
    apply_goals(kb, commit, goals_files(clusters, grace=grace, shop=True, job_tag=job_tag), now)


def filled_kb() -> KnowledgeBase:
    """Goals, a plan, reports with latency histories, a completed Job, ignored claims,
    members, a rejected proposal, a failed goals commit, a pool cluster and its token,
    branch heads."""
    kb = KnowledgeBase()
    kb.apply_leader("lead-1", 1, T0)
    kb.apply_member("lead-1", "10.0.0.1:4321", "10.0.0.1:8080", "http://10.0.0.1:8080", T0)
    _goals(kb, "c1" * 20, CLUSTERS, T0)
    kb.apply_plan({"shop/web": {"edge-1": 1, "edge-2": 1}, "shop/migrate": {"edge-2": 1}},
                  {}, "new goals", "c1" * 20, 1, T0, [{"component": "shop/db", "goal": "tiers",
                                                      "message": "no cloud cluster"}])
    for i in range(4):
        kb.apply_reports([_entry("edge-1", T0 + i, 20.0 + i, claim="shop/db"),
                          _entry("edge-2", T0 + i, completed="shop/migrate" if i == 2 else None)])
    kb.apply_goals_failure("d1" * 20, ["qonnect.yaml:1:1: bad"], T0 + 5)
    kb.apply_proposal_rejected("key-1", "p1", "c1" * 20, "https://forge/pr/1", T0 + 5)
    kb.apply_dynamic({"burst-1": {"pool": "cloud", "phase": "Provisioning", "nodes": 1,
                                  "tier": "cloud", "region": "eu-central"}}, T0 + 5)
    kb.apply_pool_token("burst-1", "ab" * 32, T0 + 5)
    kb.apply_branch_heads({"edge-1": "e1" * 20, "edge-2": "e2" * 20}, 1)
    return kb


def every_transition(kb: KnowledgeBase, now: float) -> None:
    """One entry of every kind, each changing what ``filled_kb`` holds, in place where a
    transition can: samples added to and dropped from latency histories, reports replaced,
    claims counted, clusters and pool clusters removed, the plan and the log moved on."""
    kb.apply_reports([_entry("edge-1", now, 99.0, claim="shop/db"),
                      _entry("edge-2", now, latency_ms=None),  # its latency targets are dropped
                      _entry("edge-3", now)])
    kb.apply_reports([_entry("edge-3", now - 50)])  # received before the one stored: stale
    kb.apply_plan({"shop/web": {"edge-3": 2}}, {"shop/web": "moved"}, "rescheduling", "c0" * 20,
                  1, now + 1, [])
    kb.apply_leader("lead-2", 2, now + 2)
    kb.apply_member("lead-2", "10.0.0.2:4321", "10.0.0.2:8080", "http://10.0.0.2:8080", now + 2)
    kb.apply_member_removed("10.0.0.1:4321", now + 2)
    kb.apply_proposal_rejected("key-2", "p2", "c1" * 20, "https://forge/pr/2", now + 2)
    kb.apply_goals_failure("d2" * 20, ["qonnect.yaml:2:1: bad"], now + 2)
    kb.apply_dynamic({"burst-2": {"pool": "cloud", "phase": "Joined", "nodes": 2, "tier": "cloud",
                                  "region": "eu-central"}}, now + 3)
    kb.apply_pool_token("burst-2", "cd" * 32, now + 3)
    kb.apply_branch_heads({"edge-1": None, "edge-2": "f2" * 20, "edge-3": "f3" * 20}, 2)
    _goals(kb, "c2" * 20, CLUSTERS[1:] + ["edge-4"], now + 4, job_tag="2", grace=60.0)  # edge-1 leaves


def dump_fields() -> list[str]:
    """The parts of the dumped state (``to_dict``'s keys)."""
    return list(KnowledgeBase().to_dict())


def changed_fields(before: dict[str, Any], after: dict[str, Any]) -> set[str]:
    """The parts of two ``to_dict`` outputs that differ."""
    return {key for key in before if before[key] != after[key]}
