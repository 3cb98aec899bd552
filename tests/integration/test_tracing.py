"""One trace per round: beat's round span → publish → the provider worker's
run and `provider.check` spans → the callback's publish → the controller's
run and `fleet.record` spans, across the real broker, exported by the real
processes over OTLP/HTTP to a collector in the test.

(An in-process variant with two `start_worker` threads in one process lost
the controller's messages now and then — two consumers of one app in one
process is not how fleet runs — so the processes are real here.)"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration


def test_real_processes_export_one_trace_per_round(redis_server, make_stack):
    """beat, a provider worker and the controller as real processes, each
    exporting over OTLP/HTTP (configured only by OTEL_* variables)."""
    from tests.fakes.otlp import Collector

    with Collector() as collector:
        stack = make_stack(redis_server.url, [{"name": "edge", "type": "fake", "fake": {"targets": [{"name": "t"}]}}],
                           OTEL_EXPORTER_OTLP_ENDPOINT=collector.url, OTEL_BSP_SCHEDULE_DELAY="100",
                           OTEL_TRACES_SAMPLER="always_on")
        stack.worker("edge")
        stack.controller()
        stack.wait_ready("worker:edge", "controller")
        stack.beat()

        def record_span():
            return next((s for s in collector.collected.snapshot() if s["name"] == "fleet.record"), None)

        from fleet.testing.procs import wait_for

        rec = wait_for(record_span, 40, "the controller's fleet.record span")

        def path_to_root():
            by_id = {s["id"]: s for s in collector.collected.snapshot() if s["trace"] == rec["trace"]}
            path, span = [], rec
            while span:
                path.append((span["name"], span["service"]))
                if span["parent"] is None:
                    return list(reversed(path)), list(by_id.values())
                span = by_id.get(span["parent"])
            return None  # a parent has not been exported yet

        path, spans = wait_for(path_to_root, 20, "every span from the round to the record")
        everything = [(s["service"], s["name"]) for s in collector.collected.snapshot()]
        assert path[0] == ("fleet.round", "fleet-beat"), everything
        assert ("provider.check", "fleet-worker") in [(s["name"], s["service"]) for s in spans]
        assert [name for name, _ in path] == ["fleet.round", "apply_async/fleet.check_provider", "run/fleet.check_provider",
                                              "apply_async/fleet.record_check", "run/fleet.record_check", "fleet.record"]
