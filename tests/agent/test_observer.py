"""`qonnect observer`: clusters synced by Flux and by Argo CD are reported as an agent's
cluster is, and planned the same.

Three simulated clusters run the rendered branches of one decision: agent-1 through
qonnect's agent; flux-1 and argo-1 through the test playing Flux and Argo CD: it applies
the branch with `kubectl apply --server-side -k` under their field managers (the branch
builds as it is) and writes the status fields their controllers write on the upstream
CRDs (tests/deploy/testdata/crds). The observers read those clusters with the read-only
RBAC of deploy/observer/ only. Their reports go into a Knowledge Base and the planner
places on the three clusters alike; a syncer that fails has its cluster cordoned, as an
agent that refuses its branch has.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config

from qonnect_gitops.agent.agent import Agent
from qonnect_gitops.agent.config import AgentConfig
from qonnect_gitops.agent.observer import Observer, SyncerKind, SyncerRef, argocd_status, commit_of, flux_status
from qonnect_gitops.gitstore.daemon import GitDaemon, free_port
from qonnect_gitops.gitstore.store import GitStore
from qonnect_gitops.gitstore.trailers import DecisionMeta
from qonnect_gitops.kb import KnowledgeBase
from qonnect_gitops.model import load_goals
from qonnect_gitops.model.plan import CurrentPlacement
from qonnect_gitops.model.report import AgentReport
from qonnect_gitops.model.status import SyncReason, SyncState
from qonnect_gitops.placement import plan as make_plan
from qonnect_gitops.render import render
from qonnect_gitops.sim import SimCluster
from tests.conftest import ROOT
from tests.deploy.kustomize import kubectl, kustomize
from tests.deploy.syncers import install_crds
from tests.kb.transitions import apply_goals, report_entry
from tests.lead.harness import CLUSTER, FLEET
from tests.render.test_render import make_plan as fixed_plan

CLUSTERS = ("agent-1", "argo-1", "flux-1")
APP = """apiVersion: qonnect.io/v1alpha1
kind: QoSApp
metadata: {name: shop}
spec:
  namespace: shop
  components:
    - name: web
      manifests: [manifests/web.yaml]
      replicas: 3
      qos:
        tiers: [edge]
        availability: {minClusters: 3, spread: true}
"""
WEB = """apiVersion: apps/v1
kind: Deployment
metadata: {name: web-v1}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
        - {name: web, image: nginx:1.27, resources: {requests: {cpu: 100m, memory: 64Mi}}}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: web-settings}
