"""The HTTP transport the three dialects share: JSON in and out, bounded, with retries.

* every answer is read up to ``MAX_ANSWER_BYTES``; redirects are refused (a redirect
  would carry the token to wherever it points);
* 5xx answers and dropped connections are retried with exponential backoff;
* rate limits are honoured: ``Retry-After`` (seconds or an HTTP date) and the forges'
  headers (GitHub and Gitea ``X-RateLimit-Remaining``/``X-RateLimit-Reset``, GitLab
  ``RateLimit-Remaining``/``RateLimit-Reset``). A wait longer than the policy allows
  raises ``ForgeRateLimited`` with the time to come back, instead of blocking the caller;
* pagination follows ``Link: <...>; rel="next"`` on the same origin only.

The token is only ever placed in a request header: it is never logged and is masked in
any error text that would echo it.
"""

from __future__ import annotations

import email.utils
import json
import random
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from qonnect_gitops.forge.base import ForgeError, ForgeRateLimited
from qonnect_gitops.logs import get_logger

log = get_logger(__name__)

MAX_ANSWER_BYTES = 8 * 1024 * 1024
MAX_PAGES = 20
_RETRY_STATUSES = {500, 502, 503, 504}
_IDEMPOTENT = {"GET", "HEAD", "PUT", "DELETE", "PATCH"}


@dataclass(frozen=True)
class RetryPolicy:
    """How hard to try: at most ``attempts`` requests and ``max_wait`` seconds of waiting."""

    attempts: int = 5
    base_delay: float = 0.5
    max_delay: float = 20.0
    max_wait: float = 60.0
    timeout: float = 15.0


@dataclass(frozen=True)
class Answer:
    """A decoded answer: status, headers (lower-case names) and JSON body (None if empty)."""

    status: int
    headers: Mapping[str, str]
    body: Any


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # urllib then raises the 3xx as an HTTPError


