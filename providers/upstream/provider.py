"""The upstream provider: members are proxies fleet did not create.

- list mode: `create` takes the first entry no member holds (QuotaExceeded
  when none is free), `delete` gives it back; the id is the entry's URL
  without credentials, so an entry always has the same id.
- vendor mode: `create` mints a random session id (a new exit at the
  vendor), `delete` forgets it; the id carries the session and the
  placement values (`ids`). A Proxy's rotation (maxAgeSeconds) thus gets a
  new exit.

Which member holds what lives in the state directory (`state`), with the GC
marks; `get` and `list_by_tag` read it every time. A member is `Running`
with the upstream's host as its IP while its entry is still listed (or its
endpoint still configured), else `Stopped`, so the reconciler replaces it.

What a request's fields become: `name` → the record's key (idempotency);
`uid`, `namespace`, `proxy_name`, `installation` → the record and its marks;
`placement` → the vendor username's placeholders (the registry's hook
refuses what the template can't take); `port` and `cloud_init`: ignored (the
upstream's own port is in the id; there is no machine to initialise).

Credentials are read only by the checker (and, later, the gateway): the
verbs never open a credential file, so they can't leak one. listFile is
read by list-mode verbs for its URLs; its errors name the line, not its text.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from providers import base, marks
from providers.base import CreateRequest, Deadline, Instance, State, TargetStatus
from providers.boundary import Boundary
from providers.upstream import credentials, ids
from providers.upstream.check import check_upstream, new_session
from providers.upstream.config import UpstreamConfig
from providers.upstream.errors import BadRequest, Exhausted, RecordMissing, classify
from providers.upstream.ids import Member
from providers.upstream.placement import placement_problem, values
from providers.upstream.state import Store, new_record

log = logging.getLogger(__name__)

T = TypeVar("T")


class UpstreamProvider:
    def __init__(self, name: str, cfg: UpstreamConfig) -> None:
        self.name = name
        self.cfg = cfg
        self.store = Store(cfg.state_dir(name))
        self.boundary = Boundary(provider=name, classify=classify)

    def _call(self, op: str, pid: str, deadline: Deadline, fn: Callable[[], T]) -> T:
        return self.boundary.call(op=op, pid=pid, deadline=deadline, fn=lambda _: fn())

    # -- Checker -----------------------------------------------------------------------

    def check(self, deadline: Deadline) -> list[TargetStatus]:
        return check_upstream(self.cfg, deadline)

    # -- Provider ----------------------------------------------------------------------

    def create(self, request: CreateRequest, deadline: Deadline) -> str:
        return self._call("create", "", deadline, lambda: self._create(request, deadline))

    def get(self, provider_id: str, deadline: Deadline) -> Instance:
        return self._call("get", provider_id, deadline, lambda: self._get(provider_id, deadline))

    def delete(self, provider_id: str, deadline: Deadline) -> None:
        self._call("delete", provider_id, deadline, lambda: self._delete(provider_id, deadline))

    def list_by_tag(self, deadline: Deadline) -> list[Instance]:
        return self._call("list", "", deadline, lambda: self._list(deadline))

    # -- the verbs ---------------------------------------------------------------------

    def _create(self, request: CreateRequest, deadline: Deadline) -> str:
        problem = marks.problem(request) or placement_problem(self.cfg, request.placement)
        if problem:
            raise BadRequest(problem)
        listed = self._listed() if self.cfg.mode == "list" else []
        with self.store.locked(deadline, create=True) as members:
            held = members.get(request.name)
            if held is not None:
                return str(held["id"])  # idempotent: the same member
            if self.cfg.mode == "list":
                taken = {rec["id"] for rec in members.values()}
                free = [m for m in listed if m.id not in taken]
                if not free:
                    raise Exhausted(f"all {len(listed)} entries of the list are held by members; "
                                    "delete a Proxy or add entries (proxies or listFile)")
                member = free[0]
            else:
                member = Member(self.cfg.vendor_endpoint(), new_session(), values(self.cfg, request.placement))
            members[request.name] = new_record(request, member.id)
        log.info("upstream member %s for %s/%s", _shown(member), request.namespace, request.proxy_name)
        return member.id

    def _get(self, pid: str, deadline: Deadline) -> Instance:
        ids.parse(pid)
        with self.store.locked(deadline) as members:
            found = [rec for rec in members.values() if rec["id"] == pid]
        if not found:
            raise RecordMissing(f"no member {pid}")
        return self._instance(found[0], self._live())

    def _delete(self, pid: str, deadline: Deadline) -> None:
        ids.parse(pid)
        with self.store.locked(deadline) as members:
            for name in [n for n, rec in members.items() if rec["id"] == pid]:
                del members[name]

    def _list(self, deadline: Deadline) -> list[Instance]:
        with self.store.locked(deadline) as members:
            recs = list(members.values())
        live = self._live()
        return [self._instance(rec, live) for rec in recs
                if rec["labels"].get(base.LABEL_MANAGED) == base.LABEL_MANAGED_YES]

    # -- helpers -------------------------------------------------------------------------

    def _listed(self) -> list[Member]:
        try:
            return [Member(e.endpoint) for e in credentials.entries(self.cfg)]
        except ValueError as exc:
            raise BadRequest(str(exc)) from None

    def _live(self) -> Callable[[Member], bool]:
        """Whether a member's entry is still listed (its endpoint still configured)."""
        if self.cfg.mode == "vendor":
            endpoint = self.cfg.vendor_endpoint()
            return lambda m: bool(m.session) and m.endpoint == endpoint
        listed = {m.id for m in self._listed()}
        return lambda m: not m.session and m.id in listed

    def _instance(self, rec: dict[str, Any], live: Callable[[Member], bool]) -> Instance:
        member = ids.parse(rec["id"])
        running = live(member)
        labels = rec["labels"]
        return Instance(
            id=rec["id"],
            state=State.RUNNING if running else State.STOPPED,
            ip=member.endpoint.host if running else "",
            uid=rec["uid"],
            created_at=_created(rec["createdAt"]),
            installation=_str(labels.get(base.LABEL_INSTALLATION)),
            namespace=_str(labels.get(base.LABEL_NAMESPACE)),
        )


def _shown(member: Member) -> str:
    """A member as logged: the id holds no secret (no credentials, only the session and placement)."""
    return member.id


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""


def _created(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text)
    except (TypeError, ValueError):
        return None


def new(name: str, cfg: UpstreamConfig) -> UpstreamProvider:
    return UpstreamProvider(name, cfg)
