"""The beat schedule as data: `Entry` values, built from the settings and the
providers config at every start (nothing when checks are off).

Two entries: the check round, every interval, fanned out into one
`fleet.check_provider` per provider (`beat.fanout`; none when checks are
off), and the orphan GC sweep, one `fleet.gc_sweep` to the controller every
--gc-interval (none when GC is off; not fanned out: the controller asks
every provider for its list itself, `fleet.gc.sweep`). An entry names its
task and arguments, never a queue: `fleet.celery.routing` places every message. The
overdue sweep is not here: the controller runs it on its own clock, so a
dead beat is itself reported (CheckOverdue, "is fleet beat running?")."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from types import MappingProxyType
from typing import Any

from celery import signature

from fleet.celery import routing
from fleet.config import ProvidersConfig
from fleet.settings import Settings

ROUND = "check-round"
GC = "gc-sweep"


@dataclass(frozen=True)
class Entry:
    """One beat entry. `fan_out`: every `every` seconds, one message per
    provider with a live worker, its `kwargs` plus `provider` and the round's
    tick time as `scheduled_at` (the task must take both); otherwise one
    message with `kwargs`. `expires` in seconds; `link`: the task the result
    is handed to."""

    name: str
    task: str
    every: float
    kwargs: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    fan_out: bool = False
    expires: float | None = None
    link: str | None = None


def build_schedule(settings: Settings, config: ProvidersConfig) -> tuple[Entry, ...]:
    entries: list[Entry] = []
    if settings.checks_enabled:
        interval = settings.provider_check_interval
        entries.append(Entry(ROUND, routing.CHECK_PROVIDER, interval, MappingProxyType({"timeout": settings.check_timeout}),
                             fan_out=True, expires=interval, link=routing.RECORD_CHECK))
    if settings.gc_enabled:
        # a sweep not started within one interval is stale: the next one is on its way
        entries.append(Entry(GC, routing.GC_SWEEP, settings.gc_interval, expires=settings.gc_interval))
    return tuple(entries)


def celery_entries(entries: Iterable[Entry]) -> dict[str, dict[str, Any]]:
    """The entries as Celery's beat reads them (`Scheduler.merge_inplace`).
    A fan-out entry's message is built by `beat.fanout`, not by Celery."""
    out: dict[str, dict[str, Any]] = {}
    for e in entries:
        options: dict[str, Any] = {}
        if e.expires is not None:
            options["expires"] = e.expires
        if e.link:
            options["link"] = signature(e.link)
        out[e.name] = {"task": e.task, "schedule": timedelta(seconds=e.every), "kwargs": dict(e.kwargs), "options": options}
    return out
