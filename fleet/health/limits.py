"""Bounds on what the controller accepts and emits (issue 9): one place for
each number. The message validator (`fleet.health.messages`), the task boundary
(`tasks.controller`), the store's compare-and-set and the /metrics collector
all read them from here.

The controller runs in 128Mi and Redis in 256Mi, so every input is bounded
before it is stored or expanded: a check result is at most 1 MiB of JSON and
1,000 targets, its timestamps are finite and no later than the controller's
clock plus a small skew allowance, and /metrics emits at most a fixed number
of target series.
"""

from __future__ import annotations

from dataclasses import dataclass

EPOCH_2020 = 1_577_836_800.0  # 2020-01-01T00:00:00Z


@dataclass(frozen=True)
class Limits:
    # size: checked on the raw body before Celery decodes it (the task's
    # Strategy), and again by a bounded walk of the decoded value
    max_message_bytes: int = 1 << 20
    max_depth: int = 8  # nesting of the decoded value (a result needs 4)
    max_targets: int = 1000  # per provider; also what /metrics emits per provider
    max_details: int = 32  # entries per target
    # identifiers are refused when longer; free text is cut
    max_name: int = 253  # target name (a DNS name)
    max_type: int = 63  # provider type
    max_reason: int = 128
    max_detail_key: int = 128
    max_text: int = 1024  # target message, details values: cut, marked with "…"
    max_address: int = 512  # cut
    max_worker: int = 255  # cut
    max_latency_ms: float = 86_400_000.0  # one day
    # time: checkedAt must be in [earliest, controller's now + clock_skew]
    clock_skew: float = 30.0
    earliest: float = EPOCH_2020
    info_horizon: float = 86_400.0  # scheduledAt/recordedAt (informational): up to now + one day
    # /metrics: target series in all, per gauge (× 3 gauges); per provider: max_targets
    max_series: int = 20_000
    # distinct (provider, reason) pairs a controller logs at WARNING before going quiet
    max_reported: int = 1024


LIMITS = Limits()
