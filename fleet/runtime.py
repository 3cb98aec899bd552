"""Per-process state, built on first use: settings, the providers config,
provider instances (only the ones this process is asked for, so a worker
imports only its own provider's SDK). Feature state (the health controller,
the latest results) is the feature's: `fleet.health.runtime`.

The providers config is the one in use *now*: `watch_config` (started by the
controller, beat and each provider worker) re-reads the file when it
changes (`fleet.reload`) and switches to a new one only when it is valid
whole. A switch closes the built providers whose block changed or that
were removed (after the longest call or check has had time to end), so the
next call builds from the new block, and then calls the hooks registered
with `on_config_change` (the controller's features). Read the config through
`providers_config()` at each use, never keep it."""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable

from fleet import reload
from fleet.config import ProvidersConfig, load_bytes, read_bytes
from fleet.settings import Settings
from fleet.store import Store
from providers import registry
from providers.base import Provider

log = logging.getLogger("fleet.runtime")
_lock = threading.Lock()  # the built providers; taken before _config_lock
_providers: dict[str, Provider] = {}
_retiring: dict[int, tuple[str, Provider, threading.Timer]] = {}  # replaced instances waiting to be closed
_config_lock = threading.Lock()
_config: ProvidersConfig | None = None
_config_digest = ""  # sha256 of the bytes `_config` was first loaded from (the watch starts from it)
_watching = False
RETIRE_SLACK = 5.0  # seconds past the longest call or check before a replaced provider is closed


@functools.cache
def settings() -> Settings:
    return Settings.from_env()


def providers_config() -> ProvidersConfig:
    """The providers config in use now (loaded on first use; raises ConfigError)."""
    return _loaded()[1]


def _loaded() -> tuple[str, ProvidersConfig]:
    global _config, _config_digest
    with _config_lock:
        if _config is None:
            path = settings().providers_config
            if not path:
                raise RuntimeError("no providers config: set --providers-config or FLEET_PROVIDERS_CONFIG")
            data = read_bytes(path)
            _config, _config_digest = load_bytes(data, path), reload.digest_of(data)
            reload.STATUS.loaded(time.time())
        return _config_digest, _config


def watch_config(stop: threading.Event, every: float = reload.RELOAD_EVERY) -> threading.Thread | None:
    """Re-read the providers file every `every` seconds until `stop`, in a
    daemon thread (once per process: None if already watching)."""
    global _watching
    digest, config = _loaded()
    path = settings().providers_config
    assert path  # _loaded raised otherwise
    with _config_lock:
        if _watching:
            return None
        _watching = True
    watcher = reload.Watcher(path, (digest, config), lambda: read_bytes(path), lambda data: load_bytes(data, path),
                             _switch, every=every)
    thread = threading.Thread(target=watcher.run, args=(stop,), name="fleet-config-reload", daemon=True)
    thread.start()
    log.info("watching the providers file for changes", extra={"fields": {"file": path, "every": f"{every:g}s"}})
    return thread


def _switch(new: ProvidersConfig, change: reload.Change) -> None:
    """Use `new` from now on: built providers it changes or removes are
    closed once their calls can have ended, then the hooks run."""
    global _config
    with _lock:
        with _config_lock:
            _config = new
        retired = [(n, _providers.pop(n)) for n in reload.to_retire(change, _providers)]
    for name, p in retired:
        _retire(name, p, retire_after())
    for hook in list(_changes):
        try:
            hook(new, change)
        except Exception:  # one feature's failure must not keep the others on the old config
            log.exception("applying the reloaded providers config failed", extra={"fields": {"hook": getattr(hook, "__qualname__", "?")}})


def retire_after() -> float:
    """How long a replaced provider instance may still be in use: the longest
    provider call or check this process runs, plus slack."""
    s = settings()
    return max(s.provider_call_timeout, s.check_timeout) + RETIRE_SLACK


def _retire(name: str, p: Provider, after: float) -> None:
    if getattr(p, "close", None) is None:
        return
    timer = threading.Timer(after, _close_retired, args=(id(p),))
    timer.daemon = True
    with _lock:
        _retiring[id(p)] = (name, p, timer)
    timer.start()
    log.info("provider rebuilt from the new config at its next use; the old instance closes in %gs", after,
             extra={"fields": {"provider": name}})


def _close_retired(key: int) -> None:
    with _lock:
        entry = _retiring.pop(key, None)
    if entry is not None:
        _close(entry[0], entry[1])


def _close(name: str, p: Provider) -> None:
    close = getattr(p, "close", None)
    if close is None:
        return
    try:
        close()
    except Exception as exc:  # shutting down or replaced: say it, don't raise
        log.warning("closing provider %s failed: %s", name, exc)


_changes: list[Callable[[ProvidersConfig, reload.Change], object]] = []


def on_config_change(hook: Callable[[ProvidersConfig, reload.Change], object]) -> Callable[[ProvidersConfig, reload.Change], object]:
    """Have a switch to a reloaded config call `hook(new, change)` (in the watch thread)."""
    _changes.append(hook)
    return hook


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
        for name, p, timer in _retiring.values():
            timer.cancel()
            built.append((name, p))
        _retiring.clear()
    for name, p in built:
        _close(name, p)


def reset() -> None:
    """Forget everything (tests), the features' per-process state included."""
    global _config, _watching
    settings.cache_clear()
    store.cache_clear()
    with _lock:
        _providers.clear()
        for _name, _p, timer in _retiring.values():
            timer.cancel()
        _retiring.clear()
        with _config_lock:
            _config, _watching = None, False
    _changes.clear()
    for hook in _resets:
        hook()


_resets: list[Callable[[], None]] = []


def on_reset(hook: Callable[[], None]) -> Callable[[], None]:
    """Have `reset` call `hook` too (a feature's per-process state)."""
    _resets.append(hook)
    return hook


EXIT_FOREIGN_DATABASE = 1


def own_database(store_: Store | None = None, installation: str | None = None) -> None:
    """Claim this Redis database for this process's installation (`fleet.store.installation`),
    or end the process with one CRITICAL line naming both installations: two fleets must never
    share queues, locks or leases. Redis not answering yet is not a refusal (the next start checks)."""
    import os

    from fleet.store import StoreError
    from fleet.store.installation import Foreign

    s = store_ or store()
    try:
        s.claim_installation(installation or settings().installation_id)
    except Foreign as exc:
        log.critical("start-up refused: %s", exc)
        logging.shutdown()
        os._exit(EXIT_FOREIGN_DATABASE)
    except StoreError as exc:
        log.info("installation marker not checked: Redis does not answer yet (%s)", type(exc).__name__)
