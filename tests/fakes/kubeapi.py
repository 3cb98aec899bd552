"""An HTTP-level fake of the Kubernetes API paths fleet uses, for the real
`kubernetes` client to talk to.

Custom objects, cluster-scoped and namespaced (get, list with an equality
label selector, in one namespace or across all, create, status subresource
merge-patch with a resourceVersion precondition, delete), and the
cluster-wide pod list the kubernetes Checker makes. `objects` is keyed by
name for a cluster-scoped object and by `namespace/name` for a namespaced
one; each object belongs to the plural it was created under (`add` takes
it, `providerhealths` by default), so kinds don't see each other. Every
request is recorded, with its `fieldManager`; writes keep
`metadata.managedFields` as the API server does (manager = fieldManager, else
the User-Agent's product, e.g. `OpenAPI-Generator`). Missing RBAC (`deny`:
403 for a verb on a resource) and a missing CRD (`remove_crd`: 404 for every
request on it) answer like the API server; other responses can be scripted
per path.
(The PyPI `kmock` emulator lacks label selectors, status subresources and
resourceVersion conflicts, hence this small fake.)
"""

from __future__ import annotations

import copy
import json
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.fakes.http import LoopbackServer

PODS = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods(?:/(?P<name>[^/]+))?$")
CUSTOM = re.compile(
    r"^/apis/(?P<group>[^/]+)/(?P<version>[^/]+)(?:/namespaces/(?P<ns>[^/]+))?"
    r"/(?P<plural>[^/]+)(?:/(?P<name>[^/]+))?(?P<status>/status)?$"
)


def key(namespace: str | None, name: str) -> str:
    """Where `objects` keeps an object: its name, or `namespace/name`."""
    return f"{namespace}/{name}" if namespace else name


def merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge(out.get(k), v)
    return out


def status_body(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "reason": reason, "code": code}


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    body: Any
    content_type: str
    user_agent: str = ""

    @property
    def field_manager(self) -> str | None:
        return (self.query.get("fieldManager") or [None])[0]

    @property
    def manager(self) -> str:
        """The manager the API server records: fieldManager, else the User-Agent's product."""
        return self.field_manager or self.user_agent.split("/", 1)[0]


def verb_of(method: str, name: str | None, query: dict[str, list[str]]) -> str:
    """The RBAC verb of a request."""
    if method == "GET":
        return "get" if name else ("watch" if query.get("watch", ["false"])[0] in ("1", "true") else "list")
    if method == "DELETE":
        return "delete" if name else "deletecollection"
    return {"POST": "create", "PATCH": "patch", "PUT": "update"}.get(method, method.lower())


