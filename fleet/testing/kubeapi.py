"""An HTTP-level fake of the Kubernetes API paths fleet uses, for the real
`kubernetes` client to talk to.

Custom objects, cluster-scoped and namespaced (get, list with an equality
label selector, in one namespace or across all, create, status subresource
merge-patch with a resourceVersion precondition, the scale subresource
of a CRD that declares one (GET, merge PATCH of spec.replicas), delete), and the
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

What a Proxy controller needs, as the API server behaves (issue 12):
- create (POST) assigns uid, creationTimestamp, resourceVersion and
  generation 1; generation bumps when a write changes the spec (and when
  deletion starts), never on a status or metadata-only change; a write that
  changes nothing keeps the resourceVersion and sends no event;
- merge patches of the object (metadata: finalizers, labels, annotations;
  spec) and of its status subresource, each with an optional
  metadata.resourceVersion precondition (409 on mismatch);
- DELETE of an object with finalizers sets deletionTimestamp and keeps it;
  it goes when a patch empties its finalizers; without finalizers at once;
- list with metadata.resourceVersion, paged with limit/continue (a continue
  token older than the event window answers 410 Expired);
- watch (`?watch=1&resourceVersion=N&allowWatchBookmarks=true&timeoutSeconds=S`):
  a chunked stream of JSON lines, see fleet/testing/kubeapi_watch.py
  (`events.window`, `events.bookmark_interval`, `expire_history()`,
  `drop_watches()`);
- core v1 Secrets: GET by name, data base64-encoded (`add_secret`).
Objects are keyed by `namespace/name` across plurals, so two kinds cannot
hold the same key. Writes (create, patch of the object or its status) are
pruned, defaulted and validated against the CRD schemas in deploy/crd/
(`schemas`; fleet/testing/crdschema.py, which says what it leaves out): a
write the real server would refuse answers 422 Invalid, a field it would
drop is dropped. Not done: PUT, CEL rules, label selectors on watch.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import json
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from fleet.testing.crdschema import admit, served_scales, served_schemas
from fleet.testing.http import LoopbackServer, Quiet
from fleet.testing.kubeapi_watch import DEFAULT_TIMEOUT, Dropped, EventLog

PODS = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods(?:/(?P<name>[^/]+))?$")
SECRETS = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/secrets/(?P<name>[^/]+)$")
# metadata a client's write cannot change
SYSTEM_METADATA = ("name", "namespace", "uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
                   "generation", "resourceVersion", "managedFields")
CUSTOM = re.compile(
    r"^/apis/(?P<group>[^/]+)/(?P<version>[^/]+)(?:/namespaces/(?P<ns>[^/]+))?"
    r"/(?P<plural>[^/]+)(?:/(?P<name>[^/]+))?(?:(?P<status>/status)|(?P<scale>/scale))?$"
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


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class Stream:
    """A streamed answer (a watch): the handler writes each item as a JSON
    line (bytes as they are). A script may answer one."""

    def __init__(self, events: Iterator[dict[str, Any] | bytes]) -> None:
        self.events = events


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
        got = self.query.get("fieldManager")
        return got[0] if got else None

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
    secrets: dict[str, dict[str, Any]] = field(default_factory=dict)  # by `key(namespace, name)`
    kinds: dict[str, str] = field(default_factory=dict)  # plural -> kind, as created (for bookmarks)
    # plural -> the openAPIV3Schema writes are pruned, defaulted and validated against (deploy/crd/)
    schemas: dict[str, dict[str, Any]] = field(default_factory=served_schemas)
    # plural -> (specReplicasPath, statusReplicasPath, labelSelectorPath) of a CRD with the scale subresource
    scales: dict[str, tuple[str, str, str | None]] = field(default_factory=served_scales)
    _rv: int = 0
    _lock: threading.RLock = field(default_factory=threading.RLock)  # reentrant: tests call _store from scripts

    def __post_init__(self) -> None:
        self.events = EventLog(self._lock)  # window, bookmark_interval: set on it

    @property
    def resource_version(self) -> int:
        """The newest resourceVersion handed out."""
        return self._rv

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

    def add(self, obj: dict[str, Any], plural: str = "providerhealths") -> dict[str, Any]:
        """Put an object in place (namespaced when its metadata has a namespace),
        as someone else's write: an ADDED or MODIFIED event. Returns a copy as stored:
        pruned and defaulted as the API server keeps it, but not validated (a
        test may plant what an older CRD let in)."""
        with self._lock:
            stored = copy.deepcopy(obj)
            if plural in self.schemas:
                stored, _ = admit(stored, self.schemas[plural])
            return copy.deepcopy(self._store(stored, plural))

    def add_secret(self, namespace: str, name: str, data: Mapping[str, str | bytes], type_: str = "Opaque") -> None:
        """A Secret whose `data` values are given decoded (str as UTF-8)."""
        encoded = {k: base64.b64encode(v.encode() if isinstance(v, str) else v).decode() for k, v in data.items()}
        with self._lock:
            self._rv += 1
            self.secrets[key(namespace, name)] = {
                "apiVersion": "v1", "kind": "Secret", "type": type_, "data": encoded,
                "metadata": {"name": name, "namespace": namespace, "uid": str(uuid.uuid4()),
                             "resourceVersion": str(self._rv), "creationTimestamp": now()},
            }

    def expire_history(self) -> None:
        """The API server compacted: a watch or a list continuation from any
        resourceVersion handed out so far answers 410 Expired (a new list's does not)."""
        with self._lock:
            self._rv += 1
            self.events.expire(self._rv)

    def drop_watches(self) -> None:
        """Cut every open watch mid-stream (a restart, a broken connection)."""
        with self._lock:
            self.events.drop()

    def delete(self, name: str) -> None:
        """Someone else deletes the object (`name`: an `objects` key): finalizers as for a DELETE."""
        with self._lock:
            self._delete(name, self.plurals[name])

    def writes(self, name: str | None = None) -> list[Request]:
        return [
            r for r in self.requests
            if r.method in ("POST", "PATCH", "PUT", "DELETE") and (name is None or r.path.rstrip("/").split("/")[-1] == name
                                                                    or r.path.endswith(f"/{name}/status"))
        ]

    def _store(self, obj: dict[str, Any], plural: str | None = None) -> dict[str, Any]:
        """Keep `obj` with a new resourceVersion (plural None: the one it had,
        else providerhealths) and record the event. A new object gets a uid,
        creationTimestamp and generation 1; a changed spec bumps the generation."""
        self._rv += 1
        meta = obj.setdefault("metadata", {})
        k = key(meta.get("namespace"), meta["name"])
        plural = plural or self.plurals.get(k, "providerhealths")
        prev = self.objects.get(k) if self.plurals.get(k) == plural else None
        meta["resourceVersion"] = str(self._rv)
        if prev is None:
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", now())
            meta.setdefault("generation", 1)
        else:
            pm = prev["metadata"]
            meta.setdefault("uid", pm.get("uid"))
            meta.setdefault("creationTimestamp", pm.get("creationTimestamp"))
            gen = int(pm.get("generation") or 1)
            meta["generation"] = gen + 1 if obj.get("spec") != prev.get("spec") else gen
        self.objects[k] = obj
        self.plurals[k] = plural
        if obj.get("kind"):
            self.kinds.setdefault(plural, obj["kind"])
        self.events.record(self._rv, plural, meta.get("namespace"), "ADDED" if prev is None else "MODIFIED", copy.deepcopy(obj))
        return obj

    def _delete(self, k: str, plural: str) -> dict[str, Any]:
        """DELETE: with finalizers, mark it (deletionTimestamp, a generation
        bump) and keep it; without, remove it now. Returns the object."""
        obj = self.objects[k]
        if obj["metadata"].get("finalizers"):
            if obj["metadata"].get("deletionTimestamp"):
                return obj
            new = copy.deepcopy(obj)
            new["metadata"].update(deletionTimestamp=now(), deletionGracePeriodSeconds=0)
            new["metadata"]["generation"] = int(obj["metadata"].get("generation") or 1) + 1
            self._rv += 1
            new["metadata"]["resourceVersion"] = str(self._rv)
            self.objects[k] = new
            self.events.record(self._rv, plural, new["metadata"].get("namespace"), "MODIFIED", copy.deepcopy(new))
            return new
        del self.objects[k]
        del self.plurals[k]
        self._rv += 1
        gone = copy.deepcopy(obj)
        gone["metadata"]["resourceVersion"] = str(self._rv)
        self.events.record(self._rv, plural, gone["metadata"].get("namespace"), "DELETED", copy.deepcopy(gone))
        return gone

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
        sm = SECRETS.match(req.path)
        if sm:
            return self._secret(req, sm.group("ns"), sm.group("name"))
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
        resource = plural + ("/status" if m.group("status") else "/scale" if m.group("scale") else "")
        forbidden = self._forbidden(req, resource, group, name, ns)
        if forbidden is not None:
            return forbidden
        if plural in self.missing:
            return 404, status_body(404, "NotFound", "the server could not find the requested resource")
        return None

    def _forbidden(self, req: Request, resource: str, group: str, name: str | None, ns: str | None) -> tuple[int, Any] | None:
        verb = verb_of(req.method, name, req.query)
        if (verb, resource) not in self.denied:
            return None
        plural = resource.split("/")[0]
        qualified = f"{plural}.{group}" if group else plural
        what = f'{qualified} "{name}"' if name else qualified
        scope = f'in the namespace "{ns}"' if ns else "at the cluster scope"
        return 403, status_body(403, "Forbidden", f'{what} is forbidden: User "{self.user}" cannot {verb} resource '
                                                  f'"{resource}" in API group "{group}" {scope}')

    def _secret(self, req: Request, ns: str, name: str) -> tuple[int, Any]:
        forbidden = self._forbidden(req, "secrets", "", name, ns)
        if forbidden is not None:
            return forbidden
        if req.method != "GET":
            return 405, status_body(405, "MethodNotAllowed", req.method)
        with self._lock:
            found = self.secrets.get(key(ns, name))
            if found is None:
                return 404, status_body(404, "NotFound", f'secrets "{name}" not found')
            return 200, copy.deepcopy(found)

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
            if req.method == "GET" and verb_of(req.method, None, req.query) == "watch":
                return self._watch(req, group, version, plural, ns)
            if req.method == "GET":  # in `ns`, or across all namespaces
                return self._list(req, group, version, plural, ns)
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
                for f in SYSTEM_METADATA[2:]:
                    meta.pop(f, None)
                obj, invalid = self._admit(obj, plural, group, n)
                if invalid is not None:
                    return invalid
                self._manage(obj, req, "")
                return 201, copy.deepcopy(self._store(obj, plural))
            return 405, status_body(405, "MethodNotAllowed", req.method)
        k = key(ns, name)
        obj = self.objects.get(k) if self.plurals.get(k) == plural else None
        if obj is None:
            return 404, status_body(404, "NotFound", f'{plural}.{group} "{name}" not found')
        if m.group("scale"):
            return self._scale(req, k, obj, plural, group, version)
        if req.method == "GET":
            return 200, copy.deepcopy(obj)
        if req.method == "DELETE":
            left = self._delete(k, plural)
            if k in self.objects:  # finalizers pending: the object, marked for deletion
                return 200, copy.deepcopy(left)
            return 200, status_body(200, "", "deleted") | {"status": "Success"}
        if req.method == "PATCH":
            if req.content_type != "application/merge-patch+json":
                return 415, status_body(415, "UnsupportedMediaType", req.content_type)
            want_rv = (req.body.get("metadata") or {}).get("resourceVersion")
            if (status and self.conflicts > 0) or (want_rv and want_rv != obj["metadata"]["resourceVersion"]):
                if status:
                    self.conflicts = max(0, self.conflicts - 1)
                return 409, status_body(409, "Conflict", f'Operation cannot be fulfilled on {plural}.{group} "{name}": '
                                                         "the object has been modified; please apply your changes to the latest version")
            return self._patch(req, k, obj, plural, group, status)
        return 405, status_body(405, "MethodNotAllowed", req.method)

    def _scale(self, req: Request, k: str, obj: dict[str, Any], plural: str, group: str,
               version: str) -> tuple[int, Any]:
        """The scale subresource of a CRD that declares one (`scales`): GET answers an
        autoscaling/v1 Scale; a merge PATCH of spec.replicas writes the spec's path."""
        paths = self.scales.get(plural)
        if paths is None:
            return 404, status_body(404, "NotFound", "the server could not find the requested resource")
        spec_path, status_path, selector_path = (p.lstrip(".").split(".") if p else None for p in paths)

        def at(path: list[str] | None) -> Any:
            node: Any = obj
            for part in path or ():
                node = node.get(part) if isinstance(node, dict) else None
            return node

        def scale() -> dict[str, Any]:
            meta = {f: obj["metadata"][f] for f in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                    if f in obj["metadata"]}
            status: dict[str, Any] = {"replicas": at(status_path) or 0}
            if selector_path and at(selector_path):
                status["selector"] = at(selector_path)
            return {"kind": "Scale", "apiVersion": "autoscaling/v1", "metadata": meta,
                    "spec": {"replicas": at(spec_path) or 0}, "status": status}

        if req.method == "GET":
            return 200, scale()
        if req.method != "PATCH":
            return 405, status_body(405, "MethodNotAllowed", req.method)
        if req.content_type != "application/merge-patch+json":
            return 415, status_body(415, "UnsupportedMediaType", req.content_type)
        replicas = ((req.body or {}).get("spec") or {}).get("replicas")
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            return 422, status_body(422, "Invalid", f"Scale.autoscaling \"{obj['metadata']['name']}\" is invalid: "
                                                    f"spec.replicas: Invalid value: {replicas!r}")
        new = copy.deepcopy(obj)
        node = new
        assert spec_path is not None
        for part in spec_path[:-1]:
            node = node.setdefault(part, {})
        node[spec_path[-1]] = replicas
        new, invalid = self._admit(new, plural, group, obj["metadata"]["name"])
        if invalid is not None:
            return invalid
        if new != obj:
            self._manage(new, req, "scale")
            obj = self._store(new, plural)
        return 200, scale()

    def _admit(self, obj: dict[str, Any], plural: str, group: str, name: str) -> tuple[dict[str, Any], tuple[int, Any] | None]:
        """The object as the API server keeps it (pruned, defaulted), or its 422 answer."""
        schema = self.schemas.get(plural)
        if schema is None:
            return obj, None
        shaped, errors = admit(obj, schema)
        if not errors:
            return shaped, None
        kind = self.kinds.get(plural) or obj.get("kind") or plural
        body = status_body(422, "Invalid", f'{kind}.{group} "{name}" is invalid: ' + (
            errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"))
        body["details"] = {"name": name, "group": group, "kind": kind,
                           "causes": [{"field": e.split(":", 1)[0], "message": e} for e in errors]}
        return obj, (422, body)

    def _patch(self, req: Request, k: str, obj: dict[str, Any], plural: str, group: str, status: bool) -> tuple[int, Any]:
        """Merge-patch the status subresource (only .status changes) or the
        object (everything but .status and the system's metadata)."""
        new = copy.deepcopy(obj)
        if status:
            new["status"] = merge(obj.get("status") or {}, req.body.get("status") or {})
            new, invalid = self._admit(new, plural, group, obj["metadata"]["name"])
            if invalid is not None:
                return invalid
        else:
            new = merge(copy.deepcopy(obj), {f: v for f, v in req.body.items() if f != "status"})
            meta, old = new["metadata"], obj["metadata"]
            for f in SYSTEM_METADATA:
                if f in old:
                    meta[f] = copy.deepcopy(old[f])
                else:
                    meta.pop(f, None)
            if not meta.get("finalizers"):  # [] is stored as absent
                meta.pop("finalizers", None)
            new, invalid = self._admit(new, plural, group, old["name"])
            if invalid is not None:
                return invalid
            meta = new["metadata"]
            added = set(meta.get("finalizers") or ()) - set(old.get("finalizers") or ())
            if old.get("deletionTimestamp") and added:
                return 422, status_body(422, "Invalid", f'{plural}.{group} "{old["name"]}" is invalid: metadata.finalizers: '
                                                        "Forbidden: no new finalizers can be added if the object is being deleted")
            if old.get("deletionTimestamp") and not meta.get("finalizers"):  # the last finalizer gone: deleted
                self.objects[k] = new
                return 200, copy.deepcopy(self._delete(k, plural))
        if new == obj:  # nothing changes: no new resourceVersion, no event
            return 200, copy.deepcopy(obj)
        self._manage(new, req, "status" if status else "")
        return 200, copy.deepcopy(self._store(new, plural))

    def _list(self, req: Request, group: str, version: str, plural: str, ns: str | None) -> tuple[int, Any]:
        """All objects, or a page of `limit` in key order with a `continue`
        token (pages come from the current state, not a snapshot)."""
        sel = req.query.get("labelSelector", [""])[0]
        items = [(k, o) for k, o in self.objects.items()
                 if self.plurals.get(k) == plural and (ns is None or o["metadata"].get("namespace") == ns) and _selected(o, sel)]
        limit = int(req.query.get("limit", ["0"])[0] or 0)
        token = req.query.get("continue", [""])[0]
        meta: dict[str, Any] = {"resourceVersion": str(self._rv)}
        if limit or token:
            items.sort()
            if token:
                try:
                    cont = json.loads(base64.urlsafe_b64decode(token))
                    rv, after = int(cont["rv"]), str(cont["after"])
                except (ValueError, KeyError, TypeError):
                    return 400, status_body(400, "BadRequest", "continue key is not valid")
                if rv < self.events.compacted:
                    return 410, status_body(410, "Expired", "The provided continue parameter is too old to display a consistent "
                                                            "list result. You can start a new list without the continue parameter.")
                items = [(k, o) for k, o in items if k > after]
                meta["resourceVersion"] = str(rv)
            if limit and len(items) > limit:
                items = items[:limit]
                cont = {"rv": int(meta["resourceVersion"]), "after": items[-1][0]}
                meta["continue"] = base64.urlsafe_b64encode(json.dumps(cont).encode()).decode()
                meta["remainingItemCount"] = 0  # not counted
        body = {"apiVersion": f"{group}/{version}", "kind": "List", "metadata": meta, "items": [copy.deepcopy(o) for _, o in items]}
        return 200, body

    def _watch(self, req: Request, group: str, version: str, plural: str, ns: str | None) -> tuple[int, Any]:
        q = {k: v[0] for k, v in req.query.items()}
        rv = q.get("resourceVersion", "")
        try:
            since = int(rv) if rv not in ("", "0") else None
            timeout = float(q.get("timeoutSeconds") or DEFAULT_TIMEOUT)
        except ValueError:
            return 400, status_body(400, "BadRequest", f"invalid resourceVersion or timeoutSeconds: {rv!r}")
        api_version = f"{group}/{version}"

        def current() -> list[dict[str, Any]]:
            return [copy.deepcopy(o) for k, o in self.objects.items()
                    if self.plurals.get(k) == plural and (ns is None or o["metadata"].get("namespace") == ns)]

        def bookmark(rv: int) -> dict[str, Any]:
            return {"kind": self.kinds.get(plural, ""), "apiVersion": api_version, "metadata": {"resourceVersion": str(rv)}}

        bookmarks = q.get("allowWatchBookmarks") in ("1", "true")
        return 200, Stream(self.events.stream(plural, ns, since, timeout, bookmarks, lambda: self._rv, current, bookmark))


def _selected(obj: dict[str, Any], selector: str) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for term in filter(None, selector.split(",")):
        k, _, v = term.partition("=")
        if labels.get(k) != v:
            return False
    return True


class Server(LoopbackServer):
    """Serves a FakeKubeAPI on 127.0.0.1 and writes a kubeconfig for it.
    `port`: listen there (a restart of a server that ran on it); leaving
    ends every open watch."""

    def __init__(self, api: FakeKubeAPI, port: int = 0) -> None:
        self.api = api
        outer = self

        class Handler(Quiet):
            protocol_version = "HTTP/1.1"

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
                if isinstance(out, Stream):
                    self._stream(code, out)
                    return
                data = json.dumps(out).encode()
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.reply(code, data, {"Content-Type": "application/json"})

            def _stream(self, code: int, out: Stream) -> None:
                """One JSON line per chunk; a cut stream ends without the last chunk."""
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    for event in out.events:  # a dict, or raw bytes (a scripted malformed line)
                        line = (event if isinstance(event, bytes) else json.dumps(event).encode()) + b"\n"
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                    self.wfile.write(b"0\r\n\r\n")
                except Dropped:
                    self.close_connection = True
                    with contextlib.suppress(OSError):
                        self.connection.shutdown(socket.SHUT_RDWR)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True
                finally:
                    close = getattr(out.events, "close", None)
                    if close is not None:
                        close()

            do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = _do

        super().__init__(Handler, "fake-kube-api")
        if port:
            self.httpd.server_close()
            self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
            self.httpd.daemon_threads = True
            self.url = f"http://127.0.0.1:{port}"
            self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), name="fake-kube-api", daemon=True)

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    def __exit__(self, *exc: Any) -> None:
        self.api.drop_watches()
        super().__exit__(*exc)

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
