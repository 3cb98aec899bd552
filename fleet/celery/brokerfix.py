"""A guard around one kombu Redis-transport bug, installed by `fleet.celery.app`.

When the broker connection drops while a late-acked message is in flight
(Redis restarted under a busy controller), kombu 5.x later touches the
channel it has already closed — to restore the unacked messages, or to ack
the message whose task just finished — and crashes the whole worker with
`AttributeError: 'NoneType' object has no attribute 'hostname'|'client'`
("Unrecoverable error"). The messages are still in Redis' unacked set, where
any worker restores them after the visibility timeout (and the controller's
tasks are idempotent), so skipping the call on a closed channel loses nothing
— and the worker stays up and reconnects. Found by tests/integration (Redis
restart); remove when kombu handles a closed channel here.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger("fleet.broker")


def _skip_on_closed_channel(method: Callable[..., Any], what: str) -> Callable[..., Any]:
    @functools.wraps(method)
    def guarded(self: Any, *args: Any, **kwargs: Any) -> Any:
        transport = getattr(self.channel, "connection", None)
        if transport is None or getattr(transport, "client", None) is None:
            log.warning(
                "broker channel already closed: %s skipped; the messages stay in Redis' unacked set and "
                "are redelivered after the visibility timeout", what,
            )
            self._delivered.clear() if what == "restore" else None
            return None
        return method(self, *args, **kwargs)

    guarded._fleet_guard = True  # type: ignore[attr-defined]
    return guarded


def install() -> None:
    from kombu.transport import redis as transport

    qos = transport.QoS
    if getattr(qos.restore_unacked, "_fleet_guard", False):
        return
    for name, what in (("restore_unacked", "restore"), ("ack", "ack"), ("reject", "reject")):
        setattr(qos, name, _skip_on_closed_channel(getattr(qos, name), what))
