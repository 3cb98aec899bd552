"""Running one provider's Checker under a deadline, for the worker task and
for `fleet check`.

The contract says a Checker never raises and returns promptly at its
deadline; this is where a checker that breaks it is caught, so a broken
backend (or a buggy provider) is a verdict, never a crashed task.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from fleet.logs import kv
from fleet.results import CheckResult
from providers import base
from providers.base import Checker, Deadline, Provider, TargetStatus

log = logging.getLogger("fleet.checking")

# How long past its deadline a checker may take before it is abandoned.
GRACE = 2.0
CHECKER_TARGET = "checker"


def _broken(message: str, latency: float) -> tuple[TargetStatus, ...]:
    return (TargetStatus(CHECKER_TARGET, "", False, base.REASON_CHECKER_ERROR, message, latency),)


def run_check(
    name: str,
    type_name: str,
    build: Callable[[], Provider],
    timeout: float,
    scheduled_at: float | None = None,
    worker: str = "",
) -> CheckResult:
    start = time.monotonic()
    deadline = Deadline(start + timeout)

    def done(supported: bool, targets: tuple[TargetStatus, ...]) -> CheckResult:
        return CheckResult(name, type_name, supported, time.time(), targets, scheduled_at, worker)

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

    thread = threading.Thread(target=call, name=f"check-{name}", daemon=True)
    thread.start()
    thread.join(timeout + GRACE)
    took = time.monotonic() - start
    if thread.is_alive():
        log.error("checker overran its deadline and was abandoned", extra=kv(provider=name, timeout=timeout))
        return done(True, _broken(f"the checker did not return within {timeout + GRACE:g}s", took))
    if "error" in box:
        return done(True, _broken(f"the checker raised {type(box['error']).__name__}: {box['error']}", took))
    return done(True, box["targets"])  # type: ignore[arg-type]
