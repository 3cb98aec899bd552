"""The beat schedule as data: one check entry per provider and an overdue
sweep, every interval; nothing when checks are off."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from celery import signature
from celery.beat import BeatLazyFunc

from fleet import routing
from fleet.config import ProvidersConfig
from fleet.settings import Settings


def check_options(name: str, interval: float) -> dict[str, Any]:
    """Queue, expiry (a check older than one interval is stale) and the
    controller callback, for every check message whoever sends it."""
    return {
        "queue": routing.provider_queue(name),
        "expires": interval,
        "link": signature(routing.RECORD_CHECK, queue=routing.CONTROLLER_QUEUE),
    }


def build_schedule(settings: Settings, config: ProvidersConfig) -> dict[str, dict[str, Any]]:
    if not settings.checks_enabled:
        return {}
    every = timedelta(seconds=settings.provider_check_interval)
    entries: dict[str, dict[str, Any]] = {}
    for pc in config.providers:
        entries[f"check:{pc.name}"] = {
            "task": routing.CHECK_PROVIDER,
            "schedule": every,
            "kwargs": {"provider": pc.name, "timeout": settings.check_timeout, "scheduled_at": BeatLazyFunc(time.time)},
            "options": check_options(pc.name, settings.provider_check_interval),
        }
    entries["sweep-overdue"] = {
        "task": routing.SWEEP_OVERDUE,
        "schedule": every,
        "options": {"queue": routing.CONTROLLER_QUEUE, "expires": settings.provider_check_interval},
    }
    return entries
