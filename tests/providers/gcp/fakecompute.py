"""A small stateful fake of the Compute Engine REST paths the gcp provider
uses, served on 127.0.0.1 by a threaded http.server, recording every request.

Paths (under /compute/v1/projects/<project>):
  POST   zones/<z>/instances              insert → Operation
  GET    zones/<z>/instances/<name>       get
  DELETE zones/<z>/instances/<name>       delete → Operation
  GET    aggregated/instances             aggregatedList (filter, maxResults, pageToken)
  GET    zones/<z>/operations/<op>        zoneOperations.get
and a GCE metadata server (ping, service account, token): ADC's last resort
and workload identity's path, reached through GCE_METADATA_HOST/IP.

Knobs: `scripts` (canned answers matched before the routes), `insert_status`,
`insert_error` (the insert is accepted, then fails: the VM never appears),
`delete_completes`, `page_size`, `unreachables`.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

from fleet.testing.http import LoopbackServer

METADATA_SA = r"/computeMetadata/v1/instance/service-accounts/[^/]+"
MANAGED_FILTER = "labels.proxy-operator-managed = true"
CREATED = "2026-11-29T05:06:45.123-08:00"


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, str]
    body: Any
    headers: dict[str, str]


@dataclass
class Script:
    method: str
    path: str  # a regex matched against the path
    status: int = 200
    body: Any = None
    delay: float = 0.0
    times: int = 1  # -1: forever
    query: dict[str, str] | None = None  # and these query parameters


@dataclass
class FakeCompute:
    project: str = "my-project"
    requests: list[Recorded] = field(default_factory=list)
    instances: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    operations: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    scripts: list[Script] = field(default_factory=list)
    insert_status: str = "RUNNING"
    insert_error: dict[str, Any] | None = None  # the failed operation's error + status
    delete_completes: bool = True
    page_size: int = 500
    unreachables: list[str] = field(default_factory=list)
    token: str = "fake-access-token"
    service_account: str = "fleet@my-project.iam.gserviceaccount.com"

    def __post_init__(self) -> None:
        self.lock = threading.Lock()
        self._ids = itertools.count(1)

    # -- helpers for tests --------------------------------------------------------

    def script(
        self,
        method: str,
        path: str,
        status: int = 200,
        body: Any = None,
        delay: float = 0.0,
        times: int = 1,
        query: dict[str, str] | None = None,
    ) -> None:
        self.scripts.append(Script(method, path, status, body, delay, times, query))

    def api_requests(self) -> list[Recorded]:
        return [r for r in self.requests if r.path.startswith("/compute/")]

    def add_instance(self, zone: str, name: str, **fields: Any) -> dict[str, Any]:
        n = next(self._ids)
        inst = {
            "kind": "compute#instance",
            "id": str(1000 + n),
            "name": name,
            "zone": f"https://www.googleapis.com/compute/v1/projects/{self.project}/zones/{zone}",
            "status": "RUNNING",
            "creationTimestamp": CREATED,
            "labels": {"proxy-operator-managed": "true", "proxy-operator-uid": f"uid-{name}"},
            "networkInterfaces": [{"network": "global/networks/default", "accessConfigs": [{"natIP": f"203.0.113.{n % 250}"}]}],
        }
        inst.update(fields)
        with self.lock:
            self.instances[(zone, name)] = inst
        return inst

    def finish_operations(self) -> None:
        """Every running operation is done; pending deletes take effect."""
        with self.lock:
            for (zone, _), op in self.operations.items():
                if op["status"] != "DONE":
                    op["status"] = "DONE"
                    if op["operationType"] == "delete":
                        self.instances.pop((zone, op["targetName"]), None)

    # -- serving --------------------------------------------------------------------

    def handle(self, method: str, path: str, query: dict[str, str], body: Any, headers: dict[str, str]):
        with self.lock:
            self.requests.append(Recorded(method, path, query, body, headers))
            script = next(
                (
                    s
                    for s in self.scripts
                    if s.method == method and re.search(s.path, path) and all(query.get(k) == v for k, v in (s.query or {}).items())
                ),
                None,
            )
            if script is not None and script.times > 0:
                script.times -= 1
                if script.times == 0:
                    self.scripts.remove(script)
        if script is not None:
            if script.delay:
                time.sleep(script.delay)
            return script.status, script.body
        if path == "/" and method == "GET":  # the metadata server ping
            return 200, b""
        sa = re.fullmatch(METADATA_SA + r"/(token|)", path)
        if sa and method == "GET" and sa[1] == "token":
            return 200, {"access_token": self.token, "expires_in": 3600, "token_type": "Bearer"}
        if sa and method == "GET":
            return 200, {"email": self.service_account, "scopes": [], "aliases": ["default"]}
        if path.startswith("/computeMetadata/"):
            return 404, b"not here"
        prefix = f"/compute/v1/projects/{self.project}/"
        if not path.startswith(prefix):
            return _error(404, f"unknown path {path}", "notFound")
        rest = path[len(prefix) :]
        with self.lock:
            return self._route(method, rest, query, body)

    def _route(self, method: str, rest: str, query: dict[str, str], body: Any):
        if method == "GET" and rest == "aggregated/instances":
            return self._aggregated(query)
        m = re.fullmatch(r"zones/([^/]+)/instances", rest)
        if m and method == "POST":
            return self._insert(m[1], body)
        m = re.fullmatch(r"zones/([^/]+)/instances/([^/]+)", rest)
        if m and method == "GET":
            inst = self.instances.get((m[1], m[2]))
            return (200, inst) if inst else _not_found(rest)
        if m and method == "DELETE":
            return self._delete(m[1], m[2])
        m = re.fullmatch(r"zones/([^/]+)/operations/([^/]+)", rest)
        if m and method == "GET":
            op = self.operations.get((m[1], m[2]))
            return (200, op) if op else _not_found(rest)
        return _error(400, f"unexpected {method} {rest}", "invalid")

    def _operation(self, zone: str, kind: str, name: str, status: str) -> dict[str, Any]:
        op_name = f"operation-{next(self._ids)}-{kind}"
        op = {
            "kind": "compute#operation",
            "name": op_name,
            "zone": f"https://www.googleapis.com/compute/v1/projects/{self.project}/zones/{zone}",
            "operationType": kind,
            "targetLink": f"https://www.googleapis.com/compute/v1/projects/{self.project}/zones/{zone}/instances/{name}",
            "targetName": name,
            "status": status,
        }
        self.operations[(zone, op_name)] = op
        return op

    def _insert(self, zone: str, body: dict[str, Any]):
        name = body["name"]
        if (zone, name) in self.instances:
            return _error(
                409,
                f"The resource 'projects/{self.project}/zones/{zone}/instances/{name}' already exists",
                "alreadyExists",
            )
        op = self._operation(zone, "insert", name, "RUNNING")
        if self.insert_error is not None:
            # Accepted now; the VM never appears, and reading the operation
            # later shows it DONE with the error.
            accepted = dict(op)
            op.update({"status": "DONE", **self.insert_error})
            return 200, accepted
        n = next(self._ids)
        inst = dict(body)
        inst.update(
            {
                "kind": "compute#instance",
                "id": str(1000 + n),
                "zone": f"https://www.googleapis.com/compute/v1/projects/{self.project}/zones/{zone}",
                "status": self.insert_status,
                "creationTimestamp": CREATED,
            }
        )
        nics = json.loads(json.dumps(inst.get("networkInterfaces", [])))
        if self.insert_status == "RUNNING":
            for nic in nics:
                for ac in nic.get("accessConfigs", []):
                    ac["natIP"] = f"203.0.113.{n % 250}"
        inst["networkInterfaces"] = nics
        self.instances[(zone, name)] = inst
        return 200, op

    def _delete(self, zone: str, name: str):
        if (zone, name) not in self.instances:
            return _not_found(f"zones/{zone}/instances/{name}")
        if self.delete_completes:
            del self.instances[(zone, name)]
            return 200, self._operation(zone, "delete", name, "DONE")
        self.instances[(zone, name)]["status"] = "STOPPING"
        return 200, self._operation(zone, "delete", name, "RUNNING")

    def _aggregated(self, query: dict[str, str]):
        flt = query.get("filter")
        if flt not in (None, MANAGED_FILTER):
            return _error(400, f"unsupported filter {flt!r}", "invalid")
        items = sorted(self.instances.items())
        if flt:
            items = [(k, v) for k, v in items if v.get("labels", {}).get("proxy-operator-managed") == "true"]
        size = min(int(query.get("maxResults", "500")), self.page_size)
        start = int(query.get("pageToken") or 0)
        chunk = items[start : start + size]
        out: dict[str, Any] = {
            "kind": "compute#instanceAggregatedList",
            "id": f"projects/{self.project}/aggregated/instances",
            "items": {},
        }
        for (zone, _), inst in chunk:
            out["items"].setdefault(f"zones/{zone}", {"instances": []})["instances"].append(inst)
        if not chunk:
            out["items"]["zones/europe-west1-b"] = {"warning": {"code": "NO_RESULTS_ON_PAGE", "message": "none"}}
        if start == 0 and self.unreachables:
            out["unreachables"] = list(self.unreachables)
            for scope in self.unreachables:
                out["items"][scope] = {"warning": {"code": "UNREACHABLE", "message": f"{scope} is unavailable"}}
        if start + size < len(items):
            out["nextPageToken"] = str(start + size)
        return 200, out


def _error(status: int, message: str, reason: str) -> tuple[int, dict[str, Any]]:
    return status, {
        "error": {
            "code": status,
            "message": message,
            "errors": [{"domain": "global", "reason": reason, "message": message}],
        }
    }


def _not_found(rest: str) -> tuple[int, dict[str, Any]]:
    return _error(404, f"The resource 'projects/my-project/{rest}' was not found", "notFound")


class _Handler(BaseHTTPRequestHandler):
    fake: FakeCompute
    protocol_version = "HTTP/1.1"

    def _serve(self) -> None:
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        ctype = self.headers.get("Content-Type", "")
        if raw and "json" in ctype:
            body: Any = json.loads(raw)
        elif raw:
            body = {k: v[-1] for k, v in parse_qs(raw.decode()).items()}
        else:
            body = None
        status, answer = self.fake.handle(self.command, url.path, query, body, {k.lower(): v for k, v in self.headers.items()})
        data = b"" if answer is None else (answer if isinstance(answer, bytes) else json.dumps(answer).encode())
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            if url.path == "/" or url.path.startswith("/computeMetadata/"):
                self.send_header("Metadata-Flavor", "Google")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (deadline tests)
            pass

    do_GET = do_POST = do_DELETE = _serve

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass


class Server(LoopbackServer):
    """`with Server(fake) as s: s.url`"""

    def __init__(self, fake: FakeCompute) -> None:
        super().__init__(type("Handler", (_Handler,), {"fake": fake}), "fake-compute")
