"""Controller tasks on `fleet.controller`, and the controller's start-up.

Late acks: a controller that dies mid-message gets it redelivered, and
`record` is idempotent (a result no newer than the stored one is dropped).
"""

from __future__ import annotations

import logging

from celery import signals

from fleet import routing, runtime
from fleet.app import app
from fleet.results import CheckResult
from fleet.tracing import span

log = logging.getLogger("fleet.controller")


@app.task(name=routing.RECORD_CHECK, acks_late=True, ignore_result=True)
def record_check(result: dict) -> str:
    res = CheckResult.from_dict(result)
    with span("fleet.record", **{"provider.name": res.provider}) as s:
        outcome = runtime.controller().record(res)
        s.set_attribute("fleet.outcome", outcome)
    return outcome


@app.task(name=routing.SWEEP_OVERDUE, acks_late=True, ignore_result=True)
def sweep_overdue() -> list[str]:
    return runtime.controller().sweep_overdue()


def _consumes_controller_queue(consumer: object) -> bool:
    queues = getattr(getattr(consumer, "task_consumer", None), "queues", None) or []
    return any(q.name == routing.CONTROLLER_QUEUE for q in queues)


@signals.worker_ready.connect
def _start_controller(sender: object = None, **_: object) -> None:
    if not _consumes_controller_queue(sender):
        return
    from fleet.serving import serve_metrics

    ctl = runtime.controller()
    ctl.start()
    serve_metrics(ctl)
