"""Read-only remote-control commands for `celery -A fleet.celery.app inspect ...`.

    inspect provider_status   per worker: its providers, the last verdict of
                              each target, and connection state (KVM: per
                              host connected, since when, a probe waiting)
    inspect provider_config   the effective config of its providers, with
                              secret fields redacted

Every worker answers, the controller included (it says so), so a missing
answer means a missing worker. Imported by `fleet.celery.app`, so the commands are
registered in the `celery inspect` client as well as in the workers (the
client refuses commands it does not know).

What a feature knows of a provider (the health feature: the last check) it
adds to `provider_status` through `reports`, so this module knows no feature.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from celery.worker.control import inspect_command

from fleet import runtime
from fleet.celery import roles, routing

# Each adds its fields to a provider's `provider_status` entry.
_reporters: list[Callable[[str], dict[str, Any]]] = []


def reports(fn: Callable[[str], dict[str, Any]]) -> Callable[[str], dict[str, Any]]:
    """Register `fn(provider name) -> fields` for `provider_status`."""
    _reporters.append(fn)
    return fn


def provider_status_of(name: str) -> dict[str, Any]:
    pc = runtime.providers_config().get(name)
    built = runtime.built(name)
    state = getattr(built, "connection_state", None)
    out: dict[str, Any] = {"name": name, "type": pc.type, "queue": routing.provider_queue(name)}
    for report in _reporters:
        out.update(report(name))
    out["connections"] = state() if callable(state) else None
    return out


@inspect_command()
def provider_status(state: Any, **_: Any) -> dict[str, Any]:
    """Providers served by this worker, their last verdicts and connections."""
    role = roles.of_consumer(state.consumer)
    return {"role": role.kind, "providers": [provider_status_of(n) for n in role.providers]}


@inspect_command()
def provider_config(state: Any, **_: Any) -> dict[str, Any]:
    """The effective config of this worker's providers, secrets redacted."""
    role = roles.of_consumer(state.consumer)
    providers = runtime.providers_config().names() if role.kind == roles.CONTROLLER else role.providers
    return {"role": role.kind, "providers": [runtime.providers_config().get(n).redacted() for n in providers]}
