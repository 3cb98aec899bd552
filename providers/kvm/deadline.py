"""Running a libvirt call under the caller's deadline.

libvirt-python's calls block in C and cannot be cancelled, so the only way
to return at a deadline is to run the call in a helper thread and stop
waiting for it. Who calls: the dialer (`libvirt.open`) and the pool (every
RPC of an operation or a probe). The helper copies the caller's context, so
the RPC spans (tracing.py) nest under the caller's span. The error it raises,
`errors.DeadlineError`, lives with the other kvm error types.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from providers.base import Deadline
from providers.kvm.errors import DeadlineError

T = TypeVar("T")


def run_until(deadline: Deadline, fn: Callable[[], T], on_abandon: Callable[[], None] | None = None) -> T:
    """Run fn in a daemon thread and return its result, unless the deadline
    passes first: then call on_abandon, leave fn running and raise
    DeadlineError. libvirt-python calls can't be cancelled otherwise."""
    box: dict[str, Any] = {}
    done = threading.Event()

    def runner() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:
            box["error"] = exc
        finally:
            done.set()

    ctx = contextvars.copy_context()  # the caller's span, for the RPC spans
    threading.Thread(target=ctx.run, args=(runner,), name="kvm-rpc", daemon=True).start()
    if not done.wait(deadline.remaining()):
        if on_abandon is not None:
            on_abandon()
        raise DeadlineError("deadline passed waiting for libvirt to answer")
    if "error" in box:
        raise box["error"]
    return box["value"]
