"""Who is asking, and may they: bearer tokens, users and RBAC as a real API server evaluates it.

* The cluster's own kubeconfig token is the admin (group ``system:masters``, bound to
  ``cluster-admin``): everything is allowed, as on a freshly installed cluster. A
  request without credentials is treated the same way, so plain ``curl`` keeps working
  against the simulated cluster.
* ``Users.add(name, groups)`` makes a restricted user with a token of its own (what
  ``SimCluster.kubeconfig(user=...)`` and ``qonnect sim --user`` hand out; those
  kubeconfigs also say ``as: <user>``, because kubectl sends no bearer token over plain
  HTTP: it impersonates the user instead, ``Impersonate-User``), and a
  ServiceAccount token (``serviceaccounts/<name>/token``) authenticates as
  ``system:serviceaccount:<ns>:<name>``. Their requests are authorised against the
  Roles, ClusterRoles and bindings stored in the cluster, with the default cluster
  roles (discovery, ``system:basic-user``...) a real cluster starts with, and refused
  with the API's 403 message. An unknown token is a 401.
* SelfSubjectAccessReview, SelfSubjectRulesReview, SubjectAccessReview,
  LocalSubjectAccessReview, SelfSubjectReview and TokenReview answer from the same rules.
"""

from __future__ import annotations

import secrets
import threading
from dataclasses import dataclass, field
from typing import Any

from qonnect_gitops.sim import errors
from qonnect_gitops.sim.store import Store

ADMIN_GROUPS = ("system:masters", "system:authenticated")
CLUSTER_ROLES = ("rbac.authorization.k8s.io", "clusterroles")
CLUSTER_BINDINGS = ("rbac.authorization.k8s.io", "clusterrolebindings")
ROLES = ("rbac.authorization.k8s.io", "roles")
BINDINGS = ("rbac.authorization.k8s.io", "rolebindings")


@dataclass(frozen=True)
class User:
    """An authenticated user."""

    name: str
    groups: tuple[str, ...] = ("system:authenticated",)
    uid: str = ""

    @property
    def admin(self) -> bool:
        """Members of ``system:masters`` pass every check (as on a real server, before RBAC)."""
        return "system:masters" in self.groups

    def info(self) -> dict[str, Any]:
        """The ``userInfo`` of reviews."""
        out: dict[str, Any] = {"username": self.name, "groups": list(self.groups)}
        if self.uid:
            out["uid"] = self.uid
        return out


@dataclass(frozen=True)
class Attributes:
    """What a request does: a verb on a resource (or a non-resource path)."""

    verb: str
    group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    path: str = ""  # non-resource requests (discovery, /version...)

    @property
    def resource_path(self) -> str:
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource


@dataclass
class Users:
    """Tokens and the users they stand for."""

    admin_token: str
    admin: User
    _tokens: dict[str, User] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, name: str, groups: tuple[str, ...] = ()) -> str:
        """A token for user ``name`` (the same token when asked again)."""
        with self._lock:
            for token, user in self._tokens.items():
                if user.name == name:
                    return token
            token = "sim-" + secrets.token_hex(16)
            self._tokens[token] = User(name, tuple(dict.fromkeys((*groups, "system:authenticated"))))
            return token

    def service_account_token(self, namespace: str, name: str, uid: str) -> str:
        """A new token for a ServiceAccount (TokenRequest)."""
        token = "sim-sa-" + secrets.token_hex(16)
        with self._lock:
            self._tokens[token] = User(f"system:serviceaccount:{namespace}:{name}",
                                       ("system:serviceaccounts", f"system:serviceaccounts:{namespace}",
                                        "system:authenticated"), uid)
        return token

    def lookup(self, token: str) -> User | None:
        """The user of a token, or None."""
        if token == self.admin_token:
            return self.admin
        with self._lock:
            return self._tokens.get(token)

    def authenticate(self, authorization: str | None) -> User:
        """The user of an ``Authorization`` header; 401 for a token nobody issued."""
        if not authorization:
            return self.admin
        scheme, _, token = authorization.partition(" ")
        user = self.lookup(token.strip()) if scheme.lower() == "bearer" else None
        if user is None:
            raise errors.ApiError(401, "Unauthorized", "Unauthorized", None)
        return user


