"""Run by test_tracing.py in a fresh process: one check round through the
real broker with in-process workers (provider and controller) sharing an
in-memory span exporter, then print the finished spans as JSON."""

from __future__ import annotations

import json
import os
import sys
import time

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)

from celery.contrib.testing.worker import start_worker  # noqa: E402

from fleet import dispatch, routing, runtime, tracing  # noqa: E402
from fleet.app import app  # noqa: E402
from fleet.store import Store  # noqa: E402

tracing.instrument_celery()
names = runtime.providers_config().names()
store = Store.from_url(runtime.settings().broker)
queues = [routing.provider_queue(n) for n in names]
with (
    start_worker(app, pool="threads", concurrency=2, queues=queues, perform_ping_check=False, hostname="prov@probe"),
    start_worker(
        app, pool="threads", concurrency=2, queues=[routing.CONTROLLER_QUEUE], perform_ping_check=False, hostname="controller@probe"
    ),
):
    dispatch.send_round(app, names, 5.0, 10.0)
    deadline = time.monotonic() + 60

    def recorded() -> int:
        return sum(s.name == "fleet.record" for s in exporter.get_finished_spans())

    while time.monotonic() < deadline and recorded() < len(names):
        time.sleep(0.05)
    time.sleep(0.2)  # the celery run spans end just after ours
    dump = [
        {
            "name": s.name,
            "trace": format(s.context.trace_id, "032x"),
            "id": format(s.context.span_id, "016x"),
            "parent": format(s.parent.span_id, "016x") if s.parent else None,
            "attributes": {k: v for k, v in (s.attributes or {}).items()},
        }
        for s in exporter.get_finished_spans()
    ]
    json.dump(dump, sys.stdout)
    sys.stdout.flush()
    # The in-process thread-pool workers don't stop cleanly; the spans are out.
    os._exit(0)