@dataclass
class Transport:
    """JSON over HTTP(S) to one forge API base URL (``https://api.github.com``,
    ``https://gitlab.example.com/api/v4``...), authenticated by ``auth_header``."""

    base_url: str
    auth_header: tuple[str, str]
    policy: RetryPolicy = field(default_factory=RetryPolicy)
    user_agent: str = "qonnect-gitops"
    extra_headers: Mapping[str, str] = field(default_factory=dict)
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.time

    def __post_init__(self) -> None:
        parsed = urllib.parse.urlsplit(self.base_url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(f"forge URL {self.base_url!r} is not an http(s) URL")
        self.base_url = self.base_url.rstrip("/")
        self._origin = (parsed.scheme, parsed.netloc)
        self._opener = urllib.request.build_opener(_NoRedirect)
        self.requests = 0  # requests sent, retries included (tests and metrics read it)

    # ---------------------------------------------------------------- calls

    def call(self, method: str, path: str, *, query: Mapping[str, Any] | None = None,
             body: Any = None) -> Answer:
        """One API call with retries; raises ``ForgeError`` for a 4xx or when retries run out."""
        url = self.base_url + path
        if query:
            url += "?" + urllib.parse.urlencode({k: v for k, v in query.items() if v is not None})
        return self._call(method, url, body)

    def get_all(self, path: str, query: Mapping[str, Any] | None = None) -> list[Any]:
        """Every item of a paginated list (``Link`` rel=next, same origin, ``MAX_PAGES`` at most)."""
        items: list[Any] = []
        answer = self.call("GET", path, query=query)
        for _ in range(MAX_PAGES):
            if not isinstance(answer.body, list):
                raise ForgeError(f"GET {path}: expected a JSON list", answer.status)
            items += answer.body
            following = _next_link(answer.headers.get("link", ""))
            if following is None:
                return items
            parsed = urllib.parse.urlsplit(following)
            if (parsed.scheme, parsed.netloc) != self._origin:
                raise ForgeError(f"GET {path}: refusing a next page on another origin ({parsed.netloc})")
            answer = self._call("GET", following, None)
        raise ForgeError(f"GET {path}: more than {MAX_PAGES} pages")

    # ------------------------------------------------------------- plumbing

    def _call(self, method: str, url: str, body: Any) -> Answer:
        policy = self.policy
        started = self.clock()
        waited = 0.0
        for attempt in range(1, policy.attempts + 1):
            try:
                answer = self._once(method, url, body)
            except _Dropped as exc:
                if method not in _IDEMPOTENT and not exc.before_sending:
                    raise ForgeError(f"{method} {_path(url)}: {exc}") from None
                wait = _backoff(policy, attempt)
                status: int | None = None
                reason = str(exc)
            else:
                if answer.status < 400:
                    return answer
                wait_for = self._rate_limit_wait(answer)
                if wait_for is None and answer.status not in _RETRY_STATUSES:
                    raise ForgeError(f"{method} {_path(url)}: {answer.status} {_message(answer)}",
                                     answer.status)
                wait = wait_for if wait_for is not None else _backoff(policy, attempt)
                status, reason = answer.status, _message(answer)
            if attempt == policy.attempts:
                if status in (403, 429):
                    raise ForgeRateLimited(f"{method} {_path(url)}: rate limited ({reason})", status,
                                           self.clock() + wait)
                raise ForgeError(f"{method} {_path(url)}: gave up after {attempt} attempts: "
                                 f"{status or 'no answer'} {reason}", status)
            if waited + wait > policy.max_wait:
                raise ForgeRateLimited(
                    f"{method} {_path(url)}: the forge asks to wait {wait:.0f}s, more than the "
                    f"{policy.max_wait:.0f}s allowed ({status or 'no answer'} {reason})",
                    status, self.clock() + wait)
            log.warning("forge_retry", method=method, path=_path(url), status=status or "none",
                        attempt=attempt, wait=round(wait, 3), elapsed=round(self.clock() - started, 3))
            self.sleep(wait)
            waited += wait
        raise AssertionError("unreachable")

    def _once(self, method: str, url: str, body: Any) -> Answer:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json", "User-Agent": self.user_agent,
                   self.auth_header[0]: self.auth_header[1], **self.extra_headers}
        if data is not None:
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(url, data=data, method=method, headers=headers)
        self.requests += 1
        try:
            response = self._opener.open(request, timeout=self.policy.timeout)
        except urllib.error.HTTPError as exc:
            response = exc  # an answer with an error status: decode it like any other
        except urllib.error.URLError as exc:
            refused = isinstance(exc.reason, ConnectionRefusedError)
            raise _Dropped(f"no answer: {exc.reason}", before_sending=refused) from None
        except (TimeoutError, OSError) as exc:
            raise _Dropped(f"no answer: {exc}", before_sending=False) from None
        with response:
            try:
                raw = response.read(MAX_ANSWER_BYTES + 1)
            except (TimeoutError, OSError) as exc:
                raise _Dropped(f"answer cut: {exc}", before_sending=False) from None
            status = int(response.status if hasattr(response, "status") else response.code)
            headers = {k.lower(): v for k, v in response.headers.items()}
        if len(raw) > MAX_ANSWER_BYTES:
            raise ForgeError(f"{method} {_path(url)}: answer larger than {MAX_ANSWER_BYTES} bytes", status)
        parsed: Any = None
        if raw.strip():
            try:
                parsed = json.loads(raw)
            except (UnicodeDecodeError, json.JSONDecodeError):
                if status < 400:
                    raise ForgeError(f"{method} {_path(url)}: answer is not JSON", status) from None
                parsed = {"message": raw[:300].decode("utf-8", "replace")}
        if 300 <= status < 400:
            raise ForgeError(f"{method} {_path(url)}: refusing to follow a {status} redirect", status)
        return Answer(status, headers, self._masked(parsed))

    def _rate_limit_wait(self, answer: Answer) -> float | None:
        """Seconds the forge asks us to wait, or None when this is not a rate-limit answer."""
        headers = answer.headers
        retry_after = headers.get("retry-after")
        if retry_after is not None and answer.status in (403, 429, 503):
            seconds = _retry_after_seconds(retry_after, self.clock())
            if seconds is not None:
                return seconds
        remaining = headers.get("x-ratelimit-remaining", headers.get("ratelimit-remaining"))
        if answer.status in (403, 429) and remaining is not None and remaining.strip() == "0":
            reset = headers.get("x-ratelimit-reset", headers.get("ratelimit-reset"))
            try:
                return max(0.0, float(reset or "") - self.clock()) + 0.5
            except ValueError:
                return _backoff(self.policy, 1)
        if answer.status == 429:
            return _backoff(self.policy, 1)
        return None

    def _masked(self, value: Any) -> Any:
        secret = self.auth_header[1].split()[-1] if self.auth_header[1] else ""
        if not secret or len(secret) < 4:
            return value
        text = json.dumps(value)
        if secret not in text:
            return value
        return json.loads(text.replace(secret, "***"))


class _Dropped(Exception):
    """No (complete) answer; ``before_sending`` when the request surely never arrived."""

    def __init__(self, message: str, *, before_sending: bool) -> None:
        super().__init__(message)
        self.before_sending = before_sending


def _backoff(policy: RetryPolicy, attempt: int) -> float:
    delay = min(policy.max_delay, policy.base_delay * 2 ** (attempt - 1))
    return delay * (0.75 + random.random() / 2)  # jitter, so retrying leads do not align


def _retry_after_seconds(value: str, now: float) -> float | None:
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now)


def _next_link(header: str) -> str | None:
    for part in header.split(","):
        target, _, params = part.partition(";")
        if 'rel="next"' in params.replace(" ", ""):
            return target.strip().strip("<>")
    return None


def _message(answer: Answer) -> str:
    body = answer.body
    if isinstance(body, dict):
        text = body.get("message") or body.get("error") or body.get("errors") or ""
        return str(text)[:300]
    return ""


def _path(url: str) -> str:
    return urllib.parse.urlsplit(url).path
