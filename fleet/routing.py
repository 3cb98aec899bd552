"""Queue and task names, and the one routing function.

A provider's calls run only on `provider.<name>`, consumed only by that
provider's workers; everything the controller does runs on `fleet.controller`.
"""

from __future__ import annotations

from typing import Any

from kombu import Queue

CONTROLLER_QUEUE = "fleet.controller"
PROVIDER_QUEUE_PREFIX = "provider."

CHECK_PROVIDER = "fleet.check_provider"
RECORD_CHECK = "fleet.record_check"
SWEEP_OVERDUE = "fleet.sweep_overdue"

CONTROLLER_TASKS = (RECORD_CHECK, SWEEP_OVERDUE)
PROVIDER_TASKS = (CHECK_PROVIDER,)


def provider_queue(name: str) -> str:
    return PROVIDER_QUEUE_PREFIX + name


def provider_of_queue(queue: str) -> str | None:
    return queue[len(PROVIDER_QUEUE_PREFIX):] if queue.startswith(PROVIDER_QUEUE_PREFIX) else None


def declare(provider_names: list[str]) -> tuple[Queue, ...]:
    return (Queue(CONTROLLER_QUEUE),) + tuple(Queue(provider_queue(n)) for n in provider_names)


def route(name: str, args: Any, kwargs: Any, options: Any, task: Any = None, **kw: Any) -> dict[str, str] | None:
    """Celery router: provider tasks by their `provider` argument."""
    if name in PROVIDER_TASKS:
        provider = (kwargs or {}).get("provider") or (args[0] if args else None)
        if not provider:
            raise ValueError(f"{name} needs a provider argument to be routed")
        return {"queue": provider_queue(provider)}
    if name in CONTROLLER_TASKS:
        return {"queue": CONTROLLER_QUEUE}
    return None