@dataclass
class FakeKubeAPI:
    objects: dict[str, dict[str, Any]] = field(default_factory=dict)  # by `key(namespace, name)`
    plurals: dict[str, str] = field(default_factory=dict)  # object key -> the plural it belongs to
    pods: list[dict[str, Any]] = field(default_factory=list)
    requests: list[Request] = field(default_factory=list)
    # (method, path-regex) -> callable(req) -> (code, body) | None; first match wins
    scripts: list[tuple[str, str, Callable[[Request], tuple[int, Any] | None]]] = field(default_factory=list)
    conflicts: int = 0  # make the next N status patches fail with 409
    denied: set[tuple[str, str]] = field(default_factory=set)  # (verb, resource as RBAC names it) answered 403
    missing: set[str] = field(default_factory=set)  # custom resource plurals not served (CRD missing): 404
    user: str = "system:serviceaccount:fleet-system:fleet-controller"
    delay: float = 0.0  # seconds before answering (timeouts)
    _rv: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # --- test helpers -------------------------------------------------------------

    def script(self, method: str, path_regex: str, fn: Callable[[Request], tuple[int, Any] | None]) -> None:
        self.scripts.append((method, path_regex, fn))

    def deny(self, verb: str, resource: str = "providerhealths") -> None:
        """RBAC without `verb` on `resource` (e.g. "providerhealths/status")."""
        self.denied.add((verb, resource))

    def remove_crd(self, plural: str = "providerhealths") -> None:
        self.missing.add(plural)

    def managers(self, name: str) -> set[tuple[str, str]]:
        """(manager, subresource or '') pairs recorded in the object's managedFields (`name`: an `objects` key)."""
        return {(f["manager"], f.get("subresource", "")) for f in self.objects[name]["metadata"].get("managedFields", [])}

    def add(self, obj: dict[str, Any], plural: str = "providerhealths") -> None:
        """Put an object in place (namespaced when its metadata has a namespace)."""
        with self._lock:
            self._store(copy.deepcopy(obj), plural)

    def writes(self, name: str | None = None) -> list[Request]:
        return [
            r for r in self.requests
            if r.method in ("POST", "PATCH", "PUT", "DELETE") and (name is None or r.path.rstrip("/").split("/")[-1] == name
                                                                    or r.path.endswith(f"/{name}/status"))
        ]

    def _store(self, obj: dict[str, Any], plural: str | None = None) -> dict[str, Any]:
        """Keep `obj` with a new resourceVersion (plural None: the one it had, else providerhealths)."""
        self._rv += 1
        meta = obj.setdefault("metadata", {})
        meta["resourceVersion"] = str(self._rv)
        meta.setdefault("uid", f"uid-{meta['name']}")
        meta.setdefault("creationTimestamp", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        k = key(meta.get("namespace"), meta["name"])
        self.objects[k] = obj
        self.plurals[k] = plural or self.plurals.get(k, "providerhealths")
        return obj

    # --- request handling --------------------------------------------------------------

    def handle(self, req: Request) -> tuple[int, Any]:
        self.requests.append(req)
        if self.delay:
            time.sleep(self.delay)
        for method, rx, fn in self.scripts:
            if method == req.method and re.search(rx, req.path):
                answer = fn(req)
                if answer is not None:
                    return answer
        if req.path == "/api/v1/pods" and req.method == "GET":
            return 200, self._list_pods(req)
        pm = PODS.match(req.path)
        if pm:
            with self._lock:
                return self._pod(req, pm.group("ns"), pm.group("name"))
        m = CUSTOM.match(req.path)
        if not m:
            return 404, status_body(404, "NotFound", f"the server could not find the requested resource {req.path}")
        refused = self._refused(req, m)
        if refused is not None:
            return refused
        with self._lock:
            return self._custom(req, m)

    def _refused(self, req: Request, m: re.Match[str]) -> tuple[int, Any] | None:
        """403 for a denied verb (authorization runs before routing), then 404 for a missing CRD."""
        plural, name, group, ns = m.group("plural"), m.group("name"), m.group("group"), m.group("ns")
        verb = verb_of(req.method, name, req.query)
        resource = plural + ("/status" if m.group("status") else "")
        if (verb, resource) in self.denied:
            what = f'{plural}.{group} "{name}"' if name else f"{plural}.{group}"
            scope = f'in the namespace "{ns}"' if ns else "at the cluster scope"
            return 403, status_body(403, "Forbidden", f'{what} is forbidden: User "{self.user}" cannot {verb} resource '
                                                      f'"{resource}" in API group "{group}" {scope}')
        if plural in self.missing:
            return 404, status_body(404, "NotFound", "the server could not find the requested resource")
        return None

    def _manage(self, obj: dict[str, Any], req: Request, subresource: str) -> None:
        """Record the writer in managedFields, one entry per manager and subresource."""
        entries = [f for f in obj["metadata"].get("managedFields", [])
                   if (f["manager"], f.get("subresource", "")) != (req.manager, subresource)]
        entry = {"manager": req.manager, "operation": "Update", "apiVersion": obj.get("apiVersion", ""),
                 "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "fieldsType": "FieldsV1"}
        obj["metadata"]["managedFields"] = [*entries, entry | ({"subresource": subresource} if subresource else {})]

    def _list_pods(self, req: Request) -> dict[str, Any]:
        items = [p for p in self.pods if _selected(p, req.query.get("labelSelector", [""])[0])]
        limit = int(req.query.get("limit", ["0"])[0] or 0)
        if limit:
            items = items[:limit]
        return {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "1"}, "items": items}

    def _pod(self, req: Request, ns: str, name: str | None) -> tuple[int, Any]:
        """Namespaced pods; a created pod is Running with an IP at once."""
        found = [p for p in self.pods if p["metadata"]["namespace"] == ns and p["metadata"]["name"] == name]
        if req.method == "POST" and name is None:
            pod = copy.deepcopy(req.body)
            pname = pod["metadata"]["name"]
            if any(p["metadata"]["namespace"] == ns and p["metadata"]["name"] == pname for p in self.pods):
                return 409, status_body(409, "AlreadyExists", f'pods "{pname}" already exists')
            self._rv += 1
            pod["metadata"].update(namespace=ns, resourceVersion=str(self._rv),
                                   creationTimestamp=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
            pod["status"] = {"phase": "Running", "podIP": f"10.0.0.{len(self.pods) + 1}"}
            self.pods.append(pod)
            return 201, copy.deepcopy(pod)
        if not found:
            return 404, status_body(404, "NotFound", f'pods "{name}" not found')
        if req.method == "GET":
            return 200, copy.deepcopy(found[0])
        if req.method == "DELETE":
            self.pods.remove(found[0])
            return 200, copy.deepcopy(found[0])
        return 405, status_body(405, "MethodNotAllowed", req.method)

    def _custom(self, req: Request, m: re.Match[str]) -> tuple[int, Any]:
        name, status, group, version = m.group("name"), bool(m.group("status")), m.group("group"), m.group("version")
        plural, ns = m.group("plural"), m.group("ns")
        if name is None:
            if req.method == "GET":  # in `ns`, or across all namespaces
                sel = req.query.get("labelSelector", [""])[0]
                items = [copy.deepcopy(o) for k, o in self.objects.items()
                         if self.plurals.get(k) == plural and (ns is None or o["metadata"].get("namespace") == ns)
                         and _selected(o, sel)]
                return 200, {"apiVersion": f"{group}/{version}", "kind": "List", "metadata": {}, "items": items}
            if req.method == "POST":
                obj = req.body
                meta = obj.setdefault("metadata", {})
                if meta.get("namespace", ns) != ns:
                    return 400, status_body(400, "BadRequest", "the namespace of the provided object does not match "
                                                               "the namespace sent on the request")
                if ns:
                    meta["namespace"] = ns
                n = meta["name"]
                if key(ns, n) in self.objects:
                    return 409, status_body(409, "AlreadyExists", f'"{n}" already exists')
                obj.pop("status", None)  # status is ignored on create with the subresource
                meta.pop("managedFields", None)
                self._manage(obj, req, "")
                return 201, copy.deepcopy(self._store(obj, plural))
            return 405, status_body(405, "MethodNotAllowed", req.method)
        k = key(ns, name)
        obj = self.objects.get(k) if self.plurals.get(k) == plural else None
        if obj is None:
            return 404, status_body(404, "NotFound", f'"{name}" not found')
        if req.method == "GET":
            return 200, copy.deepcopy(obj)
        if req.method == "DELETE":
            del self.objects[k]
            del self.plurals[k]
            return 200, status_body(200, "", "deleted") | {"status": "Success"}
        if req.method == "PATCH" and status:
            if req.content_type != "application/merge-patch+json":
                return 415, status_body(415, "UnsupportedMediaType", req.content_type)
            want_rv = (req.body.get("metadata") or {}).get("resourceVersion")
            if self.conflicts > 0 or (want_rv and want_rv != obj["metadata"]["resourceVersion"]):
                self.conflicts = max(0, self.conflicts - 1)
                return 409, status_body(409, "Conflict", "the object has been modified; please apply your changes to the latest version")
            new = copy.deepcopy(obj)
            new["status"] = merge(obj.get("status") or {}, req.body.get("status") or {})
            self._manage(new, req, "status")
            return 200, copy.deepcopy(self._store(new, plural))
        return 405, status_body(405, "MethodNotAllowed", req.method)


def _selected(obj: dict[str, Any], selector: str) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for term in filter(None, selector.split(",")):
        k, _, v = term.partition("=")
        if labels.get(k) != v:
            return False
    return True


class Server(LoopbackServer):
    """Serves a FakeKubeAPI on 127.0.0.1 and writes a kubeconfig for it."""

    def __init__(self, api: FakeKubeAPI) -> None:
        self.api = api
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                # headers and body go out in two writes: without this, Nagle and
                # delayed ACKs add 40 ms to every keep-alive request
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def _do(self) -> None:
                parts = urlsplit(self.path)
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                body = json.loads(raw) if raw else None
                req = Request(self.command, parts.path, parse_qs(parts.query), body, self.headers.get("Content-Type", ""),
                              self.headers.get("User-Agent", ""))
                code, out = outer.api.handle(req)
                data = json.dumps(out).encode()
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = _do

        super().__init__(Handler, "fake-kube-api")

    def kubeconfig(self, path: str, token: str = "test-token") -> str:
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {"token": token}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
            "current-context": "fake",
        }
        with open(path, "w") as f:
            json.dump(cfg, f)
        return path
