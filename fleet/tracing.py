"""OpenTelemetry, configured only by the standard OTEL_* variables.

Without an exporter configured (no OTEL_TRACES_EXPORTER /
OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT), nothing is set up and every span is
the API's no-op; nor is Celery instrumented (its per-task hooks were 4% of
the controller's CPU per record, issue 24). With one, Celery instrumentation
runs in every process that sends or runs tasks, so one trace goes beat (a
span per round) → provider worker (a span per provider check) → controller. Span attributes carry names, ids and
counts only — never credentials or cloud-init.

Celery caveat: instrument after the pool has started its workers. With the
threads pool (ours) `worker_init` is enough; with prefork it must be
`worker_process_init`, in each child — both are connected.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode

from providers import base

log = logging.getLogger("fleet.tracing")

TRACER = "fleet"
_instrumented = False


def exporter_configured(environ: dict[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    exporter = env.get("OTEL_TRACES_EXPORTER", "")
    if exporter:
        return exporter.lower() != "none"
    return bool(env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def setup(service: str) -> bool:
    """Install an SDK tracer provider when the environment asks for one."""
    if not exporter_configured():
        return False
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

    exporter: SpanExporter
    exporter_name = os.environ.get("OTEL_TRACES_EXPORTER", "otlp").lower()
    if exporter_name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        exporter = ConsoleSpanExporter()
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter()
    resource = Resource.create({SERVICE_NAME: os.environ.get("OTEL_SERVICE_NAME", service)})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    log.info("tracing on", extra={"fields": {"exporter": exporter_name, "service": service}})
    return True


def instrument_celery() -> None:
    """Propagate trace context through task messages, and give the Google
    SDK's HTTP calls (made with `requests`) client spans under the current
    provider span (idempotent)."""
    global _instrumented
    if _instrumented:
        return
    from opentelemetry.instrumentation.celery import CeleryInstrumentor
    from opentelemetry.instrumentation.requests import RequestsInstrumentor

    CeleryInstrumentor().instrument()  # type: ignore[no-untyped-call, unused-ignore]  # its __init__ is unannotated
    RequestsInstrumentor().instrument()
    _instrumented = True


def tracer() -> trace.Tracer:
    return trace.get_tracer(TRACER)


@contextmanager
def span(name: str, **attributes: Any) -> Iterator[Span]:
    with tracer().start_as_current_span(name, attributes={k: v for k, v in attributes.items() if v is not None}) as s:
        yield s


# --- provider operations -------------------------------------------------------

@contextmanager
def provider_span(provider: str, op: str, provider_id: str | None = None) -> Iterator[Span]:
    """The seed's WithTracing, in one place: a client span `provider.<op>`
    (`op` one of create, get, delete, list) with provider.name, provider.id
    and provider.result (ok or the error class). NotFound keeps the span OK:
    polling until NotFound is expected. The exception goes on unchanged.
    Used by `fleet.celery.calls`, the one base of every provider-call task."""
    with tracer().start_as_current_span(
        f"provider.{op}", kind=trace.SpanKind.CLIENT,
        attributes={"provider.name": provider, **({"provider.id": provider_id} if provider_id else {})},
        record_exception=False, set_status_on_exception=False,  # NotFound is decided below
    ) as s:
        try:
            yield s
        except BaseException as exc:
            s.set_attribute("provider.result", base.result_label(exc))
            if not isinstance(exc, base.NotFound):
                s.record_exception(exc)
                s.set_status(Status(StatusCode.ERROR, type(exc).__name__))
            raise
        s.set_attribute("provider.result", "ok")
