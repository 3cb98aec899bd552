"""The beat schedule as data: a check round every interval; nothing when
checks are off. The round entry is expanded by
`beat.scheduler.FleetScheduler` into one check per provider. The overdue
sweep is not here: the controller runs it on its own clock, so a dead beat
is itself reported (CheckOverdue, "is fleet beat running?")."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from fleet import routing
from fleet.config import ProvidersConfig
from fleet.settings import Settings

ROUND = "check-round"


def build_schedule(settings: Settings, config: ProvidersConfig) -> dict[str, dict[str, Any]]:
    if not settings.checks_enabled:
        return {}
    every = timedelta(seconds=settings.provider_check_interval)
    return {
        ROUND: {
            "task": routing.CHECK_PROVIDER,
            "schedule": every,
            "kwargs": {"providers": config.names(), "timeout": settings.check_timeout},
            "options": {"expires": settings.provider_check_interval},
        },
    }
