"""The controller's work, kept thin: store the result, log transitions,
publish ProviderHealth (on a change, else once per --status-heartbeat:
`decide.should_write`); sweep for overdue providers on its own clock (a
thread, not a beat message, so a dead beat is reported too; turning
CheckOverdue is a change, written at once); clean up at start.

Stateless between messages (the previous verdict comes from Redis), so
replicas and restarts behave the same. Status decisions are in
`fleet.health.decide`; which messages are accepted is `fleet.health.messages` (types,
sizes, a `checkedAt` not in the future) and `drop_reason`. Results of
providers this controller does not track are dropped before they reach Redis
or the cluster (a removed provider's worker that still runs must not
recreate its object), and counted. A refused message is counted and logged,
never raised: a raising late-acked task would come back.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from fleet import kube, serving
from fleet.celery import beat
from fleet.celery.routing import provider_queue
from fleet.config import ProvidersConfig
from fleet.health import decide
from fleet.health.limits import LIMITS
from fleet.health.messages import Rejection, provider_of, unpack_args, validate_message
from fleet.health.results import CheckResult, Verdict
from fleet.health.stored import StoredResults
from fleet.logs import kv
from fleet.settings import Settings
from fleet.store import Store

log = logging.getLogger("fleet.controller")

DROPPED = "dropped"  # record's outcome for a result refused or of a provider not tracked


def drop_reason(provider: str, configured: set[str], checks_enabled: bool) -> str | None:
    """Why a result of `provider` must not be recorded, or None to record it."""
    if provider not in configured:
        return serving.DROP_UNCONFIGURED
    if not checks_enabled:
        return serving.DROP_CHECKS_OFF
    return None


class Controller:
    def __init__(
        self, settings: Settings, config: ProvidersConfig, store: Store, writer: kube.Writer | None, mode: str = ""
    ) -> None:
        self.settings = settings
        self.config = config
        self.store = store
        self.results = StoredResults(store)
        self.writer = writer
        self.mode = mode
        self.counters = serving.ControllerCounters(kinds=(kube.PROVIDER_HEALTH.kind,))
        self._configured = set(config.names())
        self._reported: set[tuple[str, str]] = set()  # (provider, reason) this process has logged at WARNING
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: Settings, config: ProvidersConfig) -> Controller:
        store = Store.from_url(settings.broker)
        writer, mode = kube.connect(settings, store.statuses)
        return cls(settings, config, store, writer, mode)

    def tracked(self) -> set[str]:
        """Providers whose results are recorded and whose objects are kept."""
        return set(self._configured) if self.settings.checks_enabled else set()

    def start(self) -> None:
        """At process start: say the mode; delete what belongs to providers
        no longer configured (everything, with checks off)."""
        log.info(self.mode or "controller starting", extra=kv(installation=self.settings.installation_id))
        keep = self.tracked()
        if not self.settings.checks_enabled:
            log.info("provider checks are off (--provider-check-interval=0)")
        gone = self.store.forget(keep)
        if gone:
            log.info("forgot results of unconfigured providers", extra=kv(providers=",".join(gone)))
        if self.writer is not None:
            self.writer.cleanup(kube.PROVIDER_HEALTH, keep, why="of an unconfigured provider")

    def reconfigure(self, config: ProvidersConfig) -> list[str]:
        """A reloaded providers config: track its providers from now on (an
        added one is expected, and CheckOverdue if no result comes), and
        forget and delete what belongs to removed ones, as at start. The
        providers forgotten."""
        with self._lock:
            self.config, self._configured = config, set(config.names())
        keep = self.tracked()
        gone = self.store.forget(keep)
        if gone:
            log.info("forgot results of providers no longer configured", extra=kv(providers=",".join(gone)))
        if self.writer is not None:
            self.writer.cleanup(kube.PROVIDER_HEALTH, keep, why="of an unconfigured provider")
        return list(gone)

    def _drop(self, provider: str, reason: str, field: str = "", detail: str = "") -> str:
        """Count a dropped result; log it once per provider and reason (then at
        DEBUG), with the field that failed. The set of logged pairs is bounded."""
        self.counters.dropped(reason)
        with self._lock:
            first = (provider, reason) not in self._reported and len(self._reported) < LIMITS.max_reported
            if first:
                self._reported.add((provider, reason))
        if field:
            log.log(logging.WARNING if first else logging.DEBUG, "dropped an invalid check result",
                    extra=kv(provider=provider, reason=reason, field=field, detail=detail))
        else:
            log.log(logging.WARNING if first else logging.DEBUG, "dropped a result of a provider this controller does not track",
                    extra=kv(provider=provider, reason=reason))
        return DROPPED

    def reject(self, provider: str, why: Rejection) -> str:
        return self._drop(provider, why.reason, why.field or "message", why.detail)

    def record_message(self, args: tuple[Any, ...], kwargs: dict[str, Any], now: float | None = None,
                       body_bounded: bool = False) -> str:
        """The task boundary: validate the call and its result, then `record`.
        `body_bounded`: the encoded message was refused over the size limit
        before it was decoded (`tasks.controller.bounded_strategy`)."""
        raw = unpack_args(args, kwargs)
        if isinstance(raw, Rejection):
            return self.reject("?", raw)
        got = validate_message(raw, time.time() if now is None else now, body_bounded=body_bounded)
        if isinstance(got, Rejection):
            return self.reject(provider_of(raw), got)
        return self.record(got)

    def _status_entry(self, name: str) -> tuple[str, str | None, str] | None:
        """The writer's cache entry of `name`'s ProviderHealth, for `save` to
        read in its round trip, when the writer's cache is this store's."""
        if self.writer is None or self.writer.cache is not self.store.statuses:
            return None
        return (kube.PROVIDER_HEALTH.plural, None, name)

    def _publish(self, name: str, checked_at: float | None, build: Callable[[dict[str, Any]], dict[str, Any]],
                 **read: Any) -> str:
        """`read`: `cached_entry=` the cache entry read already (`Writer.publish`)."""
        if self.writer is None:
            return "stored"
        outcome = self.writer.publish(
            kube.PROVIDER_HEALTH, name, None,
            lambda current: decide.decide(current, build, checked_at, time.time(), self.settings.status_heartbeat),
            **read,
        )
        if outcome == kube.FOREIGN:
            self.counters.skipped_foreign(kube.PROVIDER_HEALTH.kind)
        return outcome

    def record(self, result: CheckResult) -> str:
        reason = drop_reason(result.provider, self._configured, self.settings.checks_enabled)
        if reason is not None:
            return self._drop(result.provider, reason)
        result = dataclasses.replace(result, recorded_at=time.time())
        entry = self._status_entry(result.provider)
        # one round trip: the compare-and-set, the previous result and the status cache entry
        saved = self.results.save(result, status=entry)
        if not saved.stored:
            log.debug("dropped a result no newer than the stored one", extra=kv(provider=result.provider))
            return "stale"
        for t in decide.transitions(saved.previous, result):
            log.log(t.level, t.message, extra=kv(**t.fields))
        return self._publish(result.provider, result.checked_at, lambda prev: decide.build_status(prev, result),
                             **({"cached_entry": saved.cached} if entry is not None else {}))

    def sweep_overdue(self, now: float | None = None) -> list[str]:
        """Mark providers without a fresh result CheckOverdue (none with checks
        off: a late sweep message must not recreate what start-up deleted)."""
        if not self.settings.checks_enabled:
            return []
        now = time.time() if now is None else now
        after = self.settings.overdue_after
        last_round = beat.last_round(self.store)
        stopped = decide.rounds_stopped(last_round, now, after)
        overdue = []
        for pc in self.config.providers:
            last = self.results.latest(pc.name)
            seen = self.store.marks.first_seen(pc.name, now)
            checked = last.checked_at if last else None
            if not decide.is_overdue(checked, seen, now, after):
                continue
            overdue.append(pc.name)
            v = decide.overdue_verdict(checked, provider_queue(pc.name), after, stopped, last_round)
            if self.store.marks.mark_overdue(pc.name):
                log.warning("provider check overdue", extra=kv(provider=pc.name, message=v.message))

            def build(prev: dict[str, Any], type_name: str = pc.type, v: Verdict = v) -> dict[str, Any]:
                return decide.overdue_status(prev, type_name, v, now)

            self._publish(pc.name, None, build)
        return overdue

    def sweep_every(self) -> float:
        """How often the controller sweeps on its own clock: often enough that
        CheckOverdue shows within a fraction of an interval of being due."""
        return max(1.0, min(self.settings.provider_check_interval / 2, 30.0))

    def run_sweeps(self, stop: threading.Event) -> threading.Thread | None:
        """Sweep for overdue providers every `sweep_every` s in a daemon thread
        until `stop` is set: on the controller's clock, not beat's, so a dead
        beat is reported rather than silently freezing every status."""
        if not self.settings.checks_enabled:
            return None

        def loop() -> None:
            while not stop.wait(self.sweep_every()):
                try:
                    self.sweep_overdue()
                except Exception as exc:  # Redis or the API down: the next sweep tries again
                    log.warning("overdue sweep failed", extra=kv(error=f"{type(exc).__name__}: {exc}"))

        thread = threading.Thread(target=loop, name="fleet-overdue", daemon=True)
        thread.start()
        return thread
