"""Provider calls as Celery tasks: one base, `ProviderCallTask`, that every
task calling a provider's create/get/delete/list runs on.

A task on it is written as the provider operation alone::

    @app.task(name="fleet.get_instance", base=ProviderCallTask, op="get")
    def get_instance(p: Provider, deadline: Deadline, provider_id: str) -> dict:
        return instance_dict(p.get(provider_id, deadline))

and sent with keyword arguments only: `provider` (the configured name; the
router places the message on `provider.<name>`), the operation's own
arguments, and optionally `timeout` (seconds, default 60, at most 600) and
`attempt` (1 for the first try; the caller counts failures in a row). The
base, in this order:

- refuses a malformed message, or one for another provider's queue, without
  calling anything (an `invalid` outcome, not counted);
- builds the provider (`fleet.runtime.provider`) and runs the operation
  under a `Deadline` of `timeout`, inside the `provider.<op>` span
  (`fleet.tracing.provider_span`);
- counts it in `proxy_operator_provider_requests_total{provider,op,result}`
  (result: `providers.base.result_label`) and times it in
  `proxy_operator_provider_request_duration_seconds{provider,op}`;
- returns an outcome (`CallOutcome.to_message()`), never raises for a
  provider's failure:

    {"ok": true,  "provider", "op", "attempt", "result": <JSON value>}
    {"ok": false, "provider", "op", "attempt", "error_class": <ErrorClass>,
     "step": {"retry_after": s, "counts_as_error": b} | {"latch": reason} | {"gone": true},
     "message": str}

  where `error_class` is a `providers.base.ErrorClass` value ("not_found",
  "quota_exceeded", "transient", "permanent", or the base's own refusals
  "invalid" and "not_configured") and `step` is
  `providers.retry.next_step(error, attempt)`. A get's result is
  `instance_dict(Instance)`, a list's a list of them. Whoever receives an
  outcome reads it back with `CallOutcome.from_message` (and an instance with
  `instance_from_dict`): it comes from a queue, so it is input, checked at
  that boundary, never a promise. A create's own arguments are likewise
  `request_dict(CreateRequest)`, read back with `request_from_dict`. The caller
  (a `link`ed controller task) applies it, keeping due times in Redis: no
  `self.retry(countdown=…)`, whose message would wait in the broker for up
  to 5 minutes and be lost or doubled by a restart or the visibility
  timeout (see docs/architecture.md, Decisions).

Arguments, results and spans carry names and ids only: never cloud-init or
credentials, and arguments are never logged.
"""

from __future__ import annotations

import inspect
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from celery import Task
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.registry import Collector

from fleet import reload, runtime, serving, tracing
from fleet.celery import routing
from fleet.settings import parse_bind_address
from providers import base
from providers.base import OPS, CreateRequest, Deadline, ErrorClass, Instance, Placement, Provider, State
from providers.retry import BACKOFF_MAX, QUOTA_RETRY, Gone, Latch, Retry, Step, next_step
from providers.text import clip

log = logging.getLogger("fleet.calls")

DEFAULT_TIMEOUT = 60.0
MAX_TIMEOUT = 600.0
MAX_ATTEMPT = 1_000_000
MAX_ARG = 1024  # characters of one string argument (an id, a name)
MAX_MESSAGE = 1024  # characters of an outcome's message
LATCH_INVALID = "InvalidRequest"
LATCH_TOO_LARGE = "ListTooLarge"  # a list's answer past what one message may take (fleet.celery.compression)
MAX_RETRY = max(BACKOFF_MAX, QUOTA_RETRY)  # seconds: the longest `retry_after` a step may say
# Seconds: a get answers in milliseconds, a GCP insert waits on its operation for minutes.
BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
# The `result` label's values (providers.base.result_label): a refused message is never counted.
RESULTS = ("ok",) + tuple(cls.label.value for cls in base.ERROR_CLASSES)
# Bounds of an instance read back from an outcome (`instance_from_dict`).
MAX_UID = 253
MAX_IP = 64
MAX_CREATED = 64
MAX_MARK = 63  # an installation or namespace mark: a DNS-1123 label


