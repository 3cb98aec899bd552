"""Provider calls as tasks on `provider.<name>`, each on `fleet.calls.ProviderCallTask`:
send them with keyword arguments (`provider`, the op's own, optionally
`timeout` and `attempt`) and `link` the task that reads the outcome.

`fleet.create_instance` waits for issue 12: its request must carry a
reference to cloud-init, never the text, and that reference is not designed yet.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import signals

from fleet import exposition, roles, routing, runtime
from fleet.app import app
from fleet.calls import ProviderCallTask, instance_dict
from providers.base import Deadline, Provider

log = logging.getLogger("fleet.calls")

GET_INSTANCE, DELETE_INSTANCE, LIST_INSTANCES = routing.GET_INSTANCE, routing.DELETE_INSTANCE, routing.LIST_INSTANCES
TASKS = (GET_INSTANCE, DELETE_INSTANCE, LIST_INSTANCES)


@app.task(name=GET_INSTANCE, base=ProviderCallTask, op="get")
def get_instance(p: Provider, deadline: Deadline, provider_id: str) -> dict[str, Any]:
    """The instance as a dict (id, state, ip, uid, createdAt); not_found/gone when it does not exist."""
    return instance_dict(p.get(provider_id, deadline))


@app.task(name=DELETE_INSTANCE, base=ProviderCallTask, op="delete")
def delete_instance(p: Provider, deadline: Deadline, provider_id: str) -> None:
    """Idempotent: deleting what is gone is ok."""
    p.delete(provider_id, deadline)


@app.task(name=LIST_INSTANCES, base=ProviderCallTask, op="list")
def list_instances(p: Provider, deadline: Deadline) -> list[dict[str, Any]]:
    """The managed instances (GC's input)."""
    return [instance_dict(i) for i in p.list_by_tag(deadline)]


@signals.worker_ready.connect
def _serve_worker_metrics(sender: object = None, **_: object) -> None:
    """A provider worker serves its provider-call metrics (fleet.exposition).
    A port it cannot bind is logged, not fatal: the worker's calls matter more,
    and Prometheus' `up` shows the missing target."""
    role = roles.of_consumer(sender)
    if role.kind != roles.PROVIDER_WORKER:
        return
    try:
        exposition.serve(runtime.settings().worker_metrics_bind_address, role.providers)
    except OSError as exc:
        log.error("worker /metrics not served: %s", exc)
