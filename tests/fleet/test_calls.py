"""fleet.celery.calls: the provider-call task base — outcomes, counter, histogram,
span, refusals — without a broker (the tasks run in this process)."""

import json
import math
import uuid
from datetime import UTC, datetime

import pytest
import yaml
from opentelemetry.trace import StatusCode
from prometheus_client import generate_latest

from fleet import runtime
from fleet.celery import calls
from providers import base
from providers.base import Deadline, Instance, State
from providers.retry import BACKOFF_FIRST, LATCH_PERMANENT, QUOTA_RETRY, Gone, Latch, Retry

SENTINEL = "CLOUD-INIT-SENTINEL-7f3a"


class Scripted:
    """A provider whose get raises what it is told."""

    def __init__(self, exc=None):
        self.exc = exc

    def get(self, provider_id, deadline):
        assert deadline.remaining() > 0
        if self.exc:
            raise self.exc
        return Instance(provider_id, State.RUNNING, "10.0.0.1", "u")


def sample(recorder, name, **labels):
    for family in recorder.requests.collect() + recorder.duration.collect():
        for s in family.samples:
            if s.name == name and s.labels == labels:
                return s.value
    return None


@pytest.mark.parametrize(
    ("exc", "attempt", "error_class", "step"),
    [
        (None, 1, None, None),
        (base.NotFound("get", "edge", "x", "no such"), 1, "not_found", {"gone": True}),
        (base.QuotaExceeded("get", "edge", "x", "slow down"), 3, "quota_exceeded",
         {"retry_after": QUOTA_RETRY, "counts_as_error": False}),
        (base.Transient("get", "edge", "x", "503"), 1, "transient", {"retry_after": BACKOFF_FIRST, "counts_as_error": True}),
        (base.Transient("get", "edge", "x", "503"), 3, "transient", {"retry_after": 4 * BACKOFF_FIRST, "counts_as_error": True}),
        (base.Permanent("get", "edge", "x", "bad id"), 1, "permanent", {"latch": LATCH_PERMANENT}),
        (RuntimeError("a provider bug"), 1, "transient", {"retry_after": BACKOFF_FIRST, "counts_as_error": True}),
    ],
)
def test_outcome_counter_histogram_span(spans, exc, attempt, error_class, step):
    rec = calls.CallMetrics()
    out = calls.call("edge", "get", lambda p, d: calls.instance_dict(p.get("fake/x", d)), provider_id="fake/x",
                     attempt=attempt, build=lambda name: Scripted(exc), recorder=rec)
    result = error_class or "ok"
    assert out["ok"] is (exc is None) and out["provider"] == "edge" and out["op"] == "get" and out["attempt"] == attempt
    if exc is None:
        assert out["result"] == {"id": "fake/x", "state": "Running", "ip": "10.0.0.1", "uid": "u", "createdAt": None,
                                 "installation": "", "namespace": ""}
    else:
        assert out["error_class"] == error_class and out["step"] == step and out["message"]
    assert sample(rec, "proxy_operator_provider_requests_total", provider="edge", op="get", result=result) == 1
    assert sample(rec, "proxy_operator_provider_request_duration_seconds_count", provider="edge", op="get") == 1
    (span,) = [s for s in spans.get_finished_spans() if s.name == "provider.get"]
    assert span.attributes["provider.result"] == result
    assert span.attributes["provider.name"] == "edge" and span.attributes["provider.id"] == "fake/x"
    failed = exc is not None and not isinstance(exc, base.NotFound)
    assert (span.status.status_code is StatusCode.ERROR) is failed


def test_outcomes_are_json_values():
    import json

    for out in (
        calls.succeeded("edge", "list", 1, []),
        calls.failed("edge", "get", 2, base.Transient("get", "edge", "x", "e" * 5000)),
        calls.refused(["not", "a", "name"], "get", "why"),
    ):
        assert json.loads(json.dumps(out)) == out
    assert len(calls.failed("edge", "get", 1, base.Transient("get", "edge", "x", "e" * 5000))["message"]) < 1100


def run_op(p, deadline, provider_id):
    return None