def _subject_matches(subject: dict[str, Any], user: User, binding_ns: str) -> bool:
    kind = subject.get("kind")
    if kind == "User":
        return bool(subject.get("name") == user.name)
    if kind == "Group":
        return subject.get("name") in user.groups
    if kind == "ServiceAccount":
        ns = subject.get("namespace") or binding_ns
        return user.name == f"system:serviceaccount:{ns}:{subject.get('name')}"
    return False


def _rule_allows(rule: dict[str, Any], attrs: Attributes) -> bool:
    verbs = rule.get("verbs") or []
    if "*" not in verbs and attrs.verb not in verbs:
        return False
    if attrs.path:
        urls = rule.get("nonResourceURLs") or []
        return any(u == "*" or u == attrs.path or (u.endswith("*") and attrs.path.startswith(u[:-1])) for u in urls)
    if rule.get("nonResourceURLs"):
        return False
    groups = rule.get("apiGroups") or []
    if "*" not in groups and attrs.group not in groups:
        return False
    resources = rule.get("resources") or []
    wanted = attrs.resource_path
    if not any(r == "*" or r == wanted or (r.endswith("/*") and attrs.subresource and r[:-2] == attrs.resource)
               or (r.startswith("*/") and attrs.subresource and r[2:] == attrs.subresource) for r in resources):
        return False
    names = rule.get("resourceNames") or []
    return not names or attrs.name in names


