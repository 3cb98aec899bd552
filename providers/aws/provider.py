"""The aws provider: an EC2 instance per Proxy, with a security group of
its own admitting the proxy port from `allowedSources` only.

Calls (docs/aws-provider.md has the whole story):

- create, fresh: CreateSecurityGroup (with its marks), AuthorizeSecurityGroupIngress,
  RunInstances (with the instance's marks and the cloud-init as UserData):
  three calls. A repeat finds the group by name (DescribeSecurityGroups),
  brings its rules to the request's port, and looks for a live instance of
  that name (DescribeInstances) before running one. RunInstances carries a
  ClientToken derived from the name and the group, so two creates racing in
  two processes get one instance from EC2; in one process a lock per name
  serialises them (moto ignores ClientToken).
- get: DescribeInstances by id; a terminated instance whose group still
  exists reads Terminated (one DescribeSecurityGroups), and NotFound once
  the group is gone too, so "gone" means everything create made is gone.
- delete: TerminateInstances and DeleteSecurityGroup (which fails while the
  instance shuts down; the reconciler's next delete, or GC, gets it).
- list_by_tag: DescribeInstances and DescribeSecurityGroups filtered by the
  managed tag, every page, in every configured region; a group without a
  live instance is listed as its own Terminated entry for GC.

Every call runs under the deadline's watchdog guard with the time left;
its answer is read inside the same `_call`, so nothing escapes `classify`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any, TypeVar

from providers import base
from providers.aws import build
from providers.aws.check import check_regions
from providers.aws.client import Ec2
from providers.aws.config import AwsConfig
from providers.aws.errors import (
    DEPENDENCY,
    GROUP_DUPLICATE,
    GROUP_NOT_FOUND,
    INSTANCE_NOT_FOUND,
    PERMISSION_DUPLICATE,
    PERMISSION_NOT_FOUND,
    classify,
    error_code,
    http_status,
)
from providers.aws.ids import SHAPE, Ref, parse_id
from providers.aws.instances import LIVE_STATES, group_ids, group_instance, state_name, to_instance
from providers.aws.placement import placement_problem, region_of
from providers.base import CreateRequest, Deadline, Instance, TargetStatus
from providers.boundary import Boundary
from providers.watchdog import guard

log = logging.getLogger("providers.aws")
T = TypeVar("T")
MANAGED_FILTER = {"Name": f"tag:{base.LABEL_MANAGED}", "Values": [base.LABEL_MANAGED_YES]}
PAGE_SIZE = 1000


class _Code(Exception):
    """An expected EC2 error code, handled by the caller inside `_call`."""


class AwsProvider:
    def __init__(self, name: str, cfg: AwsConfig) -> None:
        self.name = name
        self.cfg = cfg
        self.ec2 = Ec2(cfg)
        self._names_lock = threading.Lock()
        self._names: dict[str, threading.Lock] = {}
        self.boundary = Boundary(provider=name, classify=classify, guard=guard,
                                 on_error=lambda f: self.log_api_error(f.op, f.id, f.error))

    # -- plumbing ----------------------------------------------------------------------

    def _fields(self, **more: Any) -> dict[str, Any]:
        return {"fields": {"provider": self.name, **more}}

    def log_api_error(self, op: str, pid: str, exc: BaseException) -> None:
        log.info("aws API call failed", extra=self._fields(
            op=op, id=pid, status=http_status(exc), code=error_code(exc), error=f"{type(exc).__name__}: {exc}"))

    @property
    def calls(self) -> int:
        """Requests made (the tests and the benchmark read it)."""
        return self.boundary.calls

    def _call(self, op: str, pid: str, region: str, deadline: Deadline, fn: Callable[[Any], T]) -> T:
        """One EC2 request with what reads its answer, at the boundary."""
        return self.boundary.call(op=op, pid=pid, deadline=deadline, fn=lambda _: fn(self.ec2.client(region)))

    def _tolerate(self, fn: Callable[[], T], *codes: str) -> Callable[[], T | None]:
        """`fn`, with the given EC2 error codes as None (an answer, not a failure)."""
        def call() -> T | None:
            try:
                return fn()
            except Exception as exc:
                if error_code(exc) in codes:
                    return None
                raise
        return call

    def _parse(self, op: str, provider_id: str) -> Ref:
        ref = parse_id(provider_id)
        if ref is None:
            raise base.wrap(base.Permanent, op, self.name, provider_id, f"malformed id, want {SHAPE}")
        if ref.region not in self.cfg.all_regions:
            raise base.wrap(base.Permanent, op, self.name, provider_id,
                            f"region {ref.region} is not one of this provider's regions: {', '.join(self.cfg.all_regions)}")
        return ref

    def _name_lock(self, name: str) -> threading.Lock:
        with self._names_lock:
            return self._names.setdefault(name, threading.Lock())

    # -- Checker -------------------------------------------------------------------------

    def check(self, deadline: Deadline) -> list[TargetStatus]:
        return check_regions(self, deadline)

    # -- create ----------------------------------------------------------------------------

    def create(self, request: CreateRequest, deadline: Deadline) -> str:
        problem = placement_problem(self.cfg, request.placement) or build.request_problem(request)
        if problem:
            raise base.wrap(base.Permanent, "create", self.name, request.name, problem)
        region = region_of(self.cfg, request.placement)
        log.debug("creating instance", extra=self._fields(
            name=request.name, uid=request.uid, region=region, instanceType=request.placement.machine_type,
            image=request.placement.image, cloudInitBytes=len(request.cloud_init.encode())))
        lock = self._name_lock(request.name)
        if not lock.acquire(timeout=max(0.0, deadline.remaining())):
            raise base.wrap(base.Transient, "create", self.name, request.name, "another create of this name is still running")
        try:
            group, fresh = ("", False)
            if self.cfg.manageSecurityGroup:
                group, fresh = self._ensure_group(request, region, deadline)
            if not fresh:
                found = self._find_live(request.name, region, deadline)
                if found is not None:
                    log.debug("instance already exists", extra=self._fields(id=found))
                    return found
            return self._run(request, region, group, deadline)
        finally:
            lock.release()

    def _ensure_group(self, req: CreateRequest, region: str, deadline: Deadline) -> tuple[str, bool]:
        """The group named after the instance, with exactly the wanted rules:
        (its id, whether this call created it)."""
        wanted = build.wanted_rules(req.port, self.cfg.allowedSources)
        created_at = datetime.now(UTC).isoformat(timespec="seconds")
        params = build.group_params(req, self.cfg, created_at)

        def create_group(c: Any) -> str | None:
            out = self._tolerate(lambda: c.create_security_group(**params), GROUP_DUPLICATE)()
            return None if out is None else str(out["GroupId"])

        group = self._call("create", req.name, region, deadline, create_group)
        if group is not None:
            self._authorize(region, req.name, group, wanted, deadline)
            return group, True
        filters = [{"Name": "group-name", "Values": [req.name]}]
        if self.cfg.vpcId:
            filters.append({"Name": "vpc-id", "Values": [self.cfg.vpcId]})

        def describe(c: Any) -> tuple[str, set[build.Rule]]:
            groups = c.describe_security_groups(Filters=filters)["SecurityGroups"]
            ours = [g for g in groups if g["GroupName"] == req.name]
            if len(ours) != 1:
                raise ValueError(f"{len(ours)} security groups named {req.name} after InvalidGroup.Duplicate")
            return str(ours[0]["GroupId"]), build.rules_of(ours[0])

        group, current = self._call("create", req.name, region, deadline, describe)
        add, remove = build.rules_diff(current, wanted)
        if remove:
            self._call("create", req.name, region, deadline, self._ignoring(
                lambda c: c.revoke_security_group_ingress(GroupId=group, IpPermissions=build.permissions(remove)),
                PERMISSION_NOT_FOUND))
        self._authorize(region, req.name, group, add, deadline)
        return group, False

    def _ignoring(self, fn: Callable[[Any], Any], *codes: str) -> Callable[[Any], Any]:
        return lambda c: self._tolerate(lambda: fn(c), *codes)()

    def _authorize(self, region: str, name: str, group: str, rules: set[build.Rule], deadline: Deadline) -> None:
        if rules:
            self._call("create", name, region, deadline, self._ignoring(
                lambda c: c.authorize_security_group_ingress(GroupId=group, IpPermissions=build.permissions(rules)),
                PERMISSION_DUPLICATE))

    def _find_live(self, name: str, region: str, deadline: Deadline) -> str | None:
        """The id of a live instance of ours with this name, if any."""
        filters = [{"Name": "tag:Name", "Values": [name]}, MANAGED_FILTER,
                   {"Name": "instance-state-name", "Values": ["pending", "running", "stopping", "stopped"]}]

        def find(c: Any) -> str | None:
            answer = c.describe_instances(Filters=filters)
            for inst in _instances(answer):
                if build.tags_of(inst).get(build.NAME_TAG) == name and state_name(inst) in LIVE_STATES:
                    return str(self._ref_of(region, inst, set(group_ids(inst))))
            return None

        return self._call("create", name, region, deadline, find)

    def _ref_of(self, region: str, inst: dict[str, Any], ours: set[str]) -> Ref:
        """An instance's id, with the group fleet made for it (named after it) when it has one."""
        name = build.tags_of(inst).get(build.NAME_TAG, "")
        group = next((str(g["GroupId"]) for g in inst.get("SecurityGroups") or ()
                      if g.get("GroupName") == name and str(g["GroupId"]) in ours), "")
        return Ref(region, str(inst["InstanceId"]), group if self.cfg.manageSecurityGroup else "")

    def _run(self, req: CreateRequest, region: str, group: str, deadline: Deadline) -> str:
        salt = ""
        for _ in range(3):
            params = build.run_params(req, self.cfg, group, build.client_token(req.name, group, salt))

            def run(c: Any, params: dict[str, Any] = params) -> tuple[str, str]:
                (inst,) = c.run_instances(**params)["Instances"]
                return str(inst["InstanceId"]), state_name(inst)

            iid, state = self._call("create", req.name, region, deadline, run)
            if state not in ("shutting-down", "terminated"):
                pid = str(Ref(region, iid, group))
                log.debug("instance submitted", extra=self._fields(id=pid, state=state))
                return pid
            # The token already gave an instance that is gone (a replacement
            # under the same name and group): a fresh token for this one.
            salt = iid
        raise base.wrap(base.Transient, "create", self.name, req.name, "RunInstances kept answering with terminated instances")

    # -- get / delete --------------------------------------------------------------------------

    def get(self, provider_id: str, deadline: Deadline) -> Instance:
        ref = self._parse("get", provider_id)
        if not ref.instance:
            return self._get_group(ref, deadline)

        def describe(c: Any) -> Instance:
            found = [i for i in _instances(c.describe_instances(InstanceIds=[ref.instance]))
                     if i.get("InstanceId") == ref.instance]
            if len(found) != 1:
                raise ValueError(f"the answer lists {len(found)} entries for {ref.instance}")
            return to_instance(ref, found[0], self.cfg.internalIP)

        inst = self._call("get", provider_id, ref.region, deadline, describe)
        if inst.state is not base.State.TERMINATED:
            return inst
        if ref.group and self._group_exists(ref, "get", deadline):
            return inst  # gone, but not everything create made: delete (again) removes the group
        raise base.wrap(base.NotFound, "get", self.name, provider_id, f"instance {ref.instance} is terminated")

    def _group_exists(self, ref: Ref, op: str, deadline: Deadline) -> bool:
        def describe(c: Any) -> bool:
            out = self._tolerate(lambda: c.describe_security_groups(GroupIds=[ref.group]), GROUP_NOT_FOUND)()
            if out is None:
                return False
            return any(g["GroupId"] == ref.group for g in out["SecurityGroups"])

        return self._call(op, str(ref), ref.region, deadline, describe)

    def _get_group(self, ref: Ref, deadline: Deadline) -> Instance:
        def describe(c: Any) -> Instance | None:
            out = self._tolerate(lambda: c.describe_security_groups(GroupIds=[ref.group]), GROUP_NOT_FOUND)()
            if out is None:
                return None
            (group,) = [g for g in out["SecurityGroups"] if g["GroupId"] == ref.group]
            return group_instance(ref, group)

        inst = self._call("get", str(ref), ref.region, deadline, describe)
        if inst is None:
            raise base.wrap(base.NotFound, "get", self.name, str(ref), f"security group {ref.group} is gone")
        return inst

    def delete(self, provider_id: str, deadline: Deadline) -> None:
        ref = self._parse("delete", provider_id)
        if ref.instance:
            def terminate(c: Any) -> str:
                out = self._tolerate(lambda: c.terminate_instances(InstanceIds=[ref.instance]), INSTANCE_NOT_FOUND)()
                if out is None:
                    return "gone"
                return str(out["TerminatingInstances"][0]["CurrentState"]["Name"])

            state = self._call("delete", provider_id, ref.region, deadline, terminate)
            log.debug("instance terminating", extra=self._fields(id=provider_id, state=state))
        if not ref.group:
            return

        def delete_group(c: Any) -> str:
            try:
                c.delete_security_group(GroupId=ref.group)
            except Exception as exc:
                code = error_code(exc)
                if code == GROUP_NOT_FOUND:
                    return "gone"
                if code == DEPENDENCY and ref.instance:
                    return "in use"  # the instance is still shutting down: the next delete, or GC, takes it
                raise
            return "deleted"

        outcome = self._call("delete", provider_id, ref.region, deadline, delete_group)
        log.debug("security group " + outcome, extra=self._fields(id=provider_id, group=ref.group))

    # -- list ----------------------------------------------------------------------------------

    def list_by_tag(self, deadline: Deadline) -> list[Instance]:
        out: list[Instance] = []
        for region in self.cfg.all_regions:
            out.extend(self._list_region(region, deadline))
        log.debug("instances listed", extra=self._fields(count=len(out)))
        return out

    def _pages(self, region: str, deadline: Deadline, fn: Callable[[Any, dict[str, Any]], tuple[list[Any], str]]) -> Iterator[Any]:
        token = ""
        while True:
            kwargs: dict[str, Any] = {"MaxResults": PAGE_SIZE}
            if token:
                kwargs["NextToken"] = token
            items, token = self._call("list", "", region, deadline, lambda c, kw=kwargs: fn(c, kw))
            yield from items
            if not token:
                return

    def _list_region(self, region: str, deadline: Deadline) -> list[Instance]:
        filters = [MANAGED_FILTER, {"Name": "instance-state-name", "Values": list(LIVE_STATES)}]

        def instances_page(c: Any, kw: dict[str, Any]) -> tuple[list[Any], str]:
            answer = c.describe_instances(Filters=filters, **kw)
            # the filter already did this; an unmarked or terminated one is never listed, whatever the server said
            items = [i for i in _instances(answer)
                     if build.tags_of(i).get(base.LABEL_MANAGED) == base.LABEL_MANAGED_YES and state_name(i) in LIVE_STATES]
            return items, str(answer.get("NextToken") or "")

        def groups_page(c: Any, kw: dict[str, Any]) -> tuple[list[Any], str]:
            answer = c.describe_security_groups(Filters=[MANAGED_FILTER], **kw)
            items = [g for g in answer["SecurityGroups"] if build.tags_of(g).get(base.LABEL_MANAGED) == base.LABEL_MANAGED_YES]
            return items, str(answer.get("NextToken") or "")

        try:
            raw = list(self._pages(region, deadline, instances_page))
            groups = list(self._pages(region, deadline, groups_page)) if self.cfg.manageSecurityGroup else []
            ours = {str(g["GroupId"]) for g in groups}
            used: set[str] = set()
            out: list[Instance] = []
            for inst in raw:
                used.update(group_ids(inst))
                out.append(to_instance(self._ref_of(region, inst, ours), inst, self.cfg.internalIP))
            for g in groups:
                if str(g["GroupId"]) not in used:
                    out.append(group_instance(Ref(region, "", str(g["GroupId"])), g))
        except base.ProviderError:
            raise
        except Exception as exc:  # an answer we can't vouch for: the whole list fails
            self.log_api_error("list", "", exc)
            raise base.wrap(base.Transient, "list", self.name, "", exc) from exc
        return out

    def close(self) -> None:
        self.ec2.close()


def _instances(answer: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for reservation in answer["Reservations"]:
        yield from reservation["Instances"]


def new(name: str, cfg: AwsConfig) -> AwsProvider:
    """Builds nothing that talks to the network: clients are made on first use."""
    return AwsProvider(name, cfg)