class CallMetrics:
    """This process's provider-call counter and histogram, unregistered:
    `collectors()` go into the registry a worker's /metrics serves
    (`serve_worker`); tests build their own."""

    def __init__(self) -> None:
        self.requests = Counter(
            serving.REQUESTS_TOTAL, "Provider calls made by this worker, by operation and result (ok or the error class).",
            ["provider", "op", "result"], registry=None,
        )
        self.duration = Histogram(
            serving.REQUEST_DURATION, "Duration of provider calls made by this worker, by operation.",
            ["provider", "op"], buckets=BUCKETS, registry=None,
        )

    def start(self, providers: Iterable[str], ops: Iterable[str] = ("create", "get", "delete", "list")) -> None:
        """Every series of these providers at 0, so the first failure is a rate."""
        ops = tuple(ops)
        for p in providers:
            for op in ops:
                self.duration.labels(provider=p, op=op)
                for result in RESULTS:
                    self.requests.labels(provider=p, op=op, result=result)

    def observe(self, provider: str, op: str, result: str, seconds: float) -> None:
        self.requests.labels(provider=provider, op=op, result=result).inc()
        self.duration.labels(provider=provider, op=op).observe(seconds)

    def collectors(self) -> tuple[Collector, ...]:
        return (self.requests, self.duration)


METRICS = CallMetrics()


# --- outcomes (pure) -------------------------------------------------------------


class OutcomeError(ValueError):
    """An outcome (or an instance in one) that does not read as one; the message says why."""


def step_dict(step: Step) -> dict[str, Any]:
    if isinstance(step, Retry):
        return {"retry_after": step.delay, "counts_as_error": step.counts_as_error}
    if isinstance(step, Latch):
        return {"latch": step.reason}
    if isinstance(step, Gone):
        return {"gone": True}
    raise TypeError(f"not a step: {step!r}")


def step_from_dict(raw: Any) -> Step:
    """`step_dict`'s inverse; OutcomeError when `raw` is none of its shapes."""
    if isinstance(raw, Mapping):
        delay, counts = raw.get("retry_after"), raw.get("counts_as_error", True)
        if set(raw) <= {"retry_after", "counts_as_error"} and isinstance(delay, (int, float)) and _delay(delay) \
                and isinstance(counts, bool):
            return Retry(float(delay), counts)
        if set(raw) == {"latch"} and isinstance(raw["latch"], str) and 0 < len(raw["latch"]) <= 64:
            return Latch(raw["latch"])
        if set(raw) == {"gone"} and raw["gone"] is True:
            return Gone()
    raise OutcomeError(f"step must be {{retry_after, counts_as_error}}, {{latch}} or {{gone: true}}, got {cut(repr(raw), 80)}")


def _delay(v: float) -> bool:
    return not isinstance(v, bool) and math.isfinite(v) and 0 <= v <= MAX_RETRY


def cut(text: str, limit: int = MAX_MESSAGE) -> str:
    return clip(text, limit)


RESULT_TYPES: dict[str, tuple[type | tuple[type, ...], str]] = {
    "create": (str, "a string (the id)"), "get": (Mapping, "a mapping (an instance)"),
    "delete": (type(None), "null"), "list": (list, "a list (of instances)"),
}


@dataclass(frozen=True)
class CallOutcome:
    """One provider call's answer (module docstring): `to_message()` is what
    the task returns, `from_message()` reads one back, refusing what is not."""

    ok: bool
    provider: str
    op: str  # create | get | delete | list
    attempt: int  # 0: refused before any call
    result: Any = None  # ok: create the id, get an instance dict, delete None, list a list of instance dicts
    error_class: ErrorClass | None = None  # not ok
    step: Step | None = None  # not ok; None: the answer says no step (the caller backs off as it would)
    message: str = ""  # not ok

    def to_message(self) -> dict[str, Any]:
        head: dict[str, Any] = {"ok": self.ok, "provider": self.provider, "op": self.op, "attempt": self.attempt}
        if self.ok:
            return {**head, "result": self.result}
        if self.error_class is None:
            raise TypeError("a failed outcome needs an error_class")
        step = {} if self.step is None else {"step": step_dict(self.step)}
        return {**head, "error_class": self.error_class.value, **step, "message": self.message}

    @classmethod
    def from_message(cls, raw: Any) -> CallOutcome:
        """The outcome in `raw` (a decoded message, or JSON kept in Redis); OutcomeError says what is wrong."""
        if not isinstance(raw, Mapping):
            raise OutcomeError(f"an outcome must be a mapping, got {type(raw).__name__}")
        ok, provider, op, attempt = raw.get("ok"), raw.get("provider"), raw.get("op"), raw.get("attempt", 0)
        if not isinstance(ok, bool):
            raise OutcomeError("`ok` must be true or false")
        if not isinstance(provider, str) or len(provider) > MAX_ARG:
            raise OutcomeError(f"`provider` must be a string of at most {MAX_ARG} characters")
        if op not in OPS:
            raise OutcomeError(f"`op` must be one of {', '.join(OPS)}, got {cut(repr(op), 40)}")
        if isinstance(attempt, bool) or not isinstance(attempt, int) or not 0 <= attempt <= MAX_ATTEMPT:
            raise OutcomeError(f"`attempt` must be an integer from 0 to {MAX_ATTEMPT}")
        if ok:
            result = raw.get("result")
            want, noun = RESULT_TYPES[op]
            if not isinstance(result, want):
                raise OutcomeError(f"a {op}'s `result` must be {noun}, got {type(result).__name__}")
            return cls(True, provider, op, attempt, result)
        try:
            error = ErrorClass(str(raw.get("error_class")))
        except ValueError:
            raise OutcomeError(f"`error_class` must be one of {', '.join(ErrorClass)}, "
                               f"got {cut(repr(raw.get('error_class')), 40)}") from None
        message = raw.get("message", "")
        if not isinstance(message, str):
            raise OutcomeError("`message` must be a string")
        step = raw.get("step")
        return cls(False, provider, op, attempt, error_class=error, step=None if step is None else step_from_dict(step),
                   message=message[:MAX_MESSAGE + 64])  # room for `cut`'s "... (n characters)"


