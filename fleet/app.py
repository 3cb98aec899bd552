"""The Celery app: broker, serialization, queues and routing, in one place.

`celery -A fleet.app worker|beat|inspect ...` and the `fleet` CLI both use
it. Settings come from FLEET_* variables (the CLI exports its flags). The
task modules are named, not imported, so this module stays free of them.
"""

from __future__ import annotations

from celery import Celery, signals

from fleet import brokerfix, inspection, logs, routing, runtime, tracing

settings = runtime.settings()
brokerfix.install()
assert inspection.provider_status is not None  # registers `celery inspect provider_status|provider_config`

app = Celery("fleet", include=["tasks.checks", "tasks.controller", "tasks.provider_calls"])
app.conf.update(
    broker_url=settings.broker,
    result_backend=settings.broker,
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    result_accept_content=["json"],
    event_serializer="json",
    # Every message is placed by the one router (fleet.routing.PLACEMENT):
    # senders name no queue, and a task the table lacks cannot be sent. The
    # default queue is only what a worker without -Q consumes.
    task_routes=(routing.route,),
    task_default_queue=routing.CONTROLLER_QUEUE,
    task_create_missing_queues=True,
    # Nothing reads task results (the link to record_check passes the return
    # value itself; Flower reads events; inspect uses broadcast replies), so
    # none are stored: a celery-task-meta-* key per check per round had filled
    # Redis at 0.6 GB/h for 200 providers x 50 targets (issue 9).
    task_ignore_result=True,
    result_expires=3600,
    # No task events unless something watches: Flower turns them on in the
    # workers when it connects (`enable_events`); sent events stay off, and
    # started states are not tracked (issue 11).
    task_send_sent_event=False,
    worker_send_task_events=False,
    task_track_started=False,
    worker_prefetch_multiplier=1,
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
    broker_transport_options={"visibility_timeout": 3600},
    beat_scheduler="beat.scheduler:FleetScheduler",
    timezone="UTC",
)
if settings.providers_config:
    app.conf.task_queues = routing.declare(runtime.providers_config().names())


@signals.setup_logging.connect
def _setup_logging(**_: object) -> None:
    logs.setup(settings.log_format, settings.log_level)


@signals.worker_init.connect
@signals.worker_process_init.connect
def _trace_worker(**_: object) -> None:
    tracing.setup("fleet-worker")
    tracing.instrument_celery()


@signals.beat_init.connect
def _trace_beat(**_: object) -> None:
    tracing.setup("fleet-beat")
    tracing.instrument_celery()
