"""A small stateful fake of the Hetzner Cloud API paths the hetzner provider
uses, on 127.0.0.1, recording every request.

Paths (under /v1): POST/GET /servers (name, label_selector, page,
per_page), GET/DELETE /servers/<id>, POST/GET /firewalls, GET/DELETE
/firewalls/<id>, POST /firewalls/<id>/actions/set_rules, GET /actions/<id>.
As the API does: a Bearer token is required (401 `unauthorized`); names
are unique per project (409 `uniqueness_error`); lists are paged
(`meta.pagination`: page, per_page ≤ 50, previous/next/last page,
total_entries); writes answer with action objects; errors are
`{"error": {"code", "message", "details"}}`; a firewall still applied to a
server can't be deleted (409 `resource_in_use`); deleting a server detaches
its firewalls. A new server is `initializing` until its first GET
(`boots_on_get`), then `running` with a public IPv4.

Knobs: `scripts` (canned answers before the routes), `server_limit`
(then 403 `resource_limit_exceeded`), `deletes_async` (a deleted server
stays `deleting` until `finish_deletes()`).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

from fleet.testing.http import LoopbackServer, Quiet

TOKEN = "fake-hcloud-token"
CREATED = "2026-11-29T05:06:45+00:00"
MAX_PER_PAGE = 50
Answer = tuple[int, Any]  # (HTTP status, the JSON body or None)


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    body: Any


@dataclass
class Script:
    method: str
    path: str
    status: int
    body: Any
    times: int = 1
    delay: float = 0.0


def error(status: int, code: str, message: str, details: Any = None) -> tuple[int, dict[str, Any]]:
    return status, {"error": {"code": code, "message": message, "details": details}}


@dataclass
class FakeHcloud:
    token: str = TOKEN
    requests: list[Recorded] = field(default_factory=list)
    servers: dict[int, dict[str, Any]] = field(default_factory=dict)
    firewalls: dict[int, dict[str, Any]] = field(default_factory=dict)
    actions: dict[int, dict[str, Any]] = field(default_factory=dict)
    scripts: list[Script] = field(default_factory=list)
    server_limit: int = 1000
    boots_on_get: bool = True
    deletes_async: bool = False

    def __post_init__(self) -> None:
        self.lock = threading.Lock()
        self._ids = itertools.count(1001)

    # -- for tests ----------------------------------------------------------------------

    def script(self, method: str, path: str, status: int, body: Any, times: int = 1, delay: float = 0.0) -> None:
        self.scripts.append(Script(method, path, status, body, times, delay))

    def api_requests(self) -> list[Recorded]:
        return [r for r in self.requests if r.path.startswith("/v1/")]

    def finish_deletes(self) -> None:
        with self.lock:
            for sid in [s for s, v in self.servers.items() if v["status"] == "deleting"]:
                self._remove_server(sid)

    # -- serving ------------------------------------------------------------------------

    def handle(self, method: str, path: str, query: dict[str, list[str]], body: Any, auth: str) -> Answer:
        with self.lock:
            self.requests.append(Recorded(method, path, query, body))
            script = next((s for s in self.scripts if s.method == method and re.search(s.path, path)), None)
            if script is not None:
                script.times -= 1
                if script.times == 0:
                    self.scripts.remove(script)
        if script is not None:
            if script.delay:
                time.sleep(script.delay)
            return script.status, script.body
        if auth != f"Bearer {self.token}":
            return error(401, "unauthorized", "unable to authenticate")
        if not path.startswith("/v1/"):
            return error(404, "not_found", f"unknown path {path}")
        with self.lock:
            return self._route(method, path[len("/v1/"):], query, body)

    def _route(self, method: str, rest: str, query: dict[str, list[str]], body: Any) -> Answer:
        for kind, store in (("servers", self.servers), ("firewalls", self.firewalls)):
            if rest == kind and method == "GET":
                return self._list(kind, store, query)
            if rest == kind and method == "POST":
                return self._create_server(body) if kind == "servers" else self._create_firewall(body)
            m = re.fullmatch(rf"{kind}/(\d+)", rest)
            if m and method == "GET":
                obj = store.get(int(m[1]))
                return (200, {kind[:-1]: obj}) if obj else error(404, "not_found", f"{kind[:-1]} with ID '{m[1]}' not found")
            if m and method == "DELETE":
                return self._delete_server(int(m[1])) if kind == "servers" else self._delete_firewall(int(m[1]))
        m = re.fullmatch(r"firewalls/(\d+)/actions/set_rules", rest)
        if m and method == "POST":
            fw = self.firewalls.get(int(m[1]))
            if fw is None:
                return error(404, "not_found", "firewall not found")
            fw["rules"] = [_rule(r) for r in body.get("rules", [])]
            return 201, {"actions": [self._action("set_firewall_rules", ("firewall", fw["id"]))]}
        m = re.fullmatch(r"actions/(\d+)", rest)
        if m and method == "GET":
            act = self.actions.get(int(m[1]))
            return (200, {"action": act}) if act else error(404, "not_found", "action not found")
        return error(400, "invalid_input", f"unexpected {method} {rest}")

    def _action(self, command: str, *resources: tuple[str, int], status: str = "success") -> dict[str, Any]:
        aid = next(self._ids)
        act = {"id": aid, "command": command, "status": status, "progress": 100 if status == "success" else 0,
               "started": CREATED, "finished": CREATED if status == "success" else None,
               "resources": [{"id": rid, "type": t} for t, rid in resources], "error": None}
        self.actions[aid] = act
        return act

    def _taken(self, store: dict[int, dict[str, Any]], name: str) -> bool:
        return any(o["name"] == name for o in store.values())

    def _create_firewall(self, body: dict[str, Any]) -> Answer:
        name = body.get("name")
        if not isinstance(name, str) or not name:
            return error(400, "invalid_input", "invalid input in field 'name'", {"fields": [{"name": "name"}]})
        if self._taken(self.firewalls, name):
            return error(409, "uniqueness_error", "firewall name is already used", {"fields": [{"name": "name"}]})
        fid = next(self._ids)
        fw = {"id": fid, "name": name, "labels": dict(body.get("labels") or {}), "created": CREATED,
              "rules": [_rule(r) for r in body.get("rules") or []], "applied_to": []}
        self.firewalls[fid] = fw
        return 201, {"firewall": fw, "actions": []}

    def _create_server(self, body: dict[str, Any]) -> Answer:
        name = body.get("name")
        for key in ("name", "server_type", "image"):
            if not body.get(key):
                return error(400, "invalid_input", f"invalid input in field '{key}'", {"fields": [{"name": key}]})
        if self._taken(self.servers, str(name)):
            return error(409, "uniqueness_error", "server name is already used", {"fields": [{"name": "name"}]})
        if len(self.servers) >= self.server_limit:
            return error(403, "resource_limit_exceeded", "server limit exceeded")
        fids = [f["firewall"] for f in body.get("firewalls") or []]
        for fid in fids:
            if fid not in self.firewalls:
                return error(404, "not_found", f"firewall with ID '{fid}' not found")
        sid = next(self._ids)
        n = sid % 250
        server: dict[str, Any] = {
            "id": sid, "name": name, "status": "initializing", "created": CREATED,
            "labels": dict(body.get("labels") or {}),
            "public_net": {"ipv4": {"id": sid + 500000, "ip": f"203.0.113.{n}", "blocked": False, "dns_ptr": "x"},
                           "ipv6": None, "floating_ips": [],
                           "firewalls": [{"id": fid, "status": "applied"} for fid in fids]},
            "private_net": [], "server_type": {"id": 1, "name": body["server_type"]},
            "image": {"id": 114690387, "name": body["image"], "type": "system"},
            "location": {"id": 1, "name": body.get("location") or "fsn1", "network_zone": "eu-central"},
            "protection": {"delete": False, "rebuild": False}, "user_data_bytes": len(body.get("user_data") or ""),
        }
        self.servers[sid] = server
        for fid in fids:
            self.firewalls[fid]["applied_to"].append({"type": "server", "server": {"id": sid}})
        create = self._action("create_server", ("server", sid), status="running")
        return 201, {"server": server, "action": create, "next_actions": [self._action("start_server", ("server", sid))],
                     "root_password": "fake-root-password"}

    def _remove_server(self, sid: int) -> None:
        self.servers.pop(sid, None)
        for fw in self.firewalls.values():
            fw["applied_to"] = [a for a in fw["applied_to"] if a.get("server", {}).get("id") != sid]

    def _delete_server(self, sid: int) -> Answer:
        server = self.servers.get(sid)
        if server is None:
            return error(404, "not_found", f"server with ID '{sid}' not found")
        if self.deletes_async:
            server["status"] = "deleting"
            return 200, {"action": self._action("delete_server", ("server", sid), status="running")}
        self._remove_server(sid)
        return 200, {"action": self._action("delete_server", ("server", sid))}

    def _delete_firewall(self, fid: int) -> Answer:
        fw = self.firewalls.get(fid)
        if fw is None:
            return error(404, "not_found", f"firewall with ID '{fid}' not found")
        if fw["applied_to"]:
            return error(409, "resource_in_use", "firewall is still applied to resources")
        del self.firewalls[fid]
        return 204, None

    def _list(self, kind: str, store: dict[int, dict[str, Any]], query: dict[str, list[str]]) -> Answer:
        items = sorted(store.values(), key=lambda o: o["id"])
        if "name" in query:
            items = [o for o in items if o["name"] == query["name"][-1]]
        if "label_selector" in query:
            sel = query["label_selector"][-1]
            pairs = []
            for term in sel.split(","):
                m = re.fullmatch(r"([A-Za-z0-9._/-]+)=([A-Za-z0-9._-]*)", term)
                if m is None:
                    return error(400, "invalid_input", f"unsupported label selector {sel!r}")
                pairs.append((m[1], m[2]))
            items = [o for o in items if all(o["labels"].get(k) == v for k, v in pairs)]
        per_page = min(int(query.get("per_page", ["25"])[-1]), MAX_PER_PAGE)
        page = int(query.get("page", ["1"])[-1])
        last = max(1, -(-len(items) // per_page))
        chunk = items[(page - 1) * per_page: page * per_page]
        meta = {"pagination": {"page": page, "per_page": per_page, "previous_page": page - 1 if page > 1 else None,
                               "next_page": page + 1 if page < last else None, "last_page": last,
                               "total_entries": len(items)}}
        return 200, {kind: chunk, "meta": meta}

    def boot(self, sid: int) -> None:
        """What a GET of one server does: a booting server is running afterwards."""
        s = self.servers.get(sid)
        if s is not None and s["status"] == "initializing":
            s["status"] = "running"


def _rule(r: dict[str, Any]) -> dict[str, Any]:
    return {"direction": r.get("direction"), "protocol": r.get("protocol"), "port": r.get("port"),
            "source_ips": list(r.get("source_ips") or []), "destination_ips": list(r.get("destination_ips") or []),
            "description": r.get("description")}


class _Handler(Quiet):
    fake: FakeHcloud
    protocol_version = "HTTP/1.1"

    def _serve(self) -> None:
        url = urlsplit(self.path)
        query = parse_qs(url.query, keep_blank_values=True)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            status, answer = error(400, "json_error", "invalid JSON")
        else:
            status, answer = self.fake.handle(self.command, url.path, query, body, self.headers.get("Authorization", ""))
        with self.fake.lock:  # serialised before the boot below changes the object
            data = b"" if answer is None else (answer if isinstance(answer, bytes) else json.dumps(answer).encode())
        m = re.fullmatch(r"/v1/servers/(\d+)", url.path)
        if m and self.command == "GET" and status == 200 and self.fake.boots_on_get:
            with self.fake.lock:
                self.fake.boot(int(m[1]))
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.reply(status, data, {"Content-Type": "application/json"})

    do_GET = do_POST = do_DELETE = do_PUT = _serve


class Server(LoopbackServer):
    def __init__(self, fake: FakeHcloud) -> None:
        super().__init__(type("Handler", (_Handler,), {"fake": fake}), "fake-hcloud")
