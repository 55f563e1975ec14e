"""The HTTP face of a simulated cluster: Kubernetes API paths, content types and Status errors.

Plain HTTP/1.1 on loopback with keep-alive (the official clients pool
connections); every request gets a thread, watches stream chunked JSON lines.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import yaml

from qonnect_gitops.logs import get_logger
from qonnect_gitops.sim import errors, generated, openapi, printers, subresources, wire
from qonnect_gitops.sim.api import APPLY_PATCH, ApiCore, Result, WriteOptions
from qonnect_gitops.sim.authz import Attributes, User
from qonnect_gitops.sim.resources import REVIEW_KINDS, ResourceType

log = get_logger(__name__)

try:  # the C loader is ten times faster for apply bodies
    _YamlLoader: Any = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - depends on how PyYAML was built
    _YamlLoader = yaml.SafeLoader

MAX_BODY = 3 * 1024 * 1024  # the API server's limit on a request body
DRAIN_LIMIT = 64 * 1024 * 1024  # oversized bodies up to this are read and dropped before answering 413


class SimHTTPServer(ThreadingHTTPServer):
    """A threading HTTP server bound to one ``ApiCore``."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], core: ApiCore) -> None:
        self.core = core
        self.openapi = openapi.OpenApiCache(core.registry)
        self.request_log: list[tuple[str, str, str]] | None = None  # (method, path, accept) when recording
        self.hooks: list[Any] = []  # callables(handler, method, path) -> bool (handled); part 2's faults
        self.bookmark_interval = 10.0  # seconds between watch bookmarks (the API sends one about every minute)
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        super().__init__(address, Handler)

    def drop_connections(self) -> None:
        """Cut every open client connection, as a server going away does (kept-alive ones too)."""
        with self.connections_lock:
            conns = list(self.connections)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def _first(q: dict[str, list[str]], key: str) -> str | None:
    v = q.get(key)
    return v[0] if v else None


def _truthy(v: str | None) -> bool:
    return v is not None and v.lower() in ("1", "true", "yes")