@pytest.mark.parametrize(
    ("provider", "timeout", "attempt", "args", "kwargs", "problem"),
    [
        ("edge", 10, 1, (), {"provider_id": "fake/x"}, None),
        ("edge", 0.5, 7, (), {"provider_id": "fake/x"}, None),
        ("edge", 10, 1, ("fake/x",), {}, "keyword arguments only"),
        (None, 10, 1, (), {"provider_id": "fake/x"}, "provider name"),
        (["edge"], 10, 1, (), {"provider_id": "fake/x"}, "provider name"),
        ("edge", 0, 1, (), {"provider_id": "fake/x"}, "timeout"),
        ("edge", math.inf, 1, (), {"provider_id": "fake/x"}, "timeout"),
        ("edge", 601, 1, (), {"provider_id": "fake/x"}, "timeout"),
        ("edge", "10", 1, (), {"provider_id": "fake/x"}, "timeout"),
        ("edge", True, 1, (), {"provider_id": "fake/x"}, "timeout"),
        ("edge", 10, 0, (), {"provider_id": "fake/x"}, "attempt"),
        ("edge", 10, 1.5, (), {"provider_id": "fake/x"}, "attempt"),
        ("edge", 10, 1, (), {"provider_id": "x" * 1025}, "at most 1024"),
        ("edge", 10, 1, (), {"provider_id": {"a": 1}}, "must be a string"),
        ("edge", 10, 1, (), {}, "do not match"),
        ("edge", 10, 1, (), {"provider_id": "fake/x", "cloud_init": "x"}, "do not match"),
    ],
)
def test_message_problem(provider, timeout, attempt, args, kwargs, problem):
    got = calls.message_problem(provider, timeout, attempt, args, kwargs, run_op)
    assert (got is None) if problem is None else (problem in got)


@pytest.fixture
def configured(tmp_path, monkeypatch):
    path = tmp_path / "providers.yaml"
    path.write_text(yaml.safe_dump({"providers": [{"name": "edge", "type": "fake"}]}))
    monkeypatch.setenv("FLEET_PROVIDERS_CONFIG", str(path))
    runtime.reset()
    yield
    runtime.reset()


def test_tasks_run_on_the_base(configured, spans):
    from tasks import provider_calls as t

    fake = runtime.provider("edge")
    pid = fake.create(base.CreateRequest(name="proxy-a", uid="u", cloud_init=SENTINEL), Deadline.after(5))
    before = sample(calls.METRICS, "proxy_operator_provider_requests_total", provider="edge", op="get", result="ok") or 0
    got = t.get_instance.apply(kwargs={"provider": "edge", "provider_id": pid, "timeout": 5}).get()
    assert got["ok"] and got["result"]["id"] == pid and got["result"]["state"] == "Running" and got["result"]["createdAt"]
    listed = t.list_instances.apply(kwargs={"provider": "edge"}).get()
    assert [i["id"] for i in listed["result"]] == [pid]
    assert t.delete_instance.apply(kwargs={"provider": "edge", "provider_id": pid}).get() == calls.succeeded("edge", "delete", 1, None)
    gone = t.get_instance.apply(kwargs={"provider": "edge", "provider_id": pid, "attempt": 2}).get()
    assert gone["error_class"] == "not_found" and gone["step"] == {"gone": True} and gone["attempt"] == 2
    latched = t.get_instance.apply(kwargs={"provider": "edge", "provider_id": "bad"}).get()
    assert latched["step"] == {"latch": LATCH_PERMANENT}
    assert sample(calls.METRICS, "proxy_operator_provider_requests_total", provider="edge", op="get", result="ok") == before + 1
    assert SENTINEL not in repr([dict(s.attributes) for s in spans.get_finished_spans()])


def test_create_marks_the_workers_own_installation(configured, monkeypatch):
    """The installation comes from the worker's settings, never the message;
    get and list read it back from the provider."""
    from tasks import provider_calls as t

    monkeypatch.setenv("FLEET_INSTALLATION", "blue")
    runtime.reset()
    msg = {"provider": "edge", "name": "proxy-b", "uid": "u-b", "namespace": "crawl", "proxy_name": "b",
           "port": "3128", "cloud_init_ref": ""}
    created = t.create_instance.apply(kwargs=msg).get()
    assert created["ok"] and created["result"] == "fake/proxy-b"
    got = t.get_instance.apply(kwargs={"provider": "edge", "provider_id": "fake/proxy-b"}).get()
    assert got["result"]["installation"] == "blue" and got["result"]["uid"] == "u-b"
    listed = t.list_instances.apply(kwargs={"provider": "edge"}).get()
    assert [(i["id"], i["installation"]) for i in listed["result"]] == [("fake/proxy-b", "blue")]
    smuggled = t.create_instance.apply(kwargs={**msg, "installation": "green"}).get()
    assert smuggled["error_class"] == "permanent" and "'installation' is no argument of a create" in smuggled["message"]
    bad_port = t.create_instance.apply(kwargs={**msg, "port": "0"}).get()
    assert bad_port["error_class"] == "permanent" and "port must be from 1 to 65535, got '0'" in bad_port["message"]
    assert t.create_instance.apply(kwargs={**msg, "port": 3128}).get()["error_class"] == "invalid"  # the base's: not a string


