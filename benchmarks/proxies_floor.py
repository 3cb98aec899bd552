"""The bare Celery floor for benchmarks/proxies.py: what fleet's Celery work
for one Proxy to Running costs with nothing of fleet in it.

`celery -A benchmarks.proxies_floor worker ...` with fleet's Celery settings
(fleet/celery/conf.py `MESSAGING`, as benchmarks/floor.py for pipeline.py),
a provider queue and a controller queue, and the same pool, concurrency and
command line shape as `fleet worker` and `fleet controller`. Per Proxy the
messages fleet sends, and nothing else:

- `pxfloor.create(i)` on the provider queue answers an instance id,
  linked to `pxfloor.record` on the controller queue (acks_late, as
  fleet.record_proxy_call), which SETs the Proxy's record in Redis and sends
- `pxfloor.get(id)` on the provider queue, answering an instance document,
  linked to `pxfloor.record` again: one SET, and the Proxy is done (INCR of
  `pxfloor:done`, what the benchmark watches).

`pxfloor.start(n, max_calls)` on the controller queue starts `max_calls`
chains (fleet's `--max-provider-calls`: at most that many calls in flight);
each chain takes the next Proxy (INCR `pxfloor:next`) when its last is done.
So the floor makes the same two provider round trips per Proxy as fleet (a
create and one Get, each answered by a controller task) with no poll wait,
no reconcile, no status, no Lua.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import redis
from celery import Celery, signature

from fleet.celery.conf import MESSAGING

BROKER = os.environ.get("FLOOR_BROKER_URL", "redis://127.0.0.1:6379/0")
CONTROLLER_QUEUE = "pxfloor.controller"
PROVIDER_QUEUE = "pxfloor.provider.edge"
DONE, NEXT, TOTAL = "pxfloor:done", "pxfloor:next", "pxfloor:total"

app = Celery("pxfloor", set_as_current=False)
app.conf.update(broker_url=BROKER, result_backend=BROKER, task_default_queue=CONTROLLER_QUEUE, **MESSAGING)
_redis = redis.Redis.from_url(BROKER)


def _send(op: str, arg: str | int, i: int, timeout: float = 60.0) -> None:
    link = signature("pxfloor.record", kwargs={"i": i, "op": op}, app=app).set(queue=CONTROLLER_QUEUE)
    app.send_task(f"pxfloor.{op}", args=[arg], queue=PROVIDER_QUEUE, link=link, expires=timeout)


def _take_next() -> None:
    i = int(_redis.incr(NEXT)) - 1
    if i < int(_redis.get(TOTAL) or 0):
        _send("create", i, i)


@app.task(name="pxfloor.start", ignore_result=True)
def start(n: int, max_calls: int) -> int:
    _redis.set(TOTAL, n)
    for _ in range(min(n, max_calls)):
        _take_next()
    return n


@app.task(name="pxfloor.create")
def create(i: int) -> str:
    return f"fake/px-{i:05d}"


@app.task(name="pxfloor.get")
def get(provider_id: str) -> dict[str, Any]:
    return {"id": provider_id, "state": "Running", "ip": "127.0.0.1", "uid": provider_id, "createdAt": None,
            "installation": "floor", "namespace": "bench"}


@app.task(name="pxfloor.record", acks_late=True, ignore_result=True)
def record(result: Any, i: int, op: str) -> str:
    _redis.set(f"pxfloor:px:{i}", json.dumps({"op": op, "result": result, "at": time.time()}, separators=(",", ":")))
    if op == "create":
        _send("get", str(result), i)
        return "created"
    _redis.incr(DONE)
    _take_next()
    return "running"
