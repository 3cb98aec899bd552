"""The Celery app: broker, serialization, queues and routing, in one place.

`celery -A fleet.celery.app worker|beat|inspect ...` and the `fleet` CLI both use
it. Settings come from FLEET_* variables (the CLI exports its flags). The
task modules are named, not imported, so this module stays free of them.
"""

from __future__ import annotations

from celery import Celery, signals

from fleet import logs, runtime, tracing
from fleet.celery import brokerfix, compression, inspection, routing
from fleet.celery.conf import MESSAGING
from fleet.store import target

settings = runtime.settings()
brokerfix.install()
compression.install()
assert inspection.provider_status is not None  # registers `celery inspect provider_status|provider_config`

app = Celery("fleet", include=["tasks.checks", "tasks.controller", "tasks.provider_calls", "tasks.gc"])
_redis = target.celery_config(settings.broker)  # a plain URL, or kombu's sentinel transport with master_name
_messaging = {**MESSAGING, "broker_transport_options": {**MESSAGING["broker_transport_options"],
                                                        **_redis.pop("broker_transport_options", {})}}
app.conf.update(
    **_redis,
    # Every message is placed by the one router (fleet.celery.routing.PLACEMENT):
    # senders name no queue, and a task the table lacks cannot be sent. The
    # default queue is only what a worker without -Q consumes.
    task_routes=(routing.route,),
    task_default_queue=routing.CONTROLLER_QUEUE,
    beat_scheduler="beat.scheduler:FleetScheduler",
    **_messaging,
)
if settings.providers_config:
    app.conf.task_queues = routing.declare(runtime.providers_config().names())


@signals.setup_logging.connect
def _setup_logging(**_: object) -> None:
    logs.setup(settings.log_format, settings.log_level)


@signals.worker_init.connect
@signals.worker_process_init.connect
def _trace_worker(**_: object) -> None:
    runtime.own_database()
    if tracing.setup("fleet-worker"):  # no exporter: no spans to propagate, and no per-task hooks (issue 24)
        tracing.instrument_celery()
    target.watch(settings.broker)


@signals.beat_init.connect
def _trace_beat(**_: object) -> None:
    runtime.own_database()
    if tracing.setup("fleet-beat"):
        tracing.instrument_celery()
    target.watch(settings.broker)
