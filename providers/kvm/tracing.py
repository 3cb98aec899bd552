"""Child spans for the kvm provider (closes the seed's "kvm has no child
spans" gap): one `kvm.dial` span per connection attempt, tagged with the
failing stage, and one `libvirt.<method>` span per RPC, under whatever span
is current (`provider.check`, `provider.create`, …).

RPCs run in helper threads (`deadline.run_until`), which copy the caller's
context so the spans nest. Objects libvirt returns (domains, pools, volumes)
are wrapped too, and unwrapped again when passed back into libvirt; streams
are not wrapped (an upload would be a span per chunk). Attributes are the
host name and method only: never keys or cloud-init.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import libvirt
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from providers.kvm.errors import DialError

_TRACER = trace.get_tracer("fleet.kvm")
_WRAPPED_TYPES = (libvirt.virConnect, libvirt.virDomain, libvirt.virStoragePool, libvirt.virStorageVol)


class Traced:
    """A libvirt object whose method calls are spans."""

    __slots__ = ("_host", "_inner")

    def __init__(self, inner: Any, host: str) -> None:
        object.__setattr__(self, "_inner", inner)
        object.__setattr__(self, "_host", host)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr
        host = self._host

        def call(*args: Any, **kwargs: Any) -> Any:
            args = tuple(unwrap(a) for a in args)
            kwargs = {k: unwrap(v) for k, v in kwargs.items()}
            with _TRACER.start_as_current_span(f"libvirt.{name}", kind=SpanKind.CLIENT, attributes={"kvm.host": host}):
                out = attr(*args, **kwargs)
            return wrap_result(out, host)

        return call


def traced(obj: Any, host: str) -> Traced:
    return obj if isinstance(obj, Traced) else Traced(obj, host)


def unwrap(obj: Any) -> Any:
    return obj._inner if isinstance(obj, Traced) else obj


def wrap_result(out: Any, host: str) -> Any:
    if isinstance(out, _WRAPPED_TYPES):
        return Traced(out, host)
    if isinstance(out, list) and out and isinstance(out[0], _WRAPPED_TYPES):
        return [Traced(o, host) for o in out]
    return out


@contextmanager
def dial_span(host_name: str, address: str) -> Iterator[None]:
    with _TRACER.start_as_current_span(
        "kvm.dial", kind=SpanKind.CLIENT, attributes={"kvm.host": host_name, "net.peer.address": address},
        record_exception=False, set_status_on_exception=False,
    ) as span:
        try:
            yield
        except DialError as exc:
            span.set_attribute("kvm.dial.stage", str(getattr(exc.stage, "value", exc.stage)))
            span.set_status(Status(StatusCode.ERROR, f"dial failed at {getattr(exc.stage, 'value', exc.stage)}"))
            raise