data: {greeting: hello}
"""
FIELD_MANAGER = {"flux-1": "kustomize-controller", "argo-1": "argocd-controller"}
NOW = "2026-12-01T12:00:00Z"


def goals_files() -> dict[str, bytes]:
    files = {"qonnect.yaml": FLEET.format(interval=1.0, grace=30.0).encode(),
             "apps/shop/app.yaml": APP.encode(), "apps/shop/manifests/web.yaml": WEB.encode()}
    for name in CLUSTERS:
        files[f"clusters/{name}.yaml"] = CLUSTER.format(name=name).encode()
    return files


class Fleet:
    """The goals repository with one decision, the three sims and where each branch lives."""

    def __init__(self, tmp: Path, daemon: GitDaemon, store: GitStore, sims: dict[str, SimCluster]) -> None:
        self.tmp, self.daemon, self.store, self.sims = tmp, daemon, store, sims
        self.url = daemon.url("goals.git")
        self.goals = load_goals(goals_files())

    def head(self, cluster: str) -> str:
        head = self.store.cluster_head(cluster)
        assert head is not None
        return head

    def kubeconfig(self, cluster: str) -> Path:
        path = self.tmp / f"{cluster}.kubeconfig"
        path.write_text(self.sims[cluster].kubeconfig_yaml())
        return path

    def api(self, cluster: str) -> client.ApiClient:
        return config.new_client_from_config_dict(self.sims[cluster].kubeconfig())

    def play_syncer(self, cluster: str) -> str:
        """Apply the branch head as Flux or Argo CD does: the branch built by kustomize,
        server-side applied under the controller's field manager. Returns the commit."""
        commit = self.head(cluster)
        tree = self.tmp / f"checkout-{cluster}"
        subprocess.run(["git", "-C", str(self.store.repo.path), "worktree", "add", "-f", "--detach", str(tree),
                        commit], check=True, capture_output=True)
        run = subprocess.run([kubectl(), "--kubeconfig", str(self.kubeconfig(cluster)), "apply", "--server-side",
                              f"--field-manager={FIELD_MANAGER[cluster]}", "-k", str(tree)],
                             capture_output=True, text=True, timeout=60, check=False)
        assert run.returncode == 0, run.stderr
        return commit

    def observer(self, cluster: str, kind: SyncerKind) -> Observer:
        cfg = AgentConfig(cluster=cluster, repo=self.url, kubeconfig=self.sims[cluster].kubeconfig(user="observer"),
                          cache_dir=self.tmp / "cache-observer", api_backoff=0.01, api_backoff_max=0.1,
                          allow_unsigned=True)
        return Observer(cfg, SyncerRef.default(kind, cluster))


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    goals = load_goals(goals_files())
    decided = fixed_plan(goals, {"shop/web": {name: 1 for name in CLUSTERS}})
    srv = tmp_path / "srv"
    srv.mkdir()
    store = GitStore.init_bare(srv / "goals.git")
    store.write_decision(render(goals, decided).files, summary="plan 1", body="three clusters",
                         meta=DecisionMeta(source="0" * 40, term=1, generation=7, reason="initial"),
                         clusters=list(CLUSTERS), timestamp=1_800_000_000)
    sims = {name: SimCluster.from_cluster(goals.clusters[name], startup_delay=0.05, namespace_delay=0.0)
            for name in CLUSTERS}
    for sim in sims.values():
        sim.start()
    try:
        with GitDaemon(srv, port=free_port()) as daemon:
            built = Fleet(tmp_path, daemon, store, sims)
            for name in ("argo-1", "flux-1"):
                install_crds(sims[name])
                _read_only_observer(built.api(name))
            yield built
    finally:
        for sim in sims.values():
            sim.stop()


def _read_only_observer(api: client.ApiClient) -> None:
    """deploy/observer's ClusterRole, bound to the sim's user "observer"."""
    (role,) = [o for o in kustomize(ROOT / "deploy" / "observer") if o["kind"] == "ClusterRole"]
    rbac = client.RbacAuthorizationV1Api(api)
    rbac.create_cluster_role(role)
    rbac.create_cluster_role_binding({
        "metadata": {"name": "observer"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role["metadata"]["name"]},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "observer"}]})


def _flux_syncs(fleet: Fleet, commit: str, ready: dict[str, str] | None = None) -> None:
    """The Kustomization of deploy/flux for flux-1, with the status kustomize-controller
    writes after applying ``commit`` (or ``ready``: the Ready condition it writes on failure)."""
    objs = client.CustomObjectsApi(fleet.api("flux-1"))
    sync = next(o for o in kustomize(ROOT / "deploy" / "flux") if o["kind"] == "Kustomization")
    sync["metadata"]["namespace"] = "flux-system"
    live = _upsert(objs, "kustomize.toolkit.fluxcd.io", "v1", "flux-system", "kustomizations", sync)
    revision = f"cluster/flux-1@sha1:{commit}"
    cond = ready or {"status": "True", "reason": "ReconciliationSucceeded", "message": f"Applied revision: {revision}"}
    generation = live["metadata"]["generation"]
    live["status"] = {
        "observedGeneration": generation, "lastAppliedRevision": revision,
        "lastAttemptedRevision": revision, "lastHandledReconcileAt": NOW,
        "conditions": [{"type": "Ready", "lastTransitionTime": NOW, "observedGeneration": generation, **cond},
                       {"type": "Healthy", "status": "True", "reason": "Succeeded", "lastTransitionTime": NOW,
                        "message": "Health check passed in 1.2s"}]}
    objs.replace_namespaced_custom_object_status("kustomize.toolkit.fluxcd.io", "v1", "flux-system",
                                                 "kustomizations", "qonnect", live)


