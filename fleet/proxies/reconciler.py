"""Applying `fleet.proxies.decide` in one place: one Proxy at a time, on the
controller, with every fact that must outlive the process in Redis
(`fleet.store.proxies`).

    reconcile(key):  claim it (one replica) → its object → the call in flight?
                     wait : its answer → decide → add the finalizer → write the
                     status → send the call → remove the finalizer → due again

A provider call is a task on `provider.<name>` (`fleet.create_instance`,
`fleet.get_instance`, `fleet.delete_instance`) whose `link` is
`fleet.record_proxy_call` on `fleet.controller`: `record` keeps the answer
of the call in flight (a late one for a lapsed call is dropped) and
reconciles at once. A call whose answer never comes (a worker killed, a
message lost) lapses when its record's TTL passes, and the Proxy is due then,
so the step is taken again: every provider operation is idempotent, and the
create's name comes from the UID.

The steady state costs one list per provider per resync interval, not a Get
per Running Proxy (issue 24): with `send_list`, a Running Proxy is parked
(due at +inf) once its instance is seen Running, and `resync_lists` sends
`fleet.list_instances` to each configured provider once per
`Timing.resync` across all replicas (a gate in Redis, `PX_LIST`), linked to
`fleet.record_proxy_list`. `record_list` diffs the answer against that
provider's Running Proxies (their endpoint records: one HGETALL), and only
the ones the list does not vouch for (`decide.resync_diff`) are due, at once;
their own Get then decides. A failed list is asked again after the call
back-off (`decide.list_retry`, at most the interval); no Proxy is made due
by it, so a provider's outage is no Get storm. A list whose answer is too
large for one message (`ListTooLarge`, fleet.celery.compression) makes each
of the provider's Running Proxies due for its own Get, spread over the
interval (`decide.spread`). Without `send_list` (tests of the older path)
a Running Proxy gets a Get each resync as before.

Cloud-init never travels in a message: the create carries a random token
under which the text is staged in Redis, read once by the worker (GETDEL)
and gone at the latest when the message expires (the call timeout). A
create that finds its token gone answers Transient, and the next create
stages the text again under a new token.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from fleet.celery import routing
from fleet.celery.calls import LATCH_TOO_LARGE, CallOutcome, OutcomeError, instance_from_dict, request_dict
from fleet.config import ProvidersConfig
from fleet.proxies import decide as rules
from fleet.proxies.decide import Call, Env, Outcome, Probe, RunningProxy, Step
from fleet.proxies.errors import CloudInitUnavailable as CloudInitUnavailable  # defined apart: see errors.py
from fleet.proxies.errors import Conflict as Conflict
from fleet.proxies.model import FINALIZER, RUNNING, Proxy, ProxyStatus, member_kind
from fleet.store import Proxies as ProxyStore
from fleet.store.proxies import StepRead, Tail, failures_of
from providers import registry
from providers.base import CreateRequest, ErrorClass, Instance, name_from_uid
from providers.retry import Latch, Retry, backoff

log = logging.getLogger("fleet.proxies")

CLAIM_TTL = 30.0  # seconds one replica may hold a Proxy (a reconcile takes milliseconds)
MAX_GRACE = 30.0  # seconds past a call's deadline before it counts as lost (at most; see Timing.grace)
LIST_LOOK = 1.0  # seconds between one replica's looks at a provider's list gate (one Redis call each)
FULL_RETRY = 5.0  # seconds before the first in line for a provider's call slot tries again (if no slot frees first)
MAX_OUTCOME = 64 * 1024  # bytes of one call's answer kept in Redis
OP_TASKS = {rules.CREATE: routing.CREATE_INSTANCE, rules.GET: routing.GET_INSTANCE, rules.DELETE: routing.DELETE_INSTANCE}


class Objects(Protocol):
    """Where Proxy objects live: the Kubernetes API (`cluster`) or manifests
    plus Redis (`standalone`). Reads are local; writes may raise Conflict."""

    def ready(self) -> bool:
        """Whether `get` can be trusted (a watch cache has listed once): before, nothing is reconciled."""
        ...

    # True when the objects are entries of PX_OBJECTS (standalone): the reconciler reads one with the rest of
    # its step (`fleet.store.proxies.Proxies.begin_step`) and hands it to `decode`; else it calls `get`.
    in_store: bool

    def get(self, key: str) -> Proxy | None: ...

    def decode(self, key: str, raw: bytes | str | None) -> Proxy | None:
        """The object from its stored form (`in_store` only), None when absent or unreadable."""
        ...

    def keys(self) -> list[str]: ...

    def write_status(self, p: Proxy, status: ProxyStatus) -> Proxy: ...

    def set_finalizers(self, p: Proxy, finalizers: tuple[str, ...]) -> Proxy | None: ...

    def cloud_init(self, p: Proxy) -> str: ...

    def run(self, stop: threading.Event, on_change: Callable[[Iterable[str]], None]) -> None:
        """Follow the source until `stop`, handing keys that changed (or vanished) to `on_change`."""
        ...


# send(task name, kwargs, link kwargs): publish a provider call whose answer goes to record_proxy_call
Send = Callable[[str, dict[str, Any], dict[str, Any]], None]
# send_list(kwargs, link kwargs): publish fleet.list_instances whose answer goes to record_proxy_list
SendList = Callable[[dict[str, Any], dict[str, Any]], None]


@dataclass(frozen=True)
class Timing:
    poll: float = rules.POLL
    resync: float = rules.RESYNC
    call_timeout: float = 60.0
    max_calls: int = 3  # per provider

    @property
    def grace(self) -> float:
        """How long past its deadline a call's answer may still be on its way
        (queued behind others on fleet.controller): 30 s, or the call timeout if shorter."""
        return min(MAX_GRACE, self.call_timeout)


class Reconciler:
    def __init__(self, store: ProxyStore, objects: Objects, config: ProvidersConfig | Callable[[], ProvidersConfig],
                 send: Send, timing: Timing = Timing(), clock: Callable[[], float] = time.time,
                 send_list: SendList | None = None) -> None:
        self.config = config  # a ProvidersConfig, or a callable answering the one in use (fleet.runtime.providers_config)
        self.store, self.objects, self.send, self.send_list = store, objects, send, send_list
        self._next_list: dict[str, float] = {}  # provider → when this replica next tries its gate (clock time)
        self.timing, self.clock = timing, clock
        self.owner = f"{os.uname().nodename}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.wake = threading.Event()

    @property
    def config(self) -> ProvidersConfig:
        """The providers config in use now (a reload changes it when given as a callable)."""
        return self._config()

    @config.setter
    def config(self, config: ProvidersConfig | Callable[[], ProvidersConfig]) -> None:
        self._config: Callable[[], ProvidersConfig] = config if callable(config) else (lambda: config)

    # -- one Proxy -------------------------------------------------------------------------

    def reconcile(self, key: str) -> str:
        """Take this Proxy's next step; what happened, for logs and tests. A step
        costs a round trip to Redis to begin it (the claim and every read,
        `begin_step`), one per write that must be answered before the next (the
        status's compare-and-set, the call's slot) and one to end it (the rest,
        and the claim's release: `end_step`)."""
        if not self.objects.ready():
            return "not-ready"  # its due entry stays; the loop waits for the first list
        read = self.store.begin_step(key, self.owner, CLAIM_TTL, read_object=self.objects.in_store)
        if read is None:
            return "claimed"  # another replica has it; the due entry stays for whoever is next
        return self._step(key, read)

    def _step(self, key: str, read: StepRead) -> str:
        """A claimed step (`read`: what `begin_step` read); its writes and the release at the end."""
        tail = Tail()
        try:
            return self._reconcile(key, read, tail)
        except Conflict:
            tail.schedule(self.clock() + rules.NOW)
            return "conflict"
        except Exception:
            tail.schedule(self.clock() + rules.NOW)
            raise
        finally:
            self.store.end_step(key, self.owner, tail)

    def _reconcile(self, key: str, read: StepRead, tail: Tail) -> str:
        p = self.objects.decode(key, read.object) if self.objects.in_store else self.objects.get(key)
        now = self.clock()
        if p is None:
            tail.forget()
            return "gone"
        call = json_object(read.call)
        if call is not None:
            # its answer wakes the Proxy; an answer that never came is given up once the call lapses
            deadline = call.get("deadline")
            lapses = float(deadline) + self.timing.grace if isinstance(deadline, (int, float)) else now
            if now < lapses:
                tail.schedule(lapses)
                return "waiting"
            self.store.cancel_call(key, str(call.get("provider") or p.spec.provider))
        out = self._outcome(p, read.outcome)
        env, cloud_init = self._env(p, now, read)
        step = rules.decide(p, out, env)
        result = self._apply(p, step, env, cloud_init, read, tail)
        tail.applied(read.outcome, step.failures, env.spec_hash or "")
        return result

    def _env(self, p: Proxy, now: float, read: StepRead) -> tuple[Env, str]:
        config = self.config
        configured = tuple(config.names())
        problem = None
        if p.spec.provider in configured:
            pc = config.get(p.spec.provider)
            problem = registry.placement_problem(pc.type, pc.block, p.spec.placement)
        text, digest, why = "", None, ""
        try:
            text = self.objects.cloud_init(p)
            digest = rules.spec_hash(p.spec, text)
        except CloudInitUnavailable as exc:
            why = str(exc)
        env = Env(now=now, configured=configured, placement_problem=problem, spec_hash=digest, cloud_init_problem=why,
                  failures=failures_of(read.failures, digest or ""), poll=self.timing.poll,
                  resync=math.inf if self.send_list is not None else self.timing.resync,  # lists vouch for it
                  probe=probe_of(read.verdict, p.uid))
        return env, text

    def _outcome(self, p: Proxy, raw: bytes | str | None) -> Outcome | None:
        doc = json_object(raw)
        if doc is None:
            return None
        call, out = doc.get("call"), doc.get("outcome")
        if not isinstance(call, Mapping) or not isinstance(out, Mapping) or call.get("uid") != p.uid:
            return None  # not ours (a Proxy recreated under the same name) or unreadable: decide afresh
        return outcome_of(out, spec_hash=str(call.get("specHash", "")), release_on_success=call.get("release") is True)

    def _apply(self, p: Proxy, step: Step, env: Env, cloud_init: str, read: StepRead, tail: Tail) -> str:
        now = self.clock()
        if step.finalizer == "add":
            got = self.objects.set_finalizers(p, p.finalizers + (FINALIZER,))
            if got is None:
                return "gone"
            p = got
        status, st = step.status, step.status if step.status is not None else p.status
        endpoint = self._endpoint(p, st)
        if endpoint is not None and st.member != (kind := member_kind(endpoint)):
            status = dataclasses.replace(st, member=kind)  # in the step's write, or a write of its own
        if status is not None:
            p = self.objects.write_status(p, status)
        if p.status.phase:
            self._publish_state(p, now, read, tail, endpoint)
        result = "idle"
        if step.call is not None:
            result = self._send(p, step.call, env, cloud_init, tail)
            if result.startswith("full:"):  # in line for a slot: a freed slot makes the first due; the fallback
                tail.schedule(now + self._full_retry(int(result[5:])))
                result = "full"
        if step.finalizer == "remove":
            self.objects.set_finalizers(p, tuple(f for f in p.finalizers if f != FINALIZER))
            tail.forget()
            return "released"
        if step.requeue is not None:
            tail.schedule(now + step.requeue)
        return result

    def _full_retry(self, place: int) -> float:
        """When a Proxy in line for a call slot looks again if no freed slot woke it first (a slot that lapses
        wakes nobody): FULL_RETRY for the first `max_calls` in line, later by their place, and never later than
        a slot can be held (the call timeout and grace), with jitter. Every freed slot wakes the first in line,
        so the line moves without these; they only cover lost wakes, and 10,000 Proxies in line must not
        all look again every few seconds (issue 24)."""
        base = FULL_RETRY * (1 + place // max(1, self.timing.max_calls))
        return min(base, self.timing.call_timeout + self.timing.grace) + random.uniform(0, FULL_RETRY)

    def _publish_state(self, p: Proxy, now: float, read: StepRead, tail: Tail, endpoint: dict[str, Any] | None) -> None:
        """What others read: the phase since when (the gauges) and, while
        Running, the endpoint the prober probes (`_endpoint`)."""
        old = phase_since(read.phase)
        since = old[1] if old is not None and old[0] == p.status.phase else now
        tail.set_state(f"{p.status.phase}|{since:.3f}",
                       json.dumps(endpoint, separators=(",", ":")) if endpoint is not None else None)

    def _endpoint(self, p: Proxy, st: ProxyStatus) -> dict[str, Any] | None:
        """The endpoint of `p` with status `st` as the gateway, the prober and the lease API read it, None unless
        Running with an address; status.member is read from it (`member_kind`)."""
        if st.phase != RUNNING or not st.ip:
            return None
        pl = p.spec.placement
        doc: dict[str, Any] = {"uid": p.uid, "ip": st.ip, "port": st.port or p.spec.port, "provider": p.spec.provider,
                               "region": pl.region, "zone": pl.zone, "instance": st.provider_id, "pool": p.pool}
        doc.update(self._dial_facts(p.spec.provider, st.provider_id) or {})
        return doc

    def _dial_facts(self, provider: str, provider_id: str) -> dict[str, Any] | None:
        """How a member of a provider whose proxies fleet did not make is dialed (its upstream's host, port, kind and
        credentials reference: the provider type's `dial` hook); None for the others (status.ip, the Proxy's port)."""
        if provider not in self.config.names() or not provider_id:
            return None
        pc = self.config.get(provider)
        return registry.dial_facts(pc.type, pc.name, pc.block, provider_id)

    def _send(self, p: Proxy, call: Call, env: Env, cloud_init: str, tail: Tail) -> str:
        provider, timeout, grace = p.spec.provider, self.timing.call_timeout, self.timing.grace
        now = self.clock()
        doc = {"id": uuid.uuid4().hex, "op": call.op, "provider": provider, "uid": p.uid, "specHash": env.spec_hash or "",
               "release": call.release_on_success, "deadline": now + timeout}
        token = uuid.uuid4().hex if call.op == rules.CREATE else ""
        # a create's text is staged with the call for its timeout: the message expires then too, no reader after
        state = self.store.begin_call(p.key, provider, json.dumps(doc), timeout + grace, self.timing.max_calls, now,
                                      cloud_init=(token, cloud_init, timeout) if token else None)
        if state == "busy":
            tail.schedule(now + timeout + grace)
        if state != "ok":
            return state
        kwargs: dict[str, Any] = {"provider": provider, "timeout": timeout, "attempt": env.failures + 1}
        if call.op == rules.CREATE:  # its text is staged under `token`, never in the request
            kwargs.update(request_dict(create_request(p), cloud_init_ref=token))
        else:
            kwargs["provider_id"] = call.provider_id
        try:
            self.send(OP_TASKS[call.op], kwargs, {"key": p.key, "call_id": doc["id"], "provider": provider})
        except Exception:
            self.store.cancel_call(p.key, provider)
            raise
        tail.schedule(now + timeout + grace)  # if its answer never comes
        log.debug("provider call sent", extra={"fields": {"proxy": p.key, "op": call.op, "provider": provider}})
        return "sent"

    # -- answers --------------------------------------------------------------------------------

    def record(self, key: str, call_id: str, provider: str, outcome: Mapping[str, Any]) -> str:
        """Keep the answer of the call in flight and reconcile at once (or
        leave it due for the replica holding the Proxy)."""
        body = json.dumps(outcome, separators=(",", ":"))
        if len(body) > MAX_OUTCOME:
            op, attempt = outcome.get("op"), outcome.get("attempt")
            attempt = attempt if isinstance(attempt, int) and not isinstance(attempt, bool) and attempt > 0 else 1
            body = json.dumps(CallOutcome(  # a Transient, backed off as the call's own would be
                False, provider, op if isinstance(op, str) else "", attempt, error_class=ErrorClass.TRANSIENT,
                step=Retry(backoff(attempt)), message=f"answer too large ({len(body)} bytes)").to_message())
        ready = self.objects.ready()
        kept, read = self.store.finish_call(key, call_id, provider, body, self.clock(),
                                            step=(self.owner, CLAIM_TTL, self.objects.in_store) if ready else None)
        if not kept:
            return "stale"
        if not ready:
            return "not-ready"  # due now: the loop takes it once the objects are listed
        if read is None:
            return "claimed"  # the replica holding it takes the answer next (it is due now)
        return self._step(key, read)  # begun in the same round trip that kept the answer

    # -- the steady state: one list per provider ---------------------------------------------

    def resync_lists(self) -> int:
        """Send each configured provider's list once per resync interval (one
        replica sends it: the gate in Redis); how many were sent."""
        if self.send_list is None:
            return 0
        sent, now, interval = 0, self.clock(), self.timing.resync
        for provider in self.config.names():
            if now < self._next_list.get(provider, 0.0):
                continue
            list_id = uuid.uuid4().hex
            wait = self.store.begin_list(provider, list_id, now, interval)
            # the gate is looked at again at most LIST_LOOK s on: a failed list's earlier retry may be
            # set by whichever replica took its answer
            if wait is not None:
                self._next_list[provider] = now + min(LIST_LOOK, max(wait, 0.05))
                continue
            self._next_list[provider] = now + min(LIST_LOOK, interval)
            try:
                self.send_list({"provider": provider, "timeout": self.timing.call_timeout},
                               {"provider": provider, "list_id": list_id})
            except Exception as exc:  # the broker: as a failed list, asked again after the back-off
                self._list_failed(provider, list_id, f"could not send: {type(exc).__name__}: {exc}")
                continue
            sent += 1
        return sent

    def record_list(self, provider: str, list_id: str, outcome: Mapping[str, Any]) -> str:
        """A provider's list answer: the Running Proxies it does not vouch for are due now."""
        asked_at = self.store.take_list(provider, list_id)
        if asked_at is None:
            return "stale"  # a late answer of an older list, or a redelivery
        try:
            out = CallOutcome.from_message(outcome)
        except OutcomeError as exc:
            return self._list_failed(provider, list_id, f"an unreadable answer: {exc}")
        if not out.ok and out.step == Latch(LATCH_TOO_LARGE):
            return self._list_too_large(provider, out.message)
        if not out.ok or out.op != "list" or not isinstance(out.result, list):
            return self._list_failed(provider, list_id, out.message or "not a list")
        listed: list[Instance] = []
        for raw in out.result:
            try:
                listed.append(instance_from_dict(raw))
            except OutcomeError:  # left out: the Proxy on it, if any, is due and its own Get says
                continue
        due = rules.resync_diff(self._running(provider), listed, asked_at)
        self.store.list_succeeded(provider)
        if due:
            self.store.schedule_now(due, self.clock())
            self.wake.set()
            log.info("resync list: Proxies not vouched for are due", extra={"fields": {"provider": provider, "due": len(due)}})
        return f"listed: {len(due)} due"

    def _list_too_large(self, provider: str, why: str) -> str:
        """The provider answered, but more instances than one answer may carry:
        each of its Running Proxies gets its own Get, spread over the interval
        (the steady state before lists), and the next list comes at the interval."""
        self.store.list_succeeded(provider)  # not an outage to back off from
        keys = [p.key for p in self._running(provider)]
        self.store.schedule_at(rules.spread(keys, self.clock(), self.timing.resync))
        self.wake.set()
        log.error("resync list too large for one answer; its Running Proxies get a Get each per interval instead",
                  extra={"fields": {"provider": provider, "proxies": len(keys), "error": why[:300]}})
        return f"too large: {len(keys)} due one by one"

    def _list_failed(self, provider: str, list_id: str, why: str) -> str:
        failures = self.store.list_failed(provider)
        after = rules.list_retry(failures, self.timing.resync)
        at = self.clock() + after
        self.store.retry_list(provider, list_id, at)
        self._next_list[provider] = min(self._next_list.get(provider, math.inf), at)
        log.warning("resync list failed; its Proxies keep their state", extra={"fields": {
            "provider": provider, "failures": failures, "retry": after, "error": why[:300]}})
        return "failed"

    def _running(self, provider: str) -> list[RunningProxy]:
        """The provider's Running Proxies, from their endpoint records (and since when, from the phases)."""
        phases = self.store.phases()
        out = []
        for key, raw in self.store.endpoints().items():
            doc = json_object(raw)
            if doc is None or doc.get("provider") != provider:
                continue
            since = phase_since(phases.get(key))
            out.append(RunningProxy(key, str(doc.get("uid") or ""), str(doc.get("instance") or ""), str(doc.get("ip") or ""),
                                    since[1] if since is not None and since[0] == RUNNING else 0.0))
        return out

    # -- the loop -----------------------------------------------------------------------------------

    def run_once(self, limit: int = 200) -> int:
        """Reconcile every Proxy due now; how many were due."""
        due = self.store.due(self.clock(), limit)
        for key in due:
            try:
                self.reconcile(key)
            except Exception as exc:  # one Proxy's failure must not stop the others
                log.warning("reconcile failed", extra={"fields": {"proxy": key, "error": f"{type(exc).__name__}: {exc}"}})
        return len(due)

    def resync(self) -> int:
        """Every known Proxy without a due time gets one now (after a relist,
        or a Redis that lost its data): nothing is ever forgotten."""
        return self.store.schedule_missing(self.objects.keys(), self.clock())

    def run(self, stop: threading.Event, resync_every: float = 30.0, idle: float = 0.25) -> None:
        last_resync = 0.0
        while not self.objects.ready() and not stop.wait(idle):
            pass
        while not stop.is_set():
            try:
                if time.monotonic() - last_resync >= resync_every:
                    self.resync()
                    last_resync = time.monotonic()
                self.resync_lists()
                if self.run_once():
                    continue
                nxt = self.store.next_due()
                wait = idle if nxt is None else min(idle, max(0.0, nxt - self.clock()))
            except Exception as exc:  # Redis or the API down: try again shortly
                log.warning("proxy loop: %s: %s", type(exc).__name__, exc)
                wait = 1.0
            if self.wake.wait(wait):
                self.wake.clear()


def create_request(p: Proxy) -> CreateRequest:
    """The create `p` asks for, as it travels (`fleet.celery.calls.request_dict`):
    no cloud-init (staged apart) and no installation (the worker's own)."""
    return CreateRequest(name=name_from_uid(p.uid), uid=p.uid, namespace=p.namespace, proxy_name=p.name,
                         placement=p.spec.placement, port=p.spec.port)


def outcome_of(raw: Mapping[str, Any], spec_hash: str = "", release_on_success: bool = False) -> Outcome:
    """The decision's view of a call's answer (`CallOutcome.from_message`, a
    get's instance by `instance_from_dict`). An answer that does not read as
    one is a Transient failure saying why: backed off and asked again, like
    any failure nobody classified."""
    try:
        out = CallOutcome.from_message(raw)
        result = instance_from_dict(out.result) if out.ok and out.op == rules.GET else out.result
    except OutcomeError as exc:
        op = raw.get("op")
        return Outcome(op=op if isinstance(op, str) else "", ok=False, error_class=ErrorClass.TRANSIENT,
                       message=f"an unreadable answer: {exc}", spec_hash=spec_hash,
                       release_on_success=release_on_success)
    retry = out.step.delay if isinstance(out.step, Retry) else None
    return Outcome(op=out.op, ok=out.ok, result=result, error_class=out.error_class, retry_after=retry,
                   message=out.message, spec_hash=spec_hash, release_on_success=release_on_success)


def phase_since(raw: bytes | str | None) -> tuple[str, float] | None:
    """`phase|since` as `_publish_state` stores it (a bare phase: since unknown, 0)."""
    if raw is None:
        return None
    text = raw.decode() if isinstance(raw, bytes) else raw
    phase, _, since = text.partition("|")
    try:
        return phase, float(since) if since else 0.0
    except ValueError:
        return phase, 0.0


def probe_of(raw: bytes | str | None, uid: str) -> Probe | None:
    """The prober's verdict, if it is about this UID (a verdict on a Proxy since
    deleted and declared again under the same name is not)."""
    doc = json_object(raw)
    if doc is None or doc.get("uid") != uid or not isinstance(doc.get("healthy"), bool):
        return None
    message, egress = doc.get("message"), doc.get("egressIP")
    return Probe(doc["healthy"], message[:512] if isinstance(message, str) else "",
                 egress[:64] if isinstance(egress, str) else "")


def json_object(raw: bytes | str | None) -> dict[str, Any] | None:
    """A stored JSON object, or None when absent, not JSON, or not an object."""
    if raw is None:
        return None
    try:
        doc = json.loads(raw)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None