class ListTooLarge(base.Permanent):
    """A list whose answer would not fit in one message: the call worked, its
    answer cannot travel. Its step is `Latch(LATCH_TOO_LARGE)`, so the
    controller can tell it from a provider's own Permanent failure."""

    kind = "answer too large"


def succeeded(provider: str, op: str, attempt: int, value: Any) -> dict[str, Any]:
    return CallOutcome(True, provider, op, attempt, value).to_message()


def failed(provider: str, op: str, attempt: int, exc: BaseException) -> dict[str, Any]:
    return CallOutcome(
        False, provider, op, attempt, error_class=base.error_class(exc).label,
        step=Latch(LATCH_TOO_LARGE) if isinstance(exc, ListTooLarge) else next_step(exc, attempt),
        message=cut(str(exc) if isinstance(exc, base.ProviderError) else f"{type(exc).__name__}: {exc}"),
    ).to_message()


def refused(provider: Any, op: str, why: str, error_class: ErrorClass = ErrorClass.INVALID) -> dict[str, Any]:
    return CallOutcome(False, cut(provider, 63) if isinstance(provider, str) else "", op, 0,
                       error_class=error_class, step=Latch(LATCH_INVALID), message=cut(why)).to_message()


def instance_dict(i: Instance) -> dict[str, Any]:
    """An Instance as JSON: state by its value, createdAt as ISO 8601 or null,
    installation and namespace marks as read back from the backend ("" when
    unmarked: GC's tests of "ours" and "in scope"). `instance_from_dict` reads it back."""
    created: datetime | None = i.created_at
    return {"id": i.id, "state": i.state.value, "ip": i.ip, "uid": i.uid,
            "createdAt": created.isoformat() if created else None, "installation": i.installation,
            "namespace": i.namespace}


def instance_from_dict(raw: Any) -> Instance:
    """`instance_dict`'s inverse, each field type-checked and bounded (OutcomeError
    says which is wrong). A createdAt that is no ISO 8601 time with a zone reads
    as None: unknown (GC counts it as very old). Absent uid, ip and marks read as ""."""
    if not isinstance(raw, Mapping):
        raise OutcomeError(f"an instance must be a mapping, got {type(raw).__name__}")
    pid = raw.get("id")
    if not isinstance(pid, str) or not 0 < len(pid) <= MAX_ARG:
        raise OutcomeError(f"an instance's `id` must be a non-empty string of at most {MAX_ARG} characters")
    try:
        state = State(raw.get("state"))
    except ValueError:
        raise OutcomeError(f"an instance's `state` must be one of {', '.join(s.value for s in State)}, "
                           f"got {cut(repr(raw.get('state')), 40)}") from None
    text = {}
    for key, limit in (("uid", MAX_UID), ("ip", MAX_IP), ("installation", MAX_MARK), ("namespace", MAX_MARK)):
        value = raw.get(key, "")
        if not isinstance(value, str) or len(value) > limit:
            raise OutcomeError(f"an instance's `{key}` must be a string of at most {limit} characters")
        text[key] = value
    created_raw = raw.get("createdAt")
    if created_raw is not None and (not isinstance(created_raw, str) or len(created_raw) > MAX_CREATED):
        raise OutcomeError(f"an instance's `createdAt` must be null or a string of at most {MAX_CREATED} characters")
    return Instance(id=pid, state=state, ip=text["ip"], uid=text["uid"],
                    created_at=created_from_iso(created_raw) if created_raw is not None else None,
                    installation=text["installation"], namespace=text["namespace"])


