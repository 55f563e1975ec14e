"""API errors as the Kubernetes ``Status`` objects real servers return."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """An error answered with a ``Status`` body and its HTTP code."""

    def __init__(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> dict[str, Any]:
        """The ``Status`` object for the response body."""
        body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                "message": self.message}
        if self.reason:
            body["reason"] = self.reason
        if self.details is not None:
            body["details"] = self.details
        body["code"] = self.code
        return body


def _details(name: str, group: str, kind: str, **extra: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"name": name} if name else {}
    if group:
        d["group"] = group
    d["kind"] = kind
    d.update(extra)
    return d


def not_found(group: str, plural: str, name: str) -> ApiError:
    """404 for an object that does not exist, e.g. ``deployments.apps "web" not found``."""
    qualified = f"{plural}.{group}" if group else plural
    return ApiError(404, "NotFound", f'{qualified} "{name}" not found', _details(name, group, plural))


def already_exists(group: str, plural: str, name: str) -> ApiError:
    """409 for a create whose name is taken."""
    qualified = f"{plural}.{group}" if group else plural
    return ApiError(409, "AlreadyExists", f'{qualified} "{name}" already exists', _details(name, group, plural))


def conflict(group: str, plural: str, name: str, why: str) -> ApiError:
    """409 for an optimistic-concurrency failure."""
    qualified = f"{plural}.{group}" if group else plural
    return ApiError(409, "Conflict", f'Operation cannot be fulfilled on {qualified} "{name}": {why}',
                    _details(name, group, plural))


STALE = "the object has been modified; please apply your changes to the latest version and try again"


def invalid(group: str, kind: str, name: str, causes: list[dict[str, str]]) -> ApiError:
    """422 with one cause per invalid field, worded like the API's field errors."""
    text = ", ".join(f"{c['field']}: {c['message']}" for c in causes)
    if len(causes) > 1:
        text = "[" + text + "]"
    qualified = f"{kind}.{group}" if group else kind  # the API names the kind with its group
    return ApiError(422, "Invalid", f'{qualified} "{name}" is invalid: {text}',
                    _details(name, group, kind, causes=causes))


def bad_request(message: str) -> ApiError:
    """400 BadRequest."""
    return ApiError(400, "BadRequest", message)


def method_not_allowed(message: str = "the server does not allow this method on the requested resource") -> ApiError:
    """405 MethodNotAllowed."""
    return ApiError(405, "MethodNotAllowed", message, {})


def internal(message: str) -> ApiError:
    """500 with no reason: what the API returns for errors that are not Status errors."""
    return ApiError(500, "", message)


def gone(message: str) -> ApiError:
    """410 Expired: a watch or list from a resourceVersion that was compacted away."""
    return ApiError(410, "Expired", message)
