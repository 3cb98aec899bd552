"""The prober process (`fleet prober`): asyncio, one event loop, no Celery.

- Every `interval` it re-reads the Running Proxies' endpoints
  (`fleet:px:endpoints`); a Proxy that left the hash is no longer probed.
- Every interval/4 it renews its membership (`fleet:prober:members`,
  lapsing 1.5 intervals later) and reads the live members; a Proxy is
  probed by the live member with the highest rendezvous score
  (`fleet.prober.share`), so replicas split the Proxies without talking to
  each other and a dead replica's share moves within two intervals (1.5 to
  lapse, a quarter to notice). SIGTERM/SIGINT leave the set at once.
- Each owned Proxy has a timer on the loop at its own phase of the interval
  (`share.phase`), so a share's probes are spread over the interval; at
  most one probe per Proxy is in flight (a tick that finds the previous
  probe still running is skipped and counted), and at most MAX_IN_FLIGHT
  in all. The delay from a probe's scheduled time to its start is kept
  (`delays`) for the periodic log line and the benchmark.
- Each outcome goes through `decide.judge`; a verdict is written only on
  a transition (`store.proxies.put_verdicts`, which makes the Proxy due for
  the controller), and only if the Proxy still has the endpoint (uid, ip,
  port) the probe started with. Verdicts due together share a write: one
  write in flight at a time, the verdicts that come meanwhile go in the
  next (a start or an outage of thousands of Proxies is a few round trips).
  A replica that gains a Proxy (start, restart, another replica gone)
  begins from the stored verdict for that uid, so it announces nothing that
  has not changed.

Redis calls run in threads (`asyncio.to_thread`), never on the loop. The loop
is uvloop's when uvloop is installed (the `api` extra): the same probe costs
about 0.6x the CPU of asyncio's default loop (issue 24); without it, asyncio's,
said so in a log line. The "prober started" line names the loop it runs on.
A steady probe allocates nothing that outlives it (the State comes back the
same, the per-Proxy series are plain lists) and start-up's heap is frozen out
of the cyclic collector (`gc.freeze`), so no full collection walks the
modules and every Proxy's figures while probes wait (issue 24).
"""

from __future__ import annotations

import asyncio
import gc
import importlib.util
import logging
import os
import socket
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from opentelemetry.trace import Status, StatusCode

from fleet import runtime, tracing
from fleet.credentials import Credentials, member_url
from fleet.logs import kv
from fleet.prober import share as sharing
from fleet.prober.decide import Outcome, State, Thresholds, Verdict, judge, restored
from fleet.prober.metrics import ProberSeries
from fleet.prober.probe import probe
from fleet.prober.target import Target, parse_target
from fleet.settings import Settings
from fleet.store import Store, StoreError, target
from fleet.untrusted import raise_open_files_limit

log = logging.getLogger("fleet.prober")

MAX_IN_FLIGHT = 2000  # probes at once, across the share
LAPSE_INTERVALS = 1.5  # a membership lapses this many intervals after its last renewal
STATS_EVERY = 60.0  # seconds between the summary log lines


@dataclass(frozen=True)
class Config:
    target: Target | None
    interval: float = 1.0
    time_limit: float = 5.0
    thresholds: Thresholds = field(default_factory=Thresholds)
    trace: bool = False
    max_in_flight: int = MAX_IN_FLIGHT
    upstream_secrets_dir: str | None = None

    @classmethod
    def from_settings(cls, s: Settings) -> Config:
        return cls(
            target=parse_target(s.probe_target) if s.probe_target else None,
            interval=s.probe_interval, time_limit=s.probe_time_limit,
            thresholds=Thresholds(s.probe_failure_threshold, s.probe_success_threshold), trace=s.traces_probes,
            upstream_secrets_dir=s.prober_upstream_secrets_dir,
        )

    @property
    def beat_every(self) -> float:
        return max(0.05, self.interval / 4)

    @property
    def lapse(self) -> float:
        return max(LAPSE_INTERVALS * self.interval, 3 * self.beat_every)


def member_id() -> str:
    """This replica's name in the membership set: host, pid and a random suffix (a restart is a new member)."""
    return f"{socket.gethostname()[:63]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Delays:
    """Start delays (seconds from a probe's scheduled time to its start), the most recent `keep`."""

    def __init__(self, keep: int = 500_000) -> None:
        self.samples: deque[float] = deque(maxlen=keep)

    def add(self, seconds: float) -> None:
        self.samples.append(seconds)

    def drain(self) -> list[float]:
        out = list(self.samples)
        self.samples.clear()
        return out


