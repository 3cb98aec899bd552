"""Per-process state, built on first use: settings, the providers config,
provider instances (only the ones this process is asked for, so a worker
imports only its own provider's SDK), and the controller."""

from __future__ import annotations

import functools
import logging
import threading

from fleet.config import ProvidersConfig, load
from fleet.health.results import CheckResult
from fleet.settings import Settings
from providers import registry
from providers.base import Provider

log = logging.getLogger("fleet.runtime")
_lock = threading.Lock()
_providers: dict[str, Provider] = {}
# This process's latest result per provider, for `celery inspect provider_status`.
_last: dict[str, CheckResult] = {}


@functools.cache
def settings() -> Settings:
    return Settings.from_env()


@functools.cache
def providers_config() -> ProvidersConfig:
    path = settings().providers_config
    if not path:
        raise RuntimeError("no providers config: set --providers-config or FLEET_PROVIDERS_CONFIG")
    return load(path)


def provider(name: str) -> Provider:
    with _lock:
        if name not in _providers:
            pc = providers_config().get(name)
            _providers[name] = registry.build(pc.name, pc.type, pc.block)
        return _providers[name]


@functools.cache
def controller():  # -> fleet.controller.Controller; imported late, see module doc
    from fleet.health.recording import Controller

    return Controller.from_settings(settings(), providers_config())


def remember(result: CheckResult) -> None:
    _last[result.provider] = result


def last_result(name: str) -> CheckResult | None:
    return _last.get(name)


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
    """Forget everything (tests)."""
    settings.cache_clear()
    providers_config.cache_clear()
    controller.cache_clear()
    with _lock:
        _providers.clear()
    _last.clear()
