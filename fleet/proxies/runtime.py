"""The proxies feature's per-process state on the controller: which objects
it reconciles (standalone manifests with `--proxies`, else the cluster's Proxy
objects when the controller has a cluster, else none), the reconciler, and
the threads that drive it. A reloaded providers config (`fleet.runtime`)
makes every Proxy of a provider it added, removed or changed due at once
(`reconfigure`): one waiting on ProviderNotConfigured is released without
waiting for the resync, one of a removed provider turns Failed."""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Collection, Iterable
from typing import Any

from fleet import kube, reload, runtime
from fleet.celery import compression, routing
from fleet.celery.app import app
from fleet.config import ProvidersConfig
from fleet.proxies.reconciler import Objects, Reconciler, Timing
from fleet.proxies.standalone import Standalone

log = logging.getLogger("fleet.proxies")


def send(task: str, kwargs: dict[str, Any], link: dict[str, Any]) -> None:
    """A provider call on its provider's queue, answered to `fleet.record_proxy_call`.
    It expires with its deadline: a call nobody started in time is taken again
    by the reconciler, never run late."""
    app.send_task(task, kwargs=kwargs, link=app.signature(routing.RECORD_PROXY_CALL, kwargs=link),
                  expires=float(kwargs["timeout"]))


def send_list(kwargs: dict[str, Any], link: dict[str, Any]) -> None:
    """A provider's resync list on its queue, answered (compressed) to `fleet.record_proxy_list`; it expires with its deadline."""
    answer = app.signature(routing.RECORD_PROXY_LIST, kwargs=link, options=compression.link_options(routing.LIST_INSTANCES))
    app.send_task(routing.LIST_INSTANCES, kwargs=kwargs, link=answer, expires=float(kwargs["timeout"]))


@functools.cache
def mode() -> tuple[Objects | None, str]:
    s = runtime.settings()
    store = runtime.store().proxies
    if s.proxies:
        return Standalone(store, s.proxies, s.installation_id, s.secrets_dir), f"Proxies: standalone, from {s.proxies}"
    cfg, _ = kube.cluster_configuration(s)
    if cfg is None:
        return None, "Proxies: off (no --proxies manifests and no cluster)"
    from fleet.proxies.cluster import Cluster

    scope = ", ".join(s.proxy_scope) if s.proxy_scope != ("*",) else "every namespace"
    return Cluster.connect(s), f"Proxies: watching proxies.crawl.example.com on {cfg.host} in {scope}"


@functools.cache
def reconciler() -> Reconciler | None:
    objects, _ = mode()
    if objects is None:
        return None
    s = runtime.settings()
    timing = Timing(poll=s.proxy_poll_interval, resync=s.proxy_resync_interval, call_timeout=s.provider_call_timeout,
                    max_calls=s.max_provider_calls)
    return Reconciler(runtime.store().proxies, objects, runtime.providers_config, send, timing, send_list=send_list)


def affected(providers: Iterable[tuple[str, str]], touched: Collection[str]) -> list[str]:
    """The Proxies (key, its spec.provider) a config change concerns (pure)."""
    return sorted(key for key, provider in providers if provider in touched)


def reconfigure(new: ProvidersConfig, change: reload.Change) -> int:
    """After a reload: the Proxies of the providers it touched are due now. How many."""
    rec = reconciler()
    if rec is None or not change or not rec.objects.ready():
        return 0  # not listed yet: the first resync schedules every Proxy anyway
    pairs = []
    known = rec.objects.keys()
    for key in known:
        p = rec.objects.get(key)
        if p is not None:
            pairs.append((key, p.spec.provider))
    keys = affected(pairs, change.touched)
    now = rec.clock()
    for key in keys:
        rec.store.schedule(key, now)
    if keys:
        rec.wake.set()
        log.info("providers config reloaded: %d Proxies due now", len(keys),
                 extra={"fields": {"providers": ",".join(sorted(change.touched))}})
    return len(keys)


def start(stop: threading.Event) -> list[threading.Thread]:
    """The source of Proxy objects and the reconcile loop, as daemon threads."""
    objects, said = mode()
    log.info(said)
    rec = reconciler()
    if objects is None or rec is None:
        return []
    from fleet.proxies.cluster import Cluster

    if isinstance(objects, Cluster):
        objects.claim()  # ScopeConflict when another installation serves one of its namespaces: start-up fails

    def changed(keys: Any) -> None:
        rec.store.schedule_now(keys, rec.clock())  # one command for all (a new fleet's manifest: every Proxy)
        rec.wake.set()

    threads = [threading.Thread(target=objects.run, args=(stop, changed), name="fleet-proxy-source", daemon=True),
               threading.Thread(target=rec.run, args=(stop,), name="fleet-proxy-loop", daemon=True)]
    for t in threads:
        t.start()
    return threads


@runtime.on_reset
def reset() -> None:
    mode.cache_clear()
    reconciler.cache_clear()