# --- a create's request: fleet.celery.calls.request_dict / request_from_dict ---------------

REQUEST = base.CreateRequest(name="proxy-u1", uid="u1", namespace="crawl", proxy_name="a",
                             placement=base.Placement(region="eu", zone="eu-a", machine_type="small", image="img"),
                             port=8080)
# The message every version has sent (reconciler `_send` before the codec): same keys, every value a string.
WIRE = {"name": "proxy-u1", "uid": "u1", "namespace": "crawl", "proxy_name": "a", "region": "eu", "zone": "eu-a",
        "machine_type": "small", "image": "img", "port": "8080", "cloud_init_ref": "tok"}


def test_a_request_round_trips_in_the_shape_every_version_sent():
    wire = calls.request_dict(REQUEST, cloud_init_ref="tok")
    assert wire == WIRE and json.loads(json.dumps(wire)) == wire
    assert calls.request_from_dict(wire) == (REQUEST, "tok")
    # the text and the installation never travel, even when the request holds them
    full = calls.request_dict(base.CreateRequest(**{**REQUEST.__dict__, "cloud_init": SENTINEL, "installation": "b"}),
                              cloud_init_ref="tok")
    assert full == WIRE and SENTINEL not in json.dumps(full)


def test_an_older_message_without_placement_reads_with_an_empty_one():
    old = {k: v for k, v in WIRE.items() if k not in ("region", "zone", "machine_type", "image")}
    req, ref = calls.request_from_dict(old)
    assert req.placement == base.Placement() and req.port == 8080 and ref == "tok"


@pytest.mark.parametrize(("change", "field", "why"), [
    ({"name": ""}, "name", "name must not be empty"),
    ({"uid": ""}, "uid", "uid must not be empty"),
    ({"name": None}, "name", "name must be a string of at most 1024 characters"),
    ({"uid": "u" * 1025}, "uid", "uid must be a string of at most 1024 characters"),
    ({"namespace": 7}, "namespace", "namespace must be a string"),
    ({"proxy_name": ["a"]}, "proxy_name", "proxy_name must be a string"),
    ({"region": "r" * 1025}, "region", "region must be a string"),
    ({"zone": 1}, "zone", "zone must be a string"),
    ({"machine_type": b"x"}, "machine_type", "machine_type must be a string"),
    ({"image": None}, "image", "image must be a string"),
    ({"cloud_init_ref": 5}, "cloud_init_ref", "cloud_init_ref must be a string"),
    ({"port": "0"}, "port", "port must be from 1 to 65535, got '0'"),
    ({"port": "65536"}, "port", "port must be from 1 to 65535, got '65536'"),
    ({"port": "-1"}, "port", "port must be from 1 to 65535"),
    ({"port": "²"}, "port", "port must be from 1 to 65535"),  # isdigit, yet no int
    ({"port": ""}, "port", "port must be from 1 to 65535"),
    ({"port": 8080}, "port", "port must be a string"),
    ({"cloud_init": SENTINEL}, "cloud_init", "'cloud_init' is no argument of a create"),
    ({"installation": "green"}, "installation", "'installation' is no argument of a create"),
])
def test_each_bad_argument_is_refused_by_name(change, field, why):
    with pytest.raises(calls.RequestError, match=why) as err:
        calls.request_from_dict({**WIRE, **change})
    assert err.value.field == field


@pytest.mark.parametrize("missing", ["name", "uid", "namespace", "proxy_name", "port", "cloud_init_ref"])
def test_a_missing_argument_is_named(missing):
    with pytest.raises(calls.RequestError, match=f"{missing} is missing") as err:
        calls.request_from_dict({k: v for k, v in WIRE.items() if k != missing})
    assert err.value.field == missing


def test_refused_messages_call_nothing(configured, spans):
    from tasks import provider_calls as t

    for kwargs, why, error_class in (
        ({"provider": "other", "provider_id": "fake/x"}, "'other' is not configured on this worker", "not_configured"),
        ({"provider": "edge"}, "do not match", "invalid"),
        ({"provider": "edge", "provider_id": "fake/x", "timeout": -1}, "timeout", "invalid"),
    ):
        out = t.get_instance.apply(kwargs=kwargs).get()
        assert out["ok"] is False and out["error_class"] == error_class and why in out["message"]
    assert not [s for s in spans.get_finished_spans() if s.name.startswith("provider.")]


