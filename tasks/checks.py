"""`fleet.check_provider`: runs on `provider.<name>`, in that provider's worker."""

from __future__ import annotations

import threading
import time
from typing import Any

from celery import Task, signals

from fleet import runtime
from fleet.celery import presence, roles, routing
from fleet.celery.app import app
from fleet.health import runtime as health
from fleet.health.checking import CHECKER_TARGET, run_check
from fleet.health.results import CheckResult
from fleet.tracing import span
from providers import base
from providers.base import TargetStatus


@app.task(name=routing.CHECK_PROVIDER, bind=True)
def check_provider(self: Task[..., dict[str, Any]], provider: str, timeout: float, scheduled_at: float | None = None) -> dict[str, Any]:
    """Check one provider under `timeout`; the result goes on to
    `fleet.record_check` (linked by the sender)."""
    try:
        pc = runtime.providers_config().get(provider)
    except KeyError as exc:  # removed from this worker's providers file by a reload: say so, as a verdict
        result = not_configured(provider, str(exc.args[0]), scheduled_at, self.request.hostname or "")
        health.remember(result)
        return result.to_dict()
    with span("provider.check", **{"provider.name": pc.name, "provider.type": pc.type}) as s:
        result = run_check(pc.name, pc.type, lambda: runtime.provider(provider), timeout, scheduled_at, self.request.hostname or "")
        s.set_attribute("provider.targets", len(result.targets))
        s.set_attribute("provider.targets_not_ready", sum(not t.ready for t in result.targets))
    health.remember(result)
    return result.to_dict()


def not_configured(provider: str, why: str, scheduled_at: float | None, worker: str) -> CheckResult:
    """The answer of a check of a provider this worker's config no longer has
    (pure): not ready, the `checker` target saying why."""
    message = f"{why}: this worker's providers file does not configure it"
    return CheckResult(provider, "", True, time.time(),
                       (TargetStatus(CHECKER_TARGET, "", False, base.REASON_CHECKER_ERROR, message, 0.0),), scheduled_at, worker)


_stop_watch = threading.Event()


@signals.worker_ready.connect
def _start_heartbeat(sender: object = None, **_: object) -> None:
    """Announce which providers this worker serves (see fleet.celery.presence), and
    follow changes to the providers file (a changed block rebuilds the
    provider at its next use; a removed one answers "not configured")."""
    role = roles.of_consumer(sender)
    if role.kind == roles.PROVIDER_WORKER:
        presence.start(runtime.settings().broker, list(role.providers), getattr(sender, "hostname", "") or "")
        runtime.watch_config(_stop_watch)


@signals.worker_shutdown.connect
def _close_providers(**_: object) -> None:
    """Close provider connections while their SDKs are still loaded (kvm:
    otherwise `virConnect.__del__` complains at interpreter exit)."""
    _stop_watch.set()
    runtime.close_providers()
