"""Queue and task names, the one placement table, and the one router.

A provider's calls run only on `provider.<name>`, consumed only by that
provider's workers; everything the controller does runs on `fleet.controller`.
`PLACEMENT` says which, per task; `route` is the app's only `task_routes`
entry and the only reader of the table, so senders (`send_task`, beat's
entries, the `link` signature the worker applies after a check) never name
a queue. A task missing from the table cannot be sent (`Unroutable`), rather
than landing on a default queue nobody expects it on.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from kombu import Queue

CONTROLLER_QUEUE = "fleet.controller"
PROVIDER_QUEUE_PREFIX = "provider."

CHECK_PROVIDER = "fleet.check_provider"
RECORD_CHECK = "fleet.record_check"
CREATE_INSTANCE = "fleet.create_instance"
GET_INSTANCE = "fleet.get_instance"
DELETE_INSTANCE = "fleet.delete_instance"
LIST_INSTANCES = "fleet.list_instances"
RECORD_PROXY_CALL = "fleet.record_proxy_call"
RECORD_PROXY_LIST = "fleet.record_proxy_list"  # a provider's resync list_instances answer → controller: Proxies due
GC_SWEEP = "fleet.gc_sweep"  # beat → controller: start an orphan sweep
RECORD_GC_LIST = "fleet.record_gc_list"  # a provider's list_instances answer → controller: decide and delete
RECORD_GC_DELETE = "fleet.record_gc_delete"  # a GC delete_instance answer → controller: count it


class Placement(enum.Enum):
    PROVIDER = "provider"  # on provider.<name>, <name> from the task's `provider` keyword argument
    CONTROLLER = "controller"  # on fleet.controller


PLACEMENT: Mapping[str, Placement] = MappingProxyType({
    CHECK_PROVIDER: Placement.PROVIDER,
    RECORD_CHECK: Placement.CONTROLLER,
    CREATE_INSTANCE: Placement.PROVIDER,
    GET_INSTANCE: Placement.PROVIDER,
    DELETE_INSTANCE: Placement.PROVIDER,
    LIST_INSTANCES: Placement.PROVIDER,
    RECORD_PROXY_CALL: Placement.CONTROLLER,
    RECORD_PROXY_LIST: Placement.CONTROLLER,
    GC_SWEEP: Placement.CONTROLLER,
    RECORD_GC_LIST: Placement.CONTROLLER,
    RECORD_GC_DELETE: Placement.CONTROLLER,
})


class Unroutable(ValueError):
    """A task the table does not place, or a provider task without its provider."""


def provider_queue(name: str) -> str:
    return PROVIDER_QUEUE_PREFIX + name


def provider_of_queue(queue: str) -> str | None:
    return queue[len(PROVIDER_QUEUE_PREFIX):] if queue.startswith(PROVIDER_QUEUE_PREFIX) else None


def declare(provider_names: list[str]) -> tuple[Queue, ...]:
    return (Queue(CONTROLLER_QUEUE),) + tuple(Queue(provider_queue(n)) for n in provider_names)


def queue_of(name: str, kwargs: Mapping[str, Any] | None = None) -> str:
    """The queue of a message of task `name` with these keyword arguments."""
    placement = PLACEMENT.get(name)
    if placement is None:
        raise Unroutable(f"task {name!r} has no placement in fleet.celery.routing.PLACEMENT")
    if placement is Placement.CONTROLLER:
        return CONTROLLER_QUEUE
    provider = (kwargs or {}).get("provider")
    if not provider or not isinstance(provider, str):
        raise Unroutable(f"{name} is placed by its provider: send it with a `provider` keyword argument")
    return provider_queue(provider)


def route(name: str, args: Any, kwargs: Any, options: Any, task: Any = None, **kw: Any) -> dict[str, str]:
    """The Celery router (`task_routes=(route,)`): every message, callbacks included."""
    return {"queue": queue_of(name, kwargs)}