def test_a_call_from_another_providers_queue_is_refused(configured):
    from tasks import provider_calls as t

    out = t.get_instance.apply(kwargs={"provider": "edge", "provider_id": "fake/x"},
                               routing_key="provider.other").get()
    assert out["error_class"] == "invalid" and "must come from provider.edge" in out["message"]


def test_worker_exposition_serves_the_series_at_zero():
    rec = calls.CallMetrics()
    rec.start(["edge"])
    text = generate_latest(calls.worker_registry(rec)).decode()
    assert 'proxy_operator_provider_requests_total{op="get",provider="edge",result="permanent"} 0.0' in text
    assert 'proxy_operator_provider_request_duration_seconds_count{op="list",provider="edge"} 0.0' in text
    assert calls.serve_worker("0", ["edge"], rec) is None
    with pytest.raises(ValueError, match="--worker-metrics-bind-address must be host:port"):
        calls.serve_worker("nope", ["edge"], rec)


@pytest.mark.parametrize(("value", "ok"), [("0", True), (":9090", True), ("127.0.0.1:9", True), ("9090", False), (":0", False)])
def test_worker_metrics_flag_is_validated(value, ok):
    from fleet.settings import Settings, SettingsError

    if ok:
        assert Settings.from_env({"FLEET_WORKER_METRICS_BIND_ADDRESS": value}).worker_metrics_bind_address == value
    else:
        with pytest.raises(SettingsError, match=r"^FLEET_WORKER_METRICS_BIND_ADDRESS must be"):  # named as it came
            Settings.from_env({"FLEET_WORKER_METRICS_BIND_ADDRESS": value})


# --- the outcome document -------------------------------------------------------


def test_error_classes_travel_as_their_plain_words():
    assert [c.value for c in base.ErrorClass] == [
        "not_found", "quota_exceeded", "transient", "permanent", "invalid", "not_configured"]
    assert json.dumps({"c": base.ErrorClass.TRANSIENT}) == '{"c": "transient"}'
    for cls in base.ERROR_CLASSES:
        assert base.result_label(cls("get", "edge")) == cls.label.value
    assert calls.RESULTS == ("ok", "not_found", "quota_exceeded", "transient", "permanent")


@pytest.mark.parametrize("message", [
    calls.succeeded("edge", "create", 1, "edge/x"),
    calls.succeeded("edge", "get", 2, calls.instance_dict(Instance("edge/x", State.RUNNING, "10.0.0.1", "u"))),
    calls.succeeded("edge", "delete", 1, None),
    calls.succeeded("edge", "list", 1, []),
    *(calls.failed("edge", "get", 3, cls("get", "edge", "x", "boom")) for cls in base.ERROR_CLASSES),
    calls.failed("edge", "get", 1, RuntimeError("a provider bug")),
    calls.refused("edge", "get", "why"),
    calls.refused("edge", "create", "not here", base.ErrorClass.NOT_CONFIGURED),
])
def test_an_outcome_reads_back_as_it_was_sent(message):
    assert calls.CallOutcome.from_message(json.loads(json.dumps(message))).to_message() == message


GOOD_FAIL = {"ok": False, "provider": "edge", "op": "get", "attempt": 1, "error_class": "transient",
             "step": {"retry_after": 1.0, "counts_as_error": True}, "message": "boom"}


@pytest.mark.parametrize(("raw", "why"), [
    (["ok"], "must be a mapping"),
    ({**GOOD_FAIL, "ok": "false"}, "`ok` must be true or false"),
    ({**GOOD_FAIL, "provider": 7}, "`provider` must be a string"),
    ({**GOOD_FAIL, "op": "reboot"}, "`op` must be one of create, get, delete, list"),
    ({**GOOD_FAIL, "attempt": True}, "`attempt` must be an integer"),
    ({**GOOD_FAIL, "attempt": -1}, "`attempt` must be an integer"),
    ({**GOOD_FAIL, "error_class": "Transient"}, "`error_class` must be one of not_found, "),
    ({**GOOD_FAIL, "step": {"retry_after": math.inf, "counts_as_error": True}}, "step must be"),
    ({**GOOD_FAIL, "step": {"retry_after": 1e9}}, "step must be"),
    ({**GOOD_FAIL, "step": {"gone": 1}}, "step must be"),
    ({**GOOD_FAIL, "step": None, "message": 3}, "`message` must be a string"),
    ({**GOOD_FAIL, "message": None}, "`message` must be a string"),
    ({"ok": True, "provider": "edge", "op": "create", "attempt": 1, "result": 5}, "a create's `result` must be a string"),
    ({"ok": True, "provider": "edge", "op": "get", "attempt": 1, "result": "x"}, "a get's `result` must be a mapping"),
    ({"ok": True, "provider": "edge", "op": "delete", "attempt": 1, "result": {}}, "a delete's `result` must be null"),
    ({"ok": True, "provider": "edge", "op": "list", "attempt": 1, "result": {}}, "a list's `result` must be a list"),
])
def test_an_outcome_that_is_not_one_is_refused_saying_why(raw, why):
    with pytest.raises(calls.OutcomeError) as e:
        calls.CallOutcome.from_message(raw)
    assert why in str(e.value)


