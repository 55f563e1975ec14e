"""The Kubernetes calls the agent makes, through the official client's ``ApiClient``.

Discovery maps (group, version, kind) to a resource path and scope; every request
retries transport errors, 5xx and 429 (honouring ``Retry-After``) with capped
exponential backoff and jitter. Errors that retrying cannot fix (4xx) surface at
once as ``KubeError`` with the API's ``Status`` reason and message.

No call waits forever: one call, its retries included, ends within ``timeout`` seconds
(``--api-timeout``): each attempt may take what is left of it (the connect timeout is at
most ``connect_timeout``), and no retry starts that would end after it. A call that got
no answer at all in that time (refused, reset, timed out) marks the API server as *not
answering* (``unanswered``): from then on every call fails at once with that error,
without touching the network, until a call gets an answer again. Only ``probe()`` (one
bounded ``GET /version``) asks while it is so. An API server that stops answering in the
middle of a pass therefore costs that pass at most two timeouts (the calls in flight end
within one, the first of them to fail stops the rest), not one timeout per object.
"""

from __future__ import annotations

import json
import random
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

import urllib3
from kubernetes import client, config

from qonnect_gitops.agent.config import FIELD_MANAGER
from qonnect_gitops.logs import get_logger

log = get_logger(__name__)

_RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
LIST_PAGE_SIZE = 500  # what kubectl and client-go's pager ask for
LIST_RESTARTS = 3


NO_ANSWER = "NoAnswer"  # the reason of a call refused at once because the API server is not answering


