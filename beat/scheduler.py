"""An in-memory beat scheduler fed from the providers config.

Nothing is persisted (the schedule is derived at every start, and the image
runs with a read-only root filesystem), the first round is due at once, and
a round entry fans out into one check per provider under a single span.
"""

from __future__ import annotations

import logging

from celery.beat import Scheduler

from beat.schedule import ROUND, build_schedule
from fleet import dispatch, runtime

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
            log.info("scheduled a check round every %ss", settings.provider_check_interval)

    def apply_async(self, entry, producer=None, advance=True, **kwargs):
        if entry.name != ROUND:
            return super().apply_async(entry, producer=producer, advance=advance, **kwargs)
        entry = self.reserve(entry) if advance else entry
        kw = entry.kwargs
        sent = dispatch.send_round(self.app, kw["providers"], kw["timeout"], entry.options["expires"])
        log.debug("check round sent", extra={"fields": {"providers": sent}})
        return None
