"""gcp child spans: the Google SDK's HTTP calls nest under the provider span."""

from fleet import tracing
from providers.base import Deadline


def test_gcp_sdk_http_calls_are_child_spans(spans, provider):
    """The Google SDK's requests become HTTP client spans under provider.check."""
    from opentelemetry import trace

    tracing.instrument_celery()
    with trace.get_tracer("test").start_as_current_span("provider.check") as parent:
        (st,) = provider.check(Deadline.after(5))
    assert st.ready
    http = [s for s in spans.get_finished_spans() if s.attributes.get("http.request.method") or s.attributes.get("http.method")]
    assert http, [s.name for s in spans.get_finished_spans()]
    assert all(s.parent.span_id == parent.get_span_context().span_id for s in http)
    assert "aggregated/instances" in str(http[0].attributes)