class Authorizer:
    """RBAC over the Roles and bindings in a store."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def _bound_rules(self, user: User, namespace: str) -> list[tuple[str, dict[str, Any]]]:
        """``(why, rule)`` for every rule bound to ``user`` at cluster scope and in ``namespace``."""
        out = []
        with self.store.lock:
            for b in self.store.list(CLUSTER_BINDINGS):
                if any(_subject_matches(s, user, "") for s in b.get("subjects") or []):
                    ref = b.get("roleRef") or {}
                    role = self.store.get(CLUSTER_ROLES, "", ref.get("name", ""))
                    why = f'ClusterRoleBinding "{b["metadata"]["name"]}" of ClusterRole "{ref.get("name")}"'
                    out += [(why, r) for r in (role or {}).get("rules") or []]
            if namespace:
                for b in self.store.list(BINDINGS, namespace):
                    if any(_subject_matches(s, user, namespace) for s in b.get("subjects") or []):
                        ref = b.get("roleRef") or {}
                        if ref.get("kind") == "ClusterRole":
                            role = self.store.get(CLUSTER_ROLES, "", ref.get("name", ""))
                        else:
                            role = self.store.get(ROLES, namespace, ref.get("name", ""))
                        why = f'RoleBinding "{b["metadata"]["name"]}/{namespace}" of {ref.get("kind")} ' \
                              f'"{ref.get("name")}"'
                        out += [(why, r) for r in (role or {}).get("rules") or []]
        return out

    def allowed(self, user: User, attrs: Attributes) -> tuple[bool, str]:
        """Whether ``user`` may do ``attrs``, and the reason RBAC gives."""
        if user.admin:
            return True, ""
        for why, rule in self._bound_rules(user, attrs.namespace):
            if _rule_allows(rule, attrs):
                return True, f'RBAC: allowed by {why} to User "{user.name}"'
        return False, ""

    def check(self, user: User, attrs: Attributes) -> None:
        """Raise the API's 403 when ``user`` may not do ``attrs``."""
        if self.allowed(user, attrs)[0]:
            return
        if attrs.path:
            raise errors.ApiError(403, "Forbidden", f'forbidden: User "{user.name}" cannot {attrs.verb} path '
                                  f'"{attrs.path}"', {})
        qualified = f"{attrs.resource_path}.{attrs.group}" if attrs.group else attrs.resource_path
        subject = f'{qualified} "{attrs.name}"' if attrs.name else qualified
        scope = f'in the namespace "{attrs.namespace}"' if attrs.namespace else "at the cluster scope"
        details: dict[str, Any] = {}
        if attrs.name:
            details["name"] = attrs.name
        if attrs.group:
            details["group"] = attrs.group
        details["kind"] = attrs.resource
        raise errors.ApiError(403, "Forbidden", f'{subject} is forbidden: User "{user.name}" cannot {attrs.verb} '
                              f'resource "{attrs.resource_path}" in API group "{attrs.group}" {scope}', details)

    def impersonate(self, user: User, name: str | None, groups: list[str]) -> User:
        """The user a request acts as: ``Impersonate-User``/``-Group`` if ``user`` may impersonate them."""
        if not name or name == user.name:
            return user
        self.check(user, Attributes("impersonate", "", "users", "", "", name))
        for group in groups:
            self.check(user, Attributes("impersonate", "", "groups", "", "", group))
        return User(name, tuple(dict.fromkeys((*groups, "system:authenticated"))))

    def rules(self, user: User, namespace: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """``(resourceRules, nonResourceRules)`` of a SelfSubjectRulesReview."""
        if user.admin:
            return ([{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
                    [{"verbs": ["*"], "nonResourceURLs": ["*"]}])
        resource_rules, non_resource = [], []
        for _, rule in self._bound_rules(user, namespace):
            if rule.get("nonResourceURLs"):
                non_resource.append({"verbs": list(rule.get("verbs") or []),
                                     "nonResourceURLs": list(rule["nonResourceURLs"])})
            else:
                entry = {k: list(rule.get(k) or []) for k in ("verbs", "apiGroups", "resources", "resourceNames")
                         if rule.get(k) or k in ("verbs", "apiGroups", "resources")}
                resource_rules.append(entry)
        return resource_rules, non_resource

    def review(self, kind: str, body: dict[str, Any], user: User, namespace: str, users: Users) -> dict[str, Any]:
        """The answer to a review create (its body with ``status`` filled in)."""
        spec = body.get("spec") or {}
        out = dict(body, metadata=dict(body.get("metadata") or {}, creationTimestamp=None))
        if kind == "SelfSubjectReview":
            out["status"] = {"userInfo": user.info()}
            return out
        if kind == "TokenReview":
            found = users.lookup(str(spec.get("token") or ""))
            audience = "https://kubernetes.default.svc.cluster.local"
            out["status"] = {"authenticated": True, "user": found.info(), "audiences": [audience]} \
                if found else {"user": {}, "error": "invalid bearer token"}
            return out
        if kind == "SelfSubjectRulesReview":
            resource_rules, non_resource = self.rules(user, str(spec.get("namespace") or ""))
            out["status"] = {"resourceRules": resource_rules, "nonResourceRules": non_resource, "incomplete": False}
            return out
        subject = user
        if kind in ("SubjectAccessReview", "LocalSubjectAccessReview"):
            subject = User(str(spec.get("user") or ""), tuple(spec.get("groups") or ()), str(spec.get("uid") or ""))
        res = spec.get("resourceAttributes")
        non = spec.get("nonResourceAttributes")
        if isinstance(res, dict):
            ns = namespace if kind == "LocalSubjectAccessReview" else str(res.get("namespace") or "")
            attrs = Attributes(str(res.get("verb") or ""), str(res.get("group") or ""), str(res.get("resource") or ""),
                               str(res.get("subresource") or ""), ns, str(res.get("name") or ""))
        elif isinstance(non, dict):
            attrs = Attributes(str(non.get("verb") or ""), path=str(non.get("path") or ""))
        else:
            raise errors.invalid("authorization.k8s.io", kind, "", [{
                "reason": "FieldValueInvalid", "field": "spec.resourceAttributes",
                "message": "Invalid value: \"null\": exactly one of nonResourceAttributes or resourceAttributes "
                           "must be specified"}])
        ok, why = self.allowed(subject, attrs)
        out["status"] = {"allowed": ok, **({"reason": why} if why else {})}
        return out
