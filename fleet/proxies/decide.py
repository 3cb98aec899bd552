"""The reconciler's next step, as one pure decision:

    decide(proxy, outcome, env) → Step(status, finalizer, call, requeue, failures)

`outcome` is what the Proxy's last provider call answered (`Outcome`, or None
when nothing new came back: a watch event, a due poll, a restart). The caller
(`fleet.proxies.reconciler`) writes `status` when it differs, adds or removes
the finalizer, sends `call` as a task on the provider's queue, and makes the
Proxy due again after `requeue` seconds. Nothing here reads a clock, Redis or
the API; `env.now` is the time for lastTransitionTime.

The rules are the seed's (docs/providers.md §2–3, the reconciler lines its
"Why"s cite), one row per branch in tests/fleet/proxies/test_decide.py:

| situation                          | step                                                         |
|------------------------------------|--------------------------------------------------------------|
| deleting, finalizer gone           | nothing                                                      |
| deleting, skip-cleanup             | release the finalizer, no backend call                      |
| deleting, no providerID            | release                                                      |
| deleting, provider not configured  | say so, ask again in 10 s (skip-cleanup releases)             |
| deleting                           | Deleting: Delete → poll Get every 10 s → NotFound: release   |
| deleting, Get Permanent            | Delete anyway; release if it succeeds                         |
| no finalizer                       | add it (with the first call)                                  |
| provider not configured            | Failed (ProviderNotConfigured); released once it is           |
| placement impossible               | Failed (InvalidPlacement), before any backend call            |
| Failed for this generation         | latched: nothing until metadata.generation changes            |
| a latch lifted                     | phase, conditions and message rewritten together, then on     |
| cloud-init unreadable              | Pending (CloudInitUnavailable), back off                      |
| no providerID                      | Create → Provisioning                                         |
| spec hash changed                  | Replacing: Delete → poll until NotFound → Create, same name   |
| Get: Running with an IP            | Running, ip/port, Provisioned=True; resync later              |
| Get: Provisioning                  | poll again in 10 s                                            |
| Get: Stopped / Terminated          | Replacing (delete, then create)                               |
| Get: NotFound                      | clear the ID, create again                                    |
| Transient                          | back off 1 s doubling to 5 m (the call's own `step`)          |
| a due retry                        | the same call again; the count of failures in a row kept      |
| any call succeeds, or the spec hash moves | failures in a row back to 0                            |
| worker: provider not configured    | ProviderNotConfigured, retried with back-off (not latched)    |
| QuotaExceeded                      | Provisioned=False (QuotaExceeded), retry in 5 m, not counted  |
| Permanent (not deleting)           | Failed (PermanentError), latched                              |
| Permanent to a Running Proxy's Get | Running kept, Provisioned=False (PermanentError), back off    |
| Permanent while deleting           | retried with back-off, never latched                          |
| a probe verdict, Running           | Healthy True/False (ProbeSucceeded/ProbeFailed); Ready follows |

The steady state costs one list per provider per resync interval, not a Get
per Proxy: `resync_diff(running, listed)` names the Running Proxies the
list does not vouch for (missing, not Running, another UID or address),
made due at once; `list_retry` says when a failed list is asked again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from fleet.proxies.model import (
    DELETING,
    FAILED,
    FINALIZER,
    HEALTHY,
    PENDING,
    PROVISIONED,
    PROVISIONING,
    READY,
    REPLACING,
    RUNNING,
    SKIP_CLEANUP,
    Condition,
    Proxy,
    ProxySpec,
    ProxyStatus,
)
from providers.base import ErrorClass, Instance, State
from providers.retry import BACKOFF_MAX, LATCH_PERMANENT, QUOTA_RETRY, backoff

# Seconds (seed: ProvisioningPoll and DeletionPoll 10s, RequeueNow 1s, QuotaRetry 5m).
POLL = 10.0
NOW = 1.0
RESYNC = 60.0  # a provider's list (or, without lists, a Running Proxy's Get), so a vanished or stopped instance is seen

# Condition reasons (on Provisioned unless said otherwise); docs/architecture.md lists them.
R_PROVISIONING = "Provisioning"
R_RUNNING = "Running"
R_REPLACING = "Replacing"
R_DELETING = "Deleting"
R_NOT_CONFIGURED = "ProviderNotConfigured"
R_INVALID_PLACEMENT = "InvalidPlacement"
R_CLOUD_INIT = "CloudInitUnavailable"
R_QUOTA = "QuotaExceeded"
R_PROVIDER_ERROR = "ProviderError"  # a transient failure; the message says which
R_PERMANENT = LATCH_PERMANENT
R_NOT_PROBED = "NotProbed"  # Healthy: the prober has not judged it yet
R_PROBE_OK = "ProbeSucceeded"  # Healthy=True: the prober's verdict
R_PROBE_FAILED = "ProbeFailed"  # Healthy=False: the prober's verdict (the message says why)
R_NOT_RUNNING = "NotRunning"  # Ready
LATCHES = (R_NOT_CONFIGURED, R_INVALID_PLACEMENT, R_PERMANENT)

CREATE, GET, DELETE = "create", "get", "delete"


@dataclass(frozen=True)
class Outcome:
    """A provider call's answer (`fleet.celery.calls.CallOutcome`, read back by the
    reconciler), tied to the call."""

    op: str
    ok: bool
    result: str | Instance | None = None  # create: the id; get: the instance; delete: None
    error_class: ErrorClass | None = None  # when not ok
    retry_after: float | None = None  # the call's own step, when it says retry
    message: str = ""
    spec_hash: str = ""  # create: the hash of what was created
    release_on_success: bool = False  # a Delete after a Permanent Get while deleting

    @property
    def gone(self) -> bool:
        return not self.ok and self.error_class == ErrorClass.NOT_FOUND


@dataclass(frozen=True)
class Probe:
    """The prober's last verdict on this Proxy's current UID (fleet.prober)."""

    healthy: bool
    message: str = ""
    egress_ip: str = ""


@dataclass(frozen=True)
class Env:
    """What the controller knows beyond the object: judged before deciding."""

    now: float
    configured: tuple[str, ...]  # configured provider names
    placement_problem: str | None = None
    spec_hash: str | None = None  # of placement, resolved cloud-init and port; None: cloud-init unreadable
    cloud_init_problem: str = ""
    failures: int = 0  # failed calls in a row for this Proxy
    poll: float = POLL
    resync: float = RESYNC
    probe: Probe | None = None


@dataclass(frozen=True)
class Call:
    op: str  # create | get | delete
    provider_id: str = ""  # get, delete
    release_on_success: bool = False


@dataclass(frozen=True)
class Step:
    status: ProxyStatus | None = None  # None: leave the status as it is
    finalizer: str | None = None  # "add" | "remove"
    call: Call | None = None
    requeue: float | None = None  # seconds; None: only an event or an outcome wakes it
    failures: int | None = None  # failed calls in a row from now on; None: unchanged (a due retry, a poll)


def spec_hash(spec: ProxySpec, cloud_init: str) -> str:
    """Placement, the resolved cloud-init and the port (seed spechash.go):
    a change in any of them replaces the instance."""
    p = spec.placement
    doc = json.dumps(
        {"placement": [p.region, p.zone, p.machine_type, p.image], "cloudInit": cloud_init, "port": spec.port},
        sort_keys=True, separators=(",", ":"),
    )
    return hashlib.sha256(doc.encode()).hexdigest()[:16]


def rfc3339(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def set_condition(conds: tuple[Condition, ...], c: Condition, now: float) -> tuple[Condition, ...]:
    """Replace or add `c`, keeping lastTransitionTime unless the status flips."""
    old = next((x for x in conds if x.type == c.type), None)
    when = old.last_transition_time if old is not None and old.status == c.status and old.last_transition_time else rfc3339(now)
    new = dataclasses.replace(c, last_transition_time=when)
    return tuple(x for x in conds if x.type != c.type) + (new,) if old is None else tuple(
        new if x.type == c.type else x for x in conds
    )


def with_phase(p: Proxy, env: Env, phase: str, reason: str, message: str = "", **fields: Any) -> ProxyStatus:
    """The status with this phase: Provisioned/Ready derived from it, Healthy
    left to the prober (Unknown until it judges), every condition at this
    generation. Fields not given keep their value."""
    st = dataclasses.replace(p.status, phase=phase, message=message, observed_generation=p.generation, **fields)
    g = p.generation
    running = phase == RUNNING
    conds = set_condition(st.conditions, Condition(PROVISIONED, "True" if running else "False", reason, message, g), env.now)
    probe = env.probe if running else None
    if probe is not None:
        verdict = Condition(HEALTHY, "True" if probe.healthy else "False", R_PROBE_OK if probe.healthy else R_PROBE_FAILED,
                            probe.message, g)
        conds = set_condition(conds, verdict, env.now)
        st = dataclasses.replace(st, egress_ip=probe.egress_ip)
    elif (h := st.condition(HEALTHY)) is None:
        conds = set_condition(conds, Condition(HEALTHY, "Unknown", R_NOT_PROBED, "", g), env.now)
    elif h.observed_generation != g:  # the prober's last word, kept, but observed at this generation too
        conds = set_condition(conds, dataclasses.replace(h, observed_generation=g), env.now)
    healthy_status = next(c.status for c in conds if c.type == HEALTHY)
    ready = running and healthy_status != "False"
    ready_reason = R_RUNNING if ready else (reason if not running else "Unhealthy")
    conds = set_condition(conds, Condition(READY, "True" if ready else "False", ready_reason, "" if ready else message, g), env.now)
    return dataclasses.replace(st, conditions=conds)


def with_provisioned(st: ProxyStatus, reason: str, message: str, p: Proxy, env: Env) -> ProxyStatus:
    """`st` with Provisioned=False for `reason`, all else kept (a Running Proxy whose provider cannot vouch for it)."""
    cond = Condition(PROVISIONED, "False", reason, message, p.generation)
    return dataclasses.replace(st, conditions=set_condition(st.conditions, cond, env.now))


def changed(p: Proxy, st: ProxyStatus | None) -> ProxyStatus | None:
    return None if st is None or st == p.status else st


def decide(p: Proxy, out: Outcome | None, env: Env) -> Step:
    step = _deleting(p, out, env) if p.deleting else _managing(p, out, env)
    if out is not None and out.ok and step.failures is None:
        step = dataclasses.replace(step, failures=0)  # a success ends the run of failures
    st = step.status if step.status is not None else p.status
    if not p.deleting and st.phase == RUNNING and env.probe is not None:
        # a new verdict on a Running Proxy: Healthy and Ready follow it, whatever else happens
        prov = st.condition(PROVISIONED)
        st = with_phase(dataclasses.replace(p, status=st), env, RUNNING, R_RUNNING, st.message)
        if prov is not None and prov.status == "False":  # the provider still cannot vouch for it: say so
            st = with_provisioned(st, prov.reason, prov.message, p, env)
        step = dataclasses.replace(step, status=st)
    return dataclasses.replace(step, status=changed(p, step.status))


# --- deletion ---------------------------------------------------------------------


def _deleting(p: Proxy, out: Outcome | None, env: Env) -> Step:
    if FINALIZER not in p.finalizers:
        return Step()
    if p.skip_cleanup:
        return Step(finalizer="remove")
    pid = p.status.provider_id
    if out is not None and out.op == CREATE and out.ok and isinstance(out.result, str) and not pid:
        pid = out.result  # a create answered after deletion began: delete what it made
    if not pid:
        return Step(finalizer="remove")
    if p.spec.provider not in env.configured:  # no worker holds its credentials: say so, ask again later
        msg = (f"provider {p.spec.provider!r} is not configured, so {pid} cannot be deleted: configure it again, "
               f"or set the annotation {SKIP_CLEANUP}=true to release the Proxy without touching the backend")
        return Step(status=with_phase(p, env, DELETING, R_NOT_CONFIGURED, msg, provider_id=pid), requeue=env.poll)

    def deleting(call: Call | None, requeue: float | None, message: str = "", failures: int | None = None) -> Step:
        st = with_phase(p, env, DELETING, R_DELETING, message, provider_id=pid)
        return Step(status=st, call=call, requeue=requeue, failures=failures)

    if out is None:  # first time here (phase not Deleting yet), a due poll, or a due retry of a failed call
        poll = p.status.phase == DELETING and not env.failures
        return deleting(Call(GET if poll else DELETE, pid), None)
    if out.ok:
        if out.op == DELETE:
            if out.release_on_success:
                return Step(finalizer="remove")
            return deleting(None, env.poll)  # poll Get until NotFound
        if out.op == GET:
            return deleting(Call(DELETE, pid), None)  # still there: delete again (idempotent)
        return deleting(Call(DELETE, pid), None)
    if out.gone and out.op == GET:
        return Step(finalizer="remove")
    if out.op == GET and out.error_class == ErrorClass.PERMANENT:
        # the id can never resolve (a host left the config, a malformed id): try Delete anyway
        return deleting(Call(DELETE, pid, release_on_success=True), None, out.message)
    failures = env.failures if out.error_class == ErrorClass.QUOTA_EXCEEDED else env.failures + 1
    return deleting(None, retry_after(out, failures), out.message, failures)


def retry_after(out: Outcome, failures: int) -> float:
    if out.error_class == ErrorClass.QUOTA_EXCEEDED:
        return QUOTA_RETRY
    return out.retry_after if out.retry_after is not None else min(BACKOFF_MAX, backoff(max(1, failures)))


# --- normal reconciling -----------------------------------------------------------


def _managing(p: Proxy, out: Outcome | None, env: Env) -> Step:
    add = None if FINALIZER in p.finalizers else "add"

    def failed(reason: str, message: str) -> Step:
        return Step(status=with_phase(p, env, FAILED, reason, message), finalizer=add)

    latch = _latched(p, env)
    if p.spec.provider not in env.configured:
        known = ", ".join(env.configured) or "none"
        return failed(R_NOT_CONFIGURED, f"provider {p.spec.provider!r} is not configured (configured: {known})")
    if env.placement_problem:
        return failed(R_INVALID_PLACEMENT, env.placement_problem)
    if latch:
        return Step(finalizer=add)
    if p.status.phase == FAILED:  # a latch lifted: no Failed conditions or message may outlive it
        fresh = PROVISIONING if p.status.provider_id else PENDING
        p = _with(p, with_phase(p, env, fresh, R_PROVISIONING, ""))

    st, absorbed = p.status, out is not None
    if out is not None:
        st, follow = _absorb(p, out, env)
        if follow is not None:
            return dataclasses.replace(follow, finalizer=add)
    step = _next(_with(p, st), env, absorbed)
    return dataclasses.replace(step, finalizer=add)


def _with(p: Proxy, st: ProxyStatus) -> Proxy:
    return p if st is p.status else dataclasses.replace(p, status=st)


def _latched(p: Proxy, env: Env) -> bool:
    """Failed stays until the generation changes; ProviderNotConfigured also
    ends when the provider appears (a seed gap), InvalidPlacement when the
    placement is judged possible again."""
    st = p.status
    if st.phase != FAILED or st.observed_generation != p.generation:
        return False
    cond = st.condition(PROVISIONED)
    reason = cond.reason if cond else ""
    if reason == R_NOT_CONFIGURED:
        return p.spec.provider not in env.configured
    if reason == R_INVALID_PLACEMENT:
        return env.placement_problem is not None
    return True


def _absorb(p: Proxy, out: Outcome, env: Env) -> tuple[ProxyStatus, Step | None]:
    """Fold a call's answer into the status; a Step when the answer alone
    decides what happens next (an error), else None and `_next` goes on."""
    st = p.status
    if out.ok:
        if out.op == CREATE and isinstance(out.result, str) and out.result:
            if st.provider_id and st.provider_id != out.result:
                return st, None  # a stale answer for an instance this Proxy no longer tracks
            return with_phase(p, env, PROVISIONING, R_PROVISIONING, "", provider_id=out.result,
                              spec_hash=out.spec_hash or st.spec_hash), None
        if out.op == GET and isinstance(out.result, Instance):
            return _found(p, out.result, env)
        if out.op == DELETE:
            return st, Step(status=with_phase(p, env, st.phase or REPLACING, R_REPLACING, st.message), requeue=env.poll)
        return st, None
    if out.gone:
        if out.op == GET:
            # the instance is gone: clear the ID, keep Replacing (the new one gets the same name)
            phase = REPLACING if st.phase == REPLACING else PENDING
            msg = "" if st.phase == REPLACING else "the instance is gone; creating it again"
            return dataclasses.replace(st, provider_id="", ip="", phase=phase, message=msg), None
        failures = env.failures + 1  # NotFound from create/delete: an error like any (seed), backed off
        return st, _failing(p, out, env, failures)
    if out.error_class == ErrorClass.NOT_CONFIGURED:  # the worker's config lacks it (a rollout in progress): not the spec's fault
        return st, _failing(p, out, env, env.failures + 1, R_NOT_CONFIGURED)
    if out.error_class in (ErrorClass.PERMANENT, ErrorClass.INVALID):
        if out.op == GET and st.phase == RUNNING:
            # a resync answered 401/403 (credentials or RBAC rolling out): the instance is not in doubt, the answer is
            status = with_provisioned(with_phase(p, env, RUNNING, R_RUNNING, out.message), R_PERMANENT, out.message, p, env)
            failures = env.failures + 1
            return st, Step(status=status, requeue=min(BACKOFF_MAX, backoff(failures)), failures=failures)
        return st, Step(status=with_phase(p, env, FAILED, R_PERMANENT, out.message))
    failures = env.failures if out.error_class == ErrorClass.QUOTA_EXCEEDED else env.failures + 1
    return st, _failing(p, out, env, failures)


def _failing(p: Proxy, out: Outcome, env: Env, failures: int, reason: str = "") -> Step:
    """A retryable failure: a Running Proxy keeps its conditions (the instance
    may well be serving) and only shows the message; others show why."""
    reason = reason or (R_QUOTA if out.error_class == ErrorClass.QUOTA_EXCEEDED else R_PROVIDER_ERROR)
    st = p.status
    if st.phase == RUNNING:
        status = dataclasses.replace(st, message=out.message)
    else:
        status = with_phase(p, env, st.phase or PENDING, reason, out.message)
    return Step(status=status, requeue=retry_after(out, failures), failures=failures)


def _found(p: Proxy, inst: Instance, env: Env) -> tuple[ProxyStatus, Step | None]:
    st = p.status
    if st.phase == REPLACING:
        # still there while replacing: delete again (idempotent), poll until NotFound
        return st, Step(status=with_phase(p, env, REPLACING, R_REPLACING, st.message), call=Call(DELETE, st.provider_id))
    if inst.state == State.RUNNING and inst.ip:  # the provider's State, not the Proxy phase of the same spelling
        status = with_phase(p, env, RUNNING, R_RUNNING, "", ip=inst.ip, port=p.spec.port)
        return status, None
    if inst.state in (State.STOPPED, State.TERMINATED):
        msg = f"the instance is {inst.state.value}; replacing it"
        return st, Step(status=with_phase(p, env, REPLACING, R_REPLACING, msg), call=Call(DELETE, st.provider_id))
    return with_phase(p, env, PROVISIONING, R_PROVISIONING, "", ip=""), None


def _next(p: Proxy, env: Env, absorbed: bool) -> Step:
    """No error pending: what to call next. After an answer was absorbed, a
    Proxy with an instance waits (poll, or resync once Running); on a due
    poll or a change of the object it asks the provider (Get)."""
    st = p.status
    if not st.provider_id:
        if env.spec_hash is None:  # nothing to create from yet (a Secret not there yet)
            failures = env.failures + 1
            msg = f"cloud-init: {env.cloud_init_problem}"
            status = with_phase(p, env, st.phase if st.phase == REPLACING else PENDING, R_CLOUD_INIT, msg)
            return Step(status=status, requeue=backoff(failures), failures=failures)
        phase = st.phase if st.phase in (REPLACING, PENDING, "") else PENDING
        return Step(status=dataclasses.replace(st, phase=phase), call=Call(CREATE))
    if env.spec_hash and st.spec_hash and st.spec_hash != env.spec_hash and st.phase != REPLACING:
        msg = "the spec changed; replacing the instance"
        return Step(status=with_phase(p, env, REPLACING, R_REPLACING, msg), call=Call(DELETE, st.provider_id))
    if not absorbed and st.phase == REPLACING and env.failures:
        return Step(status=st, call=Call(DELETE, st.provider_id))  # a due retry of the failed Delete, not a Get between
    if not absorbed or st.phase == REPLACING:
        return Step(status=st, call=Call(GET, st.provider_id))
    if st.phase == RUNNING:
        return Step(status=st, requeue=env.resync)
    return Step(status=with_phase(p, env, PROVISIONING, R_PROVISIONING, ""), requeue=env.poll)


# --- the steady state: one list per provider ----------------------------------------


@dataclass(frozen=True)
class RunningProxy:
    """A Running Proxy as its endpoint record says (`fleet.store.proxies.endpoints`): what a list must vouch for."""

    key: str
    uid: str
    provider_id: str
    ip: str
    since: float = 0.0  # Running since (Unix time; 0 unknown)


def resync_diff(running: Iterable[RunningProxy], listed: Iterable[Instance], asked_at: float | None = None) -> list[str]:
    """The Running Proxies a provider's list does not vouch for, due at once
    (their own Get then says what happened): the instance is missing from the
    list, not Running, or carries another UID or address. A Proxy the list
    agrees with costs nothing. One that turned Running after the list was
    asked (`asked_at`) is left out: the list cannot have seen its instance."""
    by_id = {i.id: i for i in listed}
    due = []
    for p in running:
        if asked_at is not None and p.since > asked_at:
            continue
        inst = by_id.get(p.provider_id)
        if inst is None or inst.state != State.RUNNING or inst.uid != p.uid or inst.ip != p.ip:
            due.append(p.key)
    return sorted(due)


def spread(keys: Iterable[str], start: float, span: float) -> dict[str, float]:
    """Due times for `keys` spread evenly over [start, start + span), in key
    order: a provider whose list cannot be answered gets its Gets paced
    across the interval, never all at once."""
    ordered = sorted(keys)
    step = span / len(ordered) if ordered else 0.0
    return {k: start + i * step for i, k in enumerate(ordered)}


def list_retry(failures: int, interval: float) -> float:
    """When a provider's failed list is asked again: the call back-off
    (1 s doubling), never later than the next interval's list. Its Running
    Proxies are not made due by the failure (no Get storm): the instances
    are not in doubt, the answer is."""
    return min(interval, backoff(max(1, failures)))
