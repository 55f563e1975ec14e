"""API operations beyond the plain verbs: subresources, reviews, APIServices, namespace defaults.

* ``pods/<name>/eviction`` (``kubectl drain``): deletes the Pod unless a
  PodDisruptionBudget selecting it allows no disruption (429, as the API answers);
* ``pods/<name>/binding`` and ``bindings``: bind a Pod to a node (custom schedulers);
* ``serviceaccounts/<name>/token``: a TokenRequest, answered with a token that
  authenticates as the ServiceAccount (its RBAC applies);
* ``pods/<name>/log``: the simulated containers' log lines;
* reviews (access, rules, token, self): answered from the cluster's RBAC;
* local APIServices for every served group version, kept in step with CRDs, and the
  status of APIServices users create (served by nobody: ``ServiceNotFound``);
* a new namespace's ``default`` ServiceAccount and ``kube-root-ca.crt``, at once (the
  controllers recreate them when they are deleted).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from qonnect_gitops.sim import errors
from qonnect_gitops.sim.authz import User
from qonnect_gitops.sim.defaults import CA_CERT, ROOT_CA
from qonnect_gitops.sim.resources import ResourceType
from qonnect_gitops.sim.selectors import match_label_selector_object
from qonnect_gitops.sim.ssa import now_rfc3339

if TYPE_CHECKING:
    from qonnect_gitops.sim.api import ApiCore, Result

APISERVICES = ("apiregistration.k8s.io", "apiservices")
AUTOMANAGED = "kube-aggregator.kubernetes.io/automanaged"
# Group priorities the API server gives its built-in groups (higher: preferred by clients).
_GROUP_PRIORITY = {"": 18000, "apps": 17800, "events.k8s.io": 17750, "authentication.k8s.io": 17700,
                   "authorization.k8s.io": 17600, "autoscaling": 17500, "batch": 17400,
                   "certificates.k8s.io": 17300, "networking.k8s.io": 17200, "policy": 17100,
                   "rbac.authorization.k8s.io": 17000, "storage.k8s.io": 16800,
                   "admissionregistration.k8s.io": 16700, "apiextensions.k8s.io": 16700,
                   "scheduling.k8s.io": 16600, "coordination.k8s.io": 16500, "node.k8s.io": 16300,
                   "discovery.k8s.io": 16200, "flowcontrol.apiserver.k8s.io": 16100, "resource.k8s.io": 15900,
                   "apiregistration.k8s.io": 18000, "metrics.k8s.io": 100}


def _opts(manager: str) -> Any:
    from qonnect_gitops.sim.api import WriteOptions

    return WriteOptions(field_manager=manager)


def _meta(obj: dict[str, Any] | None) -> dict[str, Any]:
    return (obj or {}).get("metadata") or {}


# --------------------------------------------------------------------------- namespaces


def namespace_defaults(core: ApiCore, ns: str) -> None:
    """The ``default`` ServiceAccount and ``kube-root-ca.crt`` ConfigMap of a new namespace."""
    sa, cm = core.registry.find("", "v1", "serviceaccounts"), core.registry.find("", "v1", "configmaps")
    assert sa is not None and cm is not None
    if core.store.get(("", "serviceaccounts"), ns, "default") is None:
        core.create(sa, ns, {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}},
                    _opts("kube-controller-manager"))
    if core.store.get(("", "configmaps"), ns, ROOT_CA) is None:
        core.create(cm, ns, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": ROOT_CA, "annotations": {
            "kubernetes.io/description": "Contains a CA bundle that can be used to verify the kube-apiserver when "
                                         "using internal endpoints such as the internal service IP or "
                                         "kubernetes.default.svc. No other usage is guaranteed across "
                                         "distributions of Kubernetes clusters."}},
                         "data": {"ca.crt": CA_CERT}}, _opts("kube-controller-manager"))


# --------------------------------------------------------------------------- APIServices


def _local_apiservice(group: str, version: str, automanaged: str) -> dict[str, Any]:
    name = f"{version}.{group}"
    return {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
            "metadata": {"name": name, "labels": {AUTOMANAGED: automanaged}},
            "spec": {"group": group, "version": version, "groupPriorityMinimum": _GROUP_PRIORITY.get(group, 1000),
                     "versionPriority": 15 if version == "v1" else 9}}


def sync_apiservices(core: ApiCore) -> None:
    """Create the APIServices of served group versions; remove automanaged ones no longer served."""
    rt = core.registry.find("apiregistration.k8s.io", "v1", "apiservices")
    if rt is None:
        return
    crd_groups = {t.group for t in core.registry.all() if t.crd_name and not t.builtin}
    wanted: dict[str, tuple[str, str, str]] = {}
    for group, versions in core.registry.group_versions().items():
        for v in versions:
            managed = "true" if group in crd_groups else "onstart"
            wanted[f"{v}.{group}"] = (group, v, managed)
    with core.store.lock:
        for name, (group, version, managed) in wanted.items():
            if core.store.get(APISERVICES, "", name) is None:
                core.create(rt, "", _local_apiservice(group, version, managed), _opts("kube-apiserver"))
        for svc in core.store.list(APISERVICES):
            name = _meta(svc)["name"]
            if (_meta(svc).get("labels") or {}).get(AUTOMANAGED) and name not in wanted:
                core.delete(rt, "", name)


def apiservice_status(core: ApiCore, svc: dict[str, Any]) -> None:
    """Available for local APIServices; ``ServiceNotFound`` for one pointing at a Service (nothing serves it)."""
    rt = core.registry.find("apiregistration.k8s.io", "v1", "apiservices")
    assert rt is not None
    service = (svc.get("spec") or {}).get("service")
    old = [c for c in (svc.get("status") or {}).get("conditions") or [] if c.get("type") == "Available"]
    if not service:
        cond = {"type": "Available", "status": "True", "reason": "Local",
                "message": "Local APIServices are always available"}
    elif core.store.get(("", "services"), service.get("namespace", ""), service.get("name", "")) is None:
        cond = {"type": "Available", "status": "False", "reason": "ServiceNotFound",
                "message": f'service/{service.get("name")} in "{service.get("namespace")}" is not present'}
    else:
        cond = {"type": "Available", "status": "False", "reason": "MissingEndpoints",
                "message": f'endpoints for service/{service.get("name")} in "{service.get("namespace")}" have no '
                           "addresses with port name \"\""}
    if old and all(old[0].get(k) == v for k, v in cond.items()):
        return
    cond["lastTransitionTime"] = now_rfc3339()
    core.replace(rt, "", _meta(svc)["name"], dict(svc, status={"conditions": [cond]}), _opts("kube-apiserver"),
                 "status")


# --------------------------------------------------------------------------- reviews


def review(core: ApiCore, rt: ResourceType, ns: str, body: Any, user: User) -> Result:
    """A review create: the body with its status, nothing stored (201, as the API answers)."""
    from qonnect_gitops.sim.api import Result

    if not isinstance(body, dict):
        raise errors.bad_request("the body of the request was in an unknown format")
    answer = core.authz.review(rt.kind, body, user, ns, core.users)
    answer["apiVersion"], answer["kind"] = rt.group_version, rt.kind
    return Result(answer, 201)


# --------------------------------------------------------------------------- pods


def _pdbs_blocking(core: ApiCore, pod: dict[str, Any]) -> list[dict[str, Any]]:
    ns = _meta(pod).get("namespace", "")
    labels = _meta(pod).get("labels") or {}
    out = []
    for pdb in core.store.list(("policy", "poddisruptionbudgets"), ns):
        selector = (pdb.get("spec") or {}).get("selector")
        if selector is None or not match_label_selector_object(selector, labels):
            continue
        if int((pdb.get("status") or {}).get("disruptionsAllowed", 0)) <= 0:
            out.append(pdb)
    return out


def evict(core: ApiCore, ns: str, name: str, body: Any, dry_run: bool) -> Result:
    """POST pods/<name>/eviction: delete the Pod unless a PodDisruptionBudget forbids it."""
    from qonnect_gitops.sim.api import Result

    pods = core.registry.find("", "v1", "pods")
    assert pods is not None
    with core.store.lock:
        pod = core.store.get(("", "pods"), ns, name)
        if pod is None:
            raise errors.not_found("", "pods", name)
        running = (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed", "Pending")
        blocking = _pdbs_blocking(core, pod) if running else []
        if blocking:
            pdb = _meta(blocking[0])["name"]
            raise errors.ApiError(429, "TooManyRequests", "Cannot evict pod as it would violate the pod's "
                                  "disruption budget.", {"causes": [{"reason": "DisruptionBudget", "message":
                                                                     f"The disruption budget {pdb} needs "
                                                                     f"{(blocking[0].get('status') or {}).get('desiredHealthy', 0)} "
                                                                     "healthy pods and has "
                                                                     f"{(blocking[0].get('status') or {}).get('currentHealthy', 0)} "
                                                                     "currently"}]})
        options = (body or {}).get("deleteOptions") if isinstance(body, dict) else None
        core.delete(pods, ns, name, options or {}, dry_run=dry_run)
    return Result({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}, 201)


def bind(core: ApiCore, ns: str, name: str, body: Any) -> Result:
    """POST pods/<name>/binding (or bindings): set the Pod's node, as a scheduler does."""
    from qonnect_gitops.sim.api import Result

    pods = core.registry.find("", "v1", "pods")
    assert pods is not None
    if not isinstance(body, dict) or not isinstance(body.get("target"), dict):
        raise errors.invalid("", "Binding", name, [{"reason": "FieldValueRequired", "field": "target",
                                                    "message": "Required value"}])
    node = str(body["target"].get("name") or "")
    with core.store.lock:
        pod = core.store.get(("", "pods"), ns, name or _meta(body).get("name", ""))
        if pod is None:
            raise errors.not_found("", "pods", name or _meta(body).get("name", ""))
        if (pod.get("spec") or {}).get("nodeName"):
            raise errors.conflict("", "pods", _meta(pod)["name"], f"pod {_meta(pod)['name']} is already assigned to "
                                  f"node \"{pod['spec']['nodeName']}\"")
        core.replace(pods, ns, _meta(pod)["name"], dict(pod, spec=dict(pod.get("spec") or {}, nodeName=node)),
                     _opts("kube-scheduler"))
    return Result({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}, 201)


