"""The gcp provider: Compute Engine VMs with an ephemeral external IP.

Four API calls do the work (instances insert/get/delete, aggregatedList),
plus zoneOperations.get for the two seed gaps closed here (operations.py).
`create` returns once the insert is accepted; progress is discovered by
polling `get`. Every SDK call gets the time left to the deadline as its
timeout; reads retry 503/504 within that time, writes never retry (the
reconciler does, and insert is idempotent by name anyway).

Logging: `providers.gcp`, fields in `extra={"fields": ...}`; the cloud-init
is only ever counted, and the SDK's own debug payloads are elided
(redaction.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

from google.api_core import exceptions as gexc
from google.api_core import retry as gretry
from google.auth.credentials import Credentials
from google.cloud import compute_v1

from providers import base
from providers.base import CreateRequest, Deadline, Instance, TargetStatus
from providers.boundary import Boundary
from providers.gcp.check import check_project
from providers.gcp.client import Compute
from providers.gcp.config import GcpConfig
from providers.gcp.errors import OperationFailedError, classify, error_reasons, http_status
from providers.gcp.ids import SHAPE, format_id, parse_id
from providers.gcp.insert import build_instance, uid_problem
from providers.gcp.instances import to_instance
from providers.gcp.listing import Page, list_request, read_page
from providers.gcp.operations import DONE, OperationBook, PendingOperation
from providers.gcp.placement import placement_problem

log = logging.getLogger("providers.gcp")
T = TypeVar("T")


def _read_retry(deadline: Deadline) -> gretry.Retry:
    """Retry a read on 503/504 until the deadline, never past it."""
    return gretry.Retry(
        predicate=gretry.if_exception_type(gexc.ServiceUnavailable, gexc.GatewayTimeout),
        initial=0.1,
        maximum=2.0,
        multiplier=2.0,
        timeout=deadline.remaining(),
    )


def op_status(op: compute_v1.Operation) -> str:
    """`Operation.status` is an enum in the SDK (`Status.DONE`); its name."""
    status = op.status
    return getattr(status, "name", None) or str(status or "")


def operation_failure(op: compute_v1.Operation) -> OperationFailedError | None:
    if "error" not in op or not op.error.errors:
        return None
    errs = list(op.error.errors)
    return OperationFailedError(
        op.name,
        op.http_error_status_code,
        [e.code for e in errs if e.code],
        "; ".join(e.message for e in errs if e.message) or op.http_error_message,
    )


class GcpProvider:
    def __init__(self, name: str, cfg: GcpConfig, credentials: Credentials | None = None) -> None:
        self.name = name
        self.cfg = cfg
        self.compute = Compute(cfg, credentials)
        self.inserts = OperationBook()
        self.deletes = OperationBook()
        self.boundary = Boundary(provider=name, classify=classify,
                                 on_error=lambda f: self.log_api_error(f.op, f.id, f.error))

    # -- plumbing ----------------------------------------------------------------

    def _fields(self, **more: Any) -> dict[str, Any]:
        return {"fields": {"provider": self.name, "project": self.cfg.project, **more}}

    def log_api_error(self, op: str, pid: str, exc: BaseException) -> None:
        """The raw backend error, once, where it happened."""
        log.info(
            "gcp API call failed",
            extra=self._fields(
                op=op,
                id=pid,
                status=http_status(exc),
                reasons=",".join(error_reasons(exc)),
                error=f"{type(exc).__name__}: {exc}",
            ),
        )

    def _call(self, op: str, pid: str, deadline: Deadline, fn: Callable[[float], T]) -> T:
        """Run one SDK call with the time left, and read its answer; any
        failure of either is translated at the boundary (an answer that does
        not parse fails inside the SDK or in the reading, both within fn)."""
        return self.boundary.call(op=op, pid=pid, deadline=deadline, fn=fn)

    def _parse(self, op: str, provider_id: str) -> tuple[str, str]:
        parsed = parse_id(provider_id)
        if parsed is None:
            raise base.wrap(base.Permanent, op, self.name, provider_id, f"malformed id, want {SHAPE}")
        return parsed

    def _operation(self, op: str, pid: str, pending: PendingOperation, deadline: Deadline) -> compute_v1.Operation:
        return self._call(
            op,
            pid,
            deadline,
            lambda t: self.compute.operations().get(
                project=self.cfg.project,
                zone=pending.zone,
                operation=pending.name,
                timeout=t,
                retry=_read_retry(deadline),
            ),
        )

    # -- Checker -----------------------------------------------------------------

    def check(self, deadline: Deadline) -> list[TargetStatus]:
        return check_project(self, deadline)

    # -- Provider ----------------------------------------------------------------

    def create(self, request: CreateRequest, deadline: Deadline) -> str:
        problem = placement_problem(self.cfg, request.placement) or uid_problem(request)
        if problem:
            raise base.wrap(base.Permanent, "create", self.name, request.name, problem)
        zone = request.placement.zone
        pid = format_id(zone, request.name)
        body = build_instance(request, self.cfg)
        log.debug(
            "inserting instance",
            extra=self._fields(
                id=pid,
                uid=request.uid,
                machineType=body.machine_type,
                image=request.placement.image,
                cloudInitBytes=len(request.cloud_init.encode()),
            ),
        )

        def insert(t: float) -> compute_v1.Operation | None:
            try:
                return self.compute.instances().insert_unary(
                    project=self.cfg.project, zone=zone, instance_resource=body, timeout=t, retry=None
                )
            except gexc.Conflict:  # 409: already exists, idempotent by name
                return None

        op = self._call("create", pid, deadline, insert)
        if op is None:
            log.debug("instance already exists", extra=self._fields(id=pid))
            return pid
        self._accepted("create", pid, zone, op, self.inserts)
        return pid

    def get(self, provider_id: str, deadline: Deadline) -> Instance:
        zone, name = self._parse("get", provider_id)
        try:
            inst = self._call(
                "get",
                provider_id,
                deadline,
                lambda t: to_instance(
                    provider_id,
                    self.compute.instances().get(
                        project=self.cfg.project, zone=zone, instance=name, timeout=t, retry=_read_retry(deadline)
                    ),
                ),
            )
        except base.NotFound as gone:
            self.deletes.forget(provider_id)
            pending = self.inserts.get(provider_id)
            if pending is not None:
                self._explain_missing(provider_id, pending, deadline, gone)
            raise
        self.inserts.forget(provider_id)  # it exists: nothing more to learn from its insert
        return inst

    def _explain_missing(self, pid: str, pending: PendingOperation, deadline: Deadline, gone: base.NotFound) -> None:
        """The VM is not there but this process inserted it: say why. Raises
        the insert's error (once: then the book forgets it, so a later get
        is NotFound and the reconciler creates again), Transient while the
        insert is still running, or returns when it succeeded (the VM was
        deleted since: NotFound)."""
        try:
            op = self._operation("get", pid, pending, deadline)
        except base.NotFound:  # the operation expired: nothing to add
            self.inserts.forget(pid, pending)
            return
        if op_status(op) != DONE:
            raise base.wrap(
                base.Transient,
                "get",
                self.name,
                pid,
                f"not visible yet: insert {op.name} is {op_status(op) or 'PENDING'}",
            ) from gone
        self.inserts.forget(pid, pending)
        failed = operation_failure(op)
        if failed is not None:
            raise self.boundary.translate(op="get", pid=pid, error=failed) from failed

    def delete(self, provider_id: str, deadline: Deadline) -> None:
        zone, name = self._parse("delete", provider_id)
        self.inserts.forget(provider_id)
        pending = self.deletes.get(provider_id)
        if pending is not None:
            try:
                op = self._operation("delete", provider_id, pending, deadline)
            except base.NotFound:
                op = None
            if op is not None and op_status(op) != DONE:
                log.debug("delete already in progress", extra=self._fields(id=provider_id, operation=op.name))
                return
            self.deletes.forget(provider_id, pending)  # finished (or failed): ask again below

        def delete(t: float) -> compute_v1.Operation | None:
            try:
                return self.compute.instances().delete_unary(project=self.cfg.project, zone=zone, instance=name, timeout=t, retry=None)
            except gexc.NotFound:  # already gone
                return None

        op = self._call("delete", provider_id, deadline, delete)
        if op is None:
            log.debug("instance already gone", extra=self._fields(id=provider_id))
            return
        self._accepted("delete", provider_id, zone, op, self.deletes)

    def _accepted(self, op_name: str, pid: str, zone: str, op: Any, pending: Any) -> None:
        """An operation the API accepted: raise its error if it already failed,
        remember it while it runs (so get/delete can consult it)."""
        failed = operation_failure(op)
        if failed is not None:
            raise self.boundary.translate(op=op_name, pid=pid, error=failed) from failed
        if op_status(op) != DONE:
            pending.put(pid, PendingOperation(zone, op.name))
        log.debug(f"{op_name} accepted", extra=self._fields(id=pid, operation=op.name, status=op_status(op)))

    def list_by_tag(self, deadline: Deadline) -> list[Instance]:
        request = list_request(self.cfg.project)
        out: list[Instance] = []
        unreachable: set[str] = set()
        pages = 0

        def one_page(t: float) -> Page:
            """One page per call, each with the time left, read inside `_call`."""
            pager = self.compute.instances().aggregated_list(request=request, timeout=t, retry=_read_retry(deadline))
            return read_page(next(iter(pager.pages)))  # the page already fetched; never the next one

        while True:
            page = self._call("list", "", deadline, one_page)
            pages += 1
            out.extend(page.instances)
            unreachable |= page.unreachable
            if not page.next_page_token:
                break
            request.page_token = page.next_page_token
        if unreachable:
            log.warning(
                "zones left out of the list: the API could not read them",
                extra=self._fields(zones=",".join(sorted(unreachable))),
            )
        log.debug("instances listed", extra=self._fields(count=len(out), pages=pages))
        return out

    def close(self) -> None:
        self.compute.close()


def new(name: str, cfg: GcpConfig, credentials: Credentials | None = None) -> GcpProvider:
    """Builds nothing that talks to the network: the SDK client is made on
    first use, with ADC unless `credentials` is given."""
    return GcpProvider(name, cfg, credentials)