def test_an_outcome_reads_its_step_and_class_typed():
    out = calls.CallOutcome.from_message(GOOD_FAIL)
    assert out.error_class is base.ErrorClass.TRANSIENT and out.step == Retry(1.0, True)
    assert calls.CallOutcome.from_message({**GOOD_FAIL, "step": {"gone": True}}).step == Gone()
    assert calls.CallOutcome.from_message({**GOOD_FAIL, "step": {"latch": "X"}}).step == Latch("X")
    assert calls.CallOutcome.from_message({k: v for k, v in GOOD_FAIL.items() if k != "step"}).step is None


def test_an_instance_reads_back_as_it_was_sent():
    born = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    inst = Instance("edge/x", State.STOPPED, "10.0.0.1", "u", born, "blue", "crawl")
    assert calls.instance_from_dict(json.loads(json.dumps(calls.instance_dict(inst)))) == inst
    assert calls.instance_from_dict({"id": "edge/y", "state": "Running"}) == Instance("edge/y", State.RUNNING)
    assert calls.instance_from_dict({"id": "x", "state": "Running", "createdAt": "yesterday"}).created_at is None
    assert calls.instance_from_dict({"id": "x", "state": "Running", "createdAt": "2026-01-02T03:04:05Z"}).created_at == \
        datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


@pytest.mark.parametrize(("raw", "why"), [
    ("edge/x", "must be a mapping"),
    ({"id": "", "state": "Running"}, "`id` must be a non-empty string"),
    ({"id": "x", "state": "running"}, "`state` must be one of Provisioning, Running, Stopped, Terminated"),
    ({"id": "x", "state": "Running", "ip": 7}, "`ip` must be a string"),
    ({"id": "x", "state": "Running", "uid": "u" * 254}, "`uid` must be a string of at most 253"),
    ({"id": "x", "state": "Running", "installation": "i" * 64}, "`installation` must be a string of at most 63"),
    ({"id": "x", "state": "Running", "createdAt": 17}, "`createdAt` must be null or a string"),
])
def test_an_instance_that_is_not_one_is_refused_saying_why(raw, why):
    with pytest.raises(calls.OutcomeError) as e:
        calls.instance_from_dict(raw)
    assert why in str(e.value)


def test_a_list_too_large_for_one_answer_is_a_failure_the_controller_can_tell(configured):
    """A list past what one message may take in Redis (fleet.celery.compression.answer_problem)
    is not sent to be refused at publish: it is a `ListTooLarge` outcome, latched
    with its own reason, naming how many instances and bytes; one that fits is sent whole."""
    from fleet.celery import compression
    from tasks import provider_calls as t

    fake = runtime.provider("edge")
    deadline = Deadline.after(60)
    for i in range(12_000):  # past the ~8,000 that filled 2mb uncompressed
        fake.create(base.CreateRequest(name=f"proxy-{i:05d}", uid=str(uuid.uuid4())), deadline)
    fits = t.list_instances.apply(kwargs={"provider": "edge", "timeout": 60}).get()
    assert fits["ok"] and len(fits["result"]) == 12_000
    assert compression.answer_problem(fits["result"]) is None
    for i in range(12_000, 100_000):  # sequential names and one address compress better than a real backend's ids
        fake.create(base.CreateRequest(name=f"proxy-{i:05d}", uid=str(uuid.uuid4())), deadline)
    out = t.list_instances.apply(kwargs={"provider": "edge", "timeout": 60}).get()
    assert not out["ok"] and out["error_class"] == "permanent" and out["step"] == {"latch": calls.LATCH_TOO_LARGE}
    assert "100000 instances take" in out["message"] and "more than the" in out["message"]
    assert calls.CallOutcome.from_message(out).step == Latch(calls.LATCH_TOO_LARGE)
