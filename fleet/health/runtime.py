"""The health feature's per-process state: the controller (built on first
use from `fleet.runtime`'s settings and config) and this worker's latest
result per provider, which `celery inspect provider_status` reports
(registered with `fleet.celery.inspection`)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from fleet import runtime
from fleet.celery import inspection
from fleet.durations import rfc3339
from fleet.health.results import CheckResult

if TYPE_CHECKING:
    from fleet.health.recording import Controller

# This process's latest result per provider, for `celery inspect provider_status`.
_last: dict[str, CheckResult] = {}


@functools.cache
def controller() -> Controller:
    # imported late: a provider worker never loads the controller's Kubernetes writer
    from fleet.health.recording import Controller

    return Controller.from_settings(runtime.settings(), runtime.providers_config())


def remember(result: CheckResult) -> None:
    _last[result.provider] = result


def last_result(name: str) -> CheckResult | None:
    return _last.get(name)


@inspection.reports
def last_check(name: str) -> dict[str, Any]:
    """A provider's last check in `provider_status`: its time and target verdicts."""
    last = last_result(name)
    return {
        "lastCheck": rfc3339(last.checked_at) if last else None,
        "targets": [
            {"name": t.name, "ready": t.ready, "reason": t.reason, "message": t.message} for t in (last.targets if last else ())
        ],
    }


@runtime.on_reset
def reset() -> None:
    controller.cache_clear()
    _last.clear()
