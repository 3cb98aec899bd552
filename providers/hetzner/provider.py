"""The hetzner provider: a Hetzner Cloud server per Proxy, with a firewall
of its own admitting the proxy port from `allowedSources` only.

Calls (docs/hetzner-provider.md):

- create, fresh: POST /firewalls (rules and labels), POST /servers (labels,
  user_data, the firewall): two calls. Names are unique per project, so a
  repeat gets `uniqueness_error` and finds the firewall (GET
  /firewalls?name=, its rules set again if the port changed) and the server
  (GET /servers?name=) by name: idempotent across processes too.
- get: GET /servers/<id>; once it is gone, GET /firewalls/<id> of its
  firewall: Terminated while that remains, NotFound once both are gone.
- delete: DELETE /servers/<id>, DELETE /firewalls/<id> (refused while the
  server still holds it: the next delete, or GC, takes it).
- list_by_tag: GET /servers and GET /firewalls with
  `label_selector=proxy-operator-managed=true`, every page
  (`meta.pagination.next_page`); a firewall without a listed server is
  its own Terminated entry for GC.

Every call runs under the deadline's watchdog guard; answers are read
inside the same `_call`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from hcloud.firewalls.domain import Firewall
from hcloud.images.domain import Image
from hcloud.locations.domain import Location
from hcloud.server_types.domain import ServerType
from hcloud.servers.domain import Server, ServerCreatePublicNetwork
from hcloud.ssh_keys.domain import SSHKey

from providers import base, marks
from providers.base import CreateRequest, Deadline, Instance, TargetStatus
from providers.boundary import Boundary
from providers.hetzner import servers
from providers.hetzner.check import check_project
from providers.hetzner.client import Hcloud
from providers.hetzner.config import HetznerConfig
from providers.hetzner.errors import IN_USE, NOT_FOUND, UNIQUENESS, api_code, classify, http_status
from providers.hetzner.ids import SHAPE, Ref, parse_id
from providers.hetzner.placement import placement_problem, resolved
from providers.watchdog import guard

log = logging.getLogger("providers.hetzner")
T = TypeVar("T")
PER_PAGE = 50  # the API's maximum


class HetznerProvider:
    def __init__(self, name: str, cfg: HetznerConfig) -> None:
        self.name = name
        self.cfg = cfg
        self.hcloud = Hcloud(cfg)
        self.boundary = Boundary(provider=name, classify=classify, guard=guard,
                                 on_error=lambda f: self.log_api_error(f.op, f.id, f.error))
        self._names_lock = threading.Lock()
        self._names: dict[str, threading.Lock] = {}

    def _fields(self, **more: Any) -> dict[str, Any]:
        return {"fields": {"provider": self.name, **more}}

    def log_api_error(self, op: str, pid: str, exc: BaseException) -> None:
        log.info("hetzner API call failed", extra=self._fields(
            op=op, id=pid, status=http_status(exc), code=api_code(exc), error=f"{type(exc).__name__}: {exc}"))

    def _call(self, op: str, pid: str, deadline: Deadline, fn: Callable[[Any], T]) -> T:
        """One hcloud request with what reads its answer, at the boundary."""
        return self.boundary.call(op=op, pid=pid, deadline=deadline, fn=lambda _: fn(self.hcloud.client()))

    @staticmethod
    def _unless(code: str, fn: Callable[[], T]) -> T | None:
        try:
            return fn()
        except Exception as exc:
            if api_code(exc) == code:
                return None
            raise

    def _parse(self, op: str, provider_id: str) -> Ref:
        ref = parse_id(provider_id)
        if ref is None:
            raise base.wrap(base.Permanent, op, self.name, provider_id, f"malformed id, want {SHAPE}")
        return ref

    def check(self, deadline: Deadline) -> list[TargetStatus]:
        return check_project(self, deadline)

    # -- create -----------------------------------------------------------------------

    def create(self, request: CreateRequest, deadline: Deadline) -> str:
        problem = placement_problem(self.cfg, request.placement) or servers.request_problem(request)
        if problem:
            raise base.wrap(base.Permanent, "create", self.name, request.name, problem)
        log.debug("creating server", extra=self._fields(name=request.name, uid=request.uid,
                                                        cloudInitBytes=len(request.cloud_init.encode())))
        with self._names_lock:
            lock = self._names.setdefault(request.name, threading.Lock())
        if not lock.acquire(timeout=max(0.0, deadline.remaining())):
            raise base.wrap(base.Transient, "create", self.name, request.name, "another create of this name is still running")
        try:
            firewall = self._ensure_firewall(request, deadline) if self.cfg.manageFirewall else 0
            return self._ensure_server(request, firewall, deadline)
        finally:
            lock.release()

    def _ensure_firewall(self, req: CreateRequest, deadline: Deadline) -> int:
        wanted = servers.rules(req.port, self.cfg.allowedSources)

        def create(c: Any) -> int | None:
            out = self._unless(UNIQUENESS, lambda: c.firewalls.create(name=req.name, rules=wanted, labels=marks.of(req)))
            return None if out is None else int(out.firewall.id)

        fid = self._call("create", req.name, deadline, create)
        if fid is not None:
            return fid

        def find(c: Any) -> tuple[int, bool]:
            fw = c.firewalls.get_by_name(req.name)
            if fw is None:
                raise ValueError(f"no firewall named {req.name} after uniqueness_error")
            return int(fw.id), servers.rule_set(fw.rules or []) == servers.rule_set(wanted)

        fid, same = self._call("create", req.name, deadline, find)
        if not same:
            self._call("create", req.name, deadline, lambda c: c.firewalls.set_rules(Firewall(id=fid), wanted))
        return fid

    def _ensure_server(self, req: CreateRequest, firewall: int, deadline: Deadline) -> str:
        location, server_type, image = resolved(self.cfg, req.placement)
        fws = [Firewall(id=firewall)] if firewall else []
        fws += [Firewall(id=f) for f in self.cfg.firewallIds]
        keys = [SSHKey(id=int(k)) if k.isdigit() else SSHKey(name=k) for k in self.cfg.sshKeys] or None

        def create(c: Any) -> int | None:
            out = self._unless(UNIQUENESS, lambda: c.servers.create(
                name=req.name, server_type=ServerType(name=server_type),
                image=Image(id=int(image)) if image.isdigit() else Image(name=image),
                location=Location(name=location), user_data=req.cloud_init or None, labels=marks.of(req),
                firewalls=fws or None, ssh_keys=keys,
                public_net=ServerCreatePublicNetwork(enable_ipv4=True, enable_ipv6=self.cfg.enableIPv6)))
            return None if out is None else int(out.server.id)  # never the root_password in it

        sid = self._call("create", req.name, deadline, create)
        if sid is None:
            def find(c: Any) -> int:
                s = c.servers.get_by_name(req.name)
                if s is None:
                    raise ValueError(f"no server named {req.name} after uniqueness_error")
                return int(s.id)

            sid = self._call("create", req.name, deadline, find)
            log.debug("server already exists", extra=self._fields(server=sid))
        return str(Ref(sid, firewall))

    # -- get / delete ---------------------------------------------------------------------

    def get(self, provider_id: str, deadline: Deadline) -> Instance:
        ref = self._parse("get", provider_id)
        if not ref.server:
            fw = self._call("get", provider_id, deadline, lambda c: servers.firewall_instance(ref, c.firewalls.get_by_id(ref.firewall)))
            return fw
        try:
            return self._call("get", provider_id, deadline,
                              lambda c: servers.to_instance(ref, c.servers.get_by_id(ref.server), self.cfg.internalIP))
        except base.NotFound:
            if not ref.firewall:
                raise
        left = self._call("get", provider_id, deadline,
                          lambda c: self._unless(NOT_FOUND, lambda: servers.firewall_instance(Ref(0, ref.firewall),
                                                                                             c.firewalls.get_by_id(ref.firewall))))
        if left is None:
            raise base.wrap(base.NotFound, "get", self.name, provider_id, "the server and its firewall are gone")
        return Instance(id=provider_id, state=base.State.TERMINATED, uid=left.uid, created_at=left.created_at,
                        installation=left.installation, namespace=left.namespace)

    def delete(self, provider_id: str, deadline: Deadline) -> None:
        ref = self._parse("delete", provider_id)
        if ref.server:
            self._call("delete", provider_id, deadline,
                       lambda c: self._unless(NOT_FOUND, lambda: c.servers.delete(Server(id=ref.server))))
        if not ref.firewall:
            return

        def delete_firewall(c: Any) -> str:
            try:
                c.firewalls.delete(Firewall(id=ref.firewall))
            except Exception as exc:
                code = api_code(exc)
                if code == NOT_FOUND:
                    return "gone"
                if code == IN_USE and ref.server:
                    return "in use"  # still detaching from the server: the next delete, or GC, takes it
                raise
            return "deleted"

        outcome = self._call("delete", provider_id, deadline, delete_firewall)
        log.debug("firewall " + outcome, extra=self._fields(id=provider_id))

    # -- list ---------------------------------------------------------------------------------

    def _all(self, deadline: Deadline, page_of: Callable[[Any, int], tuple[list[Any], int | None]]) -> list[Any]:
        out: list[Any] = []
        page: int | None = 1
        seen: set[int] = set()
        while page is not None:
            if page in seen:
                raise base.wrap(base.Transient, "list", self.name, "", f"pagination loops back to page {page}")
            seen.add(page)
            items, page = self._call("list", "", deadline, lambda c, p=page: page_of(c, p))
            out.extend(items)
        return out

    def list_by_tag(self, deadline: Deadline) -> list[Instance]:
        def servers_page(c: Any, page: int) -> tuple[list[Any], int | None]:
            res = c.servers.get_list(label_selector=servers.MANAGED_SELECTOR, page=page, per_page=PER_PAGE)
            return list(res.servers), _next_page(res.meta)

        def firewalls_page(c: Any, page: int) -> tuple[list[Any], int | None]:
            res = c.firewalls.get_list(label_selector=servers.MANAGED_SELECTOR, page=page, per_page=PER_PAGE)
            return list(res.firewalls), _next_page(res.meta)

        raw = self._all(deadline, servers_page)
        fws = self._all(deadline, firewalls_page) if self.cfg.manageFirewall else []
        try:
            ours = {int(f.id) for f in fws if (f.labels or {}).get(base.LABEL_MANAGED) == base.LABEL_MANAGED_YES}
            used: set[int] = set()
            out: list[Instance] = []
            for s in raw:
                if (s.labels or {}).get(base.LABEL_MANAGED) != base.LABEL_MANAGED_YES:
                    continue  # the selector did this; never list an unmarked server, whatever the answer
                fids = servers.firewall_ids(s)
                used.update(fids)
                mine = next((f for f in fids if f in ours and _named(fws, f, s.name)), 0)
                out.append(servers.to_instance(Ref(int(s.id), mine), s, self.cfg.internalIP))
            for f in fws:
                if int(f.id) in ours and int(f.id) not in used:
                    out.append(servers.firewall_instance(Ref(0, int(f.id)), f))
        except Exception as exc:  # an answer we can't vouch for
            self.log_api_error("list", "", exc)
            raise base.wrap(base.Transient, "list", self.name, "", exc) from exc
        log.debug("servers listed", extra=self._fields(count=len(out)))
        return out

    def close(self) -> None:
        self.hcloud.close()


def _named(fws: list[Any], fid: int, name: str) -> bool:
    return any(int(f.id) == fid and f.name == name for f in fws)


def _next_page(meta: Any) -> int | None:
    pag = meta.pagination if meta is not None else None
    nxt = pag.next_page if pag is not None else None
    if nxt is not None and not isinstance(nxt, int):
        raise TypeError("meta.pagination.next_page is not a number")
    return nxt


def new(name: str, cfg: HetznerConfig) -> HetznerProvider:
    """Builds nothing that talks to the network (nor reads the token)."""
    return HetznerProvider(name, cfg)
