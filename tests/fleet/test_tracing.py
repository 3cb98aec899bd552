"""fleet.tracing: the provider-operation span (used by the provider-call task base) and the OTEL_* gate."""

import pytest
from opentelemetry.trace import StatusCode

from fleet import tracing
from providers import base
from providers.base import CreateRequest, Deadline
from providers.fake import FakeConfig, new

SENTINEL = "CLOUD-INIT-SENTINEL-7f3a"


def by_name(spans):
    return {s.name: s for s in spans.get_finished_spans()}


def test_operation_spans_carry_name_id_and_result(spans):
    p = new("edge", FakeConfig())

    def call(op, provider_id, fn, *args):
        with tracing.provider_span("edge", op, provider_id):
            return fn(*args, Deadline.after(5))

    with tracing.span("reconcile"):
        pid = call("create", "proxy-a", p.create, CreateRequest(name="proxy-a", uid="u", cloud_init=SENTINEL))
        call("get", pid, p.get, pid)
        call("delete", pid, p.delete, pid)
        with pytest.raises(base.NotFound):
            call("get", pid, p.get, pid)
        with pytest.raises(base.Permanent):
            call("get", "bad", p.get, "bad")
        call("list", None, p.list_by_tag)
    finished = spans.get_finished_spans()
    ops = [(s.name, s.attributes.get("provider.id"), s.attributes["provider.result"]) for s in finished if s.name.startswith("provider.")]
    assert ops == [
        ("provider.create", "proxy-a", "ok"),
        ("provider.get", "fake/proxy-a", "ok"),
        ("provider.delete", "fake/proxy-a", "ok"),
        ("provider.get", "fake/proxy-a", "not_found"),
        ("provider.get", "bad", "permanent"),
        ("provider.list", None, "ok"),
    ]
    parent = by_name(spans)["reconcile"].context.span_id
    for s in finished:
        if s.name.startswith("provider."):
            assert s.parent.span_id == parent
            assert s.attributes["provider.name"] == "edge"
    statuses = [s.status.status_code for s in finished if s.name == "provider.get"]
    assert statuses == [StatusCode.UNSET, StatusCode.UNSET, StatusCode.ERROR]  # NotFound is expected while polling
    assert SENTINEL not in repr([dict(s.attributes) for s in finished])


@pytest.mark.parametrize(
    ("env", "want"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, True),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}, False),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, False),
    ],
)
def test_exporter_only_from_otel_variables(env, want):
    assert tracing.exporter_configured(env) is want

