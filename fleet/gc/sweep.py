"""Applying the orphan matrix (`fleet.gc.decide`) on the controller, one
message at a time, with the sweep's state in Redis (`fleet.store.gc`):

    fleet.gc_sweep (beat, every --gc-interval)       → Sweeper.start
        the live UIDs must be readable, else the whole sweep is skipped;
        take the sweep lock (one sweep at a time across replicas);
        fleet.list_instances on every provider with a live worker,
        link = fleet.record_gc_list(provider, sweep)
    fleet.record_gc_list(outcome, provider, sweep)   → Sweeper.record_list
        take the answer once (pending → answered); validate it
        (`fleet.gc.answers`); read the live UIDs now; decide (pure, inside a
        `gc.sweep` span); fleet.delete_instance per verdict "delete" on that
        provider's queue, link = fleet.record_gc_delete; GC_LAST[provider] = now
    fleet.record_gc_delete(outcome, provider, sweep, provider_id)
                                                      → Sweeper.record_delete: count it
    the sweep's deadline (call timeout + grace)      → Sweeper.lapse: providers
        that never answered are skipped (`no-answer`); a timer in the process
        that started the sweep, and again the next sweep's start, whichever first

A provider whose list failed, was invalid, never came, or came when the
live UIDs could not be read, is skipped for that sweep and counted
(`proxy_operator_gc_skipped_total{provider,reason}`); the others are swept.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from fleet.celery import routing
from fleet.celery.calls import CallOutcome, OutcomeError
from fleet.gc import answers, metrics
from fleet.gc.decide import DEFAULT_MAX_DELETES, EVERY_NAMESPACE, decide_all, short_duration
from fleet.gc.live import LiveUids
from fleet.store import StoreError
from fleet.store.gc import GcState
from fleet.tracing import span

log = logging.getLogger("fleet.gc")

GRACE = 30.0  # seconds past the list's deadline its answer may still be queued on fleet.controller
SWEPT = "swept"

# send(task, kwargs, link task, link kwargs): a provider call whose answer goes to the link
Send = Callable[[str, dict[str, Any], str, dict[str, Any]], None]
Timer = Callable[[float, Callable[[], object]], None]


def _thread_timer(delay: float, fn: Callable[[], object]) -> None:
    t = threading.Timer(max(0.0, delay), fn)
    t.daemon = True
    t.start()


@dataclass(frozen=True)
class Policy:
    installation: str
    min_age: float
    call_timeout: float  # of each list and delete
    interval: float  # between sweeps (how long a sweep record is kept for the next one)
    max_deletes: int = DEFAULT_MAX_DELETES  # per provider and sweep
    namespaces: tuple[str, ...] = EVERY_NAMESPACE  # whose Proxies the live set covers (rule 4, the namespace guard)

    @property
    def deadline_after(self) -> float:
        return self.call_timeout + min(GRACE, self.call_timeout)


class Sweeper:
    def __init__(self, state: GcState, providers: Iterable[str], live: LiveUids | None, no_source: str,
                 workers: Callable[[], Iterable[str]], send: Send, policy: Policy, counters: metrics.GcCounters,
                 clock: Callable[[], float] = time.time, timer: Timer = _thread_timer) -> None:
        self.state, self.providers, self.live, self.no_source = state, tuple(providers), live, no_source
        self.workers, self.send, self.policy, self.counters = workers, send, policy, counters
        self.clock, self.timer = clock, timer

    def reconfigure(self, providers: Iterable[str]) -> None:
        """A reloaded providers config: the next sweeps ask these providers,
        answers of removed ones are dropped, added ones get counter series."""
        self.providers = tuple(providers)
        self.counters.reconfigure(self.providers)

    # -- a sweep begins --------------------------------------------------------------------

    def start(self) -> str:
        """Begin a sweep; what happened, for logs and tests."""
        if self.live is None:
            return self._skip_all(metrics.NO_SOURCE, self.no_source)
        try:
            self.live()  # vouch for the live set before asking anyone for a list
        except Exception as exc:
            return self._skip_all(metrics.LIVE_UNAVAILABLE, str(exc))
        now = self.clock()
        try:
            live_workers = set(self.workers())
        except StoreError as exc:
            return self._skip_all(metrics.STORE_ERROR, str(exc))
        send_to = [p for p in self.providers if p in live_workers]
        sweep = uuid.uuid4().hex
        deadline = now + self.policy.deadline_after
        try:
            started, unanswered = self.state.begin(sweep, send_to, now, deadline,
                                                   ttl=self.policy.deadline_after + 2 * self.policy.interval + 60)
        except StoreError as exc:
            return self._skip_all(metrics.STORE_ERROR, str(exc))
        for p in unanswered:
            self._skip(p, metrics.NO_ANSWER, "no list answer came within the previous sweep's deadline")
        if not started:
            return self._skip_all(metrics.IN_PROGRESS, "the previous sweep still waits for list answers")
        for p in self.providers:
            if p not in live_workers:
                self._skip(p, metrics.NO_WORKER, f"no live worker consumes {routing.provider_queue(p)}")
        for p in send_to:
            try:
                self.send(routing.LIST_INSTANCES, {"provider": p, "timeout": self.policy.call_timeout},
                          routing.RECORD_GC_LIST, {"provider": p, "sweep": sweep})
            except Exception as exc:  # the broker: this provider lapses to no-answer at the deadline
                log.warning("GC: could not send the list", extra={"fields": {"provider": p, "error": str(exc)[:300]}})
        self.timer(deadline - now + 0.5, lambda: self.lapse(sweep))
        log.info("GC sweep started", extra={"fields": {"sweep": sweep, "providers": send_to}})
        return f"started {sweep}"

    def lapse(self, sweep: str) -> list[str]:
        """Skip the providers of `sweep` that never answered, once its deadline passed."""
        try:
            gone = self.state.lapse(sweep, self.clock())
        except StoreError as exc:
            log.warning("GC: could not close the sweep", extra={"fields": {"sweep": sweep, "error": str(exc)[:300]}})
            return []
        for p in gone:
            self._skip(p, metrics.NO_ANSWER, f"no list answer within {short_duration(self.policy.deadline_after)}")
        return gone

    # -- a provider's list answer -----------------------------------------------------------

    def record_list(self, outcome: Any, provider: str, sweep: str) -> str:
        if provider not in self.providers:
            log.warning("GC: dropped a list answer of an unconfigured provider", extra={"fields": {"provider": provider[:63]}})
            return "dropped: unconfigured provider"
        try:
            if not self.state.take(sweep, provider):
                log.info("GC: dropped a list answer not awaited (an older sweep's, late, or a redelivery)",
                         extra={"fields": {"provider": provider, "sweep": sweep[:64]}})
                return "dropped: not awaited"
        except StoreError as exc:
            log.warning("GC: dropped a list answer (Redis)", extra={"fields": {"provider": provider, "error": str(exc)[:300]}})
            return "dropped: store error"
        answer = answers.parse(outcome, provider)
        if answer.failed:
            return self._settle_skip(sweep, provider, metrics.LIST_FAILED, f"the list failed: {answer.failed}")
        if answer.invalid:
            return self._settle_skip(sweep, provider, metrics.INVALID_ANSWER, answer.invalid)
        assert self.live is not None  # a sweep is only started with a source
        try:
            live = self.live()
        except Exception as exc:
            return self._settle_skip(sweep, provider, metrics.LIVE_UNAVAILABLE, str(exc))
        now = self.clock()
        p = self.policy
        with span("gc.sweep", **{"provider.name": provider, "gc.sweep": sweep}) as s:
            verdicts = decide_all(answer.instances, live, p.installation, p.min_age, now, p.max_deletes, p.namespaces)
            deletes = [v for v in verdicts if v.delete]
            unsent = 0
            for v in deletes:
                log.info("GC: deleting an orphan", extra={"fields": {
                    "provider": provider, "instance": v.instance.id, "uid": v.instance.uid, "why": v.why,
                    "age": "unknown" if v.age is None else short_duration(v.age)}})
                try:
                    self.send(routing.DELETE_INSTANCE,
                              {"provider": provider, "provider_id": v.instance.id, "timeout": p.call_timeout},
                              routing.RECORD_GC_DELETE, {"provider": provider, "sweep": sweep, "provider_id": v.instance.id})
                except Exception as exc:  # the broker: the next sweep decides again
                    unsent += 1
                    log.warning("GC: could not send a delete", extra={"fields": {"provider": provider, "error": str(exc)[:300]}})
            s.set_attribute("gc.listed", len(answer.instances) + answer.malformed)
            s.set_attribute("gc.malformed", answer.malformed)
            s.set_attribute("gc.live", len(live))
            s.set_attribute("gc.deleted", len(deletes))
            s.set_attribute("gc.kept", len(verdicts) - len(deletes))
        if answer.malformed:
            log.warning("GC: left out malformed instances of the list (kept)",
                        extra={"fields": {"provider": provider, "malformed": answer.malformed}})
        if unsent:
            return self._settle_skip(sweep, provider, metrics.DELETE_FAILED, f"{unsent} delete(s) could not be sent")
        try:
            self.state.set_last(provider, now)
            self.state.settle(sweep, provider, SWEPT)
        except StoreError as exc:
            log.warning("GC: could not stamp the sweep", extra={"fields": {"provider": provider, "error": str(exc)[:300]}})
        log.info("GC: provider swept", extra={"fields": {"provider": provider, "listed": len(verdicts),
                                                          "deleting": len(deletes), "malformed": answer.malformed}})
        return f"swept: {len(deletes)} to delete, {len(verdicts) - len(deletes)} kept"

    # -- a delete's answer ------------------------------------------------------------------

    def record_delete(self, outcome: Any, provider: str, sweep: str, provider_id: str) -> str:
        if not isinstance(outcome, dict) or outcome.get("provider") != provider or outcome.get("op") != "delete":
            log.warning("GC: dropped a malformed delete answer", extra={"fields": {"provider": provider[:63]}})
            return "dropped"
        try:
            out = CallOutcome.from_message(outcome)
            ok, message = out.ok, out.message
        except OutcomeError as exc:  # ours, but unreadable: not a delete we can count as done
            ok, message = False, f"an unreadable answer: {exc}"
        if ok:
            self.counters.delete(provider)
            log.info("GC: deleted an orphan", extra={"fields": {"provider": provider, "instance": provider_id}})
            return "deleted"
        self.counters.skip(provider, metrics.DELETE_FAILED)
        log.warning("GC: an orphan's delete failed (the next sweep tries again)", extra={"fields": {
            "provider": provider, "instance": provider_id, "error": answers.cut(message)}})
        return "failed"

    # -- skips ---------------------------------------------------------------------------------

    def _skip_all(self, reason: str, why: str) -> str:
        self.counters.skip(metrics.ALL, reason)
        log.warning("GC sweep skipped: %s", why[:500], extra={"fields": {"reason": reason}})
        return f"skipped: {reason}"

    def _skip(self, provider: str, reason: str, why: str) -> None:
        self.counters.skip(provider, reason)
        log.warning("GC: provider skipped this sweep: %s", why[:500], extra={"fields": {"provider": provider, "reason": reason}})

    def _settle_skip(self, sweep: str, provider: str, reason: str, why: str) -> str:
        self._skip(provider, reason, why)
        with contextlib.suppress(StoreError):  # the record lapses with its TTL; the skip is counted already
            self.state.settle(sweep, provider, reason)
        return f"skipped: {reason}"