def quantile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Prober:
    def __init__(self, store: Store, config: Config, member: str | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.config = config
        self.member = member or member_id()
        self.clock = clock
        self.series = ProberSeries()
        self.credentials = Credentials(config.upstream_secrets_dir)
        self.delays = Delays()
        self.members: list[str] = []
        self.endpoints: dict[str, sharing.Endpoint] = {}
        self.owned: dict[str, sharing.Endpoint] = {}
        self.states: dict[str, State] = {}
        self.probes = self.failed = self.skipped = self.verdicts = 0
        self._decoder = sharing.Endpoints()
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._running: dict[str, asyncio.Task[None]] = {}
        self._sem = asyncio.Semaphore(config.max_in_flight)
        self._lock = asyncio.Lock()
        self._warned: set[str] = set()
        self._invalid_logged: set[str] = set()
        self._verdict_batch: list[tuple[str, str, float, asyncio.Future[None]]] = []
        self._verdict_writer: asyncio.Task[None] | None = None

    # -- the loop ----------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Probe until `stop` is set; then leave the membership set."""
        if self.config.target is None:
            log.info("prober off: no --probe-target configured; idling")
            await stop.wait()
            return
        log.info("prober started", extra=kv(member=self.member, target=str(self.config.target), loop=loop_name(),
                                            interval=self.config.interval, time_limit=self.config.time_limit,
                                            failure_threshold=self.config.thresholds.failures,
                                            success_threshold=self.config.thresholds.successes))
        loops = [asyncio.create_task(self._every(self.config.beat_every, self.beat), name="prober-membership"),
                 asyncio.create_task(self._every(self.config.interval, self.refresh), name="prober-endpoints"),
                 asyncio.create_task(self._every(STATS_EVERY, self._log_stats, first=STATS_EVERY), name="prober-stats")]
        try:
            await stop.wait()
        finally:
            for t in loops:
                t.cancel()
            await asyncio.gather(*loops, return_exceptions=True)
            await self.shutdown()

    async def _every(self, period: float, fn: Callable[[], Any], first: float = 0.0) -> None:
        loop = asyncio.get_running_loop()
        at = loop.time() + first
        while True:
            await asyncio.sleep(max(0.0, at - loop.time()))
            await fn()
            at += period
            if at < loop.time():  # fell behind (a slow Redis): no burst of catch-up calls
                at = loop.time() + period

    async def shutdown(self) -> None:
        for h in self._timers.values():
            h.cancel()
        self._timers.clear()
        running = list(self._running.values())
        if self._verdict_writer is not None:
            running.append(self._verdict_writer)
        for t in running:
            t.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        try:
            await asyncio.to_thread(self.store.prober.leave, self.member)
            log.info("prober stopped; left the membership set", extra=kv(member=self.member))
        except StoreError as exc:
            log.warning("prober stopped; could not leave the membership set (it lapses by itself)",
                        extra=kv(member=self.member, error=type(exc).__name__))

    # -- membership and endpoints -----------------------------------------------------------------

    async def beat(self) -> None:
        now = self.clock()
        try:
            live = await asyncio.to_thread(self.store.prober.beat, self.member, now + self.config.lapse, now)
        except StoreError as exc:
            self._warn("membership", "cannot renew prober membership in Redis; probing the last known share", exc)
            return
        self._recovered("membership")
        if live != self.members:
            if self.members:
                log.info("prober members changed", extra=kv(members=len(live), joined=",".join(sorted(set(live) - set(self.members))),
                                                           left=",".join(sorted(set(self.members) - set(live)))))
            self.members = live
            await self.reassign()

    async def refresh(self) -> None:
        try:
            raw = await asyncio.to_thread(self.store.proxies.endpoints)
        except StoreError as exc:
            self._warn("endpoints", "cannot read the Running Proxies' endpoints from Redis; probing the last known list", exc)
            return
        self._recovered("endpoints")
        endpoints = self._decoder.update(raw)
        for key in set(self._decoder.invalid) - self._invalid_logged:
            log.warning("endpoint document unusable; not probing this Proxy", extra=kv(proxy=key))
        self._invalid_logged = set(self._decoder.invalid)
        if endpoints != self.endpoints:
            self.endpoints = endpoints
            await self.reassign()

    async def reassign(self) -> None:
        """Take the share the current members and endpoints give; drop the rest."""
        async with self._lock:
            wanted = sharing.share(self.members, self.member, self.endpoints)
            for key in set(self.owned) - wanted:
                self._drop(key)
            fresh = [k for k in wanted if k not in self.states or self.states[k].uid != self.endpoints[k].uid]
            stored: dict[str, bytes | str] = {}
            if fresh:
                try:
                    stored = await asyncio.to_thread(self.store.proxies.verdicts)
                except StoreError as exc:
                    self._warn("verdicts", "cannot read stored verdicts; new Proxies start without one", exc)
            for key in fresh:
                self.states[key] = restored(self.endpoints[key].uid, stored.get(key))
            loop = asyncio.get_running_loop()
            for key in wanted:
                if key not in self.owned:
                    self.series.track(key)
                    offset = sharing.phase(key, self.config.interval)
                    when = sharing.next_start(loop.time(), offset, self.config.interval)
                    self._timers[key] = loop.call_at(when, self._tick, key, when)
                self.owned[key] = self.endpoints[key]
            self.series.set_share(len(self.owned))

    def _drop(self, key: str) -> None:
        self.owned.pop(key, None)
        self.states.pop(key, None)
        handle = self._timers.pop(key, None)
        if handle is not None:
            handle.cancel()
        self.series.forget(key)  # a probe still running finds it gone and gives no verdict

    # -- probing ----------------------------------------------------------------------------

    def _tick(self, key: str, when: float) -> None:
        loop = asyncio.get_running_loop()
        if key not in self.owned:
            return
        nxt = when + self.config.interval
        if nxt <= loop.time():  # the loop fell a whole interval behind: skip, do not burst
            nxt = sharing.next_start(loop.time(), sharing.phase(key, self.config.interval), self.config.interval)
        self._timers[key] = loop.call_at(nxt, self._tick, key, nxt)
        if key in self._running:
            self.skipped += 1
            return
        self._running[key] = loop.create_task(self._probe(key, self.owned[key], when))

    async def _probe(self, key: str, ep: sharing.Endpoint, scheduled: float) -> None:
        target = self.config.target
        assert target is not None
        try:
            async with self._sem:
                self.delays.add(asyncio.get_running_loop().time() - scheduled)
                if self.config.trace:
                    outcome = await self._traced(key, ep, target)
                else:
                    outcome = await self._through(ep, target)
            self.probes += 1
            if not outcome.ok:
                self.failed += 1
            self.series.observe(key, outcome.duration, outcome.ok)
            await self.record(key, ep, outcome)
        finally:
            self._running.pop(key, None)

    async def _through(self, ep: sharing.Endpoint, target: Target) -> Outcome:
        """One probe through the endpoint's kind and, for a member that asks for them, its credentials (by
        reference, as the gateway dials it); credentials it does not have: a failed probe saying so."""
        auth = None
        if ep.credentials:
            auth = self.credentials.get(ep.credentials, member=member_url(ep.scheme, ep.ip, ep.port),
                                        username=ep.username)
            if auth is None:
                return Outcome(False, f"no credentials {ep.credentials!r} under --prober-upstream-secrets-dir")
        return await probe(ep.ip, ep.port, target, self.config.time_limit, scheme=ep.scheme, auth=auth)

    async def _traced(self, key: str, ep: sharing.Endpoint, target: Target) -> Outcome:
        with tracing.span("prober.probe", **{"proxy": key, "proxy.uid": ep.uid, "proxy.endpoint": f"{ep.ip}:{ep.port}",
                                             "probe.target": str(target)}) as s:
            outcome = await self._through(ep, target)
            s.set_attribute("probe.ok", outcome.ok)
            if outcome.egress_ip:
                s.set_attribute("probe.egress_ip", outcome.egress_ip)
            if not outcome.ok:
                s.set_status(Status(StatusCode.ERROR, outcome.message[:200]))
        return outcome

    async def record(self, key: str, ep: sharing.Endpoint, outcome: Outcome) -> Verdict | None:
        """Judge `outcome` of a probe of `ep`; write the verdict when one is due.
        No verdict when the Proxy no longer has that endpoint (replaced, gone, moved)."""
        state = self.states.get(key)
        if self.owned.get(key) != ep or state is None or state.uid != ep.uid:
            return None
        now = self.clock()
        new, verdict = judge(state, outcome, key, ep.ip, now, self.config.thresholds)
        self.states[key] = new
        if verdict is None:
            return None
        try:
            await self._put_verdict(key, verdict.encode(), now)
        except StoreError as exc:
            # Not written: forget the transition (keep the counts), so the next probe tries again.
            if self.states.get(key) is new:
                self.states[key] = replace(new, healthy=state.healthy, since=state.since, egress_ip=state.egress_ip,
                                           egress_mismatch=state.egress_mismatch)
            self._warn("verdict", "cannot write a verdict to Redis; the next probe tries again", exc)
            return None
        self.verdicts += 1
        level = logging.INFO if verdict.healthy or state.healthy is not None else logging.WARNING
        log.log(level, "proxy healthy" if verdict.healthy else "proxy unhealthy",
                extra=kv(proxy=key, uid=verdict.uid, message=verdict.message, egress_ip=verdict.egress_ip or None,
                         egress_mismatch=verdict.egress_mismatch or None))
        return verdict

    async def _put_verdict(self, key: str, doc: str, now: float) -> None:
        """Write one verdict (`store.proxies.put_verdicts`, in a thread); raises StoreError as the write does.
        Verdicts share writes: while one write is in flight, the verdicts that come meanwhile gather for the
        next one, so a mass transition (a start, an outage) is a few round trips, not one per Proxy."""
        loop = asyncio.get_running_loop()
        written: asyncio.Future[None] = loop.create_future()
        self._verdict_batch.append((key, doc, now, written))
        if self._verdict_writer is None or self._verdict_writer.done():
            self._verdict_writer = loop.create_task(self._write_verdicts(), name="prober-verdicts")
        await written

    async def _write_verdicts(self) -> None:
        while self._verdict_batch:
            batch, self._verdict_batch = self._verdict_batch, []
            try:
                await asyncio.to_thread(self.store.proxies.put_verdicts, [(k, doc, now) for k, doc, now, _ in batch])
            except asyncio.CancelledError:  # shutdown: the waiting records are cancelled with it
                for *_, written in batch:
                    written.cancel()
                raise
            except Exception as exc:  # each waiting record gets it (a StoreError; a bug is not swallowed either)
                for *_, written in batch:
                    if not written.done():
                        written.set_exception(exc)
            else:
                for *_, written in batch:
                    if not written.done():
                        written.set_result(None)

    # -- logs -------------------------------------------------------------------------------

    def _warn(self, what: str, message: str, exc: BaseException) -> None:
        if what not in self._warned:
            self._warned.add(what)
            log.warning(message, extra=kv(error=type(exc).__name__, detail=str(exc)[:200]))

    def _recovered(self, what: str) -> None:
        if what in self._warned:
            self._warned.discard(what)
            log.info("Redis answers again", extra=kv(what=what))

    async def _log_stats(self) -> None:
        recent = self.delays.drain()
        log.info("prober summary", extra=kv(
            share=len(self.owned), members=len(self.members), probes=self.probes, failed=self.failed,
            skipped=self.skipped, verdicts=self.verdicts,
            start_delay_p50_ms=round(quantile(recent, 0.5) * 1000, 1),
            start_delay_p99_ms=round(quantile(recent, 0.99) * 1000, 1)))


# --- the process -------------------------------------------------------------------------------


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event loop factory for `asyncio.Runner`: uvloop's when installed, else None (asyncio's default)."""
    if importlib.util.find_spec("uvloop") is None:
        return None
    import uvloop

    return uvloop.new_event_loop


def loop_name() -> str:
    """The running loop's kind, as it is (not as configured): "uvloop" or "asyncio"."""
    return "uvloop" if type(asyncio.get_running_loop()).__module__.startswith("uvloop") else "asyncio"


