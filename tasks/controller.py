"""Controller tasks on `fleet.controller`, and the controller's start-up
(`controller_startup`: cleanup, /metrics, the overdue sweep on its own clock).

Late acks: a controller that dies mid-message gets it redelivered, and
`record` is idempotent (a result no newer than the stored one is dropped).
So nothing a message holds may raise or exhaust memory here (issue 9): the
body's size is checked before Celery decodes it (`bounded_strategy`), the
decoded value by `fleet.health.messages`; a refused message is acked, counted and
logged, never retried.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from celery import signals
from celery.worker.strategy import default as default_strategy

from fleet.celery import compression, roles, routing
from fleet.celery.app import app
from fleet.health import runtime as health
from fleet.health.limits import LIMITS
from fleet.health.messages import Rejection, provider_of
from fleet.serving import DROP_TOO_LARGE
from fleet.store import StoreUnavailable
from fleet.tracing import span

log = logging.getLogger("fleet.controller")
F = TypeVar("F", bound=Callable[..., str])
STORE_UNAVAILABLE = "store-unavailable"


def outage_drops(then: str) -> Callable[[F], F]:
    """A record task whose store is unreachable mid-answer (a Sentinel failover under load) drops that answer with
    one WARNING saying what takes its place (`then`), not Celery's ERROR traceback: each of these answers is one a
    sender replaces anyway (the next round's check, a call's record lapsing, the next interval's list). An error of
    the call itself (a script's) still raises."""
    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> str:
            try:
                return fn(*args, **kwargs)
            except StoreUnavailable as exc:
                log.warning("the store is unreachable: an answer is dropped", extra={"fields": {
                    "task": fn.__name__, "then": then, "error": str(exc)[:200]}})
                return STORE_UNAVAILABLE
        return run  # type: ignore[return-value]  # the same signature
    return wrap


def bounded_strategy(task: Any, app: Any, consumer: Any, **kwargs: Any) -> Any:
    """Celery's default strategy behind a size check of the raw body: a
    message over `max_message_bytes` is acked and counted before its JSON
    is decoded (a 25 MB result had taken the controller to 530 MB). The
    broker's envelope has been read by then; only the body is bounded here."""
    handle = default_strategy(task, app, consumer, **kwargs)
    limit = LIMITS.max_message_bytes

    def task_message_handler(message: Any, body: Any, ack: Any, reject: Any, callbacks: Any, **kw: Any) -> Any:
        size = len(message.body or b"")
        if size > limit:
            health.controller().reject("?", Rejection(DROP_TOO_LARGE, "message", f"{size} bytes, at most {limit}"))
            ack(log, consumer.connection_errors)
            return None
        return handle(message, body, ack, reject, callbacks, **kw)

    return task_message_handler


MAX_LIST_BYTES = compression.MAX_INFLATED  # one resync list's answer as decoded (inflated): decoded once a minute


def list_strategy(task: Any, app: Any, consumer: Any, **kwargs: Any) -> Any:
    """`bounded_strategy` at a list's size: a larger answer is acked and logged
    undecoded, and the provider's next list comes at the next interval."""
    handle = default_strategy(task, app, consumer, **kwargs)

    def task_message_handler(message: Any, body: Any, ack: Any, reject: Any, callbacks: Any, **kw: Any) -> Any:
        size = len(message.body or b"")
        if size > MAX_LIST_BYTES:
            log.error("dropped a resync list answer of %d bytes (at most %d): that provider's Running Proxies go unchecked "
                      "until its instances fit", size, MAX_LIST_BYTES)
            ack(log, consumer.connection_errors)
            return None
        return handle(message, body, ack, reject, callbacks, **kw)

    return task_message_handler


@app.task(name=routing.RECORD_CHECK, acks_late=True, ignore_result=True, Strategy="tasks.controller:bounded_strategy")
@outage_drops("the next round's result replaces it")
def record_check(*args: Any, **kwargs: Any) -> str:
    """`record_check(result)`; any other shape is dropped as invalid."""
    with span("fleet.record", **{"provider.name": provider_of(args[0]) if len(args) == 1 else "?"}) as s:
        # bounded_strategy refused a body over max_message_bytes before it was decoded
        outcome = health.controller().record_message(args, kwargs, body_bounded=True)
        s.set_attribute("fleet.outcome", outcome)
    return outcome


@app.task(name=routing.RECORD_PROXY_CALL, acks_late=True, ignore_result=True, Strategy="tasks.controller:bounded_strategy")
@outage_drops("the call's record lapses and its Proxy is due again, as for a lost message")
def record_proxy_call(*args: Any, **kwargs: Any) -> str:
    """`record_proxy_call(outcome, key=, call_id=, provider=)`, the `link` of a
    provider call the Proxy reconciler sent; any other shape is dropped."""
    from fleet.proxies import runtime as proxies

    rec = proxies.reconciler()
    why = proxy_call_problem(args, kwargs)
    if rec is None or why:
        log.warning("dropped a provider-call answer", extra={"fields": {"why": why or "Proxies are off on this controller"}})
        return "dropped"
    with span("fleet.record_proxy_call", **{"provider.name": kwargs["provider"], "proxy": kwargs["key"]}) as s:
        outcome = rec.record(kwargs["key"], kwargs["call_id"], kwargs["provider"], args[0])
        s.set_attribute("fleet.outcome", outcome)
    return outcome


@app.task(name=routing.RECORD_PROXY_LIST, acks_late=True, ignore_result=True, Strategy="tasks.controller:list_strategy")
@outage_drops("the next interval's list")
def record_proxy_list(*args: Any, **kwargs: Any) -> str:
    """`record_proxy_list(outcome, provider=, list_id=)`, the `link` of a provider's
    resync list the Proxy reconciler sent; any other shape is dropped. Its body is
    bounded at a list's size (`list_strategy`), not at a check message's."""
    from fleet.proxies import runtime as proxies

    rec = proxies.reconciler()
    why = proxy_list_problem(args, kwargs)
    if rec is None or why:
        log.warning("dropped a resync list answer", extra={"fields": {"why": why or "Proxies are off on this controller"}})
        return "dropped"
    with span("fleet.record_proxy_list", **{"provider.name": kwargs["provider"]}) as s:
        outcome = rec.record_list(kwargs["provider"], kwargs["list_id"], args[0])
        s.set_attribute("fleet.outcome", outcome)
    return outcome


def proxy_list_problem(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """Why a record_proxy_list message is malformed, or None (pure)."""
    if len(args) != 1 or not isinstance(args[0], dict):
        return "expects one provider-call outcome (a mapping)"
    if set(kwargs) != {"provider", "list_id"}:
        return "expects exactly the keyword arguments provider and list_id"
    for name in ("provider", "list_id"):
        value = kwargs[name]
        if not isinstance(value, str) or not 0 < len(value) <= 320:
            return f"{name} must be a non-empty string of at most 320 characters"
    return None


def proxy_call_problem(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """Why a record_proxy_call message is malformed, or None (pure)."""
    if len(args) != 1 or not isinstance(args[0], dict):
        return "expects one provider-call outcome (a mapping)"
    if set(kwargs) != {"key", "call_id", "provider"}:
        return "expects exactly the keyword arguments key, call_id and provider"
    for name in ("key", "call_id", "provider"):
        value = kwargs[name]
        if not isinstance(value, str) or not 0 < len(value) <= 320:
            return f"{name} must be a non-empty string of at most 320 characters"
    return None


# Start-up failures (no RBAC, no CRD, a busy or bad metrics address) end the
# process with this code and one line, rather than a worker that says `ready`
# and consumes without its cleanup, /metrics or probes; Kubernetes' restart
# back-off (or `fleet up`'s) retries it.
EXIT_STARTUP_FAILED = 1
_stop_sweeps = threading.Event()


def controller_startup() -> None:
    """The controller's start-up, once its worker is ready to consume
    `fleet.controller`: say the mode and clean up what belongs to providers no
    longer configured (`Controller.start`), serve /metrics and the probes,
    start the Proxy reconciler (`fleet.proxies.runtime`) and the ProxyPool
    loop (`fleet.pools.runtime`: one replica, by a Redis lock), watch the providers
    file (`fleet.runtime.watch_config`: a reload reaches the health
    controller, GC and the Proxies), then sweep for overdue providers on the
    controller's own clock.

    Exit-on-failure policy: any exception before the sweeps start logs one
    CRITICAL line (the error, cut to 1,000 characters) and ends the process
    at once with `os._exit(EXIT_STARTUP_FAILED)`, without Celery's own
    shutdown, so the controller never consumes without its start-up.
    Restarting is left to Kubernetes' back-off or `fleet up`."""
    from fleet import reload, runtime, serving
    from fleet.gc import runtime as gc
    from fleet.health.metrics import collectors
    from fleet.pools import runtime as pools
    from fleet.proxies import runtime as proxies
    from fleet.proxies.metrics import ProxiesCollector

    try:
        ctl = health.controller()
        ctl.start()
        gc_part = gc.collectors() if ctl.settings.gc_enabled else []  # GC off: no stale last-success stamps
        registry = serving.registry_of([*collectors(ctl), ProxiesCollector(ctl.store.proxies.phases, ctl.store.proxies.verdicts),
                                        *gc_part, reload.STATUS.collector(), pools.SERIES])
        serving.serve_metrics(ctl.settings.metrics_bind_address, registry, ctl.store.ping)
        proxies.start(_stop_sweeps)
        pools.start(_stop_sweeps)  # after the Proxy claims: a pool is reconciled only where they are held
        # a reloaded providers file (fleet.reload): each feature takes the new provider set
        runtime.on_config_change(lambda new, _change: ctl.reconfigure(new))
        runtime.on_config_change(gc.reconfigure)
        runtime.on_config_change(proxies.reconfigure)
        runtime.watch_config(_stop_sweeps)
    except Exception as exc:
        log.critical("controller start-up failed, exiting: %s: %s", type(exc).__name__, str(exc)[:1000])
        logging.shutdown()
        os._exit(EXIT_STARTUP_FAILED)
    ctl.run_sweeps(_stop_sweeps)


@signals.worker_ready.connect
def _start_controller(sender: object = None, **_: object) -> None:
    """Runs `controller_startup` in the worker that consumes `fleet.controller`."""
    if roles.of_consumer(sender).kind == roles.CONTROLLER:
        controller_startup()


@signals.worker_shutdown.connect
def _stop_controller(**_: object) -> None:
    _stop_sweeps.set()
