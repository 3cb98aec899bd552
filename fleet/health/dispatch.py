"""Sending checks: one place for the message shape, whoever sends it (beat's
round, `fleet` tests, benchmarks)."""

from __future__ import annotations

import time
from typing import Any

from celery import Celery, signature

from fleet import routing
from fleet.tracing import span


def check_options(name: str, interval: float) -> dict[str, Any]:
    """Queue, expiry (a check older than one interval is stale) and the
    controller callback."""
    return {
        "queue": routing.provider_queue(name),
        "expires": interval,
        "link": signature(routing.RECORD_CHECK, queue=routing.CONTROLLER_QUEUE),
    }


def send_check(app: Celery, name: str, timeout: float, interval: float, scheduled_at: float | None = None) -> Any:
    return app.send_task(
        routing.CHECK_PROVIDER,
        kwargs={"provider": name, "timeout": timeout, "scheduled_at": scheduled_at or time.time()},
        **check_options(name, interval),
    )


def send_round(app: Celery, names: list[str], timeout: float, interval: float, tick: float | None = None,
               skipped: int = 0) -> int:
    """One round: a check per provider, all under one `fleet.round` span and
    with the same tick time (`tick`, default now). `skipped` counts the
    providers left out (no live worker), for the span."""
    tick = time.time() if tick is None else tick
    with span("fleet.round", **{"fleet.providers": len(names), "fleet.interval": interval, "fleet.skipped": skipped}):
        for name in names:
            send_check(app, name, timeout, interval, tick)
    return len(names)
