"""Fanning a beat entry out: one message per provider, all with the round's
tick time, under one `fleet.round` span, so a round is one trace from beat
through each provider worker to the controller. `beat.scheduler` decides
who gets one (`beat.decisions.plan_round`) and stamps the round; this
module only builds and sends. No queue: `fleet.celery.routing` places each message
by its `provider`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from celery import Celery, signature

from beat.schedule import Entry
from fleet.tracing import span


def message(entry: Entry, provider: str, tick: float) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """(task, kwargs, options) of `entry`'s message to `provider` in the round of `tick`."""
    options: dict[str, Any] = {}
    if entry.expires is not None:
        options["expires"] = entry.expires
    if entry.link:
        options["link"] = signature(entry.link)
    return entry.task, {"provider": provider, **entry.kwargs, "scheduled_at": tick}, options


def send(app: Celery, entry: Entry, provider: str, tick: float) -> Any:
    task, kwargs, options = message(entry, provider, tick)
    return app.send_task(task, kwargs=kwargs, **options)


def send_round(app: Celery, entry: Entry, providers: Iterable[str], tick: float, skipped: int = 0) -> int:
    """One round of `entry`: a message per provider in `providers`, under one
    span; `skipped` counts the providers left out (no live worker), for the span."""
    names = list(providers)
    with span("fleet.round", **{"fleet.entry": entry.name, "fleet.providers": len(names), "fleet.interval": entry.every,
                                "fleet.skipped": skipped}):
        for name in names:
            send(app, entry, name, tick)
    return len(names)
