"""Orphan GC's tasks on `fleet.controller` (`fleet.gc.sweep` applies them):

- `fleet.gc_sweep()`: from beat every --gc-interval (or `fleet gc`): start a sweep;
- `fleet.record_gc_list(outcome, provider=, sweep=)`: the `link` of a sweep's
  `fleet.list_instances`: decide and send the deletes;
- `fleet.record_gc_delete(outcome, provider=, sweep=, provider_id=)`: the
  `link` of its `fleet.delete_instance`: count it.

Late acks, like every controller task; a malformed message is logged and
dropped, never raised (a raising late-acked task would come back). The body
of an answer is bounded before Celery decodes it (`gc_strategy`).
"""

from __future__ import annotations

import logging
from typing import Any

from celery.worker.strategy import default as default_strategy

from fleet import runtime
from fleet.celery import compression, routing
from fleet.celery.app import app
from fleet.gc import metrics
from fleet.gc import runtime as gc

log = logging.getLogger("fleet.gc")

# Bytes of one answer's body as decoded: a list's comes compressed and is
# inflated no further than this (fleet.celery.compression), an uncompressed
# one (an older worker, a Redis without proto-max-bulk-len) is checked here.
MAX_ANSWER_BYTES = compression.MAX_INFLATED
MAX_ARG = 320


def gc_strategy(task: Any, app: Any, consumer: Any, **kwargs: Any) -> Any:
    """Celery's default strategy behind a size check of the raw body: an
    answer over `MAX_ANSWER_BYTES` is acked, logged and counted (its provider
    then lapses to `no-answer`) before its JSON is decoded."""
    handle = default_strategy(task, app, consumer, **kwargs)

    def task_message_handler(message: Any, body: Any, ack: Any, reject: Any, callbacks: Any, **kw: Any) -> Any:
        size = len(message.body or b"")
        if size > MAX_ANSWER_BYTES:
            gc.counters().skip(metrics.ALL, metrics.INVALID_ANSWER)
            log.warning("GC: dropped an answer of %d bytes (at most %d)", size, MAX_ANSWER_BYTES)
            ack(log, consumer.connection_errors)
            return None
        return handle(message, body, ack, reject, callbacks, **kw)

    return task_message_handler


def answer_problem(args: tuple[Any, ...], kwargs: dict[str, Any], names: tuple[str, ...]) -> str | None:
    """Why an answer message is malformed, or None (pure)."""
    if len(args) != 1:
        return "expects one provider-call outcome"
    if set(kwargs) != set(names):
        return f"expects exactly the keyword arguments {', '.join(names)}"
    for name in names:
        value = kwargs[name]
        if not isinstance(value, str) or not 0 < len(value) <= MAX_ARG:
            return f"{name} must be a non-empty string of at most {MAX_ARG} characters"
    return None


@app.task(name=routing.GC_SWEEP, acks_late=True, ignore_result=True, Strategy="tasks.controller:bounded_strategy")
def gc_sweep(*_args: Any, **_kwargs: Any) -> str:
    """Takes no arguments; any a message carries are ignored."""
    if not runtime.settings().gc_enabled:
        log.info("GC sweep not started: GC is off on this controller (--gc-interval=0)")
        return "off"
    return gc.sweeper().start()


@app.task(name=routing.RECORD_GC_LIST, acks_late=True, ignore_result=True, Strategy="tasks.gc:gc_strategy")
def record_gc_list(*args: Any, **kwargs: Any) -> str:
    why = answer_problem(args, kwargs, ("provider", "sweep"))
    if why:
        gc.counters().skip(metrics.ALL, metrics.INVALID_ANSWER)
        log.warning("GC: dropped a list answer", extra={"fields": {"why": why}})
        return "dropped"
    return gc.sweeper().record_list(args[0], kwargs["provider"], kwargs["sweep"])


@app.task(name=routing.RECORD_GC_DELETE, acks_late=True, ignore_result=True, Strategy="tasks.controller:bounded_strategy")
def record_gc_delete(*args: Any, **kwargs: Any) -> str:
    why = answer_problem(args, kwargs, ("provider", "sweep", "provider_id"))
    if why:
        log.warning("GC: dropped a delete answer", extra={"fields": {"why": why}})
        return "dropped"
    return gc.sweeper().record_delete(args[0], kwargs["provider"], kwargs["sweep"], kwargs["provider_id"])
