"""An in-memory beat scheduler fed from the providers config, safe to run
as several replicas.

Nothing is persisted locally (the schedule is derived at every start, and
the image runs with a read-only root filesystem). Every tick first takes or
extends the Redis lock (`fleet.celery.beat`): only its holder sends anything;
a standby ticks every second, sends nothing, and takes over when the lock
expires (at most `beatstate.LOCK_TTL` after the active beat stopped). A
newly active beat resumes one interval after the last round any beat sent,
so a takeover neither doubles nor skips a round; with no round on record the
first is due at once.

The entries are data (`beat.schedule.Entry`). A fan-out entry goes out as
one message per provider with a live worker heartbeat, under a single span
(`beat.fanout.send_round`); the round is stamped in Redis with the schedule
it ran (`fleet.celery.beat.record_round`). Any other entry is sent by Celery's own
scheduler. No entry names a queue: `fleet.celery.routing` places every message.
Decisions are in `beat.decisions`.

The providers file is watched (`fleet.runtime.watch_config`); at each tick
beat follows the config in use, so a reload changes which providers the next
round checks without a restart, and an added provider is checked as soon as
a worker of it is alive.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

from celery.beat import ScheduleEntry, Scheduler
from kombu import Producer

from beat import decisions, fanout
from beat.schedule import Entry, build_schedule, celery_entries
from fleet import runtime
from fleet.celery import beat, presence, routing
from fleet.config import ProvidersConfig
from fleet.store import Store, StoreError

log = logging.getLogger("fleet.beat")

T = TypeVar("T")


class FleetScheduler(Scheduler):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._owner = beat.new_owner()
        self._role: str | None = None
        self._checked = float("-inf")  # monotonic time the lock was last confirmed
        self._redis_failing = False
        self._skipped: set[str] = set()  # providers the last round left out
        self._redis: Store | None = None
        self._doc: dict[str, Any] = {}
        self._interval = 0.0
        self._entries: dict[str, Entry] = {}  # by name: the data behind each Celery entry
        self._providers: list[str] = []
        self._config: ProvidersConfig | None = None  # the config the schedule was built from
        self._added: set[str] = set()  # providers a reload added, until their first check goes out
        self._stop_watch = threading.Event()
        super().__init__(*args, **kwargs)

    def setup_schedule(self) -> None:
        settings = runtime.settings()
        config = runtime.providers_config()
        entries = build_schedule(settings, config)
        self._entries = {e.name: e for e in entries}
        self._use(config)
        self.merge_inplace(celery_entries(entries))  # type: ignore[arg-type, unused-ignore]  # celery-types: Celery takes beat_schedule-style dicts here
        self._redis = beat.connect(settings.broker)
        self._interval = settings.provider_check_interval
        runtime.watch_config(self._stop_watch)
        if not settings.checks_enabled:
            log.info("provider checks are off (--provider-check-interval=0)")
        if not entries:
            log.info("nothing scheduled")
        for e in entries:
            log.info("scheduled %s every %ss", e.name, e.every)

    def _use(self, config: ProvidersConfig) -> None:
        """Send rounds to `config`'s providers (the entries themselves come
        from the settings alone, so a reload changes only who gets a check)."""
        settings = runtime.settings()
        self._config = config
        self._providers = config.names()
        self._doc = beat.schedule_doc(settings.provider_check_interval, settings.check_timeout if settings.checks_enabled else 0,
                                           settings.overdue_after if settings.checks_enabled else 0, settings.installation_id,
                                           config.names(), self._owner, time.time())

    def _follow_config(self) -> None:
        """A reloaded providers file (`fleet.runtime.watch_config`): rounds go
        to the new provider set, an added provider gets its first check as
        soon as a worker of it is alive (not an interval later), a removed one
        none, and the published schedule says so."""
        config = runtime.providers_config()
        if config is self._config or self._config is None:
            return
        added, removed = decisions.provider_changes(self._providers, config.names())
        self._use(config)
        self._added = (self._added | set(added)) - set(removed)
        self._skipped = (self._skipped | set(added)) - set(removed)
        log.info("providers config reloaded: checks go to %s", ", ".join(self._providers) or "no provider",
                 extra={"fields": {"added": ",".join(added), "removed": ",".join(removed)}})
        if self._role == decisions.ACTIVE:
            self._quiet(beat.publish_schedule, {**self._doc, "published_at": time.time()})

    # --- the lock -------------------------------------------------------------------

    def tick(self, *args: Any, **kwargs: Any) -> float:
        self._follow_config()
        if not self._holds_lock():
            return beat.STANDBY_EVERY
        self._catch_up()
        return min(super().tick(*args, **kwargs), beat.RENEW_EVERY)

    def _holds_lock(self) -> bool:
        """Take or extend the lock, at most once a second while active (a
        lock confirmed under a second ago has most of its TTL left)."""
        now = time.monotonic()
        if self._role == decisions.ACTIVE and now - self._checked < 1.0:
            return True
        try:
            held = beat.hold(self._client(), self._owner)
        except StoreError as exc:
            if not self._redis_failing:
                log.warning("beat lock: Redis error, sending nothing until it answers", extra={"fields": {"error": str(exc)}})
            self._redis_failing = True
            held = False
        else:
            if self._redis_failing:
                log.info("beat lock: Redis answers again")
            self._redis_failing = False
        if held:
            self._checked = now
        change = decisions.role_change(self._role, held)
        if change:
            self._role = change
            if change == decisions.ACTIVE:
                self._become_active()
            else:
                holder = self._quiet(beat.holder)
                log.info("beat is standby: another beat holds the lock; sending nothing",
                         extra={"fields": {"beat": self._owner, "holder": holder}})
        return held

    def _become_active(self) -> None:
        r = self._client()
        wall = time.time()
        try:
            last = beat.last_round(r)
            beat.publish_schedule(r, {**self._doc, "published_at": wall})
        except StoreError:
            last = None
        start = decisions.resume_at(last, self._interval, wall)
        for entry in self.schedule.values():
            entry.last_run_at = datetime.fromtimestamp(start, tz=UTC)
        self._heap = None  # rebuilt from the new last-run times at the next tick
        log.info("beat is active: holding the lock, sending rounds",
                 extra={"fields": {"beat": self._owner, "last_round": last, "next_round_in": round(start + self._interval - wall, 1)}})

    def close(self) -> None:
        """Release the lock at a clean stop, so a standby takes over at once."""
        if self._role == decisions.ACTIVE and self._quiet(beat.release, self._owner):
            log.info("beat released the lock", extra={"fields": {"beat": self._owner}})
        self._role = None
        self._stop_watch.set()
        super().close()

    # --- rounds ---------------------------------------------------------------------

    def apply_async(self, entry: ScheduleEntry, producer: Producer | None = None, advance: bool = True, **kwargs: Any) -> Any:
        spec = self._entries.get(entry.name) if entry.name is not None else None
        if spec is None or not spec.fan_out:
            return super().apply_async(entry, producer=producer, advance=advance, **kwargs)
        if advance:
            self.reserve(entry)
        r = self._client()
        live = presence.live_workers(r)
        plan = decisions.plan_round(self._role == decisions.ACTIVE, self._providers, live)
        if not plan.record:
            return None
        tick = time.time()
        fanout.send_round(self.app, spec, plan.send, tick, skipped=len(plan.skip))
        self._note_workers(set(plan.skip))
        try:
            beat.record_round(r, tick, self._doc, list(plan.skip))
        except StoreError as exc:
            log.warning("could not stamp the round in Redis", extra={"fields": {"error": str(exc)}})
        log.debug("check round sent", extra={"fields": {"providers": len(plan.send), "skipped": list(plan.skip)}})
        return None

    def _catch_up(self) -> None:
        """A provider skipped in the last round gets its message of each
        fan-out entry as soon as a worker of it is alive."""
        if not self._skipped:
            return
        live = self._quiet(presence.live_workers) or {}
        back = decisions.catch_up(self._skipped, live)
        tick = time.time()
        for name in back:
            for spec in self._entries.values():
                if spec.fan_out:
                    fanout.send(self.app, spec, name, tick)
        if back:
            self._note_workers(self._skipped - set(back))

    def _note_workers(self, skipped: set[str]) -> None:
        gone, back = decisions.worker_changes(self._skipped, skipped)
        first = [n for n in back if n in self._added]  # an added provider's first check: not a worker "back"
        self._added -= set(back)
        back = [n for n in back if n not in first]
        for name in first:
            log.info("a worker of the added provider %s is alive: sending its checks", name, extra={"fields": {"provider": name}})
        for name in gone:
            log.warning("no live worker for provider %s: not sending its checks to queue %s until one is back "
                        "(its ProviderHealth goes CheckOverdue)", name, routing.provider_queue(name),
                        extra={"fields": {"provider": name}})
        for name in back:
            log.info("a worker of provider %s is back: sending its checks", name, extra={"fields": {"provider": name}})
        self._skipped = skipped

    # --- plumbing -------------------------------------------------------------------

    def _client(self) -> Store:
        if self._redis is None:
            self._redis = beat.connect(runtime.settings().broker)
        return self._redis

    def _quiet(self, fn: Callable[..., T], *args: Any) -> T | None:
        try:
            return fn(self._client(), *args)
        except StoreError:
            return None
