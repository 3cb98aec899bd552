"""Provider calls as tasks on `provider.<name>`, each on `fleet.celery.calls.ProviderCallTask`:
send them with keyword arguments (`provider`, the op's own, optionally
`timeout` and `attempt`) and `link` the task that reads the outcome.

`fleet.create_instance` carries a CreateRequest as `fleet.celery.calls.request_dict`
writes it, and a reference to cloud-init, never the text:
the controller stages the text in Redis under a random token for the call's
timeout (`fleet.proxies.reconciler`); the worker takes it here (read and
deleted at once, GETDEL) and hands it to the provider, so it never sits in a
message, a result, Flower or a log, nor in Redis after the create began.
It marks the instance with the worker's own installation
(`runtime.settings().installation_id`), never one from the message: a worker
only ever creates for its own installation, whose GC alone may collect it.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from celery import signals

from fleet import runtime
from fleet.celery import calls, compression, roles, routing
from fleet.celery.app import app
from fleet.celery.calls import ProviderCallTask, instance_dict
from providers.base import Deadline, Permanent, Provider, Transient, wrap

log = logging.getLogger("fleet.calls")

CREATE_INSTANCE, GET_INSTANCE = routing.CREATE_INSTANCE, routing.GET_INSTANCE
DELETE_INSTANCE, LIST_INSTANCES = routing.DELETE_INSTANCE, routing.LIST_INSTANCES
TASKS = (CREATE_INSTANCE, GET_INSTANCE, DELETE_INSTANCE, LIST_INSTANCES)


@app.task(name=CREATE_INSTANCE, base=ProviderCallTask, op="create")
def create_instance(p: Provider, deadline: Deadline, **message: Any) -> str:
    """The provider id of the instance named in `message` (idempotent by
    name). The message is `calls.request_dict`'s; one that does not read
    (`calls.request_from_dict`) is Permanent, naming the argument at fault."""
    try:
        request, cloud_init_ref = calls.request_from_dict(message)
    except calls.RequestError as exc:
        name = message.get("name")
        raise wrap(Permanent, "create", p_name(p), name[:80] if isinstance(name, str) else "", str(exc)) from None
    text = runtime.store().proxies.take_cloud_init(cloud_init_ref) if cloud_init_ref else b""
    if text is None:  # read by an earlier delivery of this message, or lapsed before it ran: a new create restages it
        raise wrap(Transient, "create", p_name(p), request.name,
                   "the staged cloud-init is gone (read once by an earlier delivery of this create, or expired "
                   "before it ran); the next create stages it again")
    request = dataclasses.replace(request, cloud_init=text.decode() if isinstance(text, bytes) else text,
                                  installation=runtime.settings().installation_id)
    return p.create(request, deadline)


def p_name(p: Provider) -> str:
    return str(getattr(p, "name", "") or "?")


@app.task(name=GET_INSTANCE, base=ProviderCallTask, op="get")
def get_instance(p: Provider, deadline: Deadline, provider_id: str) -> dict[str, Any]:
    """The instance as a dict (id, state, ip, uid, createdAt, installation); not_found/gone when it does not exist."""
    return instance_dict(p.get(provider_id, deadline))


@app.task(name=DELETE_INSTANCE, base=ProviderCallTask, op="delete")
def delete_instance(p: Provider, deadline: Deadline, provider_id: str) -> None:
    """Idempotent: deleting what is gone is ok."""
    p.delete(provider_id, deadline)


@app.task(name=LIST_INSTANCES, base=ProviderCallTask, op="list")
def list_instances(p: Provider, deadline: Deadline) -> list[dict[str, Any]]:
    """The managed instances (GC's and the resync's input), measured before
    they are sent: an answer too large for one message is `ListTooLarge`."""
    listed = [instance_dict(i) for i in p.list_by_tag(deadline)]
    why = compression.answer_problem(listed)
    if why:
        raise calls.ListTooLarge("list", p_name(p), "", f"{len(listed)} instances take {why}")
    return listed


@signals.worker_ready.connect
def _serve_worker_metrics(sender: object = None, **_: object) -> None:
    """A provider worker serves its provider-call metrics (fleet.celery.calls.serve_worker).
    A port it cannot bind is logged, not fatal: the worker's calls matter more,
    and Prometheus' `up` shows the missing target."""
    role = roles.of_consumer(sender)
    if role.kind != roles.PROVIDER_WORKER:
        return
    try:
        calls.serve_worker(runtime.settings().worker_metrics_bind_address, role.providers)
    except OSError as exc:
        log.error("worker /metrics not served: %s", exc)