# --- a create's request (pure) ---------------------------------------------------------
#
# `fleet.create_instance`'s keyword arguments are a CreateRequest without its
# cloud-init (staged in Redis, referenced by `cloud_init_ref`) and without its
# installation (the worker's own): `request_dict` writes them on the
# controller, `request_from_dict` reads them on the worker, and nothing else
# spells them. The shape is the one every version has sent (all strings, the
# port too), so a message queued by either side of a rolling deploy reads on
# the other.

REQUEST_REQUIRED = ("name", "uid", "namespace", "proxy_name", "port", "cloud_init_ref")
REQUEST_OPTIONAL = ("region", "zone", "machine_type", "image")  # "" when absent


class RequestError(ValueError):
    """A create message that does not read as a request; `field` names the argument at fault."""

    def __init__(self, field: str, why: str) -> None:
        super().__init__(why)
        self.field = field


def request_dict(request: CreateRequest, *, cloud_init_ref: str) -> dict[str, str]:
    """`request`'s message arguments: never its cloud-init text nor its
    installation (module notes); `request_from_dict` reads them back."""
    pl = request.placement
    return {"name": request.name, "uid": request.uid, "namespace": request.namespace,
            "proxy_name": request.proxy_name, "region": pl.region, "zone": pl.zone,
            "machine_type": pl.machine_type, "image": pl.image, "port": str(request.port),
            "cloud_init_ref": cloud_init_ref}


def request_from_dict(raw: Mapping[str, Any]) -> tuple[CreateRequest, str]:
    """`request_dict`'s inverse: the request (cloud-init and installation
    empty: the worker fills both) and the cloud-init reference. Each argument
    is checked and bounded; RequestError names the first at fault."""
    for key in raw:
        if key not in REQUEST_REQUIRED and key not in REQUEST_OPTIONAL:
            raise RequestError(str(key)[:60], f"{cut(str(key), 60)!r} is no argument of a create")
    text: dict[str, str] = {}
    for key in (*REQUEST_REQUIRED, *REQUEST_OPTIONAL):
        if key not in raw and key in REQUEST_REQUIRED:
            raise RequestError(key, f"{key} is missing")
        value = raw.get(key, "")
        if not isinstance(value, str) or len(value) > MAX_ARG:
            raise RequestError(key, f"{key} must be a string of at most {MAX_ARG} characters")
        text[key] = value
    for key in ("name", "uid"):
        if not text[key]:
            raise RequestError(key, f"{key} must not be empty")
    port = text["port"]
    if not (port.isascii() and port.isdigit()) or not 1 <= int(port) <= 65535:
        raise RequestError("port", f"port must be from 1 to 65535, got {port[:20]!r}")
    placement = Placement(region=text["region"], zone=text["zone"], machine_type=text["machine_type"],
                          image=text["image"])
    return CreateRequest(name=text["name"], uid=text["uid"], namespace=text["namespace"],
                         proxy_name=text["proxy_name"], placement=placement, port=int(port)), text["cloud_init_ref"]


def created_from_iso(text: str) -> datetime | None:
    """An ISO 8601 time with a zone ("Z" too); None when unparsable or without one."""
    try:
        dt = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return dt if dt.tzinfo is not None else None


def message_problem(provider: Any, timeout: Any, attempt: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any],
                    run: Callable[..., Any]) -> str | None:
    """Why a provider-call message is refused, or None (pure)."""
    if args:
        return "provider calls take keyword arguments only"
    if not isinstance(provider, str) or not provider:
        return "needs a provider name (keyword argument `provider`)"
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not math.isfinite(timeout) \
            or not 0 < timeout <= MAX_TIMEOUT:
        return f"timeout must be a number of seconds in (0, {MAX_TIMEOUT:g}]"
    if isinstance(attempt, bool) or not isinstance(attempt, int) or not 1 <= attempt <= MAX_ATTEMPT:
        return f"attempt must be an integer from 1 to {MAX_ATTEMPT}"
    for key, value in kwargs.items():
        if not isinstance(value, str) or len(value) > MAX_ARG:
            return f"argument {cut(str(key), 60)!r} must be a string of at most {MAX_ARG} characters"
    try:
        inspect.signature(run).bind(None, None, **kwargs)
    except TypeError as exc:
        return f"arguments do not match the operation: {exc}"
    return None


# --- applying it -------------------------------------------------------------------