def token_request(core: ApiCore, ns: str, name: str, body: Any) -> Result:
    """POST serviceaccounts/<name>/token: a token that authenticates as the ServiceAccount."""
    from qonnect_gitops.sim.api import Result

    sa = core.store.get(("", "serviceaccounts"), ns, name)
    if sa is None:
        raise errors.not_found("", "serviceaccounts", name)
    spec = dict((body or {}).get("spec") or {}) if isinstance(body, dict) else {}
    seconds = int(spec.get("expirationSeconds") or 3600)
    spec.setdefault("audiences", ["https://kubernetes.default.svc.cluster.local"])
    spec["expirationSeconds"] = seconds
    token = core.users.service_account_token(ns, name, _meta(sa).get("uid", ""))
    expires = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + seconds))
    return Result({"kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
                   "metadata": {"name": name, "namespace": ns, "creationTimestamp": None}, "spec": spec,
                   "status": {"token": token, "expirationTimestamp": expires}}, 201)


def pod_log(core: ApiCore, ns: str, name: str, container: str | None) -> str:
    """The log of a simulated container: when it started (the sim runs no processes)."""
    pod = core.store.get(("", "pods"), ns, name)
    if pod is None:
        raise errors.not_found("", "pods", name)
    containers = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or []]
    if container is None and len(containers) > 1:
        raise errors.bad_request(f"a container name must be specified for pod {name}, choose one of: "
                                 f"[{' '.join(str(c) for c in containers)}]")
    wanted = container or (containers[0] if containers else "")
    status = next((c for c in (pod.get("status") or {}).get("containerStatuses") or [] if c.get("name") == wanted),
                  None)
    if wanted not in containers:
        raise errors.bad_request(f"container {wanted} is not valid for pod {name}")
    running = ((status or {}).get("state") or {}).get("running")
    if not running:
        raise errors.bad_request(f'container "{wanted}" in pod "{name}" is waiting to start: ContainerCreating')
    return f"{running.get('startedAt')} simulated container {wanted} started (image {(status or {}).get('image')})\n"