class Handler(BaseHTTPRequestHandler):
    """One connection; dispatches requests to the API core."""

    protocol_version = "HTTP/1.1"
    server: SimHTTPServer
    server_version = "qonnect-sim"
    sys_version = ""

    def setup(self) -> None:
        """Disable Nagle: headers and body go out as separate writes, and a delayed ACK would add 40 ms."""
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.server.connections_lock:
            self.server.connections.add(self.connection)

    def finish(self) -> None:
        """Forget the connection when it ends."""
        try:
            super().finish()
        finally:
            with self.server.connections_lock:
                self.server.connections.discard(self.connection)

    def log_message(self, format: str, *args: Any) -> None:
        """Route the stdlib access log to our structured debug log."""
        log.debug("http_request", line=format % args)

    # ------------------------------------------------------------------ plumbing

    def _wants_protobuf(self) -> bool:
        """Whether the client prefers protobuf (Go clients of built-in kinds send it first in Accept)."""
        accept = self.headers.get("Accept", "")
        first = accept.split(",")[0].split(";")[0].strip()
        return first == wire.PROTOBUF

    def _send_object(self, code: int, body: Any, rt: ResourceType | None = None,
                     warnings: list[str] | None = None) -> None:
        """An API object or list, as protobuf when the client prefers it and the kind has a message."""
        if rt is not None and self._wants_protobuf() and isinstance(body, dict):
            data = wire.encode(body, rt)
            if data is not None:
                return self._send_json(code, None, wire.PROTOBUF, warnings, raw=data)
        self._send_json(code, body, warnings=warnings)

    def _send_json(self, code: int, body: Any, content_type: str = "application/json",
                   warnings: list[str] | None = None, raw: bytes | None = None) -> None:
        # The API server's JSON encoder ends every document with a newline.
        data = raw if raw is not None else json.dumps(body, separators=(",", ":")).encode() + b"\n"
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-cache, private")
        for w in warnings or []:
            # The API's warning header: code 299, agent "-", quoted text.
            self.send_header("Warning", '299 - "' + w.replace("\\", "\\\\").replace('"', '\\"') + '"')
        if code == 401:
            self.send_header("WWW-Authenticate", 'Basic realm="kubernetes-master"')
        if code in (429, 503) and isinstance(body, dict):
            retry = (body.get("details") or {}).get("retryAfterSeconds")
            if retry:
                self.send_header("Retry-After", str(retry))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _send_error(self, err: errors.ApiError) -> None:
        self._send_json(err.code, err.status())

    def send_api_error(self, err: errors.ApiError) -> None:
        """Answer with a ``Status`` error (for hooks that inject faults); drains the request body."""
        self._drain()
        self._send_error(err)

    def send_raw(self, code: int, data: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
        """Answer with a ready body and extra headers (fault hooks: ``Retry-After``); drains the request body."""
        self._drain()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _body(self) -> bytes:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            raise errors.bad_request("invalid Content-Length") from None
        if length > MAX_BODY:
            # Read (and drop) a moderately oversized body so the client gets the answer, not a broken pipe;
            # past DRAIN_LIMIT the connection is closed instead.
            self._body_read = True
            if length <= DRAIN_LIMIT:
                left = length
                while left > 0:
                    chunk = self.rfile.read(min(left, 1 << 16))
                    if not chunk:
                        break
                    left -= len(chunk)
            else:
                self.close_connection = True
            raise errors.ApiError(413, "RequestEntityTooLarge",
                                  f"Request entity too large: limit is {MAX_BODY}", {})
        return self.rfile.read(length) if length > 0 else b""

    def _parse_body(self, raw: bytes, content_type: str, rt: ResourceType | None = None) -> Any:
        if not raw:
            return None
        if content_type == wire.PROTOBUF:
            return wire.decode(raw)
        if "cbor" in content_type:
            raise errors.ApiError(415, "UnsupportedMediaType",
                                  f"the body of the request was in an unknown format - accepted media types "
                                  f"include: application/json, application/yaml, {wire.PROTOBUF}", {})
        try:
            return json.loads(raw)
        except ValueError:
            pass
        if "yaml" in content_type:
            try:
                return yaml.load(raw, Loader=_YamlLoader)
            except yaml.YAMLError as exc:
                raise errors.bad_request(f"error decoding YAML: {exc}") from None
        raise errors.bad_request("couldn't get version/kind; json parse error: invalid JSON body")

    def do_GET(self) -> None:
        """GET and watch."""
        self._dispatch("GET")

    def do_HEAD(self) -> None:
        """HEAD as GET without a body."""
        self._dispatch("GET")

    def do_POST(self) -> None:
        """Create."""
        self._dispatch("POST")

    def do_PUT(self) -> None:
        """Replace."""
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        """Patch and server-side apply."""
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        """Delete."""
        self._dispatch("DELETE")

    def _dispatch(self, method: str) -> None:
        url = urlsplit(self.path)
        path = unquote(url.path)  # as Go's URL.Path: the client escapes ':' in names (system:basic-user)
        query = parse_qs(url.query, keep_blank_values=True)
        self._body_read = False  # per request: a hook answering early must still drain this request's body
        if self.server.request_log is not None:
            self.server.request_log.append((method, self.path, self.headers.get("Accept", "")))
        try:
            for hook in self.server.hooks:
                if hook(self, method, path):
                    return
            self._route(method, path, query)
        except errors.ApiError as err:
            self._drain()
            self._send_error(err)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:  # a bug in the sim must not look like a hung server
            log.error("request_failed", exc_info=True, method=method, path=self.path)  # noqa: G201
            self._drain()
            self._send_error(errors.ApiError(500, "InternalError", f"Internal error occurred: {exc}", {}))

    def _drain(self) -> None:
        # Unread request bodies would corrupt the next request on a kept-alive connection.
        if not getattr(self, "_body_read", False) and self.headers.get("Content-Length"):
            try:
                self._body()
            except (OSError, errors.ApiError):
                pass
            self._body_read = True

    # ------------------------------------------------------------------ routing

    def _route(self, method: str, path: str, query: dict[str, list[str]]) -> None:
        """Authenticate, serve a discovery path or find the resource a path names, authorize
        the verb, then read or write it."""
        self._body_read = False
        core = self.server.core
        user = self._user()
        accept = self.headers.get("Accept", "")
        path = path.rstrip("/") or "/"  # "/version/" and "/apis/" are served like the API does
        parts = [p for p in path.split("/") if p]
        if not _is_resource_path(parts):
            core.authz.check(user, Attributes(method.lower() if method != "GET" else "get", path=path))
            if method == "GET" and self._discovery(path, accept):
                return
        group, version, rest = _group_version(parts)
        if not rest:
            return self._resource_list(method, group, version)
        rt, ns, name, sub = self._locate(group, version, rest)
        self._authorize(user, _verb(method, name, _truthy(_first(query, "watch"))), group, rt, ns, name, sub)
        self._resource(method, rt, ns or "", ns is not None, name, sub, query, accept, user)

    def _user(self) -> User:
        """Who sends the request: its bearer token's user, or whom it impersonates."""
        core = self.server.core
        user = core.users.authenticate(self.headers.get("Authorization"))
        return core.authz.impersonate(user, self.headers.get("Impersonate-User"),
                                      self.headers.get_all("Impersonate-Group") or [])

    def _authorize(self, user: User, verb: str, group: str, rt: ResourceType, ns: str | None,
                   name: str | None, sub: str) -> None:
        """405 for a verb the resource does not serve, 403 for one the user may not use."""
        allowed = rt.sub_verbs(sub) if sub else rt.verbs
        if verb not in allowed and not (verb == "watch" and "watch" in rt.verbs):
            raise errors.method_not_allowed()
        self.server.core.authz.check(user, Attributes(verb, group, rt.plural, sub, ns or "", name or ""))

    def _discovery(self, path: str, accept: str) -> bool:
        """Serve a GET of a path that names no resource (health, version, discovery, OpenAPI);
        False when ``path`` is none of them."""
        registry = self.server.core.registry
        if path in ("/healthz", "/livez", "/readyz"):
            self._send_json(200, None, "text/plain; charset=utf-8", raw=b"ok")
        elif path == "/version":
            self._send_json(200, openapi.version_info())
        elif path in ("/api", "/apis") and "as=APIGroupDiscoveryList" in accept:
            self._send_json(200, openapi.aggregated(registry, core=path == "/api"), openapi.AGGREGATED_CONTENT_TYPE)
        elif path in ("/api", "/apis"):
            self._send_json(200, openapi.api_versions() if path == "/api" else openapi.api_group_list(registry))
        else:
            return self._openapi(path)
        return True

    def _openapi(self, path: str) -> bool:
        """Serve a GET of the OpenAPI documents; False when ``path`` is not one."""
        if path == "/openapi/v2":
            self._send_json(200, None, raw=self.server.openapi.v2())
        elif path == "/openapi/v3":
            self._send_json(200, self.server.openapi.v3_root())
        elif path.startswith("/openapi/v3/"):
            hit = self.server.openapi.v3(path[len("/openapi/v3/"):])
            if hit is None:
                raise _not_found()
            self._send_json(200, None, raw=hit[1])
        else:
            return False
        return True

    def _resource_list(self, method: str, group: str, version: str) -> None:
        """The resources of one group version (``/api/v1``, ``/apis/apps/v1``)."""
        if method != "GET":
            raise errors.method_not_allowed()
        listing = openapi.resource_list(self.server.core.registry, group, version)
        if listing is None:
            raise _not_found()
        self._send_json(200, listing)

    def _locate(self, group: str, version: str, rest: list[str]) -> tuple[ResourceType, str | None, str | None, str]:
        """The resource type, namespace, name and subresource the rest of a path names
        (``namespaces/NS/PLURAL/NAME/SUB``); 404 for a path the API does not serve."""
        registry = self.server.core.registry
        ns: str | None = None
        if rest[0] == "namespaces" and len(rest) >= 3 and registry.find(group, version, rest[2]):
            ns, rest = rest[1], rest[2:]
        rt = registry.find(group, version, rest[0])
        if rt is None:
            raise _not_found()
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else ""
        _check_target(rt, ns, name, sub, len(rest))
        return rt, ns, name, sub

    def _options(self, query: dict[str, list[str]]) -> WriteOptions:
        validation = _first(query, "fieldValidation") or "Warn"
        if validation not in ("Strict", "Warn", "Ignore"):
            raise errors.bad_request(f"fieldValidation parameter unsupported: {validation}")
        dry = query.get("dryRun") or []
        if any(d != "All" for d in dry):
            raise errors.bad_request(f"Unsupported dryRun value: {dry}")
        return WriteOptions(field_manager=_first(query, "fieldManager"), field_validation=validation,
                            dry_run=bool(dry), force=_truthy(_first(query, "force")),
                            user_agent=self.headers.get("User-Agent", ""))

    def _read(self, method: str, rt: ResourceType, ns: str, has_ns: bool, name: str | None, sub: str,
              query: dict[str, list[str]], accept: str) -> None:
        core = self.server.core
        if rt.group == "metrics.k8s.io" or rt.kind == "ComponentStatus":
            body = generated_read(core, rt, ns if has_ns else None, name, _first(query, "labelSelector"))
            return self._send_json(200, printers.table(rt, body, name is None) if "as=Table" in accept else body)
        if name is None:
            if _truthy(_first(query, "watch")):
                return self._watch(rt, ns if has_ns else None, query)
            limit = _first(query, "limit")
            try:
                limit_n = int(limit) if limit else None
            except ValueError:
                raise errors.bad_request(f"invalid limit: {limit}") from None
            body = core.list(rt, ns if has_ns else None, _first(query, "labelSelector"),
                             _first(query, "fieldSelector"), limit_n if limit_n and limit_n > 0 else None,
                             _first(query, "continue"))
            if "as=Table" in accept:
                return self._send_json(200, printers.table(rt, body, is_list=True))
            return self._send_object(200, body, rt)
        if sub == "scale":
            return self._send_object(200, core.get_scale(rt, ns, name), core.registry.by_kind(
                "autoscaling", "v1", "Scale"))
        if sub == "log":
            text = subresources.pod_log(core, ns, name, _first(query, "container"))
            return self._send_json(200, None, "text/plain", raw=text.encode())
        obj = core.get(rt, ns, name)
        if "as=Table" in accept:
            return self._send_json(200, printers.table(rt, obj, is_list=False))
        self._send_object(200, obj, rt)

    def _resource(self, method: str, rt: ResourceType, ns: str, has_ns: bool, name: str | None, sub: str,
                  query: dict[str, list[str]], accept: str, user: User) -> None:
        core = self.server.core
        if method == "GET":
            return self._read(method, rt, ns, has_ns, name, sub, query, accept)
        raw = self._body()
        self._body_read = True
        content_type = (self.headers.get("Content-Type") or "application/json").split(";")[0].strip()
        if method == "DELETE":
            opts = self._parse_body(raw, content_type) or {}
            if not isinstance(opts, dict):
                raise errors.bad_request("the body of a delete must be DeleteOptions")
            if _first(query, "propagationPolicy"):
                opts["propagationPolicy"] = _first(query, "propagationPolicy")
            dry = bool(query.get("dryRun")) or "All" in (opts.get("dryRun") or [])
            deleted: Result
            if name is None:
                deleted = core.delete_collection(rt, ns if has_ns else None, _first(query, "labelSelector"),
                                                 _first(query, "fieldSelector"), opts)
            else:
                deleted = core.delete(rt, ns, name, opts, dry_run=dry)
            return self._send_object(deleted.code, deleted.body, rt if deleted.body.get("kind") != "Status"
                                     else None)
        opts = self._options(query)
        res: Result
        body = self._parse_body(raw, content_type if method != "PATCH" else (
            APPLY_PATCH if content_type.startswith("application/apply-patch") else content_type))
        if method == "POST" and sub:
            res = self._post_subresource(rt, ns, name or "", sub, body, opts)
        elif method == "POST":
            if name is not None:
                raise errors.method_not_allowed()
            if rt.kind in REVIEW_KINDS:
                res = subresources.review(core, rt, ns, body, user)
            elif (rt.group, rt.kind) == ("", "Binding"):
                res = subresources.bind(core, ns, "", body)
            else:
                res = core.create(rt, ns, body, opts)
        elif method == "PUT":
            if name is None:
                raise errors.method_not_allowed()
            res = core.replace(rt, ns, name, body, opts, sub)
        elif method == "PATCH":
            if name is None:
                raise errors.method_not_allowed()
            res = core.patch(rt, ns, name, content_type, body, opts, sub)
        else:
            raise errors.method_not_allowed()
        shown = core.registry.by_kind("autoscaling", "v1", "Scale") if sub == "scale" else rt
        self._send_object(res.code, res.body, shown if res.body.get("kind") not in ("Status",) else None,
                          res.warnings)

    def _post_subresource(self, rt: ResourceType, ns: str, name: str, sub: str, body: Any,
                          opts: WriteOptions) -> Result:
        core = self.server.core
        if sub == "eviction":
            return subresources.evict(core, ns, name, body, opts.dry_run)
        if sub == "binding":
            return subresources.bind(core, ns, name, body)
        if sub == "token":
            return subresources.token_request(core, ns, name, body)
        raise errors.method_not_allowed()

    def _watch(self, rt: ResourceType, ns: str | None, query: dict[str, list[str]]) -> None:
        core = self.server.core
        timeout = float(_first(query, "timeoutSeconds") or 1800)
        send_initial = _first(query, "sendInitialEvents")
        events = core.watch(rt, ns, _first(query, "labelSelector"), _first(query, "fieldSelector"),
                            _first(query, "resourceVersion"), _truthy(_first(query, "allowWatchBookmarks")),
                            _truthy(send_initial) if send_initial is not None else None, timeout,
                            self.server.bookmark_interval)
        core.matcher(rt, _first(query, "labelSelector"), _first(query, "fieldSelector"))  # 400 before headers
        proto = self._wants_protobuf() and wire.has_message(rt)
        self.send_response(200)
        self.send_header("Content-Type", wire.PROTOBUF_STREAM if proto else "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        try:
            table = "as=Table" in self.headers.get("Accept", "")
            for ev in events:
                if table and ev["type"] in ("ADDED", "MODIFIED", "DELETED"):
                    # kubectl get --watch asks for rows, one Table per event.
                    ev = {"type": ev["type"], "object": printers.table(rt, ev["object"], False)}
                if proto:
                    self._chunk(wire.encode_watch_event(ev, rt))
                else:
                    self._chunk(json.dumps(ev, separators=(",", ":")).encode() + b"\n")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (TimeoutError, BrokenPipeError, ConnectionResetError):
            pass
        finally:
            close = getattr(events, "close", None)
            if close is not None:
                close()
        # As a Go server does, a watch that ended (its timeout) leaves the connection open for the
        # next request: the final chunk ended the response. Only a server going away closes it.
        self.close_connection = core.store.closed

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()


def _not_found() -> errors.ApiError:
    return errors.ApiError(404, "NotFound", "the server could not find the requested resource", {})


def _is_resource_path(parts: list[str]) -> bool:
    """``/api/v1/PLURAL...`` or ``/apis/GROUP/VERSION/PLURAL...``: authorized by verb and
    resource; every other path by its URL."""
    return len(parts) >= 3 and (parts[0] == "api" or (parts[0] == "apis" and len(parts) >= 4))


def _check_target(rt: ResourceType, ns: str | None, name: str | None, sub: str, depth: int) -> None:
    """Refuse what the API does not serve: a kubelet subresource, a path past the
    subresource, an unknown one, a namespaced object named without its namespace, a
    cluster-scoped one under a namespace."""
    if rt.kind == "Pod" and not rt.group and sub in ("exec", "attach", "portforward", "proxy"):
        raise errors.bad_request(f"pods/{sub} is not available: the simulated cluster's kubelet runs no processes")
    if depth > 3 or (sub and sub not in rt.subresources):
        raise _not_found()
    scoped_right = (name is None or ns is not None) if rt.namespaced else ns is None
    if not scoped_right:
        raise _not_found()


def _group_version(parts: list[str]) -> tuple[str, str, list[str]]:
    """The API group, version and the rest of a path under ``/api`` or ``/apis``."""
    if parts[:1] == ["api"] and len(parts) >= 2:
        return "", parts[1], parts[2:]
    if parts[:1] == ["apis"] and len(parts) >= 3:
        return parts[1], parts[2], parts[3:]
    raise _not_found()


def _verb(method: str, name: str | None, watch: bool) -> str:
    """The authorization verb of a request."""
    if method == "GET":
        return "watch" if watch else ("get" if name is not None else "list")
    return {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method, "delete" if name is not None
                                                                     else "deletecollection")


def generated_read(core: ApiCore, rt: ResourceType, ns: str | None, name: str | None,
                   label_selector: str | None) -> dict[str, Any]:
    """GET of a computed kind (resource metrics, component statuses): one object or a list."""
    labels = core.matcher(rt, label_selector, None)
    if rt.kind == "ComponentStatus":
        items = generated.component_statuses()
    else:
        items = [o for o in generated.metrics(core.store, rt.plural, ns) if labels(o)]
    if name is not None:
        for o in items:
            if o["metadata"]["name"] == name:
                return o
        raise errors.not_found(rt.group, rt.plural, name)
    return {"kind": rt.list_kind, "apiVersion": rt.group_version, "metadata": {}, "items": items}


def serve(core: ApiCore, host: str = "127.0.0.1", port: int = 0) -> SimHTTPServer:
    """Bind a server for ``core`` (port 0: the OS picks); the caller runs ``serve_forever``."""
    started = time.monotonic()
    server = SimHTTPServer((host, port), core)
    log.debug("sim_http_bound", cluster=core.cluster_name, port=server.server_address[1],
              ms=round((time.monotonic() - started) * 1000, 1))
    return server