def call(
    provider: str, op: str, fn: Callable[[Provider, Deadline], Any], *, timeout: float = DEFAULT_TIMEOUT,
    provider_id: str | None = None, attempt: int = 1,
    build: Callable[[str], Provider] | None = None, recorder: CallMetrics | None = None,
) -> dict[str, Any]:
    """Run `fn(provider, deadline)` as one counted, timed, traced call; the
    outcome. `build` defaults to `fleet.runtime.provider`, `recorder` to `METRICS`."""
    build = build or runtime.provider
    recorder = recorder or METRICS
    deadline = Deadline.after(timeout)
    start = time.monotonic()
    error: BaseException | None = None
    try:
        with tracing.provider_span(provider, op, provider_id) as span:
            value = fn(build(provider), deadline)
            if op == "create" and isinstance(value, str):
                span.set_attribute("provider.id", value)
    except Exception as exc:  # every failure is an outcome; BaseException (shutdown) goes on
        error = exc
    finally:
        recorder.observe(provider, op, base.result_label(error), time.monotonic() - start)
    if error is None:
        return succeeded(provider, op, attempt, value)
    out = failed(provider, op, attempt, error)
    if not isinstance(error, base.ProviderError):  # a provider bug: unclassified, so Transient
        log.warning("unclassified provider error (counted as transient)", exc_info=error,
                    extra={"fields": {"provider": provider, "op": op}})
    return out


if TYPE_CHECKING:
    _TaskBase = Task[..., dict[str, Any]]
else:
    _TaskBase = Task  # older Celery cannot subscript Task at run time (celery/celery#10038)


class ProviderCallTask(_TaskBase):
    """The base of every provider-call task (module docstring). A task sets
    `op` (create, get, delete or list) through `app.task(..., op=...)`; its
    function takes the built provider, the deadline and its own arguments."""

    abstract = True
    typing = False  # the message's `provider`, `timeout` and `attempt` are the base's, not the function's
    op: str = ""

    def __call__(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        provider = kwargs.pop("provider", None)
        timeout = kwargs.pop("timeout", DEFAULT_TIMEOUT)
        attempt = kwargs.pop("attempt", 1)
        why = message_problem(provider, timeout, attempt, args, kwargs, self.run)
        error_class = ErrorClass.INVALID
        if why is None and provider not in runtime.providers_config().names():
            # a config rollout in progress (the controller has it, this worker not yet): retried, never latched
            why, error_class = f"provider {provider!r} is not configured on this worker", ErrorClass.NOT_CONFIGURED
        if why is None:
            why = self._placement_problem(provider)
        if why is not None:
            log.warning("provider call refused", extra={"fields": {"task": self.name, "why": why}})
            return refused(provider, self.op, why, error_class)
        return call(provider, self.op, lambda p, d: self.run(p, d, **kwargs), timeout=float(timeout),
                    provider_id=kwargs.get("provider_id"), attempt=attempt)

    def _placement_problem(self, provider: str) -> str | None:
        """A message for provider X runs only from queue provider.X (and for a
        configured X), so no worker calls a provider it holds no credentials for."""
        queue = ((self.request.delivery_info or {}) if self.request else {}).get("routing_key")
        if queue and queue != routing.provider_queue(provider):
            return f"a call for provider {provider} must come from {routing.provider_queue(provider)}, not {cut(queue, 80)}"
        return None


# --- a provider worker's own /metrics -------------------------------------------
#
# The provider-call counter and histogram (`METRICS`) of this process and its
# config-reload status (`fleet.reload.STATUS`), on
# `--worker-metrics-bind-address` (off by default). Provider workers run the
# threads pool, one process each, so a plain in-process registry is the whole
# truth: no prometheus_client multiprocess mode (files in a shared directory,
# needed only with a forking pool). Prometheus scrapes each worker pod, the
# controller keeps its own /metrics.

WORKER_FLAG = "--worker-metrics-bind-address"


def worker_registry(recorder: CallMetrics) -> CollectorRegistry:
    """A provider worker's /metrics: `recorder`'s series and the config-reload status."""
    return serving.registry_of([*recorder.collectors(), reload.STATUS.collector()])


def serve_worker(address: str, providers: Iterable[str], recorder: CallMetrics = METRICS) -> object | None:
    """Serve `recorder`'s series (at 0 for `providers`) on `address`; None when off.
    Raises OSError naming the address when it cannot bind."""
    if parse_bind_address(address, WORKER_FLAG) is None:
        log.info("worker metrics endpoint off")
        return None
    recorder.start(providers)
    return serving.serve_metrics(address, worker_registry(recorder), None, WORKER_FLAG, who="worker ")
