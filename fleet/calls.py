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
- returns an outcome, never raises for a provider's failure:

    {"ok": true,  "provider", "op", "attempt", "result": <JSON value>}
    {"ok": false, "provider", "op", "attempt", "error_class": "not_found" |
     "quota_exceeded" | "transient" | "permanent" | "invalid",
     "step": {"retry_after": s, "counts_as_error": b} | {"latch": reason} | {"gone": true},
     "message": str}

  where `step` is `providers.retry.next_step(error, attempt)`. The caller
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
from datetime import datetime
from typing import TYPE_CHECKING, Any

from celery import Task
from prometheus_client import Counter, Histogram
from prometheus_client.registry import Collector

from fleet import metrics, routing, runtime, tracing
from providers import base
from providers.base import Deadline, Instance, Provider
from providers.retry import Gone, Latch, Retry, Step, next_step

log = logging.getLogger("fleet.calls")

DEFAULT_TIMEOUT = 60.0
MAX_TIMEOUT = 600.0
MAX_ATTEMPT = 1_000_000
MAX_ARG = 1024  # characters of one string argument (an id, a name)
MAX_MESSAGE = 1024  # characters of an outcome's message
INVALID = "invalid"  # error_class of a message refused before any call
NOT_CONFIGURED = "not_configured"  # error_class of a call refused because this worker's config lacks its provider
LATCH_INVALID = "InvalidRequest"
# Seconds: a get answers in milliseconds, a GCP insert waits on its operation for minutes.
BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
RESULTS = ("ok", "not_found", "quota_exceeded", "transient", "permanent")


class CallMetrics:
    """This process's provider-call counter and histogram, unregistered:
    `collectors()` go into the registry a worker's /metrics serves
    (fleet.exposition); tests build their own."""

    def __init__(self) -> None:
        self.requests = Counter(
            metrics.REQUESTS_TOTAL, "Provider calls made by this worker, by operation and result (ok or the error class).",
            ["provider", "op", "result"], registry=None,
        )
        self.duration = Histogram(
            metrics.REQUEST_DURATION, "Duration of provider calls made by this worker, by operation.",
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


def step_dict(step: Step) -> dict[str, Any]:
    if isinstance(step, Retry):
        return {"retry_after": step.delay, "counts_as_error": step.counts_as_error}
    if isinstance(step, Latch):
        return {"latch": step.reason}
    if isinstance(step, Gone):
        return {"gone": True}
    raise TypeError(f"not a step: {step!r}")


def cut(text: str, limit: int = MAX_MESSAGE) -> str:
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"


def succeeded(provider: str, op: str, attempt: int, value: Any) -> dict[str, Any]:
    return {"ok": True, "provider": provider, "op": op, "attempt": attempt, "result": value}


def failed(provider: str, op: str, attempt: int, exc: BaseException) -> dict[str, Any]:
    return {
        "ok": False, "provider": provider, "op": op, "attempt": attempt,
        "error_class": base.result_label(exc),
        "step": step_dict(next_step(exc, attempt)),
        "message": cut(str(exc) if isinstance(exc, base.ProviderError) else f"{type(exc).__name__}: {exc}"),
    }


def refused(provider: Any, op: str, why: str, error_class: str = INVALID) -> dict[str, Any]:
    return {
        "ok": False, "provider": cut(provider, 63) if isinstance(provider, str) else "", "op": op, "attempt": 0,
        "error_class": error_class, "step": {"latch": LATCH_INVALID}, "message": cut(why),
    }


def instance_dict(i: Instance) -> dict[str, Any]:
    """An Instance as JSON: state by its value, createdAt as ISO 8601 or null,
    installation and namespace marks as read back from the backend ("" when
    unmarked: GC's tests of "ours" and "in scope")."""
    created: datetime | None = i.created_at
    return {"id": i.id, "state": i.state.value, "ip": i.ip, "uid": i.uid,
            "createdAt": created.isoformat() if created else None, "installation": i.installation,
            "namespace": i.namespace}


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
        error_class = INVALID
        if why is None and provider not in runtime.providers_config().names():
            # a config rollout in progress (the controller has it, this worker not yet): retried, never latched
            why, error_class = f"provider {provider!r} is not configured on this worker", NOT_CONFIGURED
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
