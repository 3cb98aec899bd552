"""A provider without a backend: scripted check verdicts and an in-memory
instance table.

It drives the pipeline's own tests, the demo and the benchmarks through the
same registry, workers and queues as a real provider. `latencyMs` makes each
check take that long, honouring the deadline like a real backend would.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Annotated

from pydantic import Field

from providers import base
from providers.base import Deadline, Instance, State, TargetStatus
from providers.blocks import Block

# Bounds (the file is validated before anything starts; a check must stay
# cheap): at most MAX_TARGETS listed targets and MAX_TARGET_COUNT generated
# ones, a latency of at most MAX_LATENCY_MS (10 minutes, past any check
# timeout: the check then reports Timeout), short strings, few details.
MAX_TARGETS = 1000
MAX_TARGET_COUNT = 10000
MAX_LATENCY_MS = 600_000
MAX_DETAILS = 32


class FakeTarget(Block):
    name: str = Field(min_length=1, max_length=253)
    ready: bool = True
    reason: str = Field(default="", max_length=128)
    message: str = Field(default="", max_length=1024)
    details: dict[Annotated[str, Field(max_length=128)], Annotated[str, Field(max_length=1024)]] = Field(
        default_factory=dict, max_length=MAX_DETAILS)


class FakeConfig(Block):
    targets: list[FakeTarget] = Field(default_factory=list, max_length=MAX_TARGETS)
    # Adds this many generated ready targets t0000, t0001, … (benchmarks).
    targetCount: int = Field(default=0, ge=0, le=MAX_TARGET_COUNT)
    latencyMs: int = Field(default=0, ge=0, le=MAX_LATENCY_MS)
    # A provider of this type that has no Checker: Ready=Unknown/ChecksNotImplemented.
    checks: bool = True


class FakeProvider:
    def __init__(self, name: str, cfg: FakeConfig) -> None:
        self.name = name
        self.cfg = cfg
        self._lock = threading.Lock()
        self._instances: dict[str, Instance] = {}

    # -- Checker ---------------------------------------------------------------

    def check(self, deadline: Deadline) -> list[TargetStatus]:
        latency = self.cfg.latencyMs / 1000
        start = time.monotonic()
        timed_out = latency > deadline.remaining()
        time.sleep(min(latency, deadline.remaining()))
        took = time.monotonic() - start
        out = []
        for t in self._targets():
            if timed_out:
                out.append(TargetStatus(t.name, "fake", False, base.REASON_TIMEOUT, "deadline passed", took))
                continue
            reason = t.reason or (base.REASON_REACHABLE if t.ready else base.REASON_UNREACHABLE)
            out.append(TargetStatus(t.name, "fake", t.ready, reason, t.message, took, dict(t.details)))
        return out

    def _targets(self) -> list[FakeTarget]:
        generated = [FakeTarget(name=f"t{i:04d}") for i in range(self.cfg.targetCount)]
        return list(self.cfg.targets) + generated

    # -- Provider ---------------------------------------------------------------

    def create(self, request: base.CreateRequest, deadline: Deadline) -> str:
        pid = f"fake/{request.name}"
        with self._lock:
            if pid not in self._instances:
                self._instances[pid] = Instance(
                    pid, State.RUNNING, "127.0.0.1", request.uid, datetime.now(UTC)
                )
        return pid

    def get(self, provider_id: str, deadline: Deadline) -> Instance:
        self._check_id("get", provider_id)
        with self._lock:
            try:
                return self._instances[provider_id]
            except KeyError:
                raise base.wrap(base.NotFound, "get", self.name, provider_id, "no such instance") from None

    def delete(self, provider_id: str, deadline: Deadline) -> None:
        self._check_id("delete", provider_id)
        with self._lock:
            self._instances.pop(provider_id, None)

    def list_by_tag(self, deadline: Deadline) -> list[Instance]:
        with self._lock:
            return list(self._instances.values())

    def _check_id(self, op: str, provider_id: str) -> None:
        prefix, _, name = provider_id.partition("/")
        if prefix != "fake" or not name or "/" in name:
            raise base.wrap(base.Permanent, op, self.name, provider_id, "malformed id, want fake/<name>")


class _NoChecks:
    """The same provider without the optional Checker interface."""

    def __init__(self, inner: FakeProvider) -> None:
        self.create, self.get, self.delete, self.list_by_tag = (
            inner.create,
            inner.get,
            inner.delete,
            inner.list_by_tag,
        )


def new(name: str, cfg: FakeConfig) -> base.Provider:
    p = FakeProvider(name, cfg)
    return p if cfg.checks else _NoChecks(p)
