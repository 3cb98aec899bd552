"""The controller's work, kept thin: store the result, log transitions,
publish ProviderHealth; sweep for overdue providers; clean up at start.

Stateless between messages (the previous verdict comes from Redis), so
replicas and restarts behave the same. All decisions are in `fleet.status`.
"""

from __future__ import annotations

import dataclasses
import logging
import time

from fleet import status
from fleet.config import ProvidersConfig
from fleet.kube import HealthWriter, cluster_configuration
from fleet.logs import kv
from fleet.results import CheckResult
from fleet.routing import provider_queue
from fleet.settings import Settings
from fleet.store import Store

log = logging.getLogger("fleet.controller")

OVERDUE_KEY = "fleet:overdue:"


class Controller:
    def __init__(
        self, settings: Settings, config: ProvidersConfig, store: Store, writer: HealthWriter | None, mode: str = ""
    ) -> None:
        self.settings = settings
        self.config = config
        self.store = store
        self.writer = writer
        self.mode = mode

    @classmethod
    def from_settings(cls, settings: Settings, config: ProvidersConfig) -> Controller:
        from kubernetes import client

        cfg, mode = cluster_configuration(settings)
        writer = HealthWriter(client.ApiClient(cfg)) if cfg is not None else None
        return cls(settings, config, Store.from_url(settings.broker), writer, mode)

    def start(self) -> None:
        """At process start: say the mode; delete what belongs to providers
        no longer configured (everything, with checks off)."""
        log.info(self.mode or "controller starting")
        keep = set(self.config.names()) if self.settings.checks_enabled else set()
        if not self.settings.checks_enabled:
            log.info("provider checks are off (--provider-check-interval=0)")
        gone = self.store.forget(keep)
        if gone:
            log.info("forgot results of unconfigured providers", extra=kv(providers=",".join(gone)))
        if self.writer is not None:
            self.writer.cleanup(keep)

    def record(self, result: CheckResult) -> str:
        result = dataclasses.replace(result, recorded_at=time.time())
        stored, prev = self.store.save_if_newer(result)
        if not stored:
            log.debug("dropped a result no newer than the stored one", extra=kv(provider=result.provider))
            return "stale"
        self.store.r.delete(OVERDUE_KEY + result.provider)
        for t in status.transitions(prev, result):
            log.log(t.level, t.message, extra=kv(**t.fields))
        if self.writer is None:
            return "stored"
        return self.writer.publish(result.provider, result.checked_at, lambda prev: status.build_status(prev, result))

    def sweep_overdue(self, now: float | None = None) -> list[str]:
        """Mark providers without a fresh result CheckOverdue."""
        now = time.time() if now is None else now
        after = self.settings.overdue_after
        overdue = []
        for pc in self.config.providers:
            last = self.store.latest(pc.name)
            seen = self.store.first_seen(pc.name, now)
            checked = last.checked_at if last else None
            if not status.is_overdue(checked, seen, now, after):
                continue
            overdue.append(pc.name)
            v = status.overdue_verdict(checked, provider_queue(pc.name), after)
            if self.store.r.set(OVERDUE_KEY + pc.name, "1", nx=True):
                log.warning("provider check overdue", extra=kv(provider=pc.name, message=v.message))
            if self.writer is not None:
                self.writer.publish(pc.name, None, lambda prev, pc=pc, v=v: status.overdue_status(prev, pc.type, v, now))
        return overdue
