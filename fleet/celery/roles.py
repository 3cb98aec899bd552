"""What a worker process is, from the queues it consumes: worked out once,
for `celery inspect` (`fleet.celery.inspection`), the provider heartbeat
(`tasks.checks`) and the controller's start-up (`tasks.controller`)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from fleet.celery import routing

PROVIDER_WORKER, CONTROLLER, OTHER = "provider-worker", "controller", "other"


@dataclass(frozen=True)
class Role:
    kind: str  # PROVIDER_WORKER, CONTROLLER or OTHER
    providers: tuple[str, ...] = ()  # a provider worker's providers


def queues_of(consumer: Any) -> list[str]:
    """The queue names a Celery consumer (a worker's `sender`, or an inspect
    command's `state.consumer`) consumes; none when it has no task consumer yet."""
    queues = getattr(getattr(consumer, "task_consumer", None), "queues", None) or []
    return [q.name for q in queues]


def of(queues: Iterable[str]) -> Role:
    """A worker consuming `provider.<name>` queues serves those providers;
    one consuming `fleet.controller` is the controller; else another role."""
    names = list(queues)
    providers = tuple(p for q in names if (p := routing.provider_of_queue(q)))
    if providers:
        return Role(PROVIDER_WORKER, providers)
    return Role(CONTROLLER if routing.CONTROLLER_QUEUE in names else OTHER)


def of_consumer(consumer: Any) -> Role:
    return of(queues_of(consumer))
