"""Running one provider's Checker under a deadline, for the worker task and
for `fleet check`.

The contract says a Checker never raises and returns promptly at its
deadline; this is where a checker that breaks it is caught, so a broken
backend (or a buggy provider) is a verdict, never a crashed task.

A checker that overruns is abandoned, not killed (Python cannot), so each
process runs at most one check thread per provider, an abandoned one
included (`CheckSlots`, as kvm's per-host probe rule): while it runs, a
round answers `Timeout` "previous check still running" at once and starts
nothing, and the slot frees itself when the thread ends. Without it every
round against a backend that never answers left a thread and a socket
behind.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from fleet.health.results import CheckResult
from fleet.logs import kv
from providers import base
from providers.base import Checker, Deadline, Provider, TargetStatus

log = logging.getLogger("fleet.checking")

# How long past its deadline a checker may take before it is abandoned.
GRACE = 2.0
CHECKER_TARGET = "checker"
STILL_RUNNING = "previous check still running"


class CheckSlots:
    """The in-flight check thread of each provider in this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._threads: dict[str, threading.Thread] = {}

    def start(self, name: str, fn: Callable[[], None]) -> threading.Thread | None:
        """Start `fn` in a thread named `check-<name>` holding the slot, or
        return None, starting nothing, while the previous one still runs."""
        with self._lock:
            if name in self._threads:
                return None
            thread = threading.Thread(target=self._run, args=(name, fn), name=f"check-{name}", daemon=True)
            self._threads[name] = thread
        thread.start()
        return thread

    def _run(self, name: str, fn: Callable[[], None]) -> None:
        try:
            fn()
        finally:
            with self._lock:
                if self._threads.get(name) is threading.current_thread():
                    del self._threads[name]

    def busy(self, name: str) -> bool:
        with self._lock:
            return name in self._threads


SLOTS = CheckSlots()


def _broken(message: str, latency: float) -> tuple[TargetStatus, ...]:
    return (TargetStatus(CHECKER_TARGET, "", False, base.REASON_CHECKER_ERROR, message, latency),)


def _still_running() -> tuple[TargetStatus, ...]:
    return (TargetStatus(CHECKER_TARGET, "", False, base.REASON_TIMEOUT, STILL_RUNNING, 0.0),)


def run_check(
    name: str,
    type_name: str,
    build: Callable[[], Provider],
    timeout: float,
    scheduled_at: float | None = None,
    worker: str = "",
    slots: CheckSlots | None = None,
) -> CheckResult:
    slots = SLOTS if slots is None else slots
    start = time.monotonic()
    deadline = Deadline(start + timeout)

    def done(supported: bool, targets: tuple[TargetStatus, ...]) -> CheckResult:
        return CheckResult(name, type_name, supported, time.time(), targets, scheduled_at, worker)

    if slots.busy(name):
        log.warning("previous check still running, none started", extra=kv(provider=name))
        return done(True, _still_running())
    try:
        provider = build()
    except Exception as exc:
        log.warning("cannot build provider", extra=kv(provider=name, error=str(exc)))
        return done(True, _broken(f"cannot build the provider: {exc}", time.monotonic() - start))
    if not isinstance(provider, Checker):
        return done(False, ())

    box: dict[str, object] = {}

    def call() -> None:
        try:
            box["targets"] = tuple(provider.check(deadline))
        except Exception as exc:  # contract breach, reported as a verdict
            log.exception("checker raised", extra=kv(provider=name))
            box["error"] = exc

    thread = slots.start(name, call)
    if thread is None:  # a concurrent round took the slot since
        return done(True, _still_running())
    thread.join(timeout + GRACE)
    took = time.monotonic() - start
    if thread.is_alive():
        log.error("checker overran its deadline and was abandoned", extra=kv(provider=name, timeout=timeout))
        return done(True, _broken(f"the checker did not return within {timeout + GRACE:g}s", took))
    if "error" in box:
        return done(True, _broken(f"the checker raised {type(box['error']).__name__}: {box['error']}", took))
    return done(True, box["targets"])  # type: ignore[arg-type]
