"""Read-only remote-control commands for `celery -A fleet.app inspect ...`.

    inspect provider_status   per worker: its providers, the last verdict of
                              each target, and connection state (KVM: per
                              host connected, since when, a probe waiting)
    inspect provider_config   the effective config of its providers, with
                              secret fields redacted

Every worker answers, the controller included (it says so), so a missing
answer means a missing worker. Imported by `fleet.app`, so the commands are
registered in the `celery inspect` client as well as in the workers (the
client refuses commands it does not know).
"""

from __future__ import annotations

from typing import Any

from celery.worker.control import inspect_command

from fleet import roles, routing, runtime
from fleet.health.results import rfc3339


def provider_status_of(name: str) -> dict[str, Any]:
    pc = runtime.providers_config().get(name)
    last = runtime.last_result(name)
    built = runtime.built(name)
    state = getattr(built, "connection_state", None)
    return {
        "name": name,
        "type": pc.type,
        "queue": routing.provider_queue(name),
        "lastCheck": rfc3339(last.checked_at) if last else None,
        "targets": [
            {"name": t.name, "ready": t.ready, "reason": t.reason, "message": t.message} for t in (last.targets if last else ())
        ],
        "connections": state() if callable(state) else None,
    }


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
