"""An in-memory beat scheduler fed from the providers config.

Nothing is persisted (the schedule is derived at every start, and the image
runs with a read-only root filesystem), and the first round is due at once.
"""

from __future__ import annotations

import logging

from celery.beat import Scheduler

from beat.schedule import build_schedule
from fleet import runtime

log = logging.getLogger("fleet.beat")


class FleetScheduler(Scheduler):
    def setup_schedule(self) -> None:
        settings = runtime.settings()
        entries = build_schedule(settings, runtime.providers_config())
        now = self.app.now()
        for entry in entries.values():
            entry["last_run_at"] = now - entry["schedule"]  # due at start
        self.merge_inplace(entries)
        if not entries:
            log.info("provider checks are off (--provider-check-interval=0): nothing scheduled")
        else:
            log.info("scheduled provider checks: %d entries every %ss", len(entries), settings.provider_check_interval)
