"""Recovery never applies a stale decision (issue 31, 6): an agent coming back from an
outage applies only the branch head it fetches then, never a commit superseded while it
was away.

Issue 31 saw it: while a cluster's API server was down the agent kept reporting, the
leader failed the cluster over and back, and on recovery the agent first applied the
stale failover commit (pruning the frontend, its Service, Secret and ServiceAccount),
then recreated everything 1.6 s later. The cause was the leads' commit hint: the agent
had fetched the failover commit during the outage (and could not apply it), the leads'
answers kept naming that commit, so passes read it from the local cache instead of
asking Git; when the API server came back the first pass applied it, before an answer
naming the newer head arrived. A pass that is about to change the cluster now always
asks Git first; only a pass over the commit it already applied may skip Git."""

from __future__ import annotations

import threading
from typing import Any

from kubernetes import client

from qonnect_gitops.sim import SimCluster
from tests.agent.conftest import Branch, Recorder, configmap, configmap_names, namespace, wait_for


def _uid(core: client.CoreV1Api, name: str) -> str:
    return str(core.read_namespaced_config_map(name, "shop").metadata.uid)


def test_an_agent_back_from_an_api_outage_applies_the_head_not_the_commit_it_fetched_during_it(
        make_agent: Any, branch: Branch, recorder: Recorder, sim: SimCluster, core: client.CoreV1Api) -> None:
    running = [namespace("shop"), configmap("frontend"), configmap("backend")]
    first = branch.publish(running)
    recorder.response = {"accepted": True, "generation": 1, "commit": first}
    agent = make_agent(leads=(recorder.url,), interval=0.2, report_interval=0.1, drift_interval=600.0,
                       git_poll_max_interval=600.0, api_retries=1)
    thread = threading.Thread(target=agent.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: agent.last is not None and agent.last.applied is not None
                 and agent.last.applied.commit == first, what="first commit applied")
        frontend = _uid(core, "frontend")
        sim.down()
        # The leader fails the cluster over (the frontend leaves it) and says so in its answers.
        failover = branch.publish([namespace("shop"), configmap("backend")], prune_limit=1)
        recorder.response = {"accepted": True, "generation": 2, "commit": failover}
        wait_for(lambda: agent._git_head == failover, what="the failover commit fetched during the outage")
        seen = len(recorder.reports)
        wait_for(lambda: len(recorder.reports) >= seen + 3, what="answers naming the failover commit")
        # The cluster comes back; the leader's next decision supersedes the failover, and the
        # answers still name the failover commit (an answer lags a write by up to a report).
        head = branch.publish([*running, configmap("extra")])
        sim.up()
        agent.wake.set()
        wait_for(lambda: agent.last is not None and agent.last.applied is not None
                 and agent.last.applied.commit != first, timeout=20, what="a new commit applied")
        assert agent.last.applied.commit == head, "a superseded commit was applied on the way"
        assert configmap_names(core) == {"frontend", "backend", "extra"}
        assert _uid(core, "frontend") == frontend  # never pruned and recreated
    finally:
        sim.up()
        agent.stop()
        thread.join(10)
