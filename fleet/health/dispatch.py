"""Sending one check by hand (`fleet` tests, benchmarks), with the same
message as beat's round (`beat.schedule`'s check entry, fanned out by
`beat.fanout`; tests/beat pins the two together). No queue here: the router
(`fleet.celery.routing`) places the check by its `provider` and the callback on the
controller."""

from __future__ import annotations

import time
from typing import Any

from celery import Celery, signature

from fleet.celery import routing


def check_kwargs(name: str, timeout: float, scheduled_at: float) -> dict[str, Any]:
    return {"provider": name, "timeout": timeout, "scheduled_at": scheduled_at}


def check_options(interval: float) -> dict[str, Any]:
    """Expiry (a check older than one interval is stale) and the controller callback."""
    return {"expires": interval, "link": signature(routing.RECORD_CHECK)}


def send_check(app: Celery, name: str, timeout: float, interval: float, scheduled_at: float | None = None) -> Any:
    return app.send_task(routing.CHECK_PROVIDER, kwargs=check_kwargs(name, timeout, scheduled_at or time.time()),
                         **check_options(interval))
