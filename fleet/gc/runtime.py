"""GC's per-process state on the controller: the sweeper (built on first use
from `fleet.runtime`'s settings and config), its counters, and its part of
the controller's /metrics (`collectors()`)."""

from __future__ import annotations

import functools
from typing import Any

from prometheus_client.registry import Collector

from fleet import runtime
from fleet.celery import compression
from fleet.celery.app import app
from fleet.config import ProvidersConfig
from fleet.gc import live, metrics
from fleet.gc.sweep import Policy, Sweeper


def send(task: str, kwargs: dict[str, Any], link_task: str, link_kwargs: dict[str, Any]) -> None:
    """A provider call on its provider's queue (placed by `fleet.celery.routing`), answered
    to `link_task`; it expires with its deadline, so a call nobody started in
    time never runs late (the sweep has lapsed by then). A list's answer comes compressed."""
    link = app.signature(link_task, kwargs=link_kwargs, options=compression.link_options(task))
    app.send_task(task, kwargs=kwargs, link=link, expires=float(kwargs["timeout"]))


@functools.cache
def counters() -> metrics.GcCounters:
    return metrics.GcCounters(runtime.providers_config().names())


@functools.cache
def sweeper() -> Sweeper:
    s = runtime.settings()
    store = runtime.store()
    try:
        read, _ = live.source(s, store)
        no_source = ""
    except live.NoSource as exc:
        read, no_source = None, str(exc)
    policy = Policy(installation=s.installation_id, min_age=s.gc_min_age, call_timeout=s.provider_call_timeout,
                    interval=s.gc_interval, namespaces=live.scope(s))
    return Sweeper(store.gc, runtime.providers_config().names(), read, no_source, lambda: store.heartbeats.live(),
                   send, policy, counters())


def collectors() -> list[Collector]:
    """GC's part of the controller's /metrics: the last-success gauge (read
    from Redis at scrape time) and this process's counters."""
    store = runtime.store()
    return [metrics.LastSuccessCollector(lambda: runtime.providers_config().names(), store.gc.last), *counters().collectors()]


def reconfigure(new: ProvidersConfig, _change: object = None) -> None:
    """A reloaded providers config: the next sweeps ask its providers (a
    sweep in flight drops the answers of removed ones), and the counters
    have series for the added ones."""
    if sweeper.cache_info().currsize:
        sweeper().reconfigure(new.names())  # its counters too: they are counters()
    else:
        counters().reconfigure(new.names())


@runtime.on_reset
def reset() -> None:
    counters.cache_clear()
    sweeper.cache_clear()