def _argo_syncs(fleet: Fleet, commit: str) -> None:
    """The Application of deploy/argocd for argo-1, with the status the application
    controller writes after an automated sync of ``commit``."""
    objs = client.CustomObjectsApi(fleet.api("argo-1"))
    (app,) = kustomize(ROOT / "deploy" / "argocd")
    app["metadata"].update(name="qonnect-argo-1", namespace="argocd")
    app["spec"]["source"].update(repoURL=fleet.url, targetRevision="cluster/argo-1")
    live = _upsert(objs, "argoproj.io", "v1alpha1", "argocd", "applications", app)
    source = app["spec"]["source"]
    live["status"] = {
        "sync": {"status": "Synced", "revision": commit},
        "health": {"status": "Healthy"},
        "operationState": {
            "phase": "Succeeded", "message": "successfully synced (all tasks run)", "startedAt": NOW, "finishedAt": NOW,
            "operation": {"sync": {"revision": commit}, "initiatedBy": {"automated": True}},
            "syncResult": {"revision": commit, "source": source}},
        "history": [{"id": 0, "revision": commit, "deployedAt": NOW, "source": source}],
        "reconciledAt": NOW}
    # Argo CD's CRD has no status subresource: the controller writes the whole object.
    objs.replace_namespaced_custom_object("argoproj.io", "v1alpha1", "argocd", "applications", "qonnect-argo-1", live)


def _upsert(objs: client.CustomObjectsApi, group: str, version: str, ns: str, plural: str,
            body: dict[str, Any]) -> dict[str, Any]:
    try:
        return objs.create_namespaced_custom_object(group, version, ns, plural, body)  # type: ignore[no-any-return]
    except client.ApiException as exc:
        assert exc.status == 409, exc.body
        return objs.get_namespaced_custom_object(group, version, ns, plural,  # type: ignore[no-any-return]
                                                 body["metadata"]["name"])


def _settled(observer: Agent, timeout: float = 20.0) -> AgentReport:
    """Observe until every component is ready (the sim's kubelet starts the pods)."""
    deadline = time.monotonic() + timeout
    while True:
        report = observer.build_report(observer.sync())
        if report.components and all(c.healthy for c in report.components) and report.sync.state == "Ready":
            return report
        if time.monotonic() > deadline:
            raise AssertionError(f"not settled: {report.sync} {report.components}")
        time.sleep(0.2)


def _kb_plan(fleet: Fleet, reports: list[AgentReport]) -> tuple[Any, Any]:
    """The reports into a Knowledge Base (as the leads record them), then a plan from nothing."""
    kb = KnowledgeBase()
    now = time.time()
    kb.apply_leader("lead-1", 1, now - 5)
    assert apply_goals(kb, "c1" * 20, goals_files(), now - 5)
    kb.apply_reports([report_entry(r.cluster, now, r.model_dump(mode="json", by_alias=True, exclude_none=True))
                      for r in reports])
    snapshot = kb.snapshot(datetime.fromtimestamp(now + 0.5, UTC))
    return snapshot, make_plan(fleet.goals, snapshot, CurrentPlacement())


