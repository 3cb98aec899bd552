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

An ack or reject that finds the broker unreachable (a Sentinel master killed
and not yet replaced) is the same case seen a moment earlier: Celery would
log it as a critical "Couldn't ack" with a traceback; it is a WARNING saying
what happens to the message (test_chaos.py kills a master under load).
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
        if what == "restore":
            return method(self, *args, **kwargs)
        try:
            return method(self, *args, **kwargs)
        except _unreachable(transport) as exc:
            log.warning(
                "broker unreachable: %s failed (%s: %s); the message stays in Redis' unacked set and is "
                "redelivered after the visibility timeout", what, type(exc).__name__, str(exc)[:200],
            )
            return None

    guarded._fleet_guard = True  # type: ignore[attr-defined]
    return guarded


def _unreachable(transport: Any) -> tuple[type[BaseException], ...]:
    """The transport's connection errors, but KeyError (kombu counts it as one; here it would be a bug)."""
    return tuple(e for e in getattr(transport, "connection_errors", ()) if e is not KeyError)


def install() -> None:
    from kombu.transport import redis as transport

    qos = transport.QoS
    if getattr(qos.restore_unacked, "_fleet_guard", False):
        return
    for name, what in (("restore_unacked", "restore"), ("ack", "ack"), ("reject", "reject")):
        setattr(qos, name, _skip_on_closed_channel(getattr(qos, name), what))
