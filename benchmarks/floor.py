"""The bare Celery floor for benchmarks/pipeline.py: what the same two-hop
pipeline costs with nothing of fleet in it.

`celery -A benchmarks.floor worker ...` with fleet's Celery settings
(fleet/celery/conf.py, shared with fleet/celery/app.py: JSON, the broker as result backend, results ignored, task
events off, prefetch 1, the same visibility timeout, missing queues
created), the same queue shape (one queue per provider, one controller queue)
and the same worker processes and threads as the fleet run. Two tasks,
chained like fleet's check → record link:

- `floor.check(provider, latency_ms, targets, scheduled_at)` sleeps
  `latency_ms` (as the fake provider does) and returns a payload of the same
  shape and size as fleet's CheckResult.to_dict() for `targets` targets;
- `floor.record(result)` (acks_late, like fleet.record_check) does one Redis
  SET of `floor:result:<provider>`.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import redis
from celery import Celery

from fleet.celery.conf import MESSAGING

BROKER = os.environ.get("FLOOR_BROKER_URL", "redis://127.0.0.1:6379/0")
CONTROLLER_QUEUE = "floor.controller"

app = Celery("floor", set_as_current=False)
app.conf.update(
    broker_url=BROKER,
    result_backend=BROKER,
    task_default_queue=CONTROLLER_QUEUE,
    **MESSAGING,  # fleet's own (fleet/celery/conf.py), so both run under the same settings
)
_redis = redis.Redis.from_url(BROKER)


def payload(provider: str, targets: int, scheduled_at: float | None, took: float) -> dict[str, Any]:
    """The shape of fleet's CheckResult.to_dict() for a fake provider."""
    return {
        "provider": provider, "type": "fake", "supported": True, "checkedAt": time.time(),
        "targets": [{"name": f"t{i:04d}", "address": "fake", "ready": True, "reason": "Reachable", "message": "",
                     "latencyMillis": int(took * 1000), "details": {}} for i in range(targets)],
        "scheduledAt": scheduled_at, "worker": "floor@bench", "recordedAt": None,
    }


@app.task(name="floor.check")
def check(provider: str, latency_ms: float, targets: int, scheduled_at: float | None = None) -> dict[str, Any]:
    start = time.monotonic()
    time.sleep(latency_ms / 1000)
    return payload(provider, targets, scheduled_at, time.monotonic() - start)


@app.task(name="floor.record", acks_late=True, ignore_result=True)
def record(result: dict[str, Any]) -> str:
    _redis.set(f"floor:result:{result['provider']}", json.dumps(result, separators=(",", ":")))
    return "stored"
