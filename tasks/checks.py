"""`fleet.check_provider`: runs on `provider.<name>`, in that provider's worker."""

from __future__ import annotations

from typing import Any

from celery import Task, signals

from fleet import heartbeat, roles, routing, runtime
from fleet.app import app
from fleet.health import runtime as health
from fleet.health.checking import run_check
from fleet.tracing import span


@app.task(name=routing.CHECK_PROVIDER, bind=True)
def check_provider(self: Task[..., dict[str, Any]], provider: str, timeout: float, scheduled_at: float | None = None) -> dict[str, Any]:
    """Check one provider under `timeout`; the result goes on to
    `fleet.record_check` (linked by the sender)."""
    pc = runtime.providers_config().get(provider)
    with span("provider.check", **{"provider.name": pc.name, "provider.type": pc.type}) as s:
        result = run_check(pc.name, pc.type, lambda: runtime.provider(provider), timeout, scheduled_at, self.request.hostname or "")
        s.set_attribute("provider.targets", len(result.targets))
        s.set_attribute("provider.targets_not_ready", sum(not t.ready for t in result.targets))
    health.remember(result)
    return result.to_dict()


@signals.worker_ready.connect
def _start_heartbeat(sender: object = None, **_: object) -> None:
    """Announce which providers this worker serves (see fleet.heartbeat)."""
    role = roles.of_consumer(sender)
    if role.kind == roles.PROVIDER_WORKER:
        heartbeat.start(runtime.settings().broker, list(role.providers), getattr(sender, "hostname", "") or "")


@signals.worker_shutdown.connect
def _close_providers(**_: object) -> None:
    """Close provider connections while their SDKs are still loaded (kvm:
    otherwise `virConnect.__del__` complains at interpreter exit)."""
    runtime.close_providers()