class KubeError(Exception):
    """A request the API refused or that kept failing after retries."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def immutable(self) -> bool:
        return self.status == 422 and "immutable" in self.message.lower()

    @property
    def schema_error(self) -> bool:
        """A manifest field the schema does not declare. Server-side apply answers this
        with 500, not 400 (kubernetes/kubernetes#122480, #139253); it is the manifest's
        fault and retrying cannot fix it."""
        return self.status == 500 and "failed to create typed patch object" in self.message

    @property
    def transient(self) -> bool:
        return (self.status in _RETRY_STATUS or self.status == 0) and not self.schema_error

    @property
    def unanswered(self) -> bool:
        """The API server gave no answer (refused, reset, timed out), retries included:
        retrying at once cannot help."""
        return self.status == 0


@dataclass(frozen=True)
class Resource:
    """Where one kind is served."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{quote(namespace, safe='')}"
        base += f"/{self.plural}"
        if name:
            base += f"/{quote(name, safe='')}"
        return base


def split_api_version(api_version: str) -> tuple[str, str]:
    """``apps/v1`` -> (``apps``, ``v1``); ``v1`` -> (``""``, ``v1``)."""
    if "/" in api_version:
        group, version = api_version.split("/", 1)
        return group, version
    return "", api_version


def api_client_from(kubeconfig: dict[str, Any] | str | None) -> client.ApiClient:
    """An ``ApiClient`` from a kubeconfig dict, a kubeconfig file, or in-cluster credentials."""
    if isinstance(kubeconfig, dict):
        return config.new_client_from_config_dict(kubeconfig)
    if isinstance(kubeconfig, str):
        return config.new_client_from_config(config_file=kubeconfig)
    cfg = client.Configuration()
    config.load_incluster_config(client_configuration=cfg)
    return client.ApiClient(cfg)


class Kube:
    """Discovery-backed REST access with retries and a time bound per call; safe to share
    between threads (a pass's workers, the agent's signal reader)."""

    def __init__(self, api: client.ApiClient, *, retries: int = 6, backoff: float = 0.2,
                 backoff_max: float = 5.0, timeout: float = 30.0, connect_timeout: float = 5.0) -> None:
        self.api = api
        self.retries = retries
        self.backoff = backoff
        self.backoff_max = backoff_max
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self._lock = threading.Lock()
        self._discovery: dict[tuple[str, str], dict[str, Resource]] = {}
        self.requests = 0
        self.retried = 0
        # Not answering: since when (monotonic) and the error of the call that found it.
        self._unanswered: tuple[float, KubeError] | None = None

    # ------------------------------------------------------------- not answering

    @property
    def unanswered(self) -> KubeError | None:
        """The error of the call that found the API server not answering, while it is so."""
        down = self._unanswered
        return down[1] if down is not None else None

    def unanswered_for(self) -> float:
        """Seconds since the API server was found not answering (0 while it answers)."""
        down = self._unanswered
        return time.monotonic() - down[0] if down is not None else 0.0

    def probe(self) -> bool:
        """Whether the API server answers now: one ``GET /version`` without retries, within
        the timeout, made even while it is marked not answering (any answer clears that)."""
        try:
            self._call("GET", "/version", None, None, "application/json", retries=0)
        except KubeError as exc:
            return not exc.unanswered
        return True

    def _answered(self) -> None:
        if self._unanswered is not None:
            with self._lock:
                down, self._unanswered = self._unanswered, None
            if down is not None:
                log.info("kube_answering_again", after_seconds=round(time.monotonic() - down[0], 1))

    def _not_answering(self, err: KubeError) -> None:
        with self._lock:
            first = self._unanswered is None
            if first:
                self._unanswered = (time.monotonic(), err)
        if first:
            log.warning("kube_not_answering", error=err.message, timeout=self.timeout)

    # ------------------------------------------------------------- transport

    def request(self, method: str, path: str, query: dict[str, str] | None = None, body: Any = None,
                content_type: str = "application/json") -> Any:
        """One API call, retried on transient failures within the timeout; returns the decoded
        JSON body. Fails at once while the API server is marked not answering."""
        down = self._unanswered
        if down is not None:
            raise KubeError(0, NO_ANSWER, f"the API server has not answered for {time.monotonic() - down[0]:.0f} s "
                            f"({down[1].message})")
        return self._call(method, path, query, body, content_type, retries=self.retries)

    def _call(self, method: str, path: str, query: dict[str, str] | None, body: Any, content_type: str, *,
              retries: int) -> Any:
        url_path = path + ("?" + urlencode(query) if query else "")
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        deadline = time.monotonic() + self.timeout
        attempt = 0
        while True:
            attempt += 1
            wait: float | None = None
            left = max(0.001, deadline - time.monotonic())
            try:
                method_, url, hdrs, _, _ = self.api.param_serialize(
                    method, url_path, header_params=dict(headers), auth_settings=["BearerToken"])
                raw = json.dumps(body) if body is not None else None
                resp = self.api.rest_client.pool_manager.request(
                    method_, url, body=raw, headers=hdrs, timeout=urllib3.Timeout(
                        connect=min(self.connect_timeout, left), read=left), retries=False, preload_content=True)
                self.requests += 1
                self._answered()
                status = resp.status
                data = resp.data
                if 200 <= status < 300:
                    return json.loads(data) if data else None
                err = _error_from(status, data)
                if status == 429 or status == 503:
                    retry_after = resp.headers.get("Retry-After")
                    if retry_after:
                        try:
                            wait = min(float(retry_after), 60.0)
                        except ValueError:
                            wait = None
            except urllib3.exceptions.HTTPError as exc:
                err = KubeError(0, "ConnectionError", str(exc))
            if wait is None:
                wait = min(self.backoff_max, self.backoff * 2 ** (attempt - 1)) * random.uniform(0.5, 1.0)
            if not err.transient or attempt > retries or time.monotonic() + wait >= deadline:
                if err.unanswered:
                    self._not_answering(err)
                raise err
            self.retried += 1
            log.debug("kube_retry", method=method, path=path, status=err.status, wait=round(wait, 3),
                      attempt=attempt)
            time.sleep(wait)

    # ------------------------------------------------------------- discovery

    def resource(self, api_version: str, kind: str) -> Resource:
        """Where ``kind`` of ``api_version`` is served; re-reads discovery once on a miss."""
        group, version = split_api_version(api_version)
        for fresh in (False, True):
            kinds = self._kinds(group, version, fresh)
            if kind in kinds:
                return kinds[kind]
        raise KubeError(404, "NotFound", f"the server does not serve {kind} in {api_version}")

    def forget_discovery(self) -> None:
        with self._lock:
            self._discovery.clear()

    def _kinds(self, group: str, version: str, fresh: bool) -> dict[str, Resource]:
        key = (group, version)
        with self._lock:
            if not fresh and key in self._discovery:
                return self._discovery[key]
        path = f"/apis/{group}/{version}" if group else f"/api/{version}"
        try:
            doc = self.request("GET", path)
        except KubeError as exc:
            if exc.not_found:
                doc = {"resources": []}
            else:
                raise
        kinds = {}
        for res in doc.get("resources", []):
            if "/" in res.get("name", ""):
                continue  # subresources
            kinds[res["kind"]] = Resource(group, version, res["kind"], res["name"], bool(res.get("namespaced")))
        with self._lock:
            self._discovery[key] = kinds
        return kinds

    # ------------------------------------------------------------- verbs

    def get(self, res: Resource, namespace: str | None, name: str) -> dict[str, Any] | None:
        """The live object, or None if it does not exist."""
        try:
            return self.request("GET", res.path(namespace, name))  # type: ignore[no-any-return]
        except KubeError as exc:
            if exc.not_found:
                return None
            raise

    def list(self, res: Resource, namespace: str | None = None, label_selector: str | None = None,
             page_size: int = LIST_PAGE_SIZE) -> list[dict[str, Any]]:
        """Every object of ``res`` (in ``namespace``, matching ``label_selector``), read in
        pages of ``page_size`` with ``limit``/``continue``: a cluster with tens of thousands
        of objects is never one response held whole by the API server and by us at once.
        A continue token that expired (410) restarts the list from the first page."""
        for _ in range(LIST_RESTARTS):
            items: list[dict[str, Any]] = []
            token: str | None = None
            try:
                while True:
                    query = {"limit": str(page_size)}
                    if label_selector:
                        query["labelSelector"] = label_selector
                    if token:
                        query["continue"] = token
                    doc = self.request("GET", res.path(namespace), query)
                    items.extend(doc.get("items") or [])
                    token = (doc.get("metadata") or {}).get("continue") or None
                    if token is None:
                        return items
            except KubeError as exc:
                if exc.status != 410 or token is None:
                    raise
                log.info("kube_list_restarted", resource=res.plural, why=exc.message)
        raise KubeError(410, "Expired", f"listing {res.plural}: the continue token kept expiring")

    def apply(self, res: Resource, obj: dict[str, Any], *, dry_run: bool = False, force: bool = True,
              manager: str = FIELD_MANAGER) -> dict[str, Any]:
        """Server-side apply ``obj`` (``force`` takes conflicting fields over)."""
        meta = obj.get("metadata", {})
        query = {"fieldManager": manager, "force": "true" if force else "false", "fieldValidation": "Strict"}
        if dry_run:
            query["dryRun"] = "All"
        return self.request("PATCH", res.path(meta.get("namespace"), meta["name"]), query, obj,  # type: ignore[no-any-return]
                            content_type="application/apply-patch+yaml")

    def delete(self, res: Resource, namespace: str | None, name: str, uid: str | None = None,
               propagation: str = "Background") -> bool:
        """Delete (guarded by ``uid`` when given); False if it was already gone."""
        body: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation}
        if uid:
            body["preconditions"] = {"uid": uid}
        try:
            self.request("DELETE", res.path(namespace, name), None, body)
            return True
        except KubeError as exc:
            if exc.not_found:
                return False
            raise


def _error_from(status: int, data: bytes) -> KubeError:
    reason, message = "", ""
    try:
        doc = json.loads(data)
        reason, message = doc.get("reason", ""), doc.get("message", "")
    except (ValueError, AttributeError):
        message = data[:300].decode("utf-8", "replace") if data else ""
    return KubeError(status, reason or f"HTTP{status}", message)