def test_flux_and_argo_synced_clusters_are_reported_and_planned_as_an_agent_cluster(fleet: Fleet) -> None:
    agent = Agent(AgentConfig(cluster="agent-1", repo=fleet.url, kubeconfig=fleet.sims["agent-1"].kubeconfig(),
                              cache_dir=fleet.tmp / "cache-agent", api_backoff=0.01, allow_unsigned=True))
    flux, argo = fleet.observer("flux-1", SyncerKind.FLUX), fleet.observer("argo-1", SyncerKind.ARGOCD)
    # Before the syncers ran, the observers say so, and nothing is reported applied.
    nothing = flux.build_report(flux.sync())
    assert nothing.applied is None and nothing.sync.state == "Stalled"
    assert "Flux Kustomization flux-system/qonnect does not exist" in nothing.sync.message
    _flux_syncs(fleet, fleet.play_syncer("flux-1"))
    _argo_syncs(fleet, fleet.play_syncer("argo-1"))
    reports = {"agent-1": _settled(agent), "flux-1": _settled(flux), "argo-1": _settled(argo)}
    for name, report in reports.items():
        assert report.cluster == name
        assert report.applied is not None and report.applied.commit == fleet.head(name), name
        assert report.applied.generation == 7 and report.attempted == fleet.head(name)
        assert [(c.component, c.healthy, c.ready_replicas, c.desired_replicas) for c in report.components] == [
            ("shop/web", True, 1, 1)], name
        assert len(report.nodes) == 2 and all(n.ready for n in report.nodes)
        assert report.sync.reason == "ReconciliationSucceeded" and report.refusals == ()
    # The observers wrote nothing: every object in flux-1 was applied by "Flux" (or is the sim's own).
    managers = {m.manager for d in client.AppsV1Api(fleet.api("flux-1")).list_namespaced_deployment("shop").items
                for m in d.metadata.managed_fields}
    assert managers <= {"kustomize-controller", "kube-controller-manager"}, managers
    snapshot, plan = _kb_plan(fleet, list(reports.values()))
    for name in CLUSTERS:
        seen = snapshot.clusters[name]
        assert seen.healthy and seen.nodes is not None and len(seen.nodes) == 2, name
    assert plan.clusters_of("shop/web") == {name: 1 for name in CLUSTERS}
    assert plan.unmet == ()


def test_a_failing_syncer_cordons_its_cluster_as_a_refusing_agent_does(fleet: Fleet) -> None:
    agent = Agent(AgentConfig(cluster="agent-1", repo=fleet.url, kubeconfig=fleet.sims["agent-1"].kubeconfig(),
                              cache_dir=fleet.tmp / "cache-agent", api_backoff=0.01, allow_unsigned=True))
    flux, argo = fleet.observer("flux-1", SyncerKind.FLUX), fleet.observer("argo-1", SyncerKind.ARGOCD)
    commit = fleet.play_syncer("flux-1")
    _flux_syncs(fleet, commit, ready={"status": "False", "reason": "BuildFailed",
                                      "message": "kustomize build failed: accumulating resources"})
    _argo_syncs(fleet, fleet.play_syncer("argo-1"))
    failed = flux.build_report(flux.sync())
    assert (failed.sync.state, failed.sync.reason) == ("Stalled", SyncReason.BRANCH_UNREADABLE)
    assert "Flux: BuildFailed: kustomize build failed" in failed.sync.message
    assert failed.applied is not None and failed.applied.commit == commit  # what it applied before stays
    snapshot, _ = _kb_plan(fleet, [_settled(agent), failed, _settled(argo)])
    # The leads' health model: Stalled, cordoned (keeps what runs, no new replicas; the
    # planner honours the cordon), as for an agent that refuses its branch.
    seen = snapshot.clusters["flux-1"]
    assert (seen.healthy, seen.state, seen.reason, seen.cordoned) == (True, "Stalled", "BranchUnreadable", True)
    assert not snapshot.clusters["argo-1"].cordoned and not snapshot.clusters["agent-1"].cordoned


def test_a_syncer_following_another_branch_is_refused(fleet: Fleet) -> None:
    """The applied commit must be on this cluster's branch: another cluster's commit is
    not reported as applied here."""
    argo_commit = fleet.head("argo-1")
    fleet.play_syncer("flux-1")
    _flux_syncs(fleet, argo_commit)
    report = fleet.observer("flux-1", SyncerKind.FLUX).build_report(fleet.observer("flux-1", SyncerKind.FLUX).sync())
    assert report.applied is None and report.sync.state == "Stalled"
    assert report.sync.reason == "BranchUnreadable" and "not on cluster/flux-1" in report.sync.message


# ---------------------------------------------------------------- status as each syncer writes it


def test_commit_of_reads_every_revision_format() -> None:
    sha = "a" * 40
    assert commit_of(f"cluster/edge-1@sha1:{sha}") == sha  # Flux 2.x
    assert commit_of(f"cluster/edge-1/{sha}") == sha  # Flux before 2.0
    assert commit_of(sha) == sha and commit_of("b" * 64) == "b" * 64  # Argo CD, SHA-256 repositories
    assert commit_of("cluster/edge-1@sha1:abc") is None and commit_of(None) is None and commit_of(7) is None


