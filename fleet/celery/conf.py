"""The Celery settings fleet's messages travel under, apart from where they
go: serialization, results, events, prefetch, redelivery. `fleet.celery.app` uses
them, and so do the benchmarks' bare-Celery floors (benchmarks/floor.py, benchmarks/proxies_floor.py),
so each pair is measured under the same settings. Importing this module has
no side effects (no app, no signal handlers).
"""

from __future__ import annotations

from typing import Any

MESSAGING: dict[str, Any] = {
    "task_serializer": "json",
    "result_serializer": "json",
    "accept_content": ["json"],
    "result_accept_content": ["json"],
    "event_serializer": "json",
    "task_create_missing_queues": True,
    # Nothing reads task results (the link to record_check passes the return
    # value itself; Flower reads events; inspect uses broadcast replies), so
    # none are stored: a celery-task-meta-* key per check per round had filled
    # Redis at 0.6 GB/h for 200 providers x 50 targets (issue 9).
    "task_ignore_result": True,
    "result_expires": 3600,
    # No task events unless something watches: Flower turns them on in the
    # workers when it connects (`enable_events`); sent events stay off, and
    # started states are not tracked (issue 11).
    "task_send_sent_event": False,
    "worker_send_task_events": False,
    "task_track_started": False,
    "worker_prefetch_multiplier": 1,
    "worker_hijack_root_logger": False,
    "broker_connection_retry_on_startup": True,
    "broker_transport_options": {"visibility_timeout": 3600},
    "timezone": "UTC",
}
