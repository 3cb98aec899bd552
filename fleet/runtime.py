"""Per-process state, built on first use: settings, the providers config,
provider instances (only the ones this process is asked for, so a worker
imports only its own provider's SDK). Feature state (the health controller,
the latest results) is the feature's: `fleet.health.runtime`."""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable

from fleet.config import ProvidersConfig, load
from fleet.settings import Settings
from fleet.store import Store
from providers import registry
from providers.base import Provider

log = logging.getLogger("fleet.runtime")
_lock = threading.Lock()
_providers: dict[str, Provider] = {}


@functools.cache
def settings() -> Settings:
    return Settings.from_env()


@functools.cache
def providers_config() -> ProvidersConfig:
    path = settings().providers_config
    if not path:
        raise RuntimeError("no providers config: set --providers-config or FLEET_PROVIDERS_CONFIG")
    return load(path)


@functools.cache
def store() -> Store:
    """This process's Redis connection pool (a provider worker reads staged cloud-init with it)."""
    return Store.from_url(settings().broker)


def provider(name: str) -> Provider:
    with _lock:
        if name not in _providers:
            pc = providers_config().get(name)
            _providers[name] = registry.build(pc.name, pc.type, pc.block)
        return _providers[name]


def built(name: str) -> Provider | None:
    """The provider instance if this process has built it (no side effects)."""
    with _lock:
        return _providers.get(name)


def close_providers() -> None:
    """Close what this process's providers hold open (worker shutdown), so
    nothing is left to finalizers that run after their SDK is torn down."""
    with _lock:
        built = list(_providers.items())
        _providers.clear()
    for name, p in built:
        close = getattr(p, "close", None)
        if close is None:
            continue
        try:
            close()
        except Exception as exc:  # shutting down: say it, don't raise
            log.warning("closing provider %s failed: %s", name, exc)


def reset() -> None:
    """Forget everything (tests), the features' per-process state included."""
    settings.cache_clear()
    providers_config.cache_clear()
    store.cache_clear()
    with _lock:
        _providers.clear()
    for hook in _resets:
        hook()


_resets: list[Callable[[], None]] = []


def on_reset(hook: Callable[[], None]) -> Callable[[], None]:
    """Have `reset` call `hook` too (a feature's per-process state)."""
    _resets.append(hook)
    return hook