@pytest.mark.parametrize(("ready", "reconciling", "expected"), [
    ({"status": "True", "reason": "ReconciliationSucceeded"}, None,
     (SyncState.READY, SyncReason.RECONCILIATION_SUCCEEDED)),
    ({"status": "False", "reason": "HealthCheckFailed"}, None, (SyncState.STALLED, SyncReason.HEALTH_CHECK_FAILED)),
    ({"status": "False", "reason": "ArtifactFailed"}, None, (SyncState.STALLED, SyncReason.SOURCE_UNAVAILABLE)),
    ({"status": "False", "reason": "PruneFailed"}, None, (SyncState.STALLED, SyncReason.PRUNE_FAILED)),
    ({"status": "Unknown", "reason": "Progressing"}, {"status": "True", "reason": "Progressing"},
     (SyncState.RECONCILING, SyncReason.PROGRESSING)),
    ({"status": "False", "reason": "DependencyNotReady"}, {"status": "True", "reason": "ProgressingWithRetry"},
     (SyncState.RECONCILING, SyncReason.PROGRESSING)),
    (None, None, (SyncState.RECONCILING, SyncReason.PROGRESSING)),
])
def test_flux_conditions(ready: Any, reconciling: Any, expected: tuple[SyncState, SyncReason]) -> None:
    conditions = [{"type": t, **c} for t, c in (("Ready", ready), ("Reconciling", reconciling)) if c]
    found = flux_status({"metadata": {"generation": 2}, "status": {
        "observedGeneration": 2, "conditions": conditions, "lastAppliedRevision": "main@sha1:" + "c" * 40}})
    assert (found.state, found.reason) == expected and found.applied == "c" * 40


def test_flux_ready_for_an_older_spec_is_still_reconciling() -> None:
    found = flux_status({"metadata": {"generation": 3}, "status": {
        "observedGeneration": 2, "conditions": [{"type": "Ready", "status": "True"}]}})
    assert found.state == SyncState.RECONCILING and found.applied is None


@pytest.mark.parametrize(("status", "expected", "applied"), [
    ({"sync": {"status": "Synced", "revision": "a" * 40}}, SyncState.READY, "a" * 40),
    ({"sync": {"status": "OutOfSync", "revision": "b" * 40}, "history": [{"revision": "a" * 40}]},
     SyncState.RECONCILING, "a" * 40),
    ({"sync": {"status": "OutOfSync", "revision": "b" * 40},
      "operationState": {"phase": "Failed", "message": "one or more objects failed to apply",
                         "syncResult": {"revision": "b" * 40}}, "history": [{"revision": "a" * 40}]},
     SyncState.STALLED, "a" * 40),
    ({"sync": {"status": "Unknown"}, "conditions": [{"type": "ComparisonError", "message": "repository not found"}]},
     SyncState.STALLED, None),
    ({}, SyncState.RECONCILING, None),
])
def test_argocd_status(status: dict[str, Any], expected: SyncState, applied: str | None) -> None:
    found = argocd_status({"status": status})
    assert found.state == expected and found.applied == applied
    if status.get("operationState", {}).get("phase") == "Failed":
        assert found.attempted == "b" * 40 and "one or more objects failed" in found.message


def test_the_trimmed_crds_hold_every_status_field_the_observer_reads() -> None:
    """What flux_status and argocd_status read exists in the upstream schemas kept as test data."""
    crds = {d["spec"]["names"]["kind"]: d["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
            for d in (yaml.safe_load(p.read_text()) for p in (ROOT / "tests/deploy/testdata/crds").glob("*.yaml"))}

    def has(kind: str, *path: str) -> bool:
        node = crds[kind]
        for part in path:
            node = node["items"] if part == "*" else node["properties"][part]
        return True

    for path in (("lastAppliedRevision",), ("lastAttemptedRevision",), ("observedGeneration",),
                 ("conditions", "*", "reason")):
        assert has("Kustomization", "status", *path)
    for path in (("sync", "revision"), ("sync", "status"), ("operationState", "phase"),
                 ("operationState", "syncResult", "revision"), ("history", "*", "revision"),
                 ("conditions", "*", "type")):
        assert has("Application", "status", *path)