async def serve(prober: Prober) -> None:
    """Run `prober` until SIGTERM or SIGINT."""
    import signal

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await prober.run(stop)


def main(settings: Settings, on_stop: Callable[[Prober], None] | None = None) -> int:
    """`fleet prober`: /metrics and /readyz on --prober-metrics-bind-address, then probe until a signal."""
    from fleet import serving

    config = Config.from_settings(settings)
    if config.target is not None:
        files = raise_open_files_limit()
        if files < 2 * config.max_in_flight + 64:
            log.info("open files limit is low for many proxies", extra=kv(limit=files))
    tracing.setup("fleet-prober")
    store = Store.from_url(settings.broker, timeout=5, connect_timeout=3)
    runtime.own_database(store, settings.installation_id)
    target.watch(settings.broker)
    prober = Prober(store, config)
    serving.serve_metrics(settings.prober_metrics_bind_address, serving.registry_of(prober.series.collectors()), store.ping)
    factory = loop_factory()
    if factory is None:
        log.info("uvloop is not installed; probing on asyncio's default loop (install the api extra for uvloop)")
    # What start-up made (modules, settings, clients: most of the heap) is moved out of the cyclic collector's
    # generations: no full collection walks it again (issue 24: those walks were the start delays' 70 ms tail).
    gc.collect()
    gc.freeze()
    try:
        with asyncio.Runner(loop_factory=factory) as runner:
            runner.run(serve(prober))
    finally:
        if on_stop is not None:
            on_stop(prober)
        store.close()
    return 0
